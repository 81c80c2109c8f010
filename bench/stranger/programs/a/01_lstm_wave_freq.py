"""Classify noisy sine-wave sequences by frequency with a small LSTM."""
import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import TensorDataset, DataLoader

torch.manual_seed(0)
np.random.seed(0)
torch.set_num_threads(1)


def make_waves(n, seq_len=30, n_classes=3):
    t = np.linspace(0, 1, seq_len)
    y = np.random.randint(0, n_classes, size=n)
    freq = 1.0 + 1.5 * y
    phase = np.random.uniform(0, 2 * np.pi, size=n)
    x = np.sin(2 * np.pi * freq[:, None] * t[None, :] + phase[:, None])
    x += 0.3 * np.random.randn(n, seq_len)
    return torch.tensor(x[..., None], dtype=torch.float32), torch.tensor(y)


Xtr, ytr = make_waves(1200)
Xva, yva = make_waves(400)
train_loader = DataLoader(TensorDataset(Xtr, ytr), batch_size=32, shuffle=True)
val_loader = DataLoader(TensorDataset(Xva, yva), batch_size=128)


class SeqClassifier(nn.Module):
    def __init__(self, hidden=32, n_classes=3):
        super().__init__()
        self.lstm = nn.LSTM(1, hidden, batch_first=True)
        self.fc = nn.Linear(hidden, n_classes)

    def forward(self, x):
        out, (h, c) = self.lstm(x)
        return self.fc(h[-1])


model = SeqClassifier()
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
criterion = nn.CrossEntropyLoss()

for epoch in range(12):
    model.train()
    total, n = 0.0, 0
    for xb, yb in train_loader:
        logits = model(xb)
        loss = criterion(logits, yb)
        loss.backward()
        optimizer.step()
        total += loss.item() * len(yb)
        n += len(yb)
    model.eval()
    correct, vloss = 0, 0.0
    with torch.no_grad():
        for xb, yb in val_loader:
            logits = model(xb)
            vloss += criterion(logits, yb).item() * len(yb)
            correct += (logits.argmax(1) == yb).sum().item()
    print(f"epoch {epoch+1:2d} train_loss {total/n:.4f} val_loss {vloss/len(yva):.4f} val_acc {correct/len(yva):.3f}")

print(f"final val_acc {correct/len(yva):.3f}")
