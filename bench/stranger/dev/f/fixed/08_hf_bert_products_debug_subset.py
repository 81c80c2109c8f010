"""Tiny BERT product-category classifier (4 categories), HF Trainer, max_steps.

Each product title mentions three words from its category's 25-word lexicon
mixed with generic words, sometimes with one word of another category. Training
runs for a fixed number of optimizer steps with evaluation every 100 steps.
"""
import numpy as np
import torch
from torch.utils.data import Dataset, Subset
from transformers import (BertConfig, BertForSequenceClassification, Trainer,
                          TrainingArguments, set_seed)

set_seed(8)
rng = np.random.default_rng(8)

PAD, CLS, SEP = 0, 1, 2
N_CAT = 4
LEXICON = [list(range(3 + 25 * c, 28 + 25 * c)) for c in range(N_CAT)]
GENERIC = list(range(103, 160))
VOCAB = 160
MAX_LEN = 20
DEBUG_SUBSET = None        # set to e.g. 48 for quick sanity runs


def title(cat):
    n = int(rng.integers(8, MAX_LEN - 2))
    words = [int(w) for w in rng.choice(GENERIC, n)]
    for pos in rng.choice(n, 3, replace=False):
        words[pos] = int(rng.choice(LEXICON[cat]))
    if rng.random() < 0.4:
        words[int(rng.integers(n))] = int(rng.choice(LEXICON[rng.integers(N_CAT)]))
    return words


class Titles(Dataset):
    def __init__(self, n):
        self.y = rng.integers(0, N_CAT, n)
        self.x = [title(int(c)) for c in self.y]

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        ids = [CLS] + self.x[i] + [SEP]
        k = len(ids)
        return {"input_ids": torch.tensor(ids + [PAD] * (MAX_LEN - k)),
                "attention_mask": torch.tensor([1] * k + [0] * (MAX_LEN - k)),
                "labels": torch.tensor(int(self.y[i]))}


train_ds, val_ds = Titles(2400), Titles(600)
if DEBUG_SUBSET:
    train_ds = Subset(train_ds, range(DEBUG_SUBSET))
print(f"train examples {len(train_ds)}, val examples {len(val_ds)}")

config = BertConfig(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2,
                    num_attention_heads=4, intermediate_size=128,
                    max_position_embeddings=MAX_LEN, num_labels=N_CAT)
model = BertForSequenceClassification(config)


def compute_metrics(eval_pred):
    logits, y = eval_pred
    return {"accuracy": float((logits.argmax(-1) == y).mean())}


args = TrainingArguments(
    output_dir="/tmp/f08_bert_products",
    max_steps=600,
    per_device_train_batch_size=16,
    per_device_eval_batch_size=200,
    learning_rate=5e-4,
    weight_decay=0.01,
    warmup_steps=40,
    eval_strategy="steps",
    eval_steps=100,
    logging_steps=100,
    save_strategy="no",
    report_to="none",
    seed=8,
    use_cpu=True,
    disable_tqdm=True,
)

trainer = Trainer(model=model, args=args, train_dataset=train_ds, eval_dataset=val_ds,
                  compute_metrics=compute_metrics)
trainer.train()
train_m = trainer.evaluate(train_ds, metric_key_prefix="train")
m = trainer.evaluate()
print(f"final train_loss {train_m['train_loss']:.4f} train_acc {train_m['train_accuracy']:.4f}")
print(f"final val_loss {m['eval_loss']:.4f} val_acc {m['eval_accuracy']:.4f}")
