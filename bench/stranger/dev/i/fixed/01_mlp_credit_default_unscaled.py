"""Credit-default classifier on a synthetic loan table (raw units) with a PyTorch MLP."""
import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

SEED = 7
np.random.seed(SEED)
torch.manual_seed(SEED)


def make_loan_table(n=6000, rng=None):
    rng = rng or np.random.default_rng(SEED)
    income = rng.lognormal(mean=11.0, sigma=0.5, size=n)              # dollars / year
    loan_amount = rng.uniform(2_000, 60_000, size=n)                    # dollars
    opened_ts = rng.uniform(1.30e9, 1.70e9, size=n)                     # unix seconds
    n_transactions = rng.poisson(1500, size=n).astype(float)            # count / year
    age = rng.uniform(21, 75, size=n)                                   # years
    debt_ratio = rng.beta(2, 5, size=n)                                 # 0..1
    late_payments = rng.poisson(0.8, size=n).astype(float)              # count
    utilisation = rng.uniform(0, 1, size=n)                             # 0..1
    years_open = (1.72e9 - opened_ts) / 3.15e7
    logit = (3.0 * np.log(loan_amount / income + 1e-3) + 4.0 * debt_ratio
             + 0.9 * late_payments + 2.5 * utilisation - 0.12 * years_open
             - 0.03 * (age - 45) - 1.0)
    p = 1 / (1 + np.exp(-logit))
    y = (rng.uniform(size=n) < p).astype(np.int64)
    X = np.stack([income, loan_amount, opened_ts, n_transactions, age,
                  debt_ratio, late_payments, utilisation], axis=1)
    return X, y


X, y = make_loan_table()
X_train, X_val, y_train, y_val = train_test_split(X, y, test_size=0.25, random_state=SEED, stratify=y)
print(f"train {X_train.shape}, val {X_val.shape}, default rate {y.mean():.3f}")

scaler = StandardScaler().fit(X_train)
X_train_s = scaler.transform(X_train)
X_val_s = scaler.transform(X_val)

train_ds = TensorDataset(torch.tensor(X_train_s, dtype=torch.float32), torch.tensor(y_train))
val_ds = TensorDataset(torch.tensor(X_val_s, dtype=torch.float32), torch.tensor(y_val))
train_loader = DataLoader(train_ds, batch_size=64, shuffle=True, generator=torch.Generator().manual_seed(SEED))
val_loader = DataLoader(val_ds, batch_size=256)

model = nn.Sequential(
    nn.Linear(X.shape[1], 64), nn.ReLU(), nn.Dropout(0.1),
    nn.Linear(64, 32), nn.ReLU(),
    nn.Linear(32, 2),
)
criterion = nn.CrossEntropyLoss()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)

for epoch in range(1, 26):
    model.train()
    total, n = 0.0, 0
    for xb, yb in train_loader:
        optimizer.zero_grad()
        loss = criterion(model(xb), yb)
        loss.backward()
        optimizer.step()
        total += loss.item() * len(yb)
        n += len(yb)
    model.eval()
    vloss, correct, m = 0.0, 0, 0
    with torch.no_grad():
        for xb, yb in val_loader:
            out = model(xb)
            vloss += criterion(out, yb).item() * len(yb)
            correct += (out.argmax(1) == yb).sum().item()
            m += len(yb)
    print(f"epoch {epoch:02d} train_loss {total / n:.4f} val_loss {vloss / m:.4f} val_acc {correct / m:.4f}")

print(f"final val_loss {vloss / m:.4f} val_acc {correct / m:.4f}")
