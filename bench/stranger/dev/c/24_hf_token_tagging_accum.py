"""Token classification (tag each token: filler / number word / unit word) with a tiny BertForTokenClassification,
transformers.Trainer with gradient accumulation, warm-up + cosine schedule and label smoothing."""
import numpy as np
import torch
from torch.utils.data import Dataset
from transformers import BertConfig, BertForTokenClassification, Trainer, TrainingArguments, set_seed

torch.set_num_threads(1)
set_seed(24)
VOCAB, SEQ = 60, 20
NUMBER_WORDS = list(range(5, 25))
UNIT_WORDS = list(range(25, 35))
# tag 1: a number word; tag 2: a unit word; everything else is filler (0)


def make_example(rng):
    ids = rng.integers(5, VOCAB, SEQ)
    tags = np.zeros(SEQ, dtype=np.int64)
    for i in range(SEQ):
        if ids[i] in NUMBER_WORDS:
            tags[i] = 1
        elif ids[i] in UNIT_WORDS:
            tags[i] = 2
    return ids, tags


class TagDataset(Dataset):
    def __init__(self, n, seed):
        rng = np.random.default_rng(seed)
        pairs = [make_example(rng) for _ in range(n)]
        self.ids = torch.tensor(np.stack([p[0] for p in pairs]))
        self.tags = torch.tensor(np.stack([p[1] for p in pairs]))

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "attention_mask": torch.ones(SEQ, dtype=torch.long), "labels": self.tags[i]}


def compute_metrics(p):
    pred = p.predictions.argmax(-1)
    lab = p.label_ids
    unit = lab == 2
    return {"token_acc": float((pred == lab).mean()), "unit_tag_recall": float((pred[unit] == 2).mean())}


model = BertForTokenClassification(BertConfig(vocab_size=VOCAB, hidden_size=48, num_hidden_layers=2,
                                              num_attention_heads=4, intermediate_size=96,
                                              max_position_embeddings=SEQ, num_labels=3))
args = TrainingArguments(output_dir="hf_runs/24", num_train_epochs=4, per_device_train_batch_size=16,
                         gradient_accumulation_steps=2, learning_rate=2e-3, warmup_steps=25,
                         lr_scheduler_type="cosine", label_smoothing_factor=0.05, eval_strategy="epoch",
                         logging_steps=25, save_strategy="no", report_to="none", disable_tqdm=True,
                         use_cpu=True, seed=24)
trainer = Trainer(model=model, args=args, train_dataset=TagDataset(2000, 0), eval_dataset=TagDataset(400, 1),
                  compute_metrics=compute_metrics)
trainer.train()
m = trainer.evaluate()
print(f"final eval_loss {m['eval_loss']:.4f} token_acc {m['eval_token_acc']:.4f} unit_tag_recall {m['eval_unit_tag_recall']:.4f}")
