"""1-D CNN activity recogniser on windows cut from a continuous 3-axis recording."""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

SEED = 3
WIN = 64
N_CLASSES = 4
EPOCHS = 15
BATCH = 32

# (frequency in cycles per window, amplitude, offset) per activity and axis
PROFILES = np.array([
    [[1.0, 0.3, 0.0], [1.0, 0.2, 0.0], [0.5, 0.1, 1.0]],   # sitting
    [[3.0, 1.0, 0.0], [3.0, 0.5, 0.0], [6.0, 0.4, 1.0]],   # walking
    [[5.0, 1.6, 0.0], [5.0, 0.9, 0.0], [10.0, 0.8, 1.0]],  # running
    [[2.0, 0.6, 0.5], [4.0, 0.8, 0.0], [2.0, 0.3, 0.6]],   # cycling
], dtype=np.float32)


def simulate_recording(rng, n_segments=220):
    """Continuous recording; each activity bout lasts a whole number of windows."""
    signal_parts, activity_parts = [], []
    current = int(rng.integers(N_CLASSES))
    for _ in range(n_segments):
        n_windows = int(rng.integers(2, 7))
        length = n_windows * WIN
        t = np.arange(length, dtype=np.float32) / WIN
        phase = rng.uniform(0, 2 * np.pi, size=3)
        axes = []
        for a in range(3):
            freq, amp, off = PROFILES[current, a]
            freq = freq * rng.uniform(0.85, 1.15)
            axes.append(off + amp * np.sin(2 * np.pi * freq * t + phase[a]))
        seg = np.stack(axes) + rng.normal(0.0, 0.35, size=(3, length))
        signal_parts.append(seg.astype(np.float32))
        activity_parts.append(np.full(length, current, dtype=np.int64))
        current = int((current + rng.integers(1, N_CLASSES)) % N_CLASSES)
    return np.concatenate(signal_parts, axis=1), np.concatenate(activity_parts)


def make_windows(signal, activity):
    starts = np.arange(0, signal.shape[1] - WIN, WIN)
    X = np.stack([signal[:, s:s + WIN] for s in starts])
    y = activity[starts + WIN]
    return X, y


class ActivityCNN(nn.Module):
    def __init__(self, n_classes):
        super().__init__()
        self.conv1 = nn.Conv1d(3, 32, kernel_size=7, padding=3)
        self.bn1 = nn.BatchNorm1d(32)
        self.conv2 = nn.Conv1d(32, 64, kernel_size=5, padding=2)
        self.bn2 = nn.BatchNorm1d(64)
        self.conv3 = nn.Conv1d(64, 64, kernel_size=3, padding=1)
        self.head = nn.Linear(64, n_classes)

    def forward(self, x):
        x = F.max_pool1d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.max_pool1d(F.relu(self.bn2(self.conv2(x))), 2)
        x = F.relu(self.conv3(x))
        return self.head(x.mean(dim=2))


def evaluate(model, X, y):
    model.eval()
    with torch.no_grad():
        logits = model(X)
        loss = F.cross_entropy(logits, y).item()
        acc = (logits.argmax(1) == y).float().mean().item()
    return loss, acc


def main():
    torch.manual_seed(SEED)
    torch.set_num_threads(1)
    rng = np.random.default_rng(SEED)

    signal, activity = simulate_recording(rng)
    X, y = make_windows(signal, activity)
    print(f"{len(X)} windows, class counts {np.bincount(y, minlength=N_CLASSES).tolist()}")

    perm = rng.permutation(len(X))
    n_val = len(X) // 5
    val_idx, train_idx = perm[:n_val], perm[n_val:]
    X_train, y_train = torch.from_numpy(X[train_idx]), torch.from_numpy(y[train_idx])
    X_val, y_val = torch.from_numpy(X[val_idx]), torch.from_numpy(y[val_idx])

    loader = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(X_train, y_train),
        batch_size=BATCH, shuffle=True, generator=torch.Generator().manual_seed(SEED),
    )

    model = ActivityCNN(N_CLASSES)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=6, gamma=0.3)
    criterion = nn.CrossEntropyLoss()

    for epoch in range(EPOCHS):
        model.train()
        losses = []
        for xb, yb in loader:
            optimizer.zero_grad()
            loss = criterion(model(xb), yb)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        scheduler.step()
        val_loss, val_acc = evaluate(model, X_val, y_val)
        print(f"[{epoch + 1:02d}/{EPOCHS}] train_loss {np.mean(losses):.4f} "
              f"val_loss {val_loss:.4f} val_acc {val_acc:.4f}")

    print(f"final val_acc {val_acc:.4f}")


if __name__ == "__main__":
    main()
