"""A plain PyTorch classifier (it never imports tensortap) for the outcome tests: an MLP on
scikit-learn's digits with an evaluation pass over held-out digits every 40 steps and at the
end. --shuffle trains on labels shuffled against the inputs (nothing to learn: held-out
accuracy at chance); --functional computes the loss with F.cross_entropy, not a loss module;
--loader evaluates batches of a DataLoader and computes no loss there, only the accuracy."""

import argparse

import torch
from sklearn.datasets import load_digits
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=120)
parser.add_argument("--shuffle", action="store_true")
parser.add_argument("--functional", action="store_true")
parser.add_argument("--loader", action="store_true")
args = parser.parse_args()

torch.manual_seed(0)
torch.set_num_threads(1)
x, y = load_digits(return_X_y=True)
x = torch.tensor(x / 16.0, dtype=torch.float32)
y = torch.tensor(y)
x_train, y_train, x_val, y_val = x[:1200], y[:1200], x[1200:], y[1200:]
if args.shuffle:
    y_train = y_train[torch.randperm(len(y_train), generator=torch.Generator().manual_seed(2))]
model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))
optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
criterion = nn.CrossEntropyLoss()


def loss_of(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(out, target) if args.functional else criterion(out, target)


def evaluate() -> float:
    model.eval()
    correct = 0
    with torch.no_grad():
        if args.loader:  # no loss: the accuracy alone, as many evaluation loops count it
            loader = DataLoader(TensorDataset(x_val, y_val), batch_size=200)
            for inputs, targets in loader:
                correct += int((model(inputs).argmax(1) == targets).sum())
            model.train()
            return correct / len(y_val)
        for i in range(0, len(y_val), 200):
            out = model(x_val[i : i + 200])
            loss_of(out, y_val[i : i + 200])
            correct += int((out.argmax(1) == y_val[i : i + 200]).sum())
    model.train()
    return correct / len(y_val)


generator = torch.Generator().manual_seed(1)
for step in range(args.steps):
    if step and step % 40 == 0:
        print(f"step {step}: held-out accuracy {evaluate():.3f}")
    batch = torch.randint(0, len(y_train), (64,), generator=generator)
    loss = loss_of(model(x_train[batch]), y_train[batch])
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
print(f"final held-out accuracy {evaluate():.3f}")
