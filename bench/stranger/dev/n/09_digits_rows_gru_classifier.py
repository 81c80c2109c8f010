"""Reads each 8x8 digit as a sequence of 8 pixel rows with a bidirectional GRU."""
import numpy as np
import torch
import torch.nn as nn
from sklearn.datasets import load_digits

SEED = 31
EPOCHS = 15
BATCH = 64


class RowGRU(nn.Module):
    def __init__(self, n_pixels=8, hidden=64, n_classes=10):
        super().__init__()
        self.proj = nn.Linear(n_pixels, hidden)
        self.gru = nn.GRU(hidden, hidden, batch_first=True, bidirectional=True)
        self.norm = nn.LayerNorm(2 * hidden)
        self.head = nn.Linear(2 * hidden, n_classes)

    def forward(self, x):
        out, _ = self.gru(torch.relu(self.proj(x)))
        pooled = out.mean(dim=1)
        return self.head(self.norm(pooled))


def main():
    torch.manual_seed(SEED)
    torch.set_num_threads(1)
    rng = np.random.default_rng(SEED)

    digits = load_digits()
    images = (digits.images / 16.0).astype(np.float32)
    labels = digits.target.astype(np.int64)

    perm = rng.permutation(len(labels))
    images, labels = images[perm], labels[perm]
    n_val = 300
    X_train, y_train = torch.from_numpy(images[n_val:]), torch.from_numpy(labels[n_val:])
    X_val, y_val = torch.from_numpy(images[:n_val]), torch.from_numpy(labels[:n_val])

    model = RowGRU()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    steps_per_epoch = (len(X_train) + BATCH - 1) // BATCH
    scheduler = torch.optim.lr_scheduler.OneCycleLR(
        optimizer, max_lr=3e-3, epochs=EPOCHS, steps_per_epoch=steps_per_epoch)
    criterion = nn.CrossEntropyLoss(label_smoothing=0.05)

    for epoch in range(1, EPOCHS + 1):
        model.train()
        order = torch.randperm(len(X_train))
        losses = []
        for i in range(0, len(order), BATCH):
            idx = order[i:i + BATCH]
            optimizer.zero_grad()
            loss = criterion(model(X_train[idx]), y_train[idx])
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
            losses.append(loss.item())

        model.eval()
        with torch.no_grad():
            logits = model(X_val)
            val_loss = criterion(logits, y_val).item()
            val_acc = (logits.argmax(1) == y_val).float().mean().item()
        print(f"epoch {epoch:2d}  train_loss {np.mean(losses):.4f}  val_loss {val_loss:.4f}  val_acc {val_acc:.4f}")

    print(f"final val_acc {val_acc:.4f}")


if __name__ == "__main__":
    main()
