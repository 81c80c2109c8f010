"""Digits MLP in PyTorch Lightning: a LightningDataModule that standardises
the pixels in setup(), AdamW with ReduceLROnPlateau returned from
configure_optimizers as a dict, gradient accumulation and clipping from the
Trainer, and metrics logged on step and on epoch."""
import tempfile
import warnings

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import lightning as L
from torch.utils.data import DataLoader, TensorDataset
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

warnings.filterwarnings("ignore", ".*does not have many workers.*")
SEED = 17
L.seed_everything(SEED, workers=True)
torch.set_num_threads(2)


class DigitsDataModule(L.LightningDataModule):
    def __init__(self, batch_size: int = 32, val_fraction: float = 0.2):
        super().__init__()
        self.save_hyperparameters()

    def setup(self, stage=None):
        X, y = load_digits(return_X_y=True)
        X_tr, X_va, y_tr, y_va = train_test_split(
            X, y, test_size=self.hparams.val_fraction, stratify=y, random_state=SEED
        )
        scaler = StandardScaler().fit(X_tr)
        self.train_set = TensorDataset(
            torch.tensor(scaler.transform(X_tr), dtype=torch.float32), torch.tensor(y_tr)
        )
        self.val_set = TensorDataset(
            torch.tensor(scaler.transform(X_va), dtype=torch.float32), torch.tensor(y_va)
        )

    def train_dataloader(self):
        return DataLoader(self.train_set, batch_size=self.hparams.batch_size, shuffle=True)

    def val_dataloader(self):
        return DataLoader(self.val_set, batch_size=256)


class DigitsClassifier(L.LightningModule):
    def __init__(self, hidden: int = 128, lr: float = 2e-3, weight_decay: float = 1e-4):
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(
            nn.Linear(64, hidden), nn.ReLU(), nn.Dropout(0.2),
            nn.Linear(hidden, hidden // 2), nn.ReLU(),
            nn.Linear(hidden // 2, 10),
        )

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        loss = F.cross_entropy(logits, y)
        acc = (logits.argmax(-1) == y).float().mean()
        self.log("train_loss", loss, on_step=True, on_epoch=True)
        self.log("train_acc", acc, on_step=False, on_epoch=True)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        self.log("val_loss", F.cross_entropy(logits, y), on_epoch=True, prog_bar=True)
        self.log("val_acc", (logits.argmax(-1) == y).float().mean(), on_epoch=True)

    def configure_optimizers(self):
        opt = torch.optim.AdamW(self.parameters(), lr=self.hparams.lr,
                                weight_decay=self.hparams.weight_decay)
        sched = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, mode="min", factor=0.5, patience=2)
        return {
            "optimizer": opt,
            "lr_scheduler": {"scheduler": sched, "monitor": "val_loss", "interval": "epoch"},
        }


class PrintMetrics(L.Callback):
    def on_train_epoch_end(self, trainer, pl_module):
        m = trainer.callback_metrics
        lr = trainer.optimizers[0].param_groups[0]["lr"]
        print(
            f"epoch {trainer.current_epoch + 1:02d} train_loss {m['train_loss_epoch']:.4f} "
            f"train_acc {m['train_acc']:.4f} val_loss {m['val_loss']:.4f} "
            f"val_acc {m['val_acc']:.4f} lr {lr:.1e}",
            flush=True,
        )


dm = DigitsDataModule(batch_size=32)
model = DigitsClassifier()
trainer = L.Trainer(
    max_epochs=12,
    accelerator="cpu",
    devices=1,
    accumulate_grad_batches=2,
    gradient_clip_val=1.0,
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
print(f"final val_loss {res['val_loss']:.4f} val_acc {res['val_acc']:.4f}")
