"""Dense autoencoder on scikit-learn digits with Lightning EarlyStopping.

64 -> 32 -> 12 -> 32 -> 64 with a sigmoid output on pixels scaled to [0, 1],
AdamW with weight decay, EarlyStopping(patience=5) on the validation
reconstruction loss and the best checkpoint restored at the end.
"""
import tempfile

import lightning as L
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch.utils.data import DataLoader, TensorDataset

L.seed_everything(11, workers=True)
torch.set_num_threads(1)

X = (load_digits().data / 16.0).astype(np.float32)
X_tr, X_va = train_test_split(X, test_size=0.2, random_state=11)
train_dl = DataLoader(TensorDataset(torch.tensor(X_tr)), batch_size=32, shuffle=True)
val_dl = DataLoader(TensorDataset(torch.tensor(X_va)), batch_size=360)
baseline = float(((X_va - X_tr.mean(0)) ** 2).mean())
print(f"mean-image baseline val_mse {baseline:.4f}")


class DigitAE(L.LightningModule):
    def __init__(self, code=12, lr=3e-3):
        super().__init__()
        self.save_hyperparameters()
        self.encoder = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, code))
        self.decoder = nn.Sequential(nn.Linear(code, 32), nn.ReLU(), nn.Linear(32, 64),
                                     nn.Sigmoid())

    def forward(self, x):
        return self.decoder(self.encoder(x))

    def training_step(self, batch, batch_idx):
        (x,) = batch
        loss = F.mse_loss(self(x), x)
        self.log("train_mse", loss, on_step=False, on_epoch=True)
        return loss

    def validation_step(self, batch, batch_idx):
        (x,) = batch
        self.log("val_mse", F.mse_loss(self(x), x))

    def on_train_epoch_end(self):
        m = self.trainer.callback_metrics
        print(f"epoch {self.current_epoch} train_mse {m['train_mse']:.4f} val_mse {m['val_mse']:.4f}")

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=self.hparams.lr, weight_decay=1e-4)


ckpt_dir = tempfile.mkdtemp(prefix="f11_ae_")
ckpt = ModelCheckpoint(dirpath=ckpt_dir, monitor="val_mse", mode="min", save_top_k=1)
stop = EarlyStopping(monitor="val_mse", mode="min", patience=5, min_delta=1e-4)
model = DigitAE()
trainer = L.Trainer(max_epochs=150, accelerator="cpu", devices=1, callbacks=[stop, ckpt],
                    logger=False, enable_progress_bar=False, enable_model_summary=False,
                    deterministic=True)
trainer.fit(model, train_dl, val_dl)
print(f"stopped at epoch {trainer.current_epoch}, best val_mse {ckpt.best_model_score:.4f}")
best = DigitAE.load_from_checkpoint(ckpt.best_model_path)
res = trainer.validate(best, val_dl, verbose=False)[0]
print(f"final val_mse {res['val_mse']:.4f} (baseline {baseline:.4f})")
