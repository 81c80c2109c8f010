"""Nonlinear regression (Friedman #1 response surface) with Lightning: a
DataModule that standardises inputs and targets in setup(), an MLP regressor
trained on MSE with Adam and a cosine schedule from a configure_optimizers
dict; validation reports MSE and MAE in the original target units."""
import tempfile
import warnings

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import lightning as L
from torch.utils.data import DataLoader, TensorDataset
from sklearn.datasets import make_friedman1
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

warnings.filterwarnings("ignore", ".*does not have many workers.*")
SEED = 37
MAX_EPOCHS = 25
L.seed_everything(SEED, workers=True)
torch.set_num_threads(2)


class FriedmanDataModule(L.LightningDataModule):
    def __init__(self, n_samples=3000, batch_size=64):
        super().__init__()
        self.n_samples = n_samples
        self.batch_size = batch_size

    def setup(self, stage=None):
        X, y = make_friedman1(n_samples=self.n_samples, n_features=10, noise=0.5, random_state=SEED)
        X_tr, X_va, y_tr, y_va = train_test_split(X, y, test_size=0.2, random_state=SEED)
        self.x_scaler = StandardScaler().fit(X_tr)
        self.y_mean, self.y_std = float(y_tr.mean()), float(y_tr.std())
        to_t = lambda a: torch.tensor(a, dtype=torch.float32)
        self.train_set = TensorDataset(to_t(self.x_scaler.transform(X_tr)),
                                       to_t((y_tr - self.y_mean) / self.y_std))
        self.val_set = TensorDataset(to_t(self.x_scaler.transform(X_va)),
                                     to_t((y_va - self.y_mean) / self.y_std))

    def train_dataloader(self):
        return DataLoader(self.train_set, batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self):
        return DataLoader(self.val_set, batch_size=600)


class MLPRegressor(L.LightningModule):
    def __init__(self, in_dim=10, hidden=128, lr=3e-3, y_std=1.0):
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(
            nn.Linear(in_dim, hidden), nn.SiLU(),
            nn.Linear(hidden, hidden), nn.SiLU(),
            nn.Linear(hidden, 1),
        )

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        y_hat = self(x)
        loss = F.mse_loss(y_hat, y)
        self.log("train_loss", loss, on_step=True, on_epoch=True)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        y_hat = self(x).view(-1)
        self.log("val_loss", F.mse_loss(y_hat, y), on_epoch=True)
        # MAE back in the units of the original target
        self.log("val_mae", F.l1_loss(y_hat, y) * self.hparams.y_std, on_epoch=True)

    def configure_optimizers(self):
        opt = torch.optim.Adam(self.parameters(), lr=self.hparams.lr)
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=MAX_EPOCHS, eta_min=1e-5)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "epoch"}}


class PrintMetrics(L.Callback):
    def on_train_epoch_end(self, trainer, pl_module):
        m = trainer.callback_metrics
        print(
            f"epoch {trainer.current_epoch + 1:02d} train_loss {m['train_loss_epoch']:.4f} "
            f"val_loss {m['val_loss']:.4f} val_mae {m['val_mae']:.4f}",
            flush=True,
        )


dm = FriedmanDataModule()
dm.setup()
model = MLPRegressor(y_std=dm.y_std)
trainer = L.Trainer(
    max_epochs=MAX_EPOCHS,
    accelerator="cpu",
    devices=1,
    deterministic=True,
    num_sanity_val_steps=0,
    callbacks=[PrintMetrics()],
    logger=False,
    enable_checkpointing=False,
    enable_progress_bar=False,
    enable_model_summary=False,
    default_root_dir=tempfile.mkdtemp(),
)
trainer.fit(model, datamodule=dm)
res = trainer.validate(model, datamodule=dm, verbose=False)[0]
print(f"final val_loss {res['val_loss']:.4f} val_mae {res['val_mae']:.4f}")
