import math

import torch
import torch.nn as nn
from sklearn.datasets import load_breast_cancer
from sklearn.metrics import roc_auc_score
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
torch.set_num_threads(1)

X, y = load_breast_cancer(return_X_y=True)
X_tr, X_va, y_tr, y_va = train_test_split(X, y, test_size=0.25, random_state=2, stratify=y)
scaler = StandardScaler().fit(X_tr)
X_tr, X_va = scaler.transform(X_tr), scaler.transform(X_va)

micro_bs, accum_steps = 8, 4
train_loader = DataLoader(TensorDataset(torch.tensor(X_tr, dtype=torch.float32),
                                        torch.tensor(y_tr, dtype=torch.float32)),
                          batch_size=micro_bs, shuffle=True, drop_last=False)
Xv = torch.tensor(X_va, dtype=torch.float32)

model = nn.Sequential(nn.Linear(30, 64), nn.GELU(), nn.Dropout(0.1), nn.Linear(64, 32), nn.GELU(), nn.Linear(32, 1))
optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=1e-2)
updates_per_epoch = math.ceil(len(train_loader) / accum_steps)
epochs = 25
scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=epochs * updates_per_epoch)
criterion = nn.BCEWithLogitsLoss()

for epoch in range(epochs):
    model.train()
    optimizer.zero_grad(set_to_none=True)
    epoch_loss, n_seen = 0.0, 0
    for i, (xb, yb) in enumerate(train_loader):
        logits = model(xb).squeeze(1)
        loss = criterion(logits, yb)
        (loss / accum_steps).backward()
        epoch_loss += loss.item() * len(yb)
        n_seen += len(yb)
        if (i + 1) % accum_steps == 0 or (i + 1) == len(train_loader):
            nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
    print(f"epoch {epoch:2d}  train_loss {epoch_loss / n_seen:.4f}")

model.eval()
with torch.no_grad():
    prob = torch.sigmoid(model(Xv).squeeze(1)).numpy()
acc = ((prob > 0.5) == y_va).mean()
print(f"final val_acc {acc:.4f}  val_auc {roc_auc_score(y_va, prob):.4f}")
