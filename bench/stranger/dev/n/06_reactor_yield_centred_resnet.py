"""Reactor yield regression from process readings, residual MLP with MSE loss."""
import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

SEED = 5
EPOCHS = 30
BATCH = 64

# name, mean, spread of each process reading in its logged unit
READINGS = [
    ("reactor_temp_K", 340.0, 12.0),
    ("pressure_Pa", 2.5e5, 4.0e4),
    ("feed_rate_m3_s", 0.012, 0.003),
    ("catalyst_mol_L", 0.45, 0.08),
    ("ph", 6.8, 0.4),
    ("stirrer_rpm", 1200.0, 250.0),
    ("residence_time_s", 1800.0, 400.0),
    ("impurity_ppm", 35.0, 12.0),
]


def simulate_batches(n, rng):
    means = np.array([m for _, m, _ in READINGS])
    spreads = np.array([s for _, _, s in READINGS])
    z = rng.normal(size=(n, len(READINGS)))
    X = means + spreads * z
    t, p, f, c, ph, rpm, res, imp = z.T
    yield_pct = (
        72.0
        + 4.0 * t - 2.0 * t ** 2
        + 1.5 * p
        + 5.0 * f
        + 4.0 * c + 2.5 * c * ph
        - 3.0 * ph ** 2
        + 2.0 * np.tanh(rpm)
        + 1.5 * res
        - 3.5 * imp
        + rng.normal(0.0, 1.5, size=n)
    )
    return X.astype(np.float32), yield_pct.astype(np.float32)


class Block(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.fc1 = nn.Linear(width, width)
        self.fc2 = nn.Linear(width, width)
        self.act = nn.SiLU()

    def forward(self, x):
        return self.act(x + self.fc2(self.act(self.fc1(x))))


class YieldNet(nn.Module):
    def __init__(self, n_in, width=64, n_blocks=2):
        super().__init__()
        self.stem = nn.Sequential(nn.Linear(n_in, width), nn.SiLU())
        self.blocks = nn.Sequential(*[Block(width) for _ in range(n_blocks)])
        self.head = nn.Linear(width, 1)

    def forward(self, x):
        return self.head(self.blocks(self.stem(x))).squeeze(-1)


def main():
    torch.manual_seed(SEED)
    torch.set_num_threads(1)
    rng = np.random.default_rng(SEED)

    X, y = simulate_batches(3000, rng)
    X_train, X_val = X[:2400], X[2400:]
    y_train, y_val = y[:2400], y[2400:]

    x_mean = X_train.mean(axis=0)
    X_train = X_train - x_mean
    X_val = X_val - x_mean
    y_mean, y_std = y_train.mean(), y_train.std()
    y_train = (y_train - y_mean) / y_std
    y_val = (y_val - y_mean) / y_std

    train_loader = DataLoader(
        TensorDataset(torch.from_numpy(X_train), torch.from_numpy(y_train)),
        batch_size=BATCH, shuffle=True)
    X_val_t, y_val_t = torch.from_numpy(X_val), torch.from_numpy(y_val)

    model = YieldNet(X.shape[1])
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, factor=0.5, patience=3)
    mse = nn.MSELoss()

    for epoch in range(1, EPOCHS + 1):
        model.train()
        total = 0.0
        for xb, yb in train_loader:
            optimizer.zero_grad()
            loss = mse(model(xb), yb)
            loss.backward()
            optimizer.step()
            total += loss.item() * xb.shape[0]
        train_loss = total / len(X_train)

        model.eval()
        with torch.no_grad():
            pred = model(X_val_t)
            val_mse = mse(pred, y_val_t).item()
        val_r2 = 1.0 - val_mse / y_val_t.var(unbiased=False).item()
        scheduler.step(val_mse)
        print(f"epoch {epoch:02d}: train_mse={train_loss:.4f} val_mse={val_mse:.4f} val_r2={val_r2:.4f}")

    print(f"final val_r2={val_r2:.4f} val_mse={val_mse:.4f}")


if __name__ == "__main__":
    main()
