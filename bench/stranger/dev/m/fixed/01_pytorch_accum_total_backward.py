"""Digits classifier (MLP) trained with gradient accumulation.

Micro-batches of 16 are accumulated into an effective batch of 128 so the
learning rate from the batch-128 baseline (SGD, lr=0.1, momentum 0.9) can be
reused on a memory-constrained box.
"""
import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

torch.set_num_threads(1)
torch.manual_seed(0)
np.random.seed(0)

MICRO_BATCH = 16
ACCUM_STEPS = 8          # effective batch = 128
LR = 0.1                 # tuned for batch 128
EPOCHS = 20

digits = load_digits()
X_train, X_val, y_train, y_val = train_test_split(
    digits.data, digits.target, test_size=0.25, stratify=digits.target, random_state=0)
scaler = StandardScaler().fit(X_train)
X_train = scaler.transform(X_train).astype(np.float32)
X_val = scaler.transform(X_val).astype(np.float32)

train_loader = DataLoader(
    TensorDataset(torch.from_numpy(X_train), torch.from_numpy(y_train)),
    batch_size=MICRO_BATCH, shuffle=True, drop_last=True)
val_x, val_y = torch.from_numpy(X_val), torch.from_numpy(y_val)


class MLP(nn.Module):
    def __init__(self, d_in=64, n_classes=10):
        super().__init__()
        self.body = nn.Sequential(
            nn.Linear(d_in, 128), nn.ReLU(),
            nn.Linear(128, 64), nn.ReLU(),
        )
        self.head = nn.Linear(64, n_classes)

    def forward(self, x):
        return self.head(self.body(x))


model = MLP()
optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
criterion = nn.CrossEntropyLoss()

for epoch in range(EPOCHS):
    model.train()
    running, n_seen = 0.0, 0
    total = 0.0
    for i, (xb, yb) in enumerate(train_loader):
        logits = model(xb)
        loss = criterion(logits, yb)
        total = total + loss / ACCUM_STEPS
        running += loss.item()
        n_seen += 1
        if (i + 1) % ACCUM_STEPS == 0:
            optimizer.zero_grad()
            total.backward()
            optimizer.step()
            total = 0.0
    model.eval()
    with torch.no_grad():
        val_acc = (model(val_x).argmax(dim=1) == val_y).float().mean().item()
    print(f"epoch {epoch + 1:2d}  train_loss {running / n_seen:.4f}  val_acc {val_acc:.4f}")

model.eval()
with torch.no_grad():
    val_acc = (model(val_x).argmax(dim=1) == val_y).float().mean().item()
print(f"final val_accuracy: {val_acc:.4f}")
