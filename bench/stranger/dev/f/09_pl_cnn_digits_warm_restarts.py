"""Small CNN on scikit-learn digits (8x8) with Lightning.

SGD with Nesterov momentum and CosineAnnealingWarmRestarts stepped every batch
(interval='step'), so the learning rate jumps back up at each restart; the
training loss bumps a little after each restart. BatchNorm + Dropout.
"""
import lightning as L
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch.utils.data import DataLoader, TensorDataset

L.seed_everything(9, workers=True)
torch.set_num_threads(1)

digits = load_digits()
X = (digits.images / 16.0).astype(np.float32)[:, None]          # (N, 1, 8, 8) in [0, 1]
y = digits.target.astype(np.int64)
X_tr, X_va, y_tr, y_va = train_test_split(X, y, test_size=0.25, random_state=9, stratify=y)
mean, std = X_tr.mean(), X_tr.std()
X_tr, X_va = (X_tr - mean) / std, (X_va - mean) / std

train_dl = DataLoader(TensorDataset(torch.tensor(X_tr), torch.tensor(y_tr)), batch_size=32,
                      shuffle=True)
val_dl = DataLoader(TensorDataset(torch.tensor(X_va), torch.tensor(y_va)), batch_size=256)


class DigitCNN(L.LightningModule):
    def __init__(self, lr=0.05):
        super().__init__()
        self.save_hyperparameters()
        self.features = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
            nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(32, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
            nn.AdaptiveAvgPool2d(2),
        )
        self.head = nn.Sequential(nn.Flatten(), nn.Dropout(0.3), nn.Linear(128, 10))

    def forward(self, x):
        return self.head(self.features(x))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss, on_step=False, on_epoch=True)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        self.log("val_loss", F.cross_entropy(logits, y))
        self.log("val_acc", (logits.argmax(1) == y).float().mean())

    def on_train_epoch_end(self):
        m = self.trainer.callback_metrics
        print(f"epoch {self.current_epoch} train_loss {m['train_loss']:.4f} "
              f"val_loss {m['val_loss']:.4f} val_acc {m['val_acc']:.4f} "
              f"lr {self.trainer.optimizers[0].param_groups[0]['lr']:.4f}")

    def configure_optimizers(self):
        opt = torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=0.9,
                              nesterov=True, weight_decay=5e-4)
        steps_per_epoch = len(train_dl)
        sched = torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(
            opt, T_0=3 * steps_per_epoch, T_mult=2, eta_min=1e-4)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


model = DigitCNN()
trainer = L.Trainer(max_epochs=21, accelerator="cpu", devices=1, logger=False,
                    enable_checkpointing=False, enable_progress_bar=False,
                    enable_model_summary=False, deterministic=True)
trainer.fit(model, train_dl, val_dl)
res = trainer.validate(model, val_dl, verbose=False)[0]
print(f"final val_loss {res['val_loss']:.4f} val_acc {res['val_acc']:.4f}")
