"""Seed 004, "monitor autoencoder training": watch the bottleneck's embedding of handwritten
digits form clusters while a convolutional autoencoder trains.

The seed trains a Gluon autoencoder on MNIST in SageMaker and follows its trial from a notebook.
Here a PyTorch autoencoder learns scikit-learn's digits (8x8 images, shipped with the package)
in a child process, and this process follows its trial live, as the seed's loop does: every
new EVAL step becomes an embedding (PCA by default, ``--tsne`` for t-SNE) of the bottleneck's
output coloured by the digit, steps whose tensors were not saved are skipped, and the animated
figure is rewritten as a page that opens offline. The hook saves what the seed's
``include_regex`` names (the bottleneck's output, the model's label input and the loss's
inputs, i.e. the image and its reconstruction) every 10 steps.

    .venv/bin/python examples/seed004_autoencoder_embeddings.py [--output runs/seed004] [--quick]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

BOTTLENECK = "bottleneck_output_0"
LABELS = "ConvolutionalAutoencoder_input_1"  # forward(images, labels): the labels ride along
IMAGES, RECONSTRUCTIONS = "MSELoss_input_1", "MSELoss_input_0"


def train(out: Path, epochs: int) -> None:
    """The training script: an ordinary PyTorch loop with the hook's two lines."""
    import torch
    from sklearn.datasets import load_digits
    from torch import nn

    import tensortap.pytorch as tt

    class ConvolutionalAutoencoder(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.encoder = nn.Sequential(
                nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten()
            )
            self.bottleneck = nn.Linear(16 * 4 * 4, 8)
            self.decoder = nn.Sequential(
                nn.Linear(8, 16 * 4 * 4),
                nn.ReLU(),
                nn.Unflatten(1, (16, 4, 4)),
                nn.ConvTranspose2d(16, 1, 2, stride=2),
                nn.Sigmoid(),
            )

        def forward(self, images: torch.Tensor, labels: torch.Tensor | None = None) -> torch.Tensor:
            return self.decoder(self.bottleneck(self.encoder(images)))

    torch.manual_seed(0)
    torch.set_num_threads(1)
    x, y = load_digits(return_X_y=True)
    images, labels = torch.tensor(x / 16.0, dtype=torch.float32).view(-1, 1, 8, 8), torch.tensor(y)
    train_x, train_y, test_x, test_y = images[:1500], labels[:1500], images[1500:], labels[1500:]

    hook = tt.Hook(
        out,
        save_config=tt.SaveConfig(save_interval=10),
        include_regex=[BOTTLENECK, LABELS, r"MSELoss_input_\d", r"MSELoss_output_0"],
    )
    model = ConvolutionalAutoencoder()
    hook.register_module(model)
    loss_fn = nn.MSELoss()
    hook.register_loss(loss_fn)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    for epoch in range(epochs):
        hook.set_mode(tt.modes.TRAIN)
        for i in range(0, len(train_x), 50):
            optimizer.zero_grad()
            batch = train_x[i : i + 50]
            loss = loss_fn(model(batch, train_y[i : i + 50]), batch)
            loss.backward()
            optimizer.step()
        hook.set_mode(tt.modes.EVAL)  # 10 eval batches per epoch: eval steps 0, 10, 20, ...
        with torch.no_grad():
            for i in range(0, 290, 29):
                batch = test_x[i : i + 29]
                loss = loss_fn(model(batch, test_y[i : i + 29]), batch)
        print(f"epoch {epoch}: eval loss {float(loss):.4f}", flush=True)
    hook.close()


def follow(out: Path, method: str, timeout: float) -> int:
    """The seed's notebook loop, with tensortap's live embeddings."""
    import tensortap as tt
    from tensortap.viz import LiveEmbeddings, plot_embeddings

    trial = tt.create_trial(out)  # may be opened before training has written anything
    live = LiveEmbeddings(
        trial,
        BOTTLENECK,
        LABELS,
        mode=tt.modes.EVAL,
        method=method,
        poll_interval=0.2,
        timeout=timeout,
    )
    page = out.with_suffix(".html")
    for frame in live:
        image = trial.tensor(IMAGES).value(frame.step, mode=tt.modes.EVAL)[0, 0]
        output = trial.tensor(RECONSTRUCTIONS).value(frame.step, mode=tt.modes.EVAL)[0, 0]
        error = float(np.mean((image - output) ** 2))
        spread = _separation(frame.points, frame.labels)
        print(
            f"eval step {frame.step:3d}: {len(frame.points)} samples embedded, "
            f"cluster separation {spread:.2f}, first image reconstructed with error {error:.4f}"
        )
        plot_embeddings(live.frames, title=f"bottleneck ({method.upper()})").write_html(page)
    print(
        f"skipped steps (tensors not saved): {live.skipped or 'none'}; timed out: {live.timed_out}"
    )
    print(f"wrote {page} ({len(live.frames)} frames; open it in a browser, it needs no network)")
    return 0 if live.frames and not live.timed_out else 1


def _separation(points: np.ndarray, labels: np.ndarray) -> float:
    """Between-class over within-class spread: it grows as the digits form clusters."""
    centre = points.mean(axis=0)
    between = within = 0.0
    for label in np.unique(labels):
        members = points[labels == label]
        between += len(members) * float(np.sum((members.mean(axis=0) - centre) ** 2))
        within += float(np.sum((members - members.mean(axis=0)) ** 2))
    return between / max(within, 1e-12)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-o", "--output", default="runs/seed004", help="trial directory")
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
        status = follow(out, "tsne" if ns.tsne else "pca", timeout=600)
    finally:
        training.wait(timeout=600)
    return status or training.returncode


if __name__ == "__main__":
    raise SystemExit(main())
