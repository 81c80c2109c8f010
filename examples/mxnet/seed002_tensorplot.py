"""Seed 002 on MXNet, as the seed has it: save every tensor of a Gluon CNN at steps 1, 2 and 3,
then draw the ReLU outputs of every layer with TensorPlot.

The seed trains on MNIST in SageMaker; this trains on scikit-learn's digits (8x8 images, shipped
with the package) here. Run it in the MXNet environment that `make test` creates:

    .venv-mxnet/bin/python examples/mxnet/seed002_tensorplot.py [--output DIR] [--quick]
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import mxnet as mx
from mxnet import autograd, gluon, nd
from sklearn.datasets import load_digits

import tensortap.mxnet as tt
from tensortap.viz import TensorPlot


def cnn() -> gluon.nn.HybridSequential:
    net = gluon.nn.HybridSequential()
    with net.name_scope():
        net.add(
            gluon.nn.Conv2D(channels=8, kernel_size=3, padding=1, activation="relu"),
            gluon.nn.MaxPool2D(pool_size=2),
            gluon.nn.Conv2D(channels=16, kernel_size=3, padding=1, activation="relu"),
            gluon.nn.Flatten(),
            gluon.nn.Dense(64, activation="relu"),
            gluon.nn.Dense(10),
        )
    return net


def train(out: Path, batches: int) -> None:
    mx.random.seed(0)
    x, y = load_digits(return_X_y=True)
    images = nd.array(x / 16.0, dtype="float32").reshape((-1, 1, 8, 8))
    labels = nd.array(y, dtype="float32")
    # the seed's collection: include_regex ".*", save_steps "1, 2, 3"
    hook = tt.Hook(out, save_config=tt.SaveConfig(save_steps=[1, 2, 3]), include_regex=".*")
    net = cnn()
    net.initialize(mx.init.Xavier())
    hook.register_block(net)
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    hook.register_loss(loss_fn)
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1, "momentum": 0.9})
    for i in range(batches):
        start = (i * 64) % (len(y) - 64)
        with autograd.record():
            loss = loss_fn(net(images[start : start + 64]), labels[start : start + 64])
        loss.backward()
        trainer.step(64)
    hook.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-o", "--output", default="runs/seed002-mxnet", help="trial directory")
    parser.add_argument("--quick", action="store_true", help="a few batches (the tests' mode)")
    ns = parser.parse_args(argv)
    out = Path(ns.output)
    shutil.rmtree(out, ignore_errors=True)
    train(out, batches=5 if ns.quick else 60)

    visualization = TensorPlot(
        regex=".*relu_output",
        path=out,
        steps=10,
        batch_sample_id=0,
        color_channel=1,
        title="Relu outputs",
        label=".*sequential0_input_0",
        prediction=".*sequential0_output_0",
    )
    page = visualization.write_html(out.with_suffix(".html"))
    print(f"layers: {visualization.layers}")
    print(f"steps: {visualization.steps}; traces per frame: {visualization.trace_count}")
    print(f"wrote {page} (open it in a browser; it needs no network)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
