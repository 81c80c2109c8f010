"""Digits CNN with BatchNorm, Dropout, AdamW and a cosine schedule (per-epoch), with a proper eval pass."""
import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

torch.manual_seed(2024)
np.random.seed(2024)
torch.set_num_threads(1)

digits = load_digits()
X = torch.tensor(digits.images / 16.0, dtype=torch.float32).unsqueeze(1)
y = torch.tensor(digits.target)
tr_idx, va_idx = train_test_split(np.arange(len(y)), test_size=0.2, random_state=2024, stratify=digits.target)
train_dl = DataLoader(TensorDataset(X[tr_idx], y[tr_idx]), batch_size=64, shuffle=True)
val_dl = DataLoader(TensorDataset(X[va_idx], y[va_idx]), batch_size=256)

model = nn.Sequential(
    nn.Conv2d(1, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU(),
    nn.Conv2d(32, 64, 3, padding=1, bias=False), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
    nn.Conv2d(64, 64, 3, padding=1, bias=False), nn.BatchNorm2d(64), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
    nn.Flatten(), nn.Dropout(0.3), nn.Linear(64, 10),
)
EPOCHS = 15
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=5e-4)
scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=EPOCHS)
criterion = nn.CrossEntropyLoss(label_smoothing=0.05)

best = 0.0
for epoch in range(EPOCHS):
    model.train()
    running, seen = 0.0, 0
    for xb, yb in train_dl:
        optimizer.zero_grad(set_to_none=True)
        loss = criterion(model(xb), yb)
        loss.backward()
        optimizer.step()
        running += loss.item() * xb.size(0)
        seen += xb.size(0)
    scheduler.step()
    model.eval()
    correct, vloss = 0, 0.0
    with torch.no_grad():
        for xb, yb in val_dl:
            out = model(xb)
            vloss += criterion(out, yb).item() * xb.size(0)
            correct += (out.argmax(1) == yb).sum().item()
    acc = correct / len(va_idx)
    best = max(best, acc)
    print(f"epoch {epoch+1:2d} lr {scheduler.get_last_lr()[0]:.5f} train_loss {running/seen:.4f} val_loss {vloss/len(va_idx):.4f} val_acc {acc:.3f}")
print(f"final val_acc {acc:.3f} (best {best:.3f})")
