"""Binary event classifier (MLP + BatchNorm) with a chronological train/validation split."""
import numpy as np
import torch
import torch.nn as nn
from sklearn.datasets import make_classification
from sklearn.preprocessing import StandardScaler

SEED = 11
EPOCHS = 20
BATCH = 128
VAL_FRACTION = 0.2


def load_event_log(n_rows=4000):
    X, y = make_classification(
        n_samples=n_rows, n_features=16, n_informative=8, n_redundant=4,
        class_sep=1.3, flip_y=0.01, random_state=SEED,
    )
    rng = np.random.default_rng(SEED)
    # rows are written in arrival order; the event time itself can lag by a little
    event_time = np.arange(n_rows, dtype=np.float64) + rng.normal(0.0, 0.8, size=n_rows)
    return X.astype(np.float32), y.astype(np.float32), event_time


def chronological_split(X, y, event_time, val_fraction):
    order = np.argsort(event_time, kind="stable")
    X, y, event_time = X[order], y[order], event_time[order]
    cut = int(len(event_time) * (1.0 - val_fraction))
    return X[:cut], y[:cut], X[cut:], y[cut:]


def build_model(n_in):
    return nn.Sequential(
        nn.Linear(n_in, 64),
        nn.BatchNorm1d(64),
        nn.ReLU(),
        nn.Dropout(0.1),
        nn.Linear(64, 32),
        nn.BatchNorm1d(32),
        nn.ReLU(),
        nn.Linear(32, 1),
    )


def main():
    torch.manual_seed(SEED)
    torch.set_num_threads(1)

    X, y, event_time = load_event_log()
    X_train, y_train, X_val, y_val = chronological_split(X, y, event_time, VAL_FRACTION)

    scaler = StandardScaler().fit(X_train)
    X_train = scaler.transform(X_train).astype(np.float32)
    X_val = scaler.transform(X_val).astype(np.float32)

    train_ds = torch.utils.data.TensorDataset(torch.from_numpy(X_train), torch.from_numpy(y_train))
    train_dl = torch.utils.data.DataLoader(
        train_ds, batch_size=BATCH, shuffle=True,
        generator=torch.Generator().manual_seed(SEED),
    )
    xv, yv = torch.from_numpy(X_val), torch.from_numpy(y_val)

    model = build_model(X.shape[1])
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    criterion = nn.BCEWithLogitsLoss()

    for epoch in range(1, EPOCHS + 1):
        model.train()
        total, n = 0.0, 0
        for xb, yb in train_dl:
            optimizer.zero_grad()
            loss = criterion(model(xb).squeeze(1), yb)
            loss.backward()
            optimizer.step()
            total += loss.item() * len(xb)
            n += len(xb)

        model.eval()
        with torch.no_grad():
            logits = model(xv).squeeze(1)
            val_loss = criterion(logits, yv).item()
            val_acc = ((logits > 0).float() == yv).float().mean().item()
        print(f"epoch {epoch:2d}  train_loss={total / n:.4f}  val_loss={val_loss:.4f}  val_acc={val_acc:.4f}")

    print(f"final val_acc={val_acc:.4f}")


if __name__ == "__main__":
    main()
