"""Regression on sklearn diabetes with a small MLP, Adam + StepLR, report val MSE and R^2."""
import numpy as np
import torch
import torch.nn as nn
from sklearn.datasets import load_diabetes
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

torch.set_num_threads(1)
torch.manual_seed(5)
np.random.seed(5)

X, y = load_diabetes(return_X_y=True)
X_tr, X_va, y_tr, y_va = train_test_split(X, y, test_size=0.2, random_state=5)
xs = StandardScaler().fit(X_tr)
y_mean, y_std = y_tr.mean(), y_tr.std()
X_tr = torch.tensor(xs.transform(X_tr), dtype=torch.float32)
X_va = torch.tensor(xs.transform(X_va), dtype=torch.float32)
y_tr = torch.tensor((y_tr - y_mean) / y_std, dtype=torch.float32)
y_va = torch.tensor((y_va - y_mean) / y_std, dtype=torch.float32)

ds = torch.utils.data.TensorDataset(X_tr, y_tr)
dl = torch.utils.data.DataLoader(ds, batch_size=32, shuffle=True)


class Regressor(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(10, 64), nn.ReLU(), nn.Linear(64, 32), nn.ReLU())
        self.out = nn.Linear(32, 1)

    def forward(self, x):
        return self.out(self.body(x))


model = Regressor()
opt = torch.optim.Adam(model.parameters(), lr=3e-3, weight_decay=1e-3)
sched = torch.optim.lr_scheduler.StepLR(opt, step_size=30, gamma=0.3)
criterion = nn.MSELoss()

for epoch in range(60):
    model.train()
    losses = []
    for xb, yb in dl:
        pred = model(xb)
        loss = criterion(pred, yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    sched.step()
    model.eval()
    with torch.no_grad():
        pv = model(X_va)
        val_mse = criterion(pv, y_va).item()
        r2 = 1 - ((pv.reshape(-1) - y_va) ** 2).sum().item() / ((y_va - y_va.mean()) ** 2).sum().item()
    if (epoch + 1) % 10 == 0:
        print(f"epoch {epoch+1} train_mse {np.mean(losses):.4f} val_mse {val_mse:.4f} val_r2 {r2:.3f}")
print(f"final val_mse {val_mse:.4f} val_r2 {r2:.3f}")
