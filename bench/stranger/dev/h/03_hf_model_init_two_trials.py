"""Hugging Face Trainer with model_init: two short trials (different learning rate and
dropout) each start from a freshly initialised tiny DistilBERT; the better trial by
validation accuracy is then scored on a held-out test split with trainer.predict()."""
import numpy as np
import torch
from torch.utils.data import Dataset
from transformers import (DistilBertConfig, DistilBertForSequenceClassification, Trainer,
                          TrainingArguments, set_seed)

set_seed(11)
rng = np.random.default_rng(11)
PAD, CLS = 0, 1
VOCAB, SEQ = 48, 24
POS = list(range(2, 8))     # "good" words
NEG = list(range(8, 14))    # "bad" words
NEUTRAL = list(range(14, VOCAB))


def review():
    n_pos, n_neg = rng.integers(0, 5, size=2)
    while n_pos == n_neg:
        n_pos, n_neg = rng.integers(0, 5, size=2)
    words = list(rng.choice(POS, n_pos)) + list(rng.choice(NEG, n_neg))
    length = int(rng.integers(len(words) + 4, SEQ - 1))
    words += list(rng.choice(NEUTRAL, length - len(words)))
    rng.shuffle(words)
    ids = [CLS] + [int(w) for w in words]
    mask = [1] * len(ids) + [0] * (SEQ - len(ids))
    return ids + [PAD] * (SEQ - len(ids)), mask, int(n_pos > n_neg)


class Reviews(Dataset):
    def __init__(self, n):
        self.rows = [review() for _ in range(n)]

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        ids, mask, lab = self.rows[i]
        return {"input_ids": torch.tensor(ids), "attention_mask": torch.tensor(mask),
                "labels": torch.tensor(lab)}


train_ds, val_ds, test_ds = Reviews(1600), Reviews(400), Reviews(400)
print("label balance train:", np.mean([r[2] for r in train_ds.rows]).round(3))

TRIALS = [{"learning_rate": 2e-4, "dropout": 0.1}, {"learning_rate": 1e-3, "dropout": 0.2}]
current = {}


def model_init():
    cfg = DistilBertConfig(vocab_size=VOCAB, dim=64, n_layers=2, n_heads=4, hidden_dim=128,
                           max_position_embeddings=SEQ, pad_token_id=PAD, num_labels=2,
                           dropout=current["dropout"], attention_dropout=current["dropout"])
    return DistilBertForSequenceClassification(cfg)


def compute_metrics(p):
    return {"accuracy": float((p.predictions.argmax(-1) == p.label_ids).mean())}


results = []
for t, hp in enumerate(TRIALS):
    current.update(hp)
    args = TrainingArguments(output_dir=f"/tmp/h03_trial{t}", num_train_epochs=5,
                             per_device_train_batch_size=32, per_device_eval_batch_size=200,
                             learning_rate=hp["learning_rate"], lr_scheduler_type="cosine",
                             warmup_steps=25, weight_decay=0.05, eval_strategy="epoch",
                             logging_strategy="epoch", save_strategy="no", report_to="none",
                             use_cpu=True, disable_tqdm=True, seed=11)
    trainer = Trainer(model_init=model_init, args=args, train_dataset=train_ds,
                      eval_dataset=val_ds, compute_metrics=compute_metrics)
    trainer.train()
    ev = trainer.evaluate()
    print(f"trial {t} {hp}: val_loss {ev['eval_loss']:.4f} val_acc {ev['eval_accuracy']:.4f}")
    results.append((ev["eval_accuracy"], -ev["eval_loss"], t, trainer))

best_acc, _, best_t, best_trainer = max(results, key=lambda r: (r[0], r[1]))
out = best_trainer.predict(test_ds)
print(f"best trial {best_t} val_acc {best_acc:.4f}")
print(f"final test_loss {out.metrics['test_loss']:.4f} test_acc {out.metrics['test_accuracy']:.4f}")
