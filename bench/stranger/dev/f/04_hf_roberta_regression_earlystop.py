"""Tiny RoBERTa regression head (num_labels=1) with early stopping.

Each 'basket' is a sequence of item ids; every item has a hidden price and some
items are discount coupons that halve the price of the item that follows them.
The target is the (standardised) basket total. Trained with the HF Trainer,
EarlyStoppingCallback and load_best_model_at_end on eval loss.
"""
import numpy as np
import torch
from torch.utils.data import Dataset
from transformers import (EarlyStoppingCallback, RobertaConfig,
                          RobertaForSequenceClassification, Trainer, TrainingArguments,
                          set_seed)

set_seed(3)
rng = np.random.default_rng(3)

PAD, BOS, EOS, COUPON = 0, 1, 2, 3
ITEMS = np.arange(4, 60)
PRICE = {int(i): float(p) for i, p in zip(ITEMS, rng.uniform(0.5, 5.0, len(ITEMS)))}
VOCAB = 60
MAX_LEN = 20


def basket():
    n = int(rng.integers(4, MAX_LEN - 3))
    toks, total, coupon = [], 0.0, False
    while len(toks) < n:
        if rng.random() < 0.15 and not coupon:
            toks.append(COUPON)
            coupon = True
            continue
        item = int(rng.choice(ITEMS))
        toks.append(item)
        total += PRICE[item] * (0.5 if coupon else 1.0)
        coupon = False
    return toks, total


raw_train = [basket() for _ in range(2000)]
raw_val = [basket() for _ in range(400)]
mu = np.mean([t for _, t in raw_train])
sd = np.std([t for _, t in raw_train])


class Baskets(Dataset):
    def __init__(self, raw):
        self.raw = raw

    def __len__(self):
        return len(self.raw)

    def __getitem__(self, i):
        toks, total = self.raw[i]
        ids = [BOS] + toks + [EOS]
        n = len(ids)
        return {"input_ids": torch.tensor(ids + [PAD] * (MAX_LEN - n)),
                "attention_mask": torch.tensor([1] * n + [0] * (MAX_LEN - n)),
                "labels": torch.tensor((total - mu) / sd, dtype=torch.float32)}


train_ds, val_ds = Baskets(raw_train), Baskets(raw_val)

config = RobertaConfig(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2,
                       num_attention_heads=4, intermediate_size=128,
                       max_position_embeddings=MAX_LEN + 2, pad_token_id=PAD,
                       bos_token_id=BOS, eos_token_id=EOS, num_labels=1)
model = RobertaForSequenceClassification(config)


def compute_metrics(eval_pred):
    preds, labels = eval_pred
    preds = preds.reshape(-1)
    mse = float(((preds - labels) ** 2).mean())
    r2 = 1.0 - mse / float(labels.var())
    return {"mse": mse, "r2": r2}


args = TrainingArguments(
    output_dir="/tmp/f04_roberta_regression",
    num_train_epochs=30,
    per_device_train_batch_size=32,
    per_device_eval_batch_size=200,
    learning_rate=5e-4,
    weight_decay=0.01,
    warmup_steps=60,
    lr_scheduler_type="linear",
    eval_strategy="epoch",
    save_strategy="epoch",
    save_total_limit=2,
    load_best_model_at_end=True,
    metric_for_best_model="eval_loss",
    greater_is_better=False,
    logging_strategy="epoch",
    report_to="none",
    seed=3,
    use_cpu=True,
    disable_tqdm=True,
)

trainer = Trainer(model=model, args=args, train_dataset=train_ds, eval_dataset=val_ds,
                  compute_metrics=compute_metrics,
                  callbacks=[EarlyStoppingCallback(early_stopping_patience=3,
                                                   early_stopping_threshold=1e-3)])
out = trainer.train()
m = trainer.evaluate()
print(f"stopped after epoch {trainer.state.epoch:.0f} (best checkpoint {trainer.state.best_model_checkpoint})")
print(f"final val_mse {m['eval_mse']:.4f} val_r2 {m['eval_r2']:.4f}")
