"""Small CNN on scikit-learn digits, hand-written PyTorch loop with gradient
accumulation (micro-batches of 8, one optimizer step every 4 micro-batches,
i.e. an effective batch of 32), SGD with momentum and StepLR.
"""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(14)
np.random.seed(14)
torch.set_num_threads(1)

digits = load_digits()
X = torch.tensor(digits.images[:, None] / 16.0, dtype=torch.float32)
y = torch.tensor(digits.target)
idx_tr, idx_va = train_test_split(np.arange(len(y)), test_size=0.2, random_state=14,
                                  stratify=digits.target)
mean, std = X[idx_tr].mean(), X[idx_tr].std()
X = (X - mean) / std
train_loader = DataLoader(TensorDataset(X[idx_tr], y[idx_tr]), batch_size=8, shuffle=True)
val_loader = DataLoader(TensorDataset(X[idx_va], y[idx_va]), batch_size=128)

model = nn.Sequential(
    nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(),
    nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
    nn.Flatten(), nn.Dropout(0.25), nn.Linear(32 * 16, 64), nn.ReLU(), nn.Linear(64, 10),
)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=5, gamma=0.5)
ACCUM_STEPS = 4


def validate():
    model.eval()
    loss_sum, correct, n = 0.0, 0, 0
    with torch.no_grad():
        for xb, yb in val_loader:
            logits = model(xb)
            loss_sum += F.cross_entropy(logits, yb, reduction="sum").item()
            correct += (logits.argmax(1) == yb).sum().item()
            n += len(yb)
    model.train()
    return loss_sum / n, correct / n


global_step = 0          # number of optimizer updates
optimizer.zero_grad()
for epoch in range(8):
    model.train()
    running, seen = 0.0, 0
    for xb, yb in train_loader:
        loss = F.cross_entropy(model(xb), yb) / ACCUM_STEPS
        loss.backward()
        running += loss.item() * ACCUM_STEPS * len(xb)
        seen += len(xb)
        if (global_step + 1) % ACCUM_STEPS == 0:
            optimizer.step()
            optimizer.zero_grad()
            global_step += 1
    scheduler.step()
    val_loss, val_acc = validate()
    print(f"epoch {epoch} train_loss {running / seen:.4f} val_loss {val_loss:.4f} "
          f"val_acc {val_acc:.4f} updates {global_step}")

val_loss, val_acc = validate()
print(f"final val_loss {val_loss:.4f} val_acc {val_acc:.4f}")
