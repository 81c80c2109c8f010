"""Residual MLP with BatchNorm on the breast-cancer data, hand-written PyTorch loop.

Class-weighted cross-entropy, AdamW, ReduceLROnPlateau on the validation loss,
early stopping with the best weights restored before the final evaluation.
"""
import copy

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from sklearn.datasets import load_breast_cancer
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(13)
np.random.seed(13)
torch.set_num_threads(1)

X, y = load_breast_cancer(return_X_y=True)
X_tr, X_va, y_tr, y_va = train_test_split(X, y, test_size=0.25, random_state=13, stratify=y)
scaler = StandardScaler().fit(X_tr)
X_tr = torch.tensor(scaler.transform(X_tr), dtype=torch.float32)
X_va = torch.tensor(scaler.transform(X_va), dtype=torch.float32)
y_tr, y_va = torch.tensor(y_tr), torch.tensor(y_va)
train_loader = DataLoader(TensorDataset(X_tr, y_tr), batch_size=32, shuffle=True)

counts = torch.bincount(y_tr, minlength=2).float()
class_weights = counts.sum() / (2 * counts)


class ResBlock(nn.Module):
    def __init__(self, d, p):
        super().__init__()
        self.body = nn.Sequential(nn.BatchNorm1d(d), nn.ReLU(), nn.Linear(d, d),
                                  nn.BatchNorm1d(d), nn.ReLU(), nn.Dropout(p), nn.Linear(d, d))

    def forward(self, x):
        return x + self.body(x)


model = nn.Sequential(nn.Linear(30, 64), ResBlock(64, 0.3), ResBlock(64, 0.3),
                      nn.BatchNorm1d(64), nn.ReLU(), nn.Linear(64, 2))
optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=1e-3)
scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, factor=0.3, patience=3)


def evaluate():
    model.eval()
    with torch.no_grad():
        logits = model(X_va)
        loss = F.cross_entropy(logits, y_va, weight=class_weights).item()
        acc = (logits.argmax(1) == y_va).float().mean().item()
    return loss, acc


best_loss, best_state, bad_epochs, patience = float("inf"), None, 0, 8
for epoch in range(60):
    model.train()
    total, n = 0.0, 0
    for xb, yb in train_loader:
        optimizer.zero_grad()
        loss = F.cross_entropy(model(xb), yb, weight=class_weights)
        loss.backward()
        optimizer.step()
        total += loss.item() * len(xb)
        n += len(xb)
    val_loss, val_acc = evaluate()
    scheduler.step(val_loss)
    print(f"epoch {epoch} train_loss {total / n:.4f} val_loss {val_loss:.4f} "
          f"val_acc {val_acc:.4f} lr {optimizer.param_groups[0]['lr']:.5f}")
    if val_loss < best_loss - 1e-4:
        best_loss, best_state, bad_epochs = val_loss, copy.deepcopy(model.state_dict()), 0
    else:
        bad_epochs += 1
        if bad_epochs >= patience:
            print(f"early stopping at epoch {epoch}")
            break

model.load_state_dict(best_state)
val_loss, val_acc = evaluate()
print(f"final val_loss {val_loss:.4f} val_acc {val_acc:.4f}")
