# Convolutional autoencoder on digits in Lightning; OneCycleLR stepped every batch (interval="step").
import lightning as L
import numpy as np
import torch
from torch import nn
from sklearn.datasets import load_digits
from torch.utils.data import DataLoader, TensorDataset, random_split

L.seed_everything(9, verbose=False)
torch.set_num_threads(1)

EPOCHS, BS = 15, 32
imgs = torch.tensor(load_digits().images / 16.0, dtype=torch.float32).unsqueeze(1)
full = TensorDataset(imgs)
train_set, val_set = random_split(full, [1497, 300], generator=torch.Generator().manual_seed(9))


class ConvAE(L.LightningModule):
    def __init__(self, max_lr=1e-2, steps_per_epoch=1):
        super().__init__()
        self.save_hyperparameters()
        self.enc = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),   # 4x4
                                 nn.Conv2d(16, 8, 3, padding=1), nn.ReLU())
        self.dec = nn.Sequential(nn.ConvTranspose2d(8, 16, 2, stride=2), nn.ReLU(),
                                 nn.Conv2d(16, 1, 3, padding=1), nn.Sigmoid())

    def forward(self, x):
        return self.dec(self.enc(x))

    def _loss(self, batch):
        (x,) = batch
        return nn.functional.mse_loss(self(x), x)

    def training_step(self, batch, _):
        loss = self._loss(batch)
        self.log("train_mse", loss, on_step=False, on_epoch=True)
        return loss

    def validation_step(self, batch, _):
        self.log("val_mse", self._loss(batch))

    def on_train_epoch_end(self):
        m = self.trainer.callback_metrics
        lr = self.trainer.optimizers[0].param_groups[0]["lr"]
        print(f"epoch {self.current_epoch:2d} lr {lr:.5f} train_mse {m['train_mse']:.5f} val_mse {m['val_mse']:.5f}")

    def configure_optimizers(self):
        opt = torch.optim.AdamW(self.parameters(), lr=self.hparams.max_lr)
        sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=self.hparams.max_lr, epochs=EPOCHS,
                                                    steps_per_epoch=self.hparams.steps_per_epoch)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


train_dl = DataLoader(train_set, batch_size=BS, shuffle=True)
val_dl = DataLoader(val_set, batch_size=100)
model = ConvAE(steps_per_epoch=len(train_dl))
trainer = L.Trainer(max_epochs=EPOCHS, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                    enable_model_summary=False, accelerator="cpu", deterministic=True)
trainer.fit(model, train_dl, val_dl)
print("final val reconstruction mse:", round(trainer.validate(model, val_dl, verbose=False)[0]["val_mse"], 5))
