"""A plain PyTorch training script (no tensortap in it): an MLP on scikit-learn's digits.

The default is the planted problem of the demo: 12 sigmoid layers, whose first layers' gradients
vanish (each sigmoid scales the gradient by at most 0.25), so the loss barely moves. Run it with
``--activation relu`` for the healthy twin.
"""

from __future__ import annotations

import argparse

import torch
from sklearn.datasets import load_digits
from torch import nn


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--activation", choices=["sigmoid", "relu"], default="sigmoid")
    parser.add_argument("--depth", type=int, default=12)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--lr", type=float, default=0.1)
    args = parser.parse_args()

    torch.manual_seed(0)
    torch.set_num_threads(1)
    x, y = load_digits(return_X_y=True)
    x = torch.tensor(x / 16.0, dtype=torch.float32)
    y = torch.tensor(y)
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(0))
    train, test = order[:1500], order[1500:]
    act = nn.Sigmoid if args.activation == "sigmoid" else nn.ReLU
    layers: list[nn.Module] = []
    width = 64
    for _ in range(args.depth):
        layers += [nn.Linear(width, 32), act()]
        width = 32
    model = nn.Sequential(*layers, nn.Linear(width, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    for epoch in range(args.epochs):
        model.train()
        for i in range(0, len(train), 50):
            batch = train[i : i + 50]
            loss = loss_fn(model(x[batch]), y[batch])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        model.eval()
        with torch.no_grad():
            out = model(x[test])
            eval_loss = loss_fn(out, y[test])
            accuracy = float((out.argmax(1) == y[test]).float().mean())
        print(f"epoch {epoch}: eval loss {float(eval_loss):.3f}, accuracy {accuracy:.3f}")


if __name__ == "__main__":
    main()
