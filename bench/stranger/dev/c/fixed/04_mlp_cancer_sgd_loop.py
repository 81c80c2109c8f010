# Binary classifier for the breast-cancer data, plain SGD with momentum.
import random
import numpy as np
import torch
import torch.nn as nn
from sklearn.datasets import load_breast_cancer
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

random.seed(4); np.random.seed(4); torch.manual_seed(4)
torch.set_num_threads(1)

data = load_breast_cancer()
X_train, X_val, y_train, y_val = train_test_split(data.data, data.target, test_size=0.25,
                                                  random_state=4, stratify=data.target)
sc = StandardScaler()
X_train = torch.tensor(sc.fit_transform(X_train), dtype=torch.float32)
X_val = torch.tensor(sc.transform(X_val), dtype=torch.float32)
y_train = torch.tensor(y_train, dtype=torch.float32)
y_val = torch.tensor(y_val, dtype=torch.float32)

model = nn.Sequential(nn.Linear(30, 64), nn.ReLU(), nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 1))
criterion = nn.BCEWithLogitsLoss()
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

batch_size = 16
for epoch in range(30):
    model.train()
    perm = torch.randperm(len(X_train))
    total = 0.0
    for i in range(0, len(perm), batch_size):
        idx = perm[i:i + batch_size]
        optimizer.zero_grad()
        logits = model(X_train[idx]).squeeze(1)
        loss = criterion(logits, y_train[idx])
        loss.backward()
        optimizer.step()
        total += loss.item() * len(idx)
    model.eval()
    with torch.no_grad():
        v = model(X_val).squeeze(1)
        val_loss = criterion(v, y_val).item()
        val_acc = ((v > 0).float() == y_val).float().mean().item()
    if epoch % 3 == 0 or epoch == 29:
        print(f"epoch {epoch:2d}  train_loss={total/len(X_train):.4f}  val_loss={val_loss:.4f}  val_acc={val_acc:.4f}")
print(f"final val_acc={val_acc:.4f} val_loss={val_loss:.4f}")
