"""A Lightning ``Trainer.fit()`` (it never imports tensortap) whose ``ModelCheckpoint`` saves
every 5 training steps with ``save_top_k=1``: an MLP on scikit-learn's digits whose
``--fault-at``-th training step (1-based) has a NaN loss, so its update makes every weight NaN
(plain SGD). ``--default``: Lightning's own checkpoint instead (one at each epoch's end, under
``lightning_logs``). ``--resume``: two checkpoints kept and a ``last.ckpt``
(``save_top_k=2`` on the step, ``save_last=True``), and ``fit(ckpt_path="last")``.
``--package pytorch_lightning``: the older spelling of Lightning instead. ``--own-save FILE``:
the script's own ``trainer.save_checkpoint(FILE)`` every 5 training steps (from its own
callback) and once after ``fit()``. Writes what it ended with to ``--log`` (JSON): the
checkpoint files on disk, whether the weights are finite, and the SHA-256 of FILE after each
own save (by step; ``"end"``: after fit)."""

import argparse
import hashlib
import importlib
import json
import math
import os
from typing import Any

import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--log", required=True)
parser.add_argument("--steps", type=int, default=30)
parser.add_argument("--fault-at", type=int, default=-1)
parser.add_argument("--default", action="store_true")
parser.add_argument("--resume", action="store_true")
parser.add_argument("--package", choices=("lightning", "pytorch_lightning"), default="lightning")
parser.add_argument("--own-save", default=None)
args = parser.parse_args()

# the older spelling of the same Trainer, or the current one
pl: Any = importlib.import_module(
    "pytorch_lightning" if args.package == "pytorch_lightning" else "lightning.pytorch"
)
ModelCheckpoint = pl.callbacks.ModelCheckpoint


class Digits(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))
        self.calls = 0

    def training_step(self, batch, batch_idx):
        x, y = batch
        self.calls += 1
        loss = F.cross_entropy(self.net(x), y)
        return loss * math.nan if self.calls == args.fault_at else loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.2)


own_saves: dict[str, str] = {}


def own_save(trainer: Any) -> None:
    trainer.save_checkpoint(args.own_save)
    with open(args.own_save, "rb") as f:
        own_saves[str(trainer.global_step) if trainer.training else "end"] = hashlib.sha256(
            f.read()
        ).hexdigest()


class SavesItself(pl.Callback):
    def on_train_batch_end(self, trainer, *rest):
        if trainer.global_step % 5 == 0:
            own_save(trainer)


torch.manual_seed(0)
torch.set_num_threads(1)
x, y = load_digits(return_X_y=True)
data = TensorDataset(torch.tensor(x[:320] / 16.0, dtype=torch.float32), torch.tensor(y[:320]))
kept = {"save_top_k": 2, "monitor": "step", "mode": "max", "save_last": True}
checkpoint = ModelCheckpoint(
    dirpath="ckpts", every_n_train_steps=5, **(kept if args.resume else {"save_top_k": 1})
)
trainer = pl.Trainer(
    max_steps=args.steps,
    logger=False,
    enable_progress_bar=False,
    enable_model_summary=False,
    callbacks=([] if args.default else [checkpoint]) + ([SavesItself()] if args.own_save else []),
    accelerator="cpu",
    devices=1,
)
module = Digits()
trainer.fit(module, DataLoader(data, batch_size=32), ckpt_path="last" if args.resume else None)
if args.own_save:
    own_save(trainer)
files = sorted(
    os.path.relpath(os.path.join(root, name))
    for root, _, names in os.walk(".")
    for name in names
    if name.endswith(".ckpt")
)
with open(args.log, "w") as f:
    json.dump(
        {
            "checkpoints": files,
            "finite": all(bool(torch.isfinite(p).all()) for p in module.parameters()),
            "own_saves": own_saves,
        },
        f,
    )
