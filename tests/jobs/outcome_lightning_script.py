"""A plain Lightning script (it never imports tensortap) for the outcome tests: an MLP on
scikit-learn's digits, validated at the end of each of 3 epochs. --shuffle trains on labels
shuffled against the inputs (held-out accuracy at chance). --no-val-loss validates as many
scripts do: ``argmax == y`` counted by hand, no loss called."""

import argparse
import warnings

import lightning.pytorch as L
import torch
from sklearn.datasets import load_digits
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

warnings.filterwarnings("ignore")  # Lightning's advice on workers and logging
parser = argparse.ArgumentParser()
parser.add_argument("--shuffle", action="store_true")
parser.add_argument("--no-val-loss", action="store_true")
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
        if not args.no_val_loss:
            self.log("val_loss", nn.functional.cross_entropy(out, y))
        self.log("val_acc", (out.argmax(1) == y).float().mean())

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=3e-3)


torch.manual_seed(0)
torch.set_num_threads(1)
x, y = load_digits(return_X_y=True)
xs, ys = torch.tensor(x / 16.0, dtype=torch.float32), torch.tensor(y)
y_train = ys[:1200]
if args.shuffle:
    y_train = y_train[torch.randperm(1200, generator=torch.Generator().manual_seed(2))]
train = DataLoader(
    TensorDataset(xs[:1200], y_train),
    batch_size=64,
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
