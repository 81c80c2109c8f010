"""Denoising autoencoder for 8x8 digits (64 -> 16 -> 64) with Lightning; reports reconstruction MSE."""
import numpy as np
import torch
from torch import nn
import torch.nn.functional as F
import lightning as L
from torch.utils.data import DataLoader, TensorDataset
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

L.seed_everything(1, verbose=False)
torch.set_num_threads(1)


class DAE(L.LightningModule):
    def __init__(self, code=16, noise=0.1, lr=2e-3):
        super().__init__()
        self.save_hyperparameters()
        self.encoder = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, code))
        self.decoder = nn.Sequential(nn.Linear(code, 128), nn.ReLU(), nn.Linear(128, 64), nn.Sigmoid())

    def forward(self, x):
        return self.decoder(self.encoder(x))

    def training_step(self, batch, batch_idx):
        (x,) = batch
        noisy = (x + self.hparams.noise * torch.randn_like(x)).clamp(0, 1)
        loss = F.mse_loss(self(noisy), x)
        self.log("train_mse", loss, on_epoch=True, on_step=False)
        return loss

    def validation_step(self, batch, batch_idx):
        (x,) = batch
        self.log("val_mse", F.mse_loss(self(x), x))

    def on_train_epoch_end(self):
        if self.current_epoch % 5 == 4:
            m = self.trainer.callback_metrics
            print(f"epoch {self.current_epoch+1}: train_mse {m['train_mse']:.5f} val_mse {m['val_mse']:.5f} "
                  f"lr {self.lr_schedulers().get_last_lr()[0]:.2e}")

    def configure_optimizers(self):
        opt = torch.optim.Adam(self.parameters(), lr=self.hparams.lr)
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=self.trainer.max_epochs)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "epoch"}}


X = load_digits().data.astype(np.float32) / 16.0
Xtr, Xva = train_test_split(X, test_size=0.2, random_state=1)
mean_baseline = float(((Xva - Xtr.mean(0)) ** 2).mean())
train_dl = DataLoader(TensorDataset(torch.from_numpy(Xtr)), batch_size=64, shuffle=True)
val_dl = DataLoader(TensorDataset(torch.from_numpy(Xva)), batch_size=256)

trainer = L.Trainer(max_epochs=30, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                    enable_model_summary=False, num_sanity_val_steps=0)
trainer.fit(DAE(), train_dl, val_dl)
print(f"final val_mse {trainer.callback_metrics['val_mse']:.5f} (mean-image baseline {mean_baseline:.5f})")
