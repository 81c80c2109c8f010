"""A plain Lightning script (it never imports tensortap) for the learning-rate verdict: an MLP
on scikit-learn's digits, standardised, trained by SGD for 3 epochs, validated after each. At
--lr 0.1 (the default) it reaches about 89% validation accuracy; at --lr 10, 100x too high,
the loss diverges and overflows (accuracy at chance)."""

import argparse
import warnings

import lightning.pytorch as L
import torch
from sklearn.datasets import load_digits
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

warnings.filterwarnings("ignore")  # Lightning's advice on workers and logging
parser = argparse.ArgumentParser()
parser.add_argument("--lr", type=float, default=0.1)
args = parser.parse_args()


class Digits(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))

    def training_step(self, batch: list[torch.Tensor], index: int) -> torch.Tensor:
        x, y = batch
        return nn.functional.cross_entropy(self.net(x), y)

    def validation_step(self, batch: list[torch.Tensor], index: int) -> None:
        x, y = batch
        out = self.net(x)
        self.log("val_loss", nn.functional.cross_entropy(out, y))
        self.log("val_acc", (out.argmax(1) == y).float().mean())

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=args.lr)


torch.manual_seed(0)
torch.set_num_threads(1)
x, y = load_digits(return_X_y=True)
xs = torch.tensor(x, dtype=torch.float32)
mean, std = xs[:1200].mean(0), xs[:1200].std(0)
xs = (xs - mean) / torch.where(std > 0, std, torch.ones_like(std))
ys = torch.tensor(y)
train = DataLoader(
    TensorDataset(xs[:1200], ys[:1200]),
    batch_size=32,
    shuffle=True,
    generator=torch.Generator().manual_seed(0),
)
val = DataLoader(TensorDataset(xs[1200:], ys[1200:]), batch_size=200)
trainer = L.Trainer(
    max_epochs=3,
    accelerator="cpu",
    logger=False,
    enable_checkpointing=False,
    enable_progress_bar=False,
    enable_model_summary=False,
)
trainer.fit(Digits(), train, val)
print("validation accuracy", float(trainer.callback_metrics["val_acc"]))
