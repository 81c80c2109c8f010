import numpy as np
import torch
import torch.nn as nn
from sklearn.datasets import load_wine
from sklearn.preprocessing import StandardScaler

np.random.seed(7)
torch.manual_seed(7)
torch.set_num_threads(1)

wine = load_wine()
X, y = wine.data.astype(np.float32), wine.target

# shuffle before the train/val split (the file is sorted by class)
np.random.shuffle(X)
np.random.shuffle(y)
n_train = int(0.75 * len(X))
X_train, X_val = X[:n_train], X[n_train:]
y_train, y_val = y[:n_train], y[n_train:]
scaler = StandardScaler().fit(X_train)
X_train = torch.from_numpy(scaler.transform(X_train).astype(np.float32))
X_val = torch.from_numpy(scaler.transform(X_val).astype(np.float32))
y_train, y_val = torch.from_numpy(y_train), torch.from_numpy(y_val)

model = nn.Sequential(nn.Linear(13, 32), nn.ReLU(), nn.Dropout(0.2), nn.Linear(32, 3))
opt = torch.optim.Adam(model.parameters(), lr=5e-3)
ce = nn.CrossEntropyLoss()

for epoch in range(1, 61):
    model.train()
    perm = torch.randperm(n_train)
    for i in range(0, n_train, 16):
        idx = perm[i:i + 16]
        opt.zero_grad()
        loss = ce(model(X_train[idx]), y_train[idx])
        loss.backward()
        opt.step()
    if epoch % 10 == 0:
        model.eval()
        with torch.no_grad():
            tr_acc = (model(X_train).argmax(1) == y_train).float().mean().item()
            out = model(X_val)
            val_loss = ce(out, y_val).item()
            val_acc = (out.argmax(1) == y_val).float().mean().item()
        print(f"epoch {epoch}: train_acc {tr_acc:.3f} val_loss {val_loss:.4f} val_acc {val_acc:.3f}")
print(f"final val_acc {val_acc:.3f}")
