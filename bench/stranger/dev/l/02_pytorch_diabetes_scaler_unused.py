import numpy as np
import torch
import torch.nn as nn
from sklearn.datasets import load_diabetes
from sklearn.metrics import r2_score
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
torch.set_num_threads(1)

X, y = load_diabetes(return_X_y=True, scaled=False)
X_train, X_val, y_train, y_val = train_test_split(X, y, test_size=0.2, random_state=7)

scaler = StandardScaler()
scaler.fit(X_train)
y_mu, y_sd = y_train.mean(), y_train.std()


def make_loader(features, target, shuffle):
    xt = torch.tensor(features, dtype=torch.float32)
    yt = torch.tensor((target - y_mu) / y_sd, dtype=torch.float32).unsqueeze(1)
    return DataLoader(TensorDataset(xt, yt), batch_size=32, shuffle=shuffle)


train_loader = make_loader(X_train, y_train, shuffle=True)
val_loader = make_loader(X_val, y_val, shuffle=False)

model = nn.Sequential(nn.Linear(10, 64), nn.ReLU(), nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.005, momentum=0.9, weight_decay=1e-3)
loss_fn = nn.MSELoss()

for epoch in range(30):
    model.train()
    total, n = 0.0, 0
    for xb, yb in train_loader:
        optimizer.zero_grad()
        loss = loss_fn(model(xb), yb)
        loss.backward()
        optimizer.step()
        total += loss.item() * len(xb)
        n += len(xb)
    print(f"epoch {epoch:2d}  train_mse {total / n:.4f}")

model.eval()
preds = []
with torch.no_grad():
    for xb, _ in val_loader:
        preds.append(model(xb).squeeze(1).numpy())
pred = np.concatenate(preds) * y_sd + y_mu
print(f"final val_rmse {np.sqrt(np.mean((pred - y_val) ** 2)):.2f}  val_r2 {r2_score(y_val, pred):.4f}")
