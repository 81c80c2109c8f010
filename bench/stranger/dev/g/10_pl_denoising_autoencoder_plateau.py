"""Denoising autoencoder on the 64-pixel digits with ReduceLROnPlateau on val_loss.

Lightning: the scheduler dict carries monitor="val_loss"; the encoder has
BatchNorm and a 10-unit bottleneck. Reports reconstruction MSE against the
"predict the mean image" baseline.
"""
import lightning as L
import numpy as np
import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class DenoisingAE(L.LightningModule):
    def __init__(self, bottleneck=10, lr=2e-3, noise=0.3):
        super().__init__()
        self.save_hyperparameters()
        self.encoder = nn.Sequential(nn.Linear(64, 128), nn.BatchNorm1d(128), nn.ReLU(),
                                     nn.Linear(128, 48), nn.ReLU(), nn.Linear(48, bottleneck))
        self.decoder = nn.Sequential(nn.Linear(bottleneck, 48), nn.ReLU(), nn.Linear(48, 128), nn.ReLU(),
                                     nn.Linear(128, 64), nn.Sigmoid())

    def forward(self, x):
        return self.decoder(self.encoder(x))

    def training_step(self, batch, batch_idx):
        (x,) = batch
        noisy = (x + self.hparams.noise * torch.randn_like(x)).clamp(0, 1)
        loss = F.mse_loss(self(noisy), x)
        self.log("train_loss", loss, on_epoch=True, on_step=False, prog_bar=False)
        return loss

    def validation_step(self, batch, batch_idx):
        (x,) = batch
        self.log("val_loss", F.mse_loss(self(x), x))

    def configure_optimizers(self):
        opt = torch.optim.Adam(self.parameters(), lr=self.hparams.lr, weight_decay=1e-5)
        sched = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, mode="min", factor=0.3, patience=3,
                                                           min_lr=1e-5)
        return {"optimizer": opt,
                "lr_scheduler": {"scheduler": sched, "monitor": "val_loss", "interval": "epoch"}}


class EpochPrinter(L.Callback):
    def on_train_epoch_end(self, trainer, pl_module):
        m = trainer.callback_metrics
        lr = trainer.optimizers[0].param_groups[0]["lr"]
        print(f"epoch {trainer.current_epoch:2d}  train_loss {m['train_loss']:.5f}  "
              f"val_loss {m['val_loss']:.5f}  lr {lr:.1e}")


if __name__ == "__main__":
    L.seed_everything(10)
    torch.set_num_threads(1)
    X = load_digits().data.astype(np.float32) / 16.0
    X_tr, X_va = train_test_split(X, test_size=0.2, random_state=10)
    baseline = float(((X_va - X_tr.mean(0)) ** 2).mean())
    train_loader = DataLoader(TensorDataset(torch.from_numpy(X_tr)), batch_size=32, shuffle=True)
    val_loader = DataLoader(TensorDataset(torch.from_numpy(X_va)), batch_size=512)
    model = DenoisingAE()
    trainer = L.Trainer(max_epochs=40, accelerator="cpu", logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False,
                        callbacks=[EpochPrinter()], deterministic=True)
    trainer.fit(model, train_loader, val_loader)
    res = trainer.validate(model, val_loader, verbose=False)[0]
    print(f"mean-image baseline val_mse {baseline:.5f}")
    print(f"final val_loss {res['val_loss']:.5f}  ({res['val_loss'] / baseline:.2f} of baseline)")
