"""Tiny BERT (2 layers, hidden 64) trained from scratch with transformers.Trainer on a synthetic
3-class "which topic words occur" task. Evaluates every epoch."""
import numpy as np
import torch
from torch.utils.data import Dataset
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments, set_seed

torch.set_num_threads(1)
set_seed(22)

VOCAB, SEQ, N_CLASSES = 60, 24, 3
PAD, CLS = 0, 1
TOPIC_TOKENS = {c: list(range(10 + 6 * c, 16 + 6 * c)) for c in range(N_CLASSES)}  # 10..27
FILLER = list(range(30, VOCAB))


class KeywordDataset(Dataset):
    def __init__(self, n, seed):
        rng = np.random.default_rng(seed)
        self.items = []
        for _ in range(n):
            label = int(rng.integers(N_CLASSES))
            length = int(rng.integers(12, SEQ))
            toks = list(rng.choice(FILLER, size=length - 1))
            for pos in rng.choice(length - 1, size=3, replace=False):
                toks[pos] = int(rng.choice(TOPIC_TOKENS[label]))
            ids = [CLS] + toks
            mask = [1] * len(ids) + [0] * (SEQ - len(ids))
            ids = ids + [PAD] * (SEQ - len(ids))
            self.items.append({"input_ids": torch.tensor(ids), "attention_mask": torch.tensor(mask),
                               "labels": torch.tensor(label)})

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]


train_ds, eval_ds = KeywordDataset(2000, 1), KeywordDataset(500, 2)
config = BertConfig(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                    intermediate_size=128, max_position_embeddings=SEQ, num_labels=N_CLASSES, pad_token_id=PAD)
model = BertForSequenceClassification(config)


def compute_metrics(pred):
    logits, labels = pred
    return {"accuracy": float((logits.argmax(-1) == labels).mean())}


args = TrainingArguments(
    output_dir="hf_runs/22", num_train_epochs=5, per_device_train_batch_size=32, per_device_eval_batch_size=128,
    learning_rate=1e-3, weight_decay=0.01, warmup_steps=30, lr_scheduler_type="linear",
    eval_strategy="epoch", logging_strategy="steps", logging_steps=40, save_strategy="no",
    report_to="none", disable_tqdm=True, use_cpu=True, seed=22, data_seed=22,
)
trainer = Trainer(model=model, args=args, train_dataset=train_ds, eval_dataset=eval_ds,
                  compute_metrics=compute_metrics)
trainer.train()
metrics = trainer.evaluate()
print(f"final eval_loss {metrics['eval_loss']:.4f} eval_accuracy {metrics['eval_accuracy']:.4f}")
