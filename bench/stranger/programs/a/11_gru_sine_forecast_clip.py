"""One-step-ahead forecasting of noisy sums of sines with a 2-layer GRU; gradient clipping + Adam."""
import math
import numpy as np
import torch
import torch.nn as nn

torch.manual_seed(0)
np.random.seed(0)
torch.set_num_threads(1)

WIN = 24


def series(n_series, length):
    t = np.arange(length)
    out = []
    for _ in range(n_series):
        f1, f2 = np.random.uniform(0.02, 0.1, 2)
        p1, p2 = np.random.uniform(0, 2 * math.pi, 2)
        s = np.sin(2 * math.pi * f1 * t + p1) + 0.5 * np.sin(2 * math.pi * f2 * t + p2)
        out.append(s + 0.05 * np.random.randn(length))
    return np.array(out, dtype=np.float32)


def windows(arr):
    xs, ys = [], []
    for s in arr:
        for i in range(0, len(s) - WIN - 1, 4):
            xs.append(s[i:i + WIN])
            ys.append(s[i + WIN])
    return torch.tensor(np.array(xs)).unsqueeze(-1), torch.tensor(np.array(ys))


Xtr, ytr = windows(series(40, 200))
Xva, yva = windows(series(10, 200))
print(f"train windows {len(Xtr)}, val windows {len(Xva)}")


class Forecaster(nn.Module):
    def __init__(self, hidden=32):
        super().__init__()
        self.rnn = nn.GRU(1, hidden, num_layers=2, batch_first=True)
        self.head = nn.Linear(hidden, 1)

    def forward(self, x):
        out, _ = self.rnn(x)
        return self.head(out[:, -1]).squeeze(-1)


model = Forecaster()
opt = torch.optim.Adam(model.parameters(), lr=3e-3)
mse = nn.MSELoss()
naive_mse = mse(Xva[:, -1, 0], yva).item()

for epoch in range(8):
    model.train()
    perm = torch.randperm(len(Xtr))
    tl = []
    for i in range(0, len(perm), 64):
        b = perm[i:i + 64]
        opt.zero_grad()
        loss = mse(model(Xtr[b]), ytr[b])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
        opt.step()
        tl.append(loss.item())
    model.eval()
    with torch.no_grad():
        vmse = mse(model(Xva), yva).item()
    print(f"epoch {epoch+1} train_mse {np.mean(tl):.5f} val_mse {vmse:.5f} (naive last-value {naive_mse:.5f})")
print(f"final val_mse {vmse:.5f}")
