"""Seed 004 on MXNet, as the seed has it: a Gluon convolutional autoencoder learns the digits
while this process follows its trial live and embeds the bottleneck of every new EVAL step.

The hook saves what the seed's ``include_regex`` names every 10 steps: the bottleneck dense
layer's output (``convolutionalautoencoder0_hybridsequential0_dense0_output_0``), the labels the
model is called with (``convolutionalautoencoder0_input_1``) and the loss's tensors (``l2loss0``:
input 0 is the reconstruction, input 1 the image). Training runs in a child process; steps whose
tensors were not saved are skipped (TensorUnavailableForStep), as in the seed's loop. Run it in
the MXNet environment that `make test` creates:

    .venv-mxnet/bin/python examples/mxnet/seed004_autoencoder.py [--output DIR] [--quick]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

LABEL_INPUT = "convolutionalautoencoder0_input_1"
BOTTLENECK = "convolutionalautoencoder0_hybridsequential0_dense0_output_0"
AUTOENCODER_INPUT = "l2loss0_input_1"
AUTOENCODER_OUTPUT = "l2loss0_input_0"
INCLUDE_REGEX = f".*{BOTTLENECK}|.*{LABEL_INPUT}|.*loss"


def train(out: Path, epochs: int) -> None:
    import mxnet as mx
    from mxnet import autograd, gluon, nd
    from sklearn.datasets import load_digits

    import tensortap.mxnet as tt

    class ConvolutionalAutoencoder(gluon.nn.HybridBlock):
        def __init__(self) -> None:
            super().__init__()
            with self.name_scope():
                self.encoder = gluon.nn.HybridSequential()
                with self.encoder.name_scope():
                    self.encoder.add(
                        gluon.nn.Conv2D(16, kernel_size=3, padding=1, activation="relu"),
                        gluon.nn.MaxPool2D(2),
                        gluon.nn.Dense(8),  # the bottleneck
                    )
                self.decoder = gluon.nn.HybridSequential()
                with self.decoder.name_scope():
                    self.decoder.add(
                        gluon.nn.Dense(16 * 4 * 4, activation="relu"),
                        gluon.nn.HybridLambda(lambda F, x: F.reshape(x, (0, 16, 4, 4))),
                        # the seed's Conv2DTranspose fails in MXNet 1.9.1's oneDNN build here
                        # ("could not create a primitive descriptor"): upsample, then convolve
                        gluon.nn.HybridLambda(
                            lambda F, x: F.UpSampling(x, scale=2, sample_type="nearest")
                        ),
                        gluon.nn.Conv2D(1, kernel_size=3, padding=1, activation="sigmoid"),
                    )

        def hybrid_forward(self, F, x, label):  # the label rides along, as in the seed
            return self.decoder(self.encoder(x))

    mx.random.seed(0)
    x, y = load_digits(return_X_y=True)
    images = nd.array(x / 16.0, dtype="float32").reshape((-1, 1, 8, 8))
    labels = nd.array(y, dtype="float32")
    train_x, train_y, test_x, test_y = images[:1500], labels[:1500], images[1500:], labels[1500:]
    hook = tt.Hook(out, save_config=tt.SaveConfig(save_interval=10), include_regex=INCLUDE_REGEX)
    model = ConvolutionalAutoencoder()
    model.initialize(mx.init.Xavier())
    hook.register_block(model)
    loss_fn = gluon.loss.L2Loss()
    hook.register_loss(loss_fn)
    trainer = gluon.Trainer(model.collect_params(), "adam", {"learning_rate": 0.003})
    for epoch in range(epochs):
        hook.set_mode(tt.modes.TRAIN)
        for i in range(0, 1500, 50):
            with autograd.record():
                loss = loss_fn(model(train_x[i : i + 50], train_y[i : i + 50]), train_x[i : i + 50])
            loss.backward()
            trainer.step(50)
        hook.set_mode(tt.modes.EVAL)  # 10 eval batches per epoch: eval steps 0, 10, 20, ...
        for i in range(0, 290, 29):
            loss = loss_fn(model(test_x[i : i + 29], test_y[i : i + 29]), test_x[i : i + 29])
        print(f"epoch {epoch}: eval loss {float(loss.mean().asscalar()):.4f}", flush=True)
    hook.close()


def follow(out: Path, method: str) -> int:
    """The seed's notebook loop: embeddings of the bottleneck, step by step, while it trains."""
    import tensortap.mxnet as tt
    from tensortap.viz import LiveEmbeddings, plot_embeddings

    trial = tt.create_trial(out)
    live = LiveEmbeddings(
        trial,
        BOTTLENECK,
        LABEL_INPUT,
        mode=tt.modes.EVAL,
        method=method,
        poll_interval=0.2,
        timeout=600,
    )
    page = out.with_suffix(".html")
    for frame in live:
        image = trial.tensor(AUTOENCODER_INPUT).value(frame.step, mode=tt.modes.EVAL)[0, 0]
        output = trial.tensor(AUTOENCODER_OUTPUT).value(frame.step, mode=tt.modes.EVAL)[0, 0]
        error = float(np.mean((image - output) ** 2))
        print(
            f"eval step {frame.step:3d}: {len(frame.points)} samples embedded, "
            f"first image reconstructed with error {error:.4f}"
        )
        plot_embeddings(live.frames, title=f"bottleneck ({method.upper()})").write_html(page)
    skipped = live.skipped or "none"
    print(f"skipped steps (tensors not saved): {skipped}; timed out: {live.timed_out}")
    print(f"wrote {page} ({len(live.frames)} frames)")
    return 0 if live.frames and not live.timed_out else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-o", "--output", default="runs/seed004-mxnet", help="trial directory")
    parser.add_argument("--quick", action="store_true", help="3 epochs (the tests' mode)")
    parser.add_argument("--tsne", action="store_true", help="t-SNE instead of PCA")
    parser.add_argument("--train-only", action="store_true", help=argparse.SUPPRESS)
    ns = parser.parse_args(argv)
    out = Path(ns.output)
    epochs = 3 if ns.quick else 15
    if ns.train_only:
        train(out, epochs)
        return 0
    shutil.rmtree(out, ignore_errors=True)
    child = [sys.executable, __file__, "--output", str(out), "--train-only"]
    training = subprocess.Popen(child + (["--quick"] if ns.quick else []))
    try:
        status = follow(out, "tsne" if ns.tsne else "pca")
    finally:
        training.wait(timeout=600)
    return status or training.returncode


if __name__ == "__main__":
    raise SystemExit(main())
