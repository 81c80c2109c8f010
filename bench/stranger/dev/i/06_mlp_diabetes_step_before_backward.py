"""Disease-progression regression on the diabetes table with an MLP, SGD + momentum, cosine LR."""
import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset
from sklearn.datasets import load_diabetes
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

torch.manual_seed(13)

X, y = load_diabetes(return_X_y=True)
X_tr, X_va, y_tr, y_va = train_test_split(X, y, test_size=0.2, random_state=13)
xs = StandardScaler().fit(X_tr)
y_mu, y_sd = y_tr.mean(), y_tr.std()
to_t = lambda a: torch.tensor(a, dtype=torch.float32)
train_ds = TensorDataset(to_t(xs.transform(X_tr)), to_t((y_tr - y_mu) / y_sd)[:, None])
val_ds = TensorDataset(to_t(xs.transform(X_va)), to_t((y_va - y_mu) / y_sd)[:, None])
train_loader = DataLoader(train_ds, batch_size=16, shuffle=True, generator=torch.Generator().manual_seed(13))
val_loader = DataLoader(val_ds, batch_size=len(val_ds))

model = nn.Sequential(
    nn.Linear(10, 64), nn.SiLU(),
    nn.Linear(64, 64), nn.SiLU(), nn.Dropout(0.2),
    nn.Linear(64, 1),
)
EPOCHS = 40
criterion = nn.MSELoss()
optimizer = torch.optim.SGD(model.parameters(), lr=0.002, momentum=0.9, weight_decay=1e-3)
scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=EPOCHS)

for epoch in range(1, EPOCHS + 1):
    model.train()
    total, n = 0.0, 0
    for xb, yb in train_loader:
        optimizer.zero_grad()
        pred = model(xb)
        loss = criterion(pred, yb)
        optimizer.step()
        loss.backward()
        total += loss.item() * len(xb)
        n += len(xb)
    scheduler.step()
    model.eval()
    with torch.no_grad():
        xb, yb = next(iter(val_loader))
        pred = model(xb)
        val_mse = criterion(pred, yb).item()
        pred_raw = pred.squeeze(1).numpy() * y_sd + y_mu
        true_raw = yb.squeeze(1).numpy() * y_sd + y_mu
        val_mae = np.abs(pred_raw - true_raw).mean()
        r2 = 1 - ((pred_raw - true_raw) ** 2).sum() / ((true_raw - true_raw.mean()) ** 2).sum()
    if epoch % 5 == 0 or epoch == 1:
        print(f"epoch {epoch:02d} train_mse {total / n:.4f} val_mse {val_mse:.4f} val_mae {val_mae:.2f} val_r2 {r2:.3f}")

print(f"final val_mse {val_mse:.4f} val_mae {val_mae:.2f} val_r2 {r2:.3f}")
