"""A Lightning ``Trainer.fit()`` (it never imports tensortap): an MLP on scikit-learn's digits,
gradients clipped, a validation every epoch; it logs the training loss of every step and the
total gradient norm before clipping (Lightning's ``grad_norm``, in
``on_before_optimizer_step``) with a CSVLogger, and writes those rows to ``--log`` (JSON)."""

import argparse
import csv
import json
from pathlib import Path

import lightning.pytorch as pl
import torch
import torch.nn.functional as F
from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.utilities import grad_norm
from sklearn.datasets import load_digits
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--log", required=True)
parser.add_argument("--epochs", type=int, default=2)
args = parser.parse_args()


class Digits(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss, on_step=True, on_epoch=False)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", F.cross_entropy(self(x), y))

    def on_before_optimizer_step(self, optimizer) -> None:
        self.log("grad_norm", grad_norm(self, norm_type=2)["grad_2.0_norm_total"])

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.2)


torch.manual_seed(0)
torch.set_num_threads(1)
x, y = load_digits(return_X_y=True)
x = torch.tensor(x / 16.0, dtype=torch.float32)
y = torch.tensor(y)
train = DataLoader(TensorDataset(x[:640], y[:640]), batch_size=32, shuffle=True)
valid = DataLoader(TensorDataset(x[1500:], y[1500:]), batch_size=100)
logger = CSVLogger("lightning_logs", name="vitals")
trainer = pl.Trainer(
    max_epochs=args.epochs,
    gradient_clip_val=0.5,
    log_every_n_steps=1,
    logger=logger,
    enable_progress_bar=False,
    enable_model_summary=False,
    enable_checkpointing=False,
    accelerator="cpu",
    devices=1,
)
trainer.fit(Digits(), train, valid)
with open(Path(logger.log_dir) / "metrics.csv") as f:
    rows = list(csv.DictReader(f))
with open(args.log, "w") as f:
    json.dump(rows, f)
