"""Regress disease progression (sklearn diabetes) with a two-layer MLP."""
import numpy as np
import torch
import torch.nn as nn
from sklearn.datasets import load_diabetes
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

torch.manual_seed(42)
np.random.seed(42)
torch.set_num_threads(1)

X, y = load_diabetes(return_X_y=True)
X_train, X_val, y_train, y_val = train_test_split(X, y, test_size=0.2, random_state=42)
xs = StandardScaler().fit(X_train)
y_mean, y_std = y_train.mean(), y_train.std()
X_train = torch.tensor(xs.transform(X_train), dtype=torch.float32)
X_val = torch.tensor(xs.transform(X_val), dtype=torch.float32)
y_train = torch.tensor((y_train - y_mean) / y_std, dtype=torch.float32)
y_val = torch.tensor((y_val - y_mean) / y_std, dtype=torch.float32)

model = nn.Sequential(nn.Linear(10, 64), nn.ReLU(), nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 1))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, weight_decay=1e-4)
criterion = nn.MSELoss()

for epoch in range(1, 151):
    model.train()
    perm = torch.randperm(len(X_train))
    for i in range(0, len(perm), 32):
        idx = perm[i:i + 32]
        pred = model(X_train[idx])
        loss = criterion(pred, y_train[idx])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    if epoch % 15 == 0:
        model.eval()
        with torch.no_grad():
            val_pred = model(X_val).squeeze(-1)
            val_mse = ((val_pred - y_val) ** 2).mean().item()
            r2 = 1 - val_mse / y_val.var(unbiased=False).item()
            train_mse = ((model(X_train).squeeze(-1) - y_train) ** 2).mean().item()
        print(f"epoch {epoch:3d}  train_mse {train_mse:.4f}  val_mse {val_mse:.4f}  val_R2 {r2:.3f}")
print(f"final val_R2 {r2:.3f}")
