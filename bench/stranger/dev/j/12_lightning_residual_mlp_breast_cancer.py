"""Residual MLP for the breast-cancer data in Lightning: a DataModule with a
standard scaler fitted in setup(), pre-norm residual blocks, AdamW with a
OneCycleLR schedule stepped every optimizer step (configure_optimizers dict),
and gradient accumulation and clipping from the Trainer."""
import tempfile
import warnings

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import lightning as L
from torch.utils.data import DataLoader, TensorDataset
from sklearn.datasets import load_breast_cancer
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

warnings.filterwarnings("ignore", ".*does not have many workers.*")
SEED = 43
L.seed_everything(SEED, workers=True)
torch.set_num_threads(2)


class CancerDataModule(L.LightningDataModule):
    def __init__(self, batch_size=16):
        super().__init__()
        self.batch_size = batch_size

    def setup(self, stage=None):
        X, y = load_breast_cancer(return_X_y=True)
        X_tr, X_va, y_tr, y_va = train_test_split(
            X, y, test_size=0.25, stratify=y, random_state=SEED
        )
        scaler = StandardScaler().fit(X_tr)
        self.train_set = TensorDataset(torch.tensor(scaler.transform(X_tr), dtype=torch.float32),
                                       torch.tensor(y_tr))
        self.val_set = TensorDataset(torch.tensor(scaler.transform(X_va), dtype=torch.float32),
                                     torch.tensor(y_va))

    def train_dataloader(self):
        return DataLoader(self.train_set, batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self):
        return DataLoader(self.val_set, batch_size=256)


class ResidualBlock(nn.Module):
    def __init__(self, dim, dropout=0.1):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, dim * 2)
        self.fc2 = nn.Linear(dim * 2, dim)
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        return x + self.drop(self.fc2(F.gelu(self.fc1(self.norm(x)))))


class ResidualClassifier(L.LightningModule):
    def __init__(self, in_dim=30, dim=64, depth=2, num_classes=2, lr=1e-3):
        super().__init__()
        self.save_hyperparameters()
        self.stem = nn.Linear(in_dim, dim)
        self.blocks = nn.Sequential(*[ResidualBlock(dim) for _ in range(depth)])
        self.head = nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, num_classes))
        # start from a uniform prediction: zero the classifier projection
        self.apply(self._init_weights)

    @staticmethod
    def _init_weights(module):
        if isinstance(module, nn.Linear):
            nn.init.zeros_(module.weight)
            nn.init.zeros_(module.bias)

    def forward(self, x):
        return self.head(self.blocks(self.stem(x)))

    def training_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        loss = F.cross_entropy(logits, y)
        self.log("train_loss", loss, on_step=True, on_epoch=True)
        self.log("train_acc", (logits.argmax(-1) == y).float().mean(), on_step=False, on_epoch=True)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        self.log("val_loss", F.cross_entropy(logits, y), on_epoch=True)
        self.log("val_acc", (logits.argmax(-1) == y).float().mean(), on_epoch=True)

    def configure_optimizers(self):
        opt = torch.optim.AdamW(self.parameters(), lr=self.hparams.lr, weight_decay=1e-2)
        sched = torch.optim.lr_scheduler.OneCycleLR(
            opt, max_lr=self.hparams.lr, total_steps=self.trainer.estimated_stepping_batches
        )
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


class PrintMetrics(L.Callback):
    def on_train_epoch_end(self, trainer, pl_module):
        m = trainer.callback_metrics
        print(
            f"epoch {trainer.current_epoch + 1:02d} train_loss {m['train_loss_epoch']:.4f} "
            f"train_acc {m['train_acc']:.4f} val_loss {m['val_loss']:.4f} val_acc {m['val_acc']:.4f}",
            flush=True,
        )


dm = CancerDataModule()
model = ResidualClassifier()
trainer = L.Trainer(
    max_epochs=8,
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
