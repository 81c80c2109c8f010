"""An ordinary PyTorch training script (it never imports tensortap): a small CNN learns
scikit-learn's handwritten digits (8x8 images). Seeds 000 and 001 run it as a training job; the
debugger attaches itself (zero code change).

    python cnn_digits.py [--num_epochs 3] [--lr 0.05] [--batches N] [--pixel_scale 16]
"""

import argparse

import torch
from sklearn.datasets import load_digits
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--num_epochs", type=int, default=3)
parser.add_argument("--lr", type=float, default=0.05)
parser.add_argument("--batches", type=int, default=0, help="stop each epoch after N batches")
parser.add_argument(
    "--pixel_scale", type=float, default=16.0, help="the bug: 1 leaves 0..16 pixels"
)
args = parser.parse_args()

torch.manual_seed(0)
torch.set_num_threads(1)
x, y = load_digits(return_X_y=True)
images = torch.tensor(x / args.pixel_scale, dtype=torch.float32).view(-1, 1, 8, 8)
labels = torch.tensor(y)
model = nn.Sequential(
    nn.Conv2d(1, 16, 3, padding=1),
    nn.ReLU(),
    nn.MaxPool2d(2),
    nn.Conv2d(16, 32, 3, padding=1),
    nn.ReLU(),
    nn.Flatten(),
    nn.Linear(32 * 4 * 4, 64),
    nn.ReLU(),
    nn.Linear(64, 10),
)
loss_fn = nn.CrossEntropyLoss()
optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
for epoch in range(args.num_epochs):
    order = torch.randperm(1500)
    for i, start in enumerate(range(0, 1500, 32)):
        if args.batches and i == args.batches:
            break
        batch = order[start : start + 32]
        optimizer.zero_grad()
        loss = loss_fn(model(images[batch]), labels[batch])
        loss.backward()
        optimizer.step()
    with torch.no_grad():
        accuracy = (model(images[1500:]).argmax(1) == labels[1500:]).float().mean()
    print(f"epoch {epoch}: loss {loss.item():.3f}, test accuracy {accuracy.item():.3f}", flush=True)
