"""Tiny BERT trained from scratch on a synthetic 'sentiment' task with the HF Trainer.
Warm-up + cosine schedule, evaluation every epoch."""
import random
import numpy as np
import torch
from torch.utils.data import Dataset
from transformers import (BertConfig, BertForSequenceClassification, Trainer,
                          TrainingArguments, set_seed)

torch.set_num_threads(1)
set_seed(0)

VOCAB, SEQ = 60, 20
POS = list(range(10, 20))   # "good" words
NEG = list(range(20, 30))   # "bad" words


def make_split(n, seed):
    rng = np.random.default_rng(seed)
    ids = rng.integers(30, VOCAB, size=(n, SEQ))
    labels = rng.integers(0, 2, size=n)
    for i in range(n):
        k = rng.integers(2, 5)
        pos = rng.choice(np.arange(1, SEQ), size=k, replace=False)
        pool = POS if labels[i] == 1 else NEG
        ids[i, pos] = rng.choice(pool, size=k)
        # a distractor word from the other side
        j = rng.integers(1, SEQ)
        if j not in pos:
            ids[i, j] = rng.choice(NEG if labels[i] == 1 else POS)
    ids[:, 0] = 2  # [CLS]
    return ids, labels


class TokenDataset(Dataset):
    def __init__(self, ids, labels):
        self.ids = torch.tensor(ids, dtype=torch.long)
        self.labels = torch.tensor(labels, dtype=torch.long)

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i],
                "attention_mask": torch.ones_like(self.ids[i]),
                "labels": self.labels[i]}


train_ds = TokenDataset(*make_split(3000, 1))
val_ds = TokenDataset(*make_split(600, 2))

config = BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2,
                    num_attention_heads=2, intermediate_size=64,
                    max_position_embeddings=32, num_labels=2)
model = BertForSequenceClassification(config)


def compute_metrics(eval_pred):
    logits, labels = eval_pred
    return {"accuracy": float((logits.argmax(-1) == labels).mean())}


args = TrainingArguments(
    output_dir="_runs/01",
    num_train_epochs=6,
    per_device_train_batch_size=32,
    per_device_eval_batch_size=128,
    learning_rate=2e-3,
    weight_decay=0.01,
    warmup_steps=50,
    lr_scheduler_type="cosine",
    eval_strategy="epoch",
    logging_steps=50,
    save_strategy="no",
    report_to="none",
    disable_tqdm=True,
    use_cpu=True,
    seed=0,
)

trainer = Trainer(model=model, args=args, train_dataset=train_ds,
                  eval_dataset=val_ds, compute_metrics=compute_metrics)
trainer.train()
metrics = trainer.evaluate()
print(f"final val_loss={metrics['eval_loss']:.4f} val_acc={metrics['eval_accuracy']:.4f}")
