"""Residual MLP regressor on the Friedman #1 benchmark function."""
import numpy as np
import torch
import torch.nn as nn
from sklearn.datasets import make_friedman1

SEED = 7
EPOCHS = 25
BATCH = 64
LR = 2e-3


class ResidualBlock(nn.Module):
    def __init__(self, width, dropout=0.05):
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.ff = nn.Sequential(
            nn.Linear(width, width * 2),
            nn.GELU(),
            nn.Dropout(dropout),
            nn.Linear(width * 2, width),
        )

    def forward(self, x):
        return x + self.ff(self.norm(x))


class ResMLP(nn.Module):
    def __init__(self, n_in, width=64, depth=3):
        super().__init__()
        self.inp = nn.Linear(n_in, width)
        self.blocks = nn.Sequential(*[ResidualBlock(width) for _ in range(depth)])
        self.out = nn.Sequential(nn.LayerNorm(width), nn.Linear(width, 1))

    def forward(self, x):
        return self.out(self.blocks(self.inp(x))).squeeze(-1)


def r2_score(pred, target):
    ss_res = torch.sum((target - pred) ** 2)
    ss_tot = torch.sum((target - target.mean()) ** 2)
    return (1.0 - ss_res / ss_tot).item()


def main():
    torch.manual_seed(SEED)
    torch.set_num_threads(1)
    rng = np.random.default_rng(SEED)

    X, y = make_friedman1(n_samples=2400, n_features=10, noise=0.5, random_state=SEED)
    X = X.astype(np.float32)
    y = y.astype(np.float32)

    n_val = 400
    X_train, y_train = X[n_val:].copy(), y[n_val:].copy()
    X_val, y_val = X[:n_val], y[:n_val]

    # features are already in [0, 1]; only the target is standardised
    y_mean, y_std = y_train.mean(), y_train.std()
    y_train = (y_train - y_mean) / y_std
    y_val = (y_val - y_mean) / y_std

    model = ResMLP(X.shape[1])
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=1e-4)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=EPOCHS)
    loss_fn = nn.MSELoss()

    xv = torch.from_numpy(X_val)
    yv = torch.from_numpy(y_val)

    for epoch in range(1, EPOCHS + 1):
        perm = rng.permutation(len(X_train))
        X_train = X_train[perm]
        y_train = y_train[perm]

        model.train()
        running, count = 0.0, 0
        for start in range(0, len(X_train), BATCH):
            xb = torch.from_numpy(X_train[start:start + BATCH])
            yb = torch.from_numpy(y_train[start:start + BATCH])
            optimizer.zero_grad()
            loss = loss_fn(model(xb), yb)
            loss.backward()
            optimizer.step()
            running += loss.item() * len(xb)
            count += len(xb)
        scheduler.step()

        model.eval()
        with torch.no_grad():
            pred = model(xv)
            val_mse = loss_fn(pred, yv).item()
            val_r2 = r2_score(pred, yv)
        print(f"epoch {epoch:2d} | train_loss {running / count:.4f} | "
              f"val_mse {val_mse:.4f} | val_r2 {val_r2:.4f}")

    print(f"final val_r2 {val_r2:.4f} val_mse {val_mse:.4f}")


if __name__ == "__main__":
    main()
