"""MLP on sklearn digits: AdamW, linear warm-up then cosine decay, per-epoch validation."""
import math
import random

import numpy as np
import torch
import torch.nn as nn
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler
from torch.utils.data import DataLoader, TensorDataset

SEED = 0
random.seed(SEED)
np.random.seed(SEED)
torch.manual_seed(SEED)
torch.set_num_threads(1)

X, y = load_digits(return_X_y=True)
X_tr, X_va, y_tr, y_va = train_test_split(X, y, test_size=0.2, random_state=SEED, stratify=y)
scaler = StandardScaler().fit(X_tr)
X_tr, X_va = scaler.transform(X_tr), scaler.transform(X_va)

train_ds = TensorDataset(torch.tensor(X_tr, dtype=torch.float32), torch.tensor(y_tr))
val_ds = TensorDataset(torch.tensor(X_va, dtype=torch.float32), torch.tensor(y_va))
g = torch.Generator().manual_seed(SEED)
train_dl = DataLoader(train_ds, batch_size=32, shuffle=True, generator=g)
val_dl = DataLoader(val_ds, batch_size=256)

model = nn.Sequential(
    nn.Linear(64, 128), nn.ReLU(), nn.Dropout(0.1),
    nn.Linear(128, 64), nn.ReLU(),
    nn.Linear(64, 10),
)
EPOCHS = 20
total_steps = EPOCHS * len(train_dl)
warmup = 60
opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=1e-2)


def lr_lambda(step):
    if step < warmup:
        return (step + 1) / warmup
    progress = (step - warmup) / max(1, total_steps - warmup)
    return 0.5 * (1 + math.cos(math.pi * progress))


sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda)
criterion = nn.CrossEntropyLoss()


def evaluate():
    model.eval()
    tot, correct, loss_sum = 0, 0, 0.0
    with torch.no_grad():
        for xb, yb in val_dl:
            out = model(xb)
            loss_sum += criterion(out, yb).item() * len(yb)
            correct += (out.argmax(1) == yb).sum().item()
            tot += len(yb)
    return loss_sum / tot, correct / tot


for epoch in range(EPOCHS):
    model.train()
    running = 0.0
    for xb, yb in train_dl:
        opt.zero_grad()
        loss = criterion(model(xb), yb)
        loss.backward()
        opt.step()
        sched.step()
        running += loss.item()
    vl, va = evaluate()
    print(f"epoch {epoch+1:2d} lr {sched.get_last_lr()[0]:.5f} train_loss {running/len(train_dl):.4f} "
          f"val_loss {vl:.4f} val_acc {va:.4f}")

print(f"final val_acc {va:.4f}")
