"""Customer-churn MLP on a synthetic telecom table: raw-unit numeric columns standardised, plan one-hot,
class-weighted loss, AdamW + ReduceLROnPlateau, early stopping on validation loss."""
import copy
import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset
from sklearn.compose import ColumnTransformer
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import OneHotEncoder, StandardScaler
from sklearn.metrics import f1_score

SEED = 29
torch.manual_seed(SEED)
rng = np.random.default_rng(SEED)

n = 6000
tenure_days = rng.integers(10, 3650, n).astype(float)
monthly_bill = rng.normal(65, 25, n).clip(10, None)                    # dollars
data_mb = rng.lognormal(8.0, 1.0, n)                                   # MB / month
support_calls = rng.poisson(1.2, n).astype(float)
signup_ts = 1.72e9 - tenure_days * 86400                                # unix seconds
plan = rng.integers(0, 4, n)                                            # categorical
logit = (0.6 - 0.0016 * tenure_days + 0.06 * (monthly_bill - 65) + 1.1 * support_calls
         - 0.9 * np.log(data_mb / 3000) + np.array([1.2, 0.0, -0.8, -1.8])[plan])
y = (rng.uniform(size=n) < 1 / (1 + np.exp(-logit))).astype(np.int64)
X = np.column_stack([tenure_days, monthly_bill, data_mb, support_calls, signup_ts, plan])

X_tr, X_va, y_tr, y_va = train_test_split(X, y, test_size=0.2, random_state=SEED, stratify=y)
prep = ColumnTransformer([("num", StandardScaler(), [0, 1, 2, 3, 4]),
                          ("cat", OneHotEncoder(sparse_output=False), [5])])
X_tr = prep.fit_transform(X_tr).astype(np.float32)
X_va = prep.transform(X_va).astype(np.float32)
print(f"churn rate train {y_tr.mean():.3f}, features {X_tr.shape[1]}")

train_loader = DataLoader(TensorDataset(torch.from_numpy(X_tr), torch.from_numpy(y_tr)), batch_size=128,
                          shuffle=True, generator=torch.Generator().manual_seed(SEED))
Xv, yv = torch.from_numpy(X_va), torch.from_numpy(y_va)

model = nn.Sequential(
    nn.Linear(X_tr.shape[1], 128), nn.BatchNorm1d(128), nn.ReLU(), nn.Dropout(0.5),
    nn.Linear(128, 64), nn.BatchNorm1d(64), nn.ReLU(), nn.Dropout(0.5),
    nn.Linear(64, 2),
)
counts = np.bincount(y_tr)
class_w = torch.tensor(len(y_tr) / (2 * counts), dtype=torch.float32)
criterion = nn.CrossEntropyLoss(weight=class_w)
optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=1e-2)
plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, mode="min", factor=0.5, patience=3)

best, best_state, wait, PATIENCE = float("inf"), None, 0, 8
for epoch in range(1, 61):
    model.train()
    tot, cnt = 0.0, 0
    for xb, yb in train_loader:
        optimizer.zero_grad(set_to_none=True)
        loss = criterion(model(xb), yb)
        loss.backward()
        optimizer.step()
        tot += loss.item() * len(yb)
        cnt += len(yb)
    model.eval()
    with torch.no_grad():
        logits = model(Xv)
        val_loss = criterion(logits, yv).item()
        pred = logits.argmax(1)
        val_acc = (pred == yv).float().mean().item()
        val_f1 = f1_score(y_va, pred.numpy())
    plateau.step(val_loss)
    print(f"epoch {epoch:02d} lr {optimizer.param_groups[0]['lr']:.5f} train_loss {tot / cnt:.4f} "
          f"val_loss {val_loss:.4f} val_acc {val_acc:.4f} val_f1 {val_f1:.4f}")
    if val_loss < best - 1e-4:
        best, best_state, wait = val_loss, copy.deepcopy(model.state_dict()), 0
    else:
        wait += 1
        if wait >= PATIENCE:
            print(f"early stopping at epoch {epoch}, best val_loss {best:.4f}")
            break

model.load_state_dict(best_state)
model.eval()
with torch.no_grad():
    logits = model(Xv)
    pred = logits.argmax(1)
print(f"final val_loss {criterion(logits, yv).item():.4f} val_acc {(pred == yv).float().mean().item():.4f} "
      f"val_f1 {f1_score(y_va, pred.numpy()):.4f}")
