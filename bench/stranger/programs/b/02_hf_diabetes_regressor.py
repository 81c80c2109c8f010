"""MLP regressor for the diabetes data set, trained with transformers.Trainer.
The model is a plain nn.Module that returns a dict with the loss, like HF models do."""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from sklearn.datasets import load_diabetes
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler
from transformers import Trainer, TrainingArguments, set_seed

torch.set_num_threads(1)
set_seed(42)

X, y = load_diabetes(return_X_y=True)
X_tr, X_va, y_tr, y_va = train_test_split(X, y, test_size=0.25, random_state=42)
xs = StandardScaler().fit(X_tr)
X_tr, X_va = xs.transform(X_tr), xs.transform(X_va)
y_mean, y_std = y_tr.mean(), y_tr.std()
y_tr, y_va = (y_tr - y_mean) / y_std, (y_va - y_mean) / y_std


class TabDataset(torch.utils.data.Dataset):
    def __init__(self, X, y):
        self.X = torch.tensor(X, dtype=torch.float32)
        self.y = torch.tensor(y, dtype=torch.float32)

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return {"features": self.X[i], "labels": self.y[i]}


class Regressor(nn.Module):
    def __init__(self, n_in, hidden=64):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(n_in, hidden), nn.ReLU(),
                                 nn.Linear(hidden, hidden), nn.ReLU(),
                                 nn.Linear(hidden, 1))

    def forward(self, features, labels=None):
        preds = self.net(features)
        out = {"logits": preds}
        if labels is not None:
            out["loss"] = F.mse_loss(preds, labels)
        return out


def compute_metrics(p):
    preds, labels = p
    preds = preds.reshape(-1)
    mse = float(((preds - labels) ** 2).mean())
    r2 = 1.0 - mse / float(labels.var())
    return {"mse": mse, "r2": r2}


args = TrainingArguments(output_dir="_runs/02", num_train_epochs=40,
                         per_device_train_batch_size=16, per_device_eval_batch_size=256,
                         learning_rate=1e-3, weight_decay=1e-4,
                         eval_strategy="epoch", logging_strategy="epoch",
                         save_strategy="no", report_to="none", disable_tqdm=True,
                         use_cpu=True, seed=42)
trainer = Trainer(model=Regressor(X_tr.shape[1]), args=args,
                  train_dataset=TabDataset(X_tr, y_tr), eval_dataset=TabDataset(X_va, y_va),
                  compute_metrics=compute_metrics)
trainer.train()
m = trainer.evaluate()
print(f"final val_mse={m['eval_mse']:.4f} val_r2={m['eval_r2']:.4f}")
