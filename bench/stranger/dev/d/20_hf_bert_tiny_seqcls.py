"""Tiny BERT (2 layers, hidden 32) trained from scratch with transformers.Trainer on a synthetic
sequence-classification task: label = which of tokens {5, 6, 7} occurs most often in the sequence."""
import numpy as np
import torch
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments, set_seed

torch.set_num_threads(1)
set_seed(0)

VOCAB, SEQ_LEN = 30, 24
CLS, PAD = 1, 0


class CountDataset(torch.utils.data.Dataset):
    def __init__(self, n, seed):
        rng = np.random.default_rng(seed)
        self.items = []
        while len(self.items) < n:
            length = rng.integers(12, SEQ_LEN)
            toks = rng.integers(2, VOCAB, size=length - 1)
            counts = [(toks == t).sum() for t in (5, 6, 7)]
            if sorted(counts)[-1] == sorted(counts)[-2]:
                continue
            ids = np.full(SEQ_LEN, PAD)
            ids[0] = CLS
            ids[1:length] = toks
            mask = (np.arange(SEQ_LEN) < length).astype(np.int64)
            self.items.append({"input_ids": torch.tensor(ids), "attention_mask": torch.tensor(mask),
                               "labels": torch.tensor(int(np.argmax(counts)))})

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]


train_ds, eval_ds = CountDataset(3000, 1), CountDataset(600, 2)
config = BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                    intermediate_size=64, max_position_embeddings=SEQ_LEN, num_labels=3,
                    pad_token_id=PAD, hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)
model = BertForSequenceClassification(config)


def compute_metrics(eval_pred):
    logits, labels = eval_pred
    return {"accuracy": float((np.argmax(logits, -1) == labels).mean())}


args = TrainingArguments(
    output_dir="hf_out_20", num_train_epochs=8, per_device_train_batch_size=32, per_device_eval_batch_size=128,
    learning_rate=2e-3, weight_decay=0.01, warmup_steps=50, lr_scheduler_type="linear",
    eval_strategy="epoch", logging_strategy="epoch", save_strategy="no", report_to="none",
    use_cpu=True, seed=0, data_seed=0, disable_tqdm=True, dataloader_num_workers=0,
)
trainer = Trainer(model=model, args=args, train_dataset=train_ds, eval_dataset=eval_ds, compute_metrics=compute_metrics)
trainer.train()
metrics = trainer.evaluate()
print(f"final eval_loss {metrics['eval_loss']:.4f} eval_accuracy {metrics['eval_accuracy']:.4f}")
