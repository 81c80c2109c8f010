"""5-fold cross-validation of an MLP on the sklearn digits data."""
import numpy as np
import torch
import torch.nn as nn
from sklearn.datasets import load_digits
from sklearn.model_selection import StratifiedKFold
from sklearn.preprocessing import StandardScaler

torch.set_num_threads(1)
torch.manual_seed(0)

N_FOLDS = 5
EPOCHS = 8
BATCH_SIZE = 32
LR = 2e-3


def build_model(n_in=64, n_out=10):
    return nn.Sequential(
        nn.Linear(n_in, 128), nn.BatchNorm1d(128), nn.ReLU(), nn.Dropout(0.2),
        nn.Linear(128, 64), nn.BatchNorm1d(64), nn.ReLU(),
        nn.Linear(64, n_out),
    )


X, y = load_digits(return_X_y=True)
X = X.astype(np.float32)

model = build_model()
print(f"model has {sum(p.numel() for p in model.parameters()):,} parameters")
optimizer = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=1e-2)
criterion = nn.CrossEntropyLoss()

skf = StratifiedKFold(n_splits=N_FOLDS, shuffle=True, random_state=0)
fold_scores = []
for fold, (tr_idx, va_idx) in enumerate(skf.split(X, y)):
    scaler = StandardScaler().fit(X[tr_idx])
    x_tr = torch.from_numpy(scaler.transform(X[tr_idx]).astype(np.float32))
    x_va = torch.from_numpy(scaler.transform(X[va_idx]).astype(np.float32))
    y_tr, y_va = torch.from_numpy(y[tr_idx]), torch.from_numpy(y[va_idx])

    model = build_model()  # fresh weights for every fold

    for epoch in range(EPOCHS):
        model.train()
        perm = torch.randperm(len(x_tr))
        epoch_loss, n_batches = 0.0, 0
        for start in range(0, len(perm), BATCH_SIZE):
            idx = perm[start:start + BATCH_SIZE]
            if len(idx) < 2:
                continue
            optimizer.zero_grad()
            loss = criterion(model(x_tr[idx]), y_tr[idx])
            loss.backward()
            optimizer.step()
            epoch_loss += loss.item()
            n_batches += 1
        print(f"fold {fold} epoch {epoch + 1}: train_loss {epoch_loss / n_batches:.4f}")

    model.eval()
    with torch.no_grad():
        acc = (model(x_va).argmax(1) == y_va).float().mean().item()
    fold_scores.append(acc)
    print(f"fold {fold} val_accuracy {acc:.4f}")

print(f"final cv val_accuracy: {np.mean(fold_scores):.4f} +- {np.std(fold_scores):.4f}")
