"""A plain PyTorch classifier (it never imports tensortap) whose validation pass after each
epoch calls model.eval() and forgets model.train(): every later optimizer step trains with
Dropout off and BatchNorm on its running statistics. --fixed calls model.train() at the start
of each epoch; --plain has neither Dropout nor BatchNorm (eval mode changes nothing)."""

import argparse

import torch
from sklearn.datasets import load_digits
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=5)
parser.add_argument("--fixed", action="store_true")
parser.add_argument("--plain", action="store_true")
args = parser.parse_args()

torch.manual_seed(0)
torch.set_num_threads(1)
x, y = load_digits(return_X_y=True)
x = torch.tensor(x / 16.0, dtype=torch.float32)
y = torch.tensor(y)
x_train, y_train, x_val, y_val = x[:1200], y[:1200], x[1200:], y[1200:]
if args.plain:
    model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))
else:
    model = nn.Sequential(
        nn.Linear(64, 64), nn.BatchNorm1d(64), nn.ReLU(), nn.Dropout(0.3), nn.Linear(64, 10)
    )
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
criterion = nn.CrossEntropyLoss()
for epoch in range(args.epochs):
    if args.fixed:
        model.train()
    order = torch.randperm(len(y_train))
    for i in range(0, len(order), 32):
        batch = order[i : i + 32]
        optimizer.zero_grad()
        loss = criterion(model(x_train[batch]), y_train[batch])
        loss.backward()
        optimizer.step()
    model.eval()  # and model.train() is never called again (unless --fixed)
    with torch.no_grad():
        out = model(x_val)
        val_loss = criterion(out, y_val).item()
        accuracy = (out.argmax(1) == y_val).float().mean().item()
    print(f"epoch {epoch}: loss {loss.item():.4f}, val loss {val_loss:.4f}, "
          f"val accuracy {accuracy:.3f}", flush=True)  # fmt: skip
