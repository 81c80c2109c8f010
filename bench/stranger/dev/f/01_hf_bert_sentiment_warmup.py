"""Tiny BERT sequence classifier on a synthetic 'sentiment' corpus.

Each review is a sequence of word ids; some words are positive, some negative,
the rest neutral filler. The label is 1 when positive words outnumber negative
ones. Trained with the HF Trainer: linear warm-up, weight decay, eval each epoch.
"""
import numpy as np
import torch
from torch.utils.data import Dataset
from transformers import (BertConfig, BertForSequenceClassification, Trainer,
                          TrainingArguments, set_seed)

set_seed(0)
rng = np.random.default_rng(0)

PAD, CLS, SEP = 0, 1, 2
VOCAB = 64
POS_WORDS = list(range(3, 11))
NEG_WORDS = list(range(11, 19))
NEUTRAL = list(range(19, VOCAB))
MAX_LEN = 24


def make_review():
    n = rng.integers(8, MAX_LEN - 2)
    n_pos = rng.integers(0, 5)
    n_neg = rng.integers(0, 5)
    while n_pos == n_neg:
        n_neg = rng.integers(0, 5)
    words = (list(rng.choice(POS_WORDS, n_pos)) + list(rng.choice(NEG_WORDS, n_neg))
             + list(rng.choice(NEUTRAL, max(n - n_pos - n_neg, 0))))
    rng.shuffle(words)
    return [int(w) for w in words], int(n_pos > n_neg)


class ReviewDataset(Dataset):
    def __init__(self, n):
        self.items = [make_review() for _ in range(n)]

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        words, label = self.items[i]
        ids = [CLS] + words + [SEP]
        mask = [1] * len(ids) + [0] * (MAX_LEN - len(ids))
        ids = ids + [PAD] * (MAX_LEN - len(ids))
        return {"input_ids": torch.tensor(ids), "attention_mask": torch.tensor(mask),
                "labels": torch.tensor(label)}


train_ds = ReviewDataset(2000)
val_ds = ReviewDataset(500)

config = BertConfig(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2,
                    num_attention_heads=4, intermediate_size=128,
                    max_position_embeddings=MAX_LEN, num_labels=2)
model = BertForSequenceClassification(config)


def compute_metrics(eval_pred):
    logits, labels = eval_pred
    return {"accuracy": float((logits.argmax(-1) == labels).mean())}


args = TrainingArguments(
    output_dir="/tmp/f01_bert_sentiment",
    num_train_epochs=6,
    per_device_train_batch_size=32,
    per_device_eval_batch_size=128,
    learning_rate=5e-4,
    weight_decay=0.01,
    warmup_steps=40,
    lr_scheduler_type="linear",
    eval_strategy="epoch",
    logging_strategy="epoch",
    save_strategy="no",
    report_to="none",
    seed=0,
    use_cpu=True,
    disable_tqdm=True,
)

trainer = Trainer(model=model, args=args, train_dataset=train_ds, eval_dataset=val_ds,
                  compute_metrics=compute_metrics)
trainer.train()
metrics = trainer.evaluate()
print(f"final val_loss {metrics['eval_loss']:.4f} val_acc {metrics['eval_accuracy']:.4f}")
