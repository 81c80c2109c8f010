"""Digits classifier with a narrow feature backbone and a classifier head.

pytorch_lightning: backbone (64 -> 48 -> 6 with BatchNorm) + linear head,
Adam with ExponentialLR per epoch, batch 32. Everything is trained from
scratch in this script.
"""
import numpy as np
import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class BottleneckNet(pl.LightningModule):
    def __init__(self, lr=3e-3):
        super().__init__()
        self.save_hyperparameters()
        self.backbone = nn.Sequential(nn.Linear(64, 48), nn.BatchNorm1d(48), nn.ReLU(),
                                      nn.Linear(48, 6), nn.BatchNorm1d(6), nn.ReLU())
        self.classifier = nn.Linear(6, 10)

    def forward(self, x):
        return self.classifier(self.backbone(x))

    def training_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        loss = F.cross_entropy(logits, y)
        self.log("train_loss", loss, on_step=False, on_epoch=True)
        self.log("train_acc", (logits.argmax(1) == y).float().mean(), on_step=False, on_epoch=True)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        self.log("val_loss", F.cross_entropy(logits, y))
        self.log("val_acc", (logits.argmax(1) == y).float().mean())

    def configure_optimizers(self):
        optimizer = torch.optim.Adam(self.classifier.parameters(), lr=self.hparams.lr)
        scheduler = torch.optim.lr_scheduler.ExponentialLR(optimizer, gamma=0.95)
        return {"optimizer": optimizer, "lr_scheduler": scheduler}


class EpochLog(pl.Callback):
    def on_train_epoch_end(self, trainer, pl_module):
        m = trainer.callback_metrics
        print(f"epoch {trainer.current_epoch:2d}  train_loss {m['train_loss']:.4f}  train_acc {m['train_acc']:.3f}  "
              f"val_loss {m['val_loss']:.4f}  val_acc {m['val_acc']:.3f}")


if __name__ == "__main__":
    pl.seed_everything(13)
    torch.set_num_threads(1)
    X, y = load_digits(return_X_y=True)
    X = (X / 16.0 - 0.3) / 0.4
    X_tr, X_va, y_tr, y_va = train_test_split(X, y, test_size=0.25, random_state=13, stratify=y)
    f32 = lambda a: torch.tensor(a, dtype=torch.float32)
    train_loader = DataLoader(TensorDataset(f32(X_tr), torch.tensor(y_tr)), batch_size=32, shuffle=True)
    val_loader = DataLoader(TensorDataset(f32(X_va), torch.tensor(y_va)), batch_size=256)
    model = BottleneckNet()
    trainer = pl.Trainer(max_epochs=25, accelerator="cpu", logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, callbacks=[EpochLog()],
                         deterministic=True)
    trainer.fit(model, train_loader, val_loader)
    res = trainer.validate(model, val_loader, verbose=False)[0]
    print(f"final val_loss {res['val_loss']:.4f}  val_acc {res['val_acc']:.4f}")
