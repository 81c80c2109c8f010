"""Hugging Face regression: a tiny RoBERTa with a single-output head (num_labels=1,
problem_type="regression") predicts a standardised score of synthetic "basket"
sequences (each item token has a hidden price, quantities are tokens too). Gradient
accumulation (2 x 16), warm-up then linear decay, weight decay; R^2 on val and test."""
import numpy as np
import torch
from torch.utils.data import Dataset
from transformers import (RobertaConfig, RobertaForSequenceClassification, Trainer,
                          TrainingArguments, set_seed)

set_seed(2)
rng = np.random.default_rng(2)
PAD, BOS, EOS = 1, 0, 2
N_ITEMS = 30
ITEM0 = 3                       # item tokens 3..32
QTY0 = ITEM0 + N_ITEMS          # quantity tokens 33..35 mean 1, 2, 3
VOCAB = QTY0 + 3 + 5
price = rng.uniform(0.5, 5.0, size=N_ITEMS)
SEQ = 2 + 2 * 8


def basket():
    k = int(rng.integers(2, 9))
    items = rng.choice(N_ITEMS, size=k, replace=False)
    qty = rng.integers(1, 4, size=k)
    ids = [BOS]
    for it, q in zip(items, qty):
        ids += [ITEM0 + int(it), QTY0 + int(q) - 1]
    ids.append(EOS)
    total = float((price[items] * qty).sum()) + rng.normal(0, 0.5)
    mask = [1] * len(ids) + [0] * (SEQ - len(ids))
    return ids + [PAD] * (SEQ - len(ids)), mask, total


rows = [basket() for _ in range(2600)]
totals = np.array([r[2] for r in rows])
mu, sd = totals[:1800].mean(), totals[:1800].std()


class Baskets(Dataset):
    def __init__(self, part):
        self.part = part

    def __len__(self):
        return len(self.part)

    def __getitem__(self, i):
        ids, mask, total = self.part[i]
        return {"input_ids": torch.tensor(ids), "attention_mask": torch.tensor(mask),
                "labels": torch.tensor((total - mu) / sd, dtype=torch.float32)}


train_ds, val_ds, test_ds = Baskets(rows[:1800]), Baskets(rows[1800:2200]), Baskets(rows[2200:])

cfg = RobertaConfig(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=3, num_attention_heads=4,
                    intermediate_size=128, max_position_embeddings=SEQ + 4, pad_token_id=PAD,
                    bos_token_id=BOS, eos_token_id=EOS, num_labels=1, problem_type="regression",
                    hidden_dropout_prob=0.1)
model = RobertaForSequenceClassification(cfg)


def compute_metrics(p):
    pred = p.predictions.reshape(-1)
    y = p.label_ids.reshape(-1)
    r2 = 1 - ((pred - y) ** 2).sum() / ((y - y.mean()) ** 2).sum()
    return {"r2": float(r2), "mae_original_units": float(np.abs(pred - y).mean() * sd)}


args = TrainingArguments(output_dir="/tmp/h07_reg", num_train_epochs=14,
                         per_device_train_batch_size=16, gradient_accumulation_steps=2,
                         per_device_eval_batch_size=200, learning_rate=8e-4, warmup_steps=60,
                         lr_scheduler_type="linear", weight_decay=0.01, max_grad_norm=1.0,
                         eval_strategy="epoch", logging_strategy="epoch", save_strategy="no",
                         label_names=["labels"], report_to="none", use_cpu=True,
                         disable_tqdm=True, seed=2)
trainer = Trainer(model=model, args=args, train_dataset=train_ds, eval_dataset=val_ds,
                  compute_metrics=compute_metrics)
trainer.train()
ev = trainer.evaluate()
pred = trainer.predict(test_ds)
print(f"final val_loss(mse) {ev['eval_loss']:.4f} val_r2 {ev['eval_r2']:.4f}")
print(f"final test_loss(mse) {pred.metrics['test_loss']:.4f} test_r2 {pred.metrics['test_r2']:.4f} "
      f"test_mae {pred.metrics['test_mae_original_units']:.3f} (target sd {sd:.2f})")
