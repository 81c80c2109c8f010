"""Residual 1-D CNN classifying noisy synthetic waveforms (sine / square / sawtooth / triangle / chirp).
Memory-limited setup: micro-batches of 8, gradients accumulated over 8 micro-batches (loss divided by 8),
SGD Nesterov with OneCycleLR stepped once per optimizer step, gradient-norm clipping."""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(31)
rng = np.random.default_rng(31)
L_SIG, N_CLASSES = 128, 5


def make_signals(n):
    t = np.linspace(0, 1, L_SIG, dtype=np.float32)
    y = rng.integers(0, N_CLASSES, n)
    f = rng.uniform(2, 8, n)[:, None]
    ph = rng.uniform(0, 1, n)[:, None]
    u = (f * t + ph) % 1.0
    waves = np.stack([
        np.sin(2 * np.pi * u),
        np.sign(np.sin(2 * np.pi * u)),
        2 * u - 1,
        2 * np.abs(2 * u - 1) - 1,
        np.sin(2 * np.pi * (f * t + 6 * t ** 2 + ph)),
    ])
    x = waves[y, np.arange(n)] * rng.uniform(0.5, 1.5, (n, 1)) + rng.normal(0, 0.35, (n, L_SIG))
    return torch.tensor(x, dtype=torch.float32)[:, None], torch.tensor(y)


class ResBlock(nn.Module):
    def __init__(self, ch):
        super().__init__()
        self.c1 = nn.Conv1d(ch, ch, 5, padding=2, bias=False)
        self.b1 = nn.BatchNorm1d(ch)
        self.c2 = nn.Conv1d(ch, ch, 5, padding=2, bias=False)
        self.b2 = nn.BatchNorm1d(ch)

    def forward(self, x):
        h = F.relu(self.b1(self.c1(x)))
        return F.relu(x + self.b2(self.c2(h)))


class WaveNet1D(nn.Module):
    def __init__(self, ch=32):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv1d(1, ch, 7, padding=3, bias=False), nn.BatchNorm1d(ch), nn.ReLU())
        self.blocks = nn.Sequential(ResBlock(ch), nn.MaxPool1d(2), ResBlock(ch), nn.MaxPool1d(2), ResBlock(ch))
        self.fc = nn.Linear(ch, N_CLASSES)

    def forward(self, x):
        return self.fc(self.blocks(self.stem(x)).mean(-1))


Xtr, ytr = make_signals(3200)
Xva, yva = make_signals(800)
MICRO, ACCUM, EPOCHS = 8, 8, 8
train_loader = DataLoader(TensorDataset(Xtr, ytr), batch_size=MICRO, shuffle=True, drop_last=True,
                          generator=torch.Generator().manual_seed(31))
val_loader = DataLoader(TensorDataset(Xva, yva), batch_size=200)

model = WaveNet1D()
criterion = nn.CrossEntropyLoss()
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True, weight_decay=5e-4)
steps_per_epoch = len(train_loader) // ACCUM
scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=0.1, epochs=EPOCHS, steps_per_epoch=steps_per_epoch)

for epoch in range(1, EPOCHS + 1):
    model.train()
    optimizer.zero_grad()
    run_loss, seen = 0.0, 0
    for i, (xb, yb) in enumerate(train_loader):
        loss = criterion(model(xb), yb)
        (loss / ACCUM).backward()
        run_loss += loss.item() * len(yb)
        seen += len(yb)
        if (i + 1) % ACCUM == 0:
            nn.utils.clip_grad_norm_(model.parameters(), max_norm=2.0)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
    model.eval()
    vloss, correct, m = 0.0, 0, 0
    with torch.no_grad():
        for xb, yb in val_loader:
            out = model(xb)
            vloss += criterion(out, yb).item() * len(yb)
            correct += (out.argmax(1) == yb).sum().item()
            m += len(yb)
    print(f"epoch {epoch:02d} lr {scheduler.get_last_lr()[0]:.4f} train_loss {run_loss / seen:.4f} "
          f"val_loss {vloss / m:.4f} val_acc {correct / m:.4f}")

print(f"final val_loss {vloss / m:.4f} val_acc {correct / m:.4f}")
