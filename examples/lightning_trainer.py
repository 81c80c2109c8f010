"""A Lightning Trainer debugged by tensortap: an MLP on scikit-learn's digits (real data shipped
with the package), once with a sane learning rate and once with one far too high; the
recommended rules judge both trials.

    python examples/lightning_trainer.py [--quick] [--out runs/lightning]

With ``--plain`` the script adds no callback itself: run it as
``tensortap run examples/lightning_trainer.py -- --plain`` and tensortap adds it.
"""

from __future__ import annotations

import argparse
import logging
import os
import warnings

import lightning.pytorch as L
import torch
from sklearn.datasets import load_digits
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import tensortap as tt
from tensortap.report import rules_that_find_problems


class DigitsMLP(L.LightningModule):
    def __init__(self, lr: float) -> None:
        super().__init__()
        self.lr = lr
        self.net = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))

    def training_step(self, batch: list[torch.Tensor], index: int) -> torch.Tensor:
        x, y = batch
        loss = nn.functional.cross_entropy(self.net(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch: list[torch.Tensor], index: int) -> None:
        x, y = batch
        out = self.net(x)
        self.log("val_loss", nn.functional.cross_entropy(out, y))
        self.log("val_acc", (out.argmax(1) == y).float().mean())

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=self.lr)


def loaders() -> tuple[DataLoader, DataLoader]:
    x, y = load_digits(return_X_y=True)
    xs, ys = torch.tensor(x / 16.0, dtype=torch.float32), torch.tensor(y)
    train = TensorDataset(xs[:1500], ys[:1500])
    val = TensorDataset(xs[1500:], ys[1500:])
    g = torch.Generator().manual_seed(0)
    return DataLoader(train, batch_size=32, shuffle=True, generator=g), DataLoader(val, 64)


def train(out: str, lr: float, epochs: int, plain: bool, **trainer_args: object) -> str:
    """Fit with learning rate ``lr``; returns where the trial is."""
    torch.manual_seed(0)
    callbacks = []
    if not plain:
        from tensortap.lightning import TensortapCallback

        callbacks.append(
            TensortapCallback(
                include_collections=["losses", "metrics", "weights", "gradients"],
                save_config=tt.SaveConfig(save_interval=5),
            )
        )
    settings: dict[str, object] = dict(
        max_epochs=epochs,
        default_root_dir=out,
        callbacks=callbacks,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        accumulate_grad_batches=2,
        val_check_interval=0.5,
    )
    settings.update(trainer_args)
    trainer = L.Trainer(**settings)  # type: ignore[arg-type]
    trainer.fit(DigitsMLP(lr), *loaders())
    return os.path.join(out, "tensortap")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer epochs (the tests use it)")
    parser.add_argument("--out", default="runs/lightning")
    parser.add_argument("--plain", action="store_true", help="no callback: tensortap run adds it")
    args = parser.parse_args()
    warnings.filterwarnings("ignore", module="lightning")
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    epochs = 2 if args.quick else 10
    if args.plain:
        train(args.out, 0.5, epochs, plain=True)
        return
    logging.getLogger("tensortap.rules").setLevel(logging.ERROR)  # the verdicts are printed
    runs = (("healthy", "healthy (lr 0.5)", 0.5), ("lr-50", "learning rate far too high", 50.0))
    for name, label, lr in runs:
        path = train(os.path.join(args.out, name), lr, epochs, plain=False)
        loss = tt.create_trial(path).tensor("loss")
        first, last = loss.steps(mode=tt.modes.TRAIN)[0], loss.steps(mode=tt.modes.TRAIN)[-1]
        print(f"{label}: trial {path}")
        print(
            f"  loss {loss.value(first, mode=tt.modes.TRAIN).item():.3g} at step {first}, "
            f"{loss.value(last, mode=tt.modes.TRAIN).item():.3g} at step {last}"
        )
        found = rules_that_find_problems(path)
        print(f"  rules that found a problem: {', '.join(found) or 'none'}")


if __name__ == "__main__":
    main()
