"""A textbook PyTorch script (no tensortap in it): an MLP on scikit-learn's digits, Adam, a
validation pass after every epoch. It reaches about 96% validation accuracy.

    python examples/textbook_digits.py [--seed 0] [--lr 1e-3] [--epochs 15]

Run it under ``tensortap run -- python examples/textbook_digits.py``: the job ends "healthy";
with ``--lr 0.1`` (100x too high) it ends "the learning rate is too high" first.
"""

from __future__ import annotations

import argparse

import torch
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler
from torch import nn


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--epochs", type=int, default=15)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    x, y = load_digits(return_X_y=True)
    x_train, x_val, y_train, y_val = train_test_split(
        x, y, test_size=0.2, random_state=args.seed, stratify=y
    )
    scaler = StandardScaler().fit(x_train)
    x_train = torch.tensor(scaler.transform(x_train), dtype=torch.float32)
    x_val = torch.tensor(scaler.transform(x_val), dtype=torch.float32)
    y_train, y_val = torch.tensor(y_train), torch.tensor(y_val)

    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 64), nn.ReLU(),
                          nn.Linear(64, 10))  # fmt: skip
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    loss_fn = nn.CrossEntropyLoss()
    for epoch in range(args.epochs):
        model.train()
        order = torch.randperm(len(y_train))
        for i in range(0, len(order), args.batch_size):
            idx = order[i : i + args.batch_size]
            optimizer.zero_grad()
            loss = loss_fn(model(x_train[idx]), y_train[idx])
            loss.backward()
            optimizer.step()
        model.eval()
        with torch.no_grad():
            logits = model(x_val)
            val_loss = loss_fn(logits, y_val).item()
            accuracy = (logits.argmax(1) == y_val).float().mean().item()
        print(f"epoch {epoch}: loss {loss.item():.4f}, val loss {val_loss:.4f}, "
              f"val accuracy {accuracy:.3f}", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
