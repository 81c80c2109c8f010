"""Tiny BERT regression: predict a sequence's "score" from its tokens.

Twenty "scored" words carry values from -2 to +2, the rest carry none; the
target is the standardised sum of the values plus noise. The model is
BertForSequenceClassification with num_labels=1 and the loss is given to
the Trainer through compute_loss_func (plain MSE). Reports val MSE and R^2.
"""
import tempfile

import numpy as np
import torch
from torch import nn
from torch.utils.data import Dataset
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments, set_seed

set_seed(7)
PAD, CLS = 0, 1
SCORED = np.arange(2, 22)
VALUES = np.linspace(-2, 2, len(SCORED))
VOCAB = 70
MAX_LEN = 20


def make_set(n, seed):
    g = np.random.default_rng(seed)
    seqs, ys = [], []
    for _ in range(n):
        length = int(g.integers(10, MAX_LEN))
        toks = g.integers(22, VOCAB, size=length)
        k = int(g.integers(1, 5))
        idx = g.choice(length, size=k, replace=False)
        picks = g.integers(len(SCORED), size=k)
        toks[idx] = SCORED[picks]
        seqs.append([CLS] + toks.tolist())
        ys.append(VALUES[picks].sum() + g.normal(0, 0.2))
    return seqs, np.array(ys, dtype=np.float32)


tr_seqs, tr_y = make_set(2000, seed=71)
va_seqs, va_y = make_set(400, seed=72)
mu, sd = tr_y.mean(), tr_y.std()
tr_y, va_y = (tr_y - mu) / sd, (va_y - mu) / sd


class ScoreDataset(Dataset):
    def __init__(self, seqs, ys):
        self.seqs, self.ys = seqs, ys

    def __len__(self):
        return len(self.seqs)

    def __getitem__(self, i):
        s = self.seqs[i]
        pad = MAX_LEN - len(s)
        return {"input_ids": torch.tensor(s + [PAD] * pad),
                "attention_mask": torch.tensor([1] * len(s) + [0] * pad),
                "labels": torch.tensor(self.ys[i])}


config = BertConfig(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                    intermediate_size=128, max_position_embeddings=MAX_LEN, hidden_dropout_prob=0.05,
                    attention_probs_dropout_prob=0.05, num_labels=1, pad_token_id=PAD)
model = BertForSequenceClassification(config)

mse = nn.MSELoss()


def regression_loss(outputs, labels, num_items_in_batch=None):
    return mse(outputs.logits, labels)


def compute_metrics(eval_pred):
    preds, labels = eval_pred
    preds = preds.reshape(-1)
    err = float(((preds - labels) ** 2).mean())
    r2 = 1.0 - err / float(((labels - labels.mean()) ** 2).mean())
    return {"mse": err, "r2": r2}


args = TrainingArguments(
    output_dir=tempfile.mkdtemp(prefix="hf_bert_reg_"),
    num_train_epochs=8,
    per_device_train_batch_size=32,
    per_device_eval_batch_size=200,
    learning_rate=1e-3,
    lr_scheduler_type="cosine",
    warmup_steps=40,
    weight_decay=0.01,
    max_grad_norm=1.0,
    optim="adamw_torch",
    eval_strategy="epoch",
    logging_strategy="epoch",
    save_strategy="no",
    report_to="none",
    seed=7,
    use_cpu=True,
    disable_tqdm=True,
)

trainer = Trainer(model=model, args=args, train_dataset=ScoreDataset(tr_seqs, tr_y),
                  eval_dataset=ScoreDataset(va_seqs, va_y), compute_loss_func=regression_loss,
                  compute_metrics=compute_metrics)
result = trainer.train()
for rec in trainer.state.log_history:
    if "loss" in rec:
        print(f"epoch {rec['epoch']:.0f}  train_loss {rec['loss']:.4f}")
    elif "eval_loss" in rec:
        print(f"epoch {rec['epoch']:.0f}  val_loss {rec['eval_loss']:.4f}  val_mse {rec['eval_mse']:.4f}  "
              f"val_r2 {rec['eval_r2']:.3f}")
final = trainer.evaluate()
print(f"final train_loss {result.training_loss:.4f}")
print(f"final val_loss {final['eval_loss']:.4f}  val_mse {final['eval_mse']:.4f}  val_r2 {final['eval_r2']:.3f}")
