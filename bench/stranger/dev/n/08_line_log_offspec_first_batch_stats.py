"""Off-spec detector for a coating line: binary classifier on the line's process log."""
import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

SEED = 23
EPOCHS = 20
BATCH = 64
FEATURES = ["line_speed_m_min", "oven_temp_C", "coat_weight_g_m2", "web_tension_N",
            "ambient_rh_pct", "substrate_thickness_um", "dryer_airflow_m3_h"]


def load_line_log(rng, n_rows=4000, n_commissioning=300):
    """Process log of the coating line, one row per coated reel, in time order."""
    speed = rng.uniform(80, 160, n_rows)
    oven = rng.uniform(160, 220, n_rows)
    coat = rng.uniform(8, 16, n_rows)
    tension = rng.uniform(150, 350, n_rows)
    speed[:n_commissioning] = 120.0
    oven[:n_commissioning] = 190.0
    coat[:n_commissioning] = 12.0
    tension[:n_commissioning] = 250.0
    speed += rng.normal(0, 0.05, n_rows)
    oven += rng.normal(0, 0.1, n_rows)
    coat += rng.normal(0, 0.02, n_rows)
    tension += rng.normal(0, 0.5, n_rows)
    rh = rng.uniform(30, 70, n_rows)
    thickness = rng.normal(50, 4, n_rows)
    airflow = rng.uniform(2000, 4000, n_rows)

    # drying is insufficient when too much coat goes through too fast, too cool or too humid
    dwell = 60.0 / speed
    drying = (dwell * (oven - 100) / 45 + airflow / 4000 - coat / 12
              - (rh - 50) / 40 - ((tension - 250) / 120) ** 2)
    risk = -2.2 * drying + 0.15 * (thickness - 50) / 4 + rng.normal(0, 0.25, n_rows)
    offspec = (risk > np.quantile(risk, 0.65)).astype(np.float32)

    X = np.column_stack([speed, oven, coat, tension, rh, thickness, airflow]).astype(np.float32)
    return X, offspec


class Standardizer:
    def fit(self, x):
        self.mean = x.mean(dim=0)
        self.std = x.std(dim=0).clamp_min(1e-6)
        return self

    def __call__(self, x):
        return (x - self.mean) / self.std


def main():
    torch.manual_seed(SEED)
    torch.set_num_threads(1)
    rng = np.random.default_rng(SEED)

    X, y = load_line_log(rng)
    n_train = int(0.8 * len(X))
    train_ds = TensorDataset(torch.from_numpy(X[:n_train]), torch.from_numpy(y[:n_train]))
    X_val, y_val = torch.from_numpy(X[n_train:]), torch.from_numpy(y[n_train:])

    stats_batch, _ = next(iter(DataLoader(train_ds, batch_size=256)))
    scaler = Standardizer().fit(stats_batch)

    train_loader = DataLoader(train_ds, batch_size=BATCH, shuffle=True)
    model = nn.Sequential(
        nn.Linear(len(FEATURES), 64), nn.ReLU(),
        nn.Linear(64, 32), nn.ReLU(),
        nn.Linear(32, 1),
    )
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    criterion = nn.BCEWithLogitsLoss()

    for epoch in range(EPOCHS):
        model.train()
        total, count = 0.0, 0
        for xb, yb in train_loader:
            logits = model(scaler(xb)).squeeze(1)
            loss = criterion(logits, yb)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += loss.item() * len(yb)
            count += len(yb)

        model.eval()
        with torch.no_grad():
            val_logits = model(scaler(X_val)).squeeze(1)
            val_loss = criterion(val_logits, y_val).item()
            val_acc = ((val_logits > 0).float() == y_val).float().mean().item()
        print(f"epoch {epoch + 1:2d}/{EPOCHS}  loss {total / count:.4f}  "
              f"val_loss {val_loss:.4f}  val_acc {val_acc:.4f}")

    print(f"final val_acc {val_acc:.4f}")


if __name__ == "__main__":
    main()
