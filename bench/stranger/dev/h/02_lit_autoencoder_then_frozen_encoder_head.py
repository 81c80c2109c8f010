"""Lightning, two fits in one process: an autoencoder is fitted on the digits images,
then its encoder is frozen (on purpose) and a new classifier head is fitted on top of
it by a second Trainer. Validation/test through trainer.validate() and trainer.test()."""
import warnings

import lightning as L
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch.utils.data import DataLoader, TensorDataset

warnings.filterwarnings("ignore")
L.seed_everything(7, workers=True)

X, y = load_digits(return_X_y=True)
X = (X / 16.0).astype(np.float32)
X_tr, X_te, y_tr, y_te = train_test_split(X, y, test_size=0.2, random_state=7, stratify=y)
X_tr, X_va, y_tr, y_va = train_test_split(X_tr, y_tr, test_size=0.2, random_state=7, stratify=y_tr)


def loader(x, y, shuffle, bs=64):
    ds = TensorDataset(torch.tensor(x), torch.tensor(y, dtype=torch.long))
    return DataLoader(ds, batch_size=bs, shuffle=shuffle)


class AutoEncoder(L.LightningModule):
    def __init__(self, latent=16, lr=2e-3):
        super().__init__()
        self.save_hyperparameters()
        self.encoder = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, latent))
        self.decoder = nn.Sequential(nn.Linear(latent, 128), nn.ReLU(), nn.Linear(128, 64),
                                     nn.Sigmoid())

    def forward(self, x):
        return self.decoder(self.encoder(x))

    def _recon(self, batch):
        x, _ = batch  # labels are not used here
        return F.mse_loss(self(x), x)

    def training_step(self, batch, batch_idx):
        loss = self._recon(batch)
        self.log("ae_train_loss", loss, on_step=False, on_epoch=True)
        return loss

    def validation_step(self, batch, batch_idx):
        self.log("ae_val_loss", self._recon(batch), prog_bar=False)

    def on_validation_epoch_end(self):
        m = self.trainer.callback_metrics
        if "ae_train_loss" in m:
            print(f"[AE] epoch {self.current_epoch} train_mse {m['ae_train_loss']:.4f} "
                  f"val_mse {m['ae_val_loss']:.4f}")

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.hparams.lr)


class FrozenEncoderClassifier(L.LightningModule):
    def __init__(self, encoder, latent=16, lr=5e-3):
        super().__init__()
        self.save_hyperparameters(ignore=["encoder"])
        self.encoder = encoder
        self.encoder.requires_grad_(False)  # keep the pre-trained features fixed
        self.head = nn.Sequential(nn.Linear(latent, 64), nn.ReLU(), nn.Dropout(0.3),
                                  nn.Linear(64, 10))

    def forward(self, x):
        with torch.no_grad():
            z = self.encoder(x)
        return self.head(z)

    def _step(self, batch, stage):
        x, y = batch
        logits = self(x)
        loss = F.cross_entropy(logits, y)
        acc = (logits.argmax(1) == y).float().mean()
        self.log(f"{stage}_loss", loss, on_step=False, on_epoch=True)
        self.log(f"{stage}_acc", acc, on_step=False, on_epoch=True)
        return loss

    def training_step(self, batch, batch_idx):
        return self._step(batch, "train")

    def validation_step(self, batch, batch_idx):
        self._step(batch, "val")

    def test_step(self, batch, batch_idx):
        self._step(batch, "test")

    def on_validation_epoch_end(self):
        m = self.trainer.callback_metrics
        if "train_loss" in m:
            print(f"[CLF] epoch {self.current_epoch} train_loss {m['train_loss']:.4f} "
                  f"val_loss {m['val_loss']:.4f} val_acc {m['val_acc']:.4f}")

    def configure_optimizers(self):
        opt = torch.optim.AdamW(self.head.parameters(), lr=self.hparams.lr, weight_decay=1e-3)
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=self.trainer.max_epochs)
        return {"optimizer": opt, "lr_scheduler": sched}


common = dict(accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
              enable_progress_bar=False, enable_model_summary=False, deterministic=True)

ae = AutoEncoder()
L.Trainer(max_epochs=25, **common).fit(ae, loader(X_tr, y_tr, True), loader(X_va, y_va, False))

clf = FrozenEncoderClassifier(ae.encoder)
trainer = L.Trainer(max_epochs=30, **common)
trainer.fit(clf, loader(X_tr, y_tr, True, bs=32), loader(X_va, y_va, False))
val = trainer.validate(clf, loader(X_va, y_va, False), verbose=False)[0]
test = trainer.test(clf, loader(X_te, y_te, False), verbose=False)[0]
print(f"final val_loss {val['val_loss']:.4f} val_acc {val['val_acc']:.4f}")
print(f"final test_loss {test['test_loss']:.4f} test_acc {test['test_acc']:.4f}")
