"""Diabetes regression MLP trained with transformers.Trainer: plain SGD, micro-batches of 4
with 8-step gradient accumulation (effective batch 32). forward() takes **kwargs so that extra
keys the Trainer passes do not break it."""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from sklearn.datasets import load_diabetes
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler
from transformers import Trainer, TrainingArguments, set_seed

torch.set_num_threads(1)
set_seed(0)

X, y = load_diabetes(return_X_y=True)
X_tr, X_va, y_tr, y_va = train_test_split(X, y, test_size=0.25, random_state=0)
scaler = StandardScaler().fit(X_tr)
X_tr, X_va = scaler.transform(X_tr), scaler.transform(X_va)
y_mean, y_std = y_tr.mean(), y_tr.std()
y_tr, y_va = (y_tr - y_mean) / y_std, (y_va - y_mean) / y_std


class Patients(torch.utils.data.Dataset):
    def __init__(self, X, y):
        self.X = torch.tensor(X, dtype=torch.float32)
        self.y = torch.tensor(y, dtype=torch.float32)

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return {"x": self.X[i], "labels": self.y[i]}


class ProgressionNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(10, 64), nn.ReLU(), nn.Linear(64, 1))

    def forward(self, x, labels=None, num_items_in_batch=None, **kwargs):
        pred = self.net(x).squeeze(-1)
        loss = None
        if labels is not None:
            if num_items_in_batch is not None:   # Trainer passes the count over all accumulated micro-batches
                loss = F.mse_loss(pred, labels, reduction="sum") / num_items_in_batch
            else:
                loss = F.mse_loss(pred, labels)
        return {"loss": loss, "logits": pred}


def compute_metrics(p):
    mse = float(np.mean((p.predictions - p.label_ids) ** 2))
    return {"mse": mse, "r2": 1.0 - mse / float(np.var(p.label_ids))}


args = TrainingArguments(output_dir="_runs/07", num_train_epochs=60, learning_rate=0.1, optim="sgd",
                         per_device_train_batch_size=4, gradient_accumulation_steps=8,
                         per_device_eval_batch_size=128, max_grad_norm=0.0,
                         eval_strategy="epoch", logging_steps=50, save_strategy="no",
                         report_to="none", disable_tqdm=True, use_cpu=True, seed=0)
trainer = Trainer(model=ProgressionNet(), args=args, train_dataset=Patients(X_tr, y_tr),
                  eval_dataset=Patients(X_va, y_va), compute_metrics=compute_metrics)
trainer.train()
m = trainer.evaluate()
print(f"final val_mse={m['eval_mse']:.4f} val_r2={m['eval_r2']:.4f} val_loss={m['eval_loss']:.4f}")
