"""Regression on the sklearn diabetes data with a small MLP (Adam, ReduceLROnPlateau)."""
import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset, random_split
from sklearn.datasets import load_diabetes

torch.manual_seed(5)
np.random.seed(5)
torch.set_num_threads(1)

X, y = load_diabetes(return_X_y=True)
X = (X - X.mean(0)) / X.std(0)
y = (y - y.mean()) / y.std()          # standardised target
ds = TensorDataset(torch.tensor(X, dtype=torch.float32), torch.tensor(y, dtype=torch.float32))
train_ds, val_ds = random_split(ds, [354, 88], generator=torch.Generator().manual_seed(5))
train_loader = DataLoader(train_ds, batch_size=32, shuffle=True, generator=torch.Generator().manual_seed(5))
val_loader = DataLoader(val_ds, batch_size=88)

model = nn.Sequential(nn.Linear(10, 64), nn.Tanh(), nn.Linear(64, 32), nn.Tanh(), nn.Linear(32, 1))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, factor=0.5, patience=5)
mse = nn.MSELoss()

for epoch in range(60):
    model.train()
    tl = []
    for xb, yb in train_loader:
        opt.zero_grad()
        pred = model(xb).squeeze(-1)
        loss = mse(pred, yb)
        loss.backward()
        opt.step()
        tl.append(loss.item())
    model.eval()
    with torch.no_grad():
        xb, yb = next(iter(val_loader))
        pred = model(xb).view(-1)
        val_mse = ((pred - yb) ** 2).mean().item()
        r2 = 1 - val_mse / yb.var(unbiased=False).item()
    plateau.step(val_mse)
    if epoch % 5 == 0 or epoch == 59:
        print(f"epoch {epoch:02d} train_mse {np.mean(tl):.4f} val_mse {val_mse:.4f} val_r2 {r2:.3f}")
print(f"final val_mse {val_mse:.4f} val_r2 {r2:.3f}")
