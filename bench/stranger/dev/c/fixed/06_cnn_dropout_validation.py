"""CNN with BatchNorm + Dropout on digits, Adam, checkpoint the best epoch by validation accuracy."""
import copy
import numpy as np
import torch
import torch.nn as nn
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(6)
np.random.seed(6)
torch.set_num_threads(1)

d = load_digits()
imgs = torch.tensor(d.images / 16.0, dtype=torch.float32).unsqueeze(1)
labels = torch.tensor(d.target)
tr_idx, va_idx = train_test_split(np.arange(len(labels)), test_size=0.3, random_state=6, stratify=d.target)
train_loader = DataLoader(TensorDataset(imgs[tr_idx], labels[tr_idx]), batch_size=64, shuffle=True,
                          generator=torch.Generator().manual_seed(6))
val_loader = DataLoader(TensorDataset(imgs[va_idx], labels[va_idx]), batch_size=32)

model = nn.Sequential(
    nn.Conv2d(1, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
    nn.Conv2d(32, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
    nn.Dropout(0.5),
    nn.Flatten(),
    nn.Linear(32 * 16, 128), nn.ReLU(), nn.Dropout(0.5),
    nn.Linear(128, 10),
)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
criterion = nn.CrossEntropyLoss()


def validate(net):
    net.eval()
    loss, correct, n = 0.0, 0, 0
    with torch.no_grad():
        for xb, yb in val_loader:
            out = net(xb)
            loss += criterion(out, yb).item() * len(yb)
            correct += (out.argmax(1) == yb).sum().item()
            n += len(yb)
    return loss / n, correct / n


best_acc, best_state = 0.0, None
model.train()
for epoch in range(25):
    running = 0.0
    for xb, yb in train_loader:
        optimizer.zero_grad()
        loss = criterion(model(xb), yb)
        loss.backward()
        optimizer.step()
        running += loss.item()
    val_loss, val_acc = validate(model)
    model.train()
    if val_acc > best_acc:
        best_acc, best_state = val_acc, copy.deepcopy(model.state_dict())
    print(f"epoch {epoch+1:2d}: train_loss {running/len(train_loader):.4f} val_loss {val_loss:.4f} val_acc {val_acc:.4f}")

model.load_state_dict(best_state)
print(f"best val_acc {best_acc:.4f}; reloaded best checkpoint: val_loss {validate(model)[0]:.4f}")
