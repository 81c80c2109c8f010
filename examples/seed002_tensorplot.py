"""Seed 002, "Visualizing debugging tensors": save every tensor of a CNN at steps 1, 2 and 3,
then draw the ReLU outputs of every layer as one interactive 3-D figure (TensorPlot).

The seed trains a Gluon CNN on MNIST in SageMaker; this trains a PyTorch CNN on scikit-learn's
handwritten digits (8x8 images, shipped with the package) on this machine. The collection is the
seed's: ``include_regex ".*"`` and ``save_steps "1, 2, 3"``. The page written opens offline
(plotly.js is inlined).

    .venv/bin/python examples/seed002_tensorplot.py [--output runs/seed002] [--quick]
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import torch
from sklearn.datasets import load_digits
from torch import nn

import tensortap.pytorch as tt
from tensortap.viz import TensorPlot


def cnn() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(16, 16, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(16 * 4 * 4, 64),
        nn.ReLU(),
        nn.Linear(64, 10),
    )


def train(out: Path, batches: int) -> None:
    torch.manual_seed(0)
    x, y = load_digits(return_X_y=True)
    images = torch.tensor(x / 16.0, dtype=torch.float32).view(-1, 1, 8, 8)
    labels = torch.tensor(y)
    hook = tt.Hook(out, save_config=tt.SaveConfig(save_steps=[1, 2, 3]), include_regex=".*")
    model = cnn()
    hook.register_module(model)
    loss_fn = nn.CrossEntropyLoss()
    hook.register_loss(loss_fn)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for i in range(batches):
        start = (i * 64) % (len(labels) - 64)
        optimizer.zero_grad()
        loss = loss_fn(model(images[start : start + 64]), labels[start : start + 64])
        loss.backward()
        optimizer.step()
    hook.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-o", "--output", default="runs/seed002", help="trial directory")
    parser.add_argument("--quick", action="store_true", help="a few batches (the tests' mode)")
    ns = parser.parse_args(argv)
    out = Path(ns.output)
    shutil.rmtree(out, ignore_errors=True)
    train(out, batches=5 if ns.quick else 60)

    visualization = TensorPlot(
        regex=r".*relu_output",
        path=out,
        steps=10,
        batch_sample_id=0,
        color_channel=1,
        title="Relu outputs",
        label=r"^Sequential_input_0$",
        prediction=r"^Sequential_output_0$",
    )
    page = visualization.write_html(out.with_suffix(".html"))
    print(f"layers: {visualization.layers}")
    print(f"steps: {visualization.steps}; traces per frame: {visualization.trace_count}")
    print(f"wrote {page} (open it in a browser; it needs no network)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
