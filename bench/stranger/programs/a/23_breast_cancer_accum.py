"""Binary classifier on breast-cancer features with gradient accumulation (micro-batches of 8, effective batch 64)."""
import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset
from sklearn.datasets import load_breast_cancer
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

torch.manual_seed(5)
np.random.seed(5)
torch.set_num_threads(1)

X, y = load_breast_cancer(return_X_y=True)
Xtr, Xva, ytr, yva = train_test_split(X, y, test_size=0.25, stratify=y, random_state=5)
scaler = StandardScaler().fit(Xtr)
train_ds = TensorDataset(torch.tensor(scaler.transform(Xtr), dtype=torch.float32), torch.tensor(ytr, dtype=torch.float32))
val_X = torch.tensor(scaler.transform(Xva), dtype=torch.float32)
val_y = torch.tensor(yva, dtype=torch.float32)
loader = DataLoader(train_ds, batch_size=8, shuffle=True)

model = nn.Sequential(
    nn.Linear(30, 64), nn.ReLU(),
    nn.Linear(64, 64), nn.ReLU(),
    nn.Linear(64, 1),
)
optimizer = torch.optim.SGD(model.parameters(), lr=0.15, momentum=0.9)
criterion = nn.BCEWithLogitsLoss()
ACCUM = 8

for epoch in range(1, 31):
    model.train()
    optimizer.zero_grad()
    seen_loss = []
    for step, (xb, yb) in enumerate(loader, start=1):
        loss = criterion(model(xb).squeeze(1), yb)
        loss.backward()
        seen_loss.append(loss.item())
        if step % ACCUM == 0 or step == len(loader):
            optimizer.step()
            optimizer.zero_grad()
    model.eval()
    with torch.no_grad():
        logits = model(val_X).squeeze(1)
        vloss = criterion(logits, val_y).item()
        vacc = ((logits > 0).float() == val_y).float().mean().item()
    if epoch % 3 == 0:
        print(f"epoch {epoch:2d} train_loss {np.mean(seen_loss):.4f} val_loss {vloss:.4f} val_acc {vacc:.3f}")
print(f"final val_loss {vloss:.4f} val_acc {vacc:.3f}")
