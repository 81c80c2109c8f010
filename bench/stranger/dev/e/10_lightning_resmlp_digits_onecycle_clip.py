"""Residual MLP on digits in Lightning: AdamW, OneCycleLR stepped every batch, gradient-norm clipping."""
import warnings
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import lightning as L
from torch.utils.data import DataLoader, TensorDataset
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

warnings.filterwarnings("ignore", ".*does not have many workers.*")
L.seed_everything(10, verbose=False)
torch.set_num_threads(1)

digits = load_digits()
X = (digits.data / 16.0).astype("float32")
X_train, X_val, y_train, y_val = train_test_split(X, digits.target, test_size=0.2, random_state=10, stratify=digits.target)
train_ds = TensorDataset(torch.from_numpy(X_train), torch.from_numpy(y_train).long())
val_ds = TensorDataset(torch.from_numpy(X_val), torch.from_numpy(y_val).long())
train_loader = DataLoader(train_ds, batch_size=32, shuffle=True)
val_loader = DataLoader(val_ds, batch_size=256)

EPOCHS = 15


class ResBlock(nn.Module):
    def __init__(self, dim, p):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, dim * 2)
        self.fc2 = nn.Linear(dim * 2, dim)
        self.drop = nn.Dropout(p)

    def forward(self, x):
        return x + self.drop(self.fc2(F.gelu(self.fc1(self.norm(x)))))


class ResMLP(L.LightningModule):
    def __init__(self, dim=96, blocks=3, lr=3e-3):
        super().__init__()
        self.save_hyperparameters()
        self.inp = nn.Linear(64, dim)
        self.blocks = nn.Sequential(*[ResBlock(dim, 0.1) for _ in range(blocks)])
        self.out = nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, 10))

    def forward(self, x):
        return self.out(self.blocks(self.inp(x)))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss, on_step=False, on_epoch=True)
        self.log("lr", self.trainer.optimizers[0].param_groups[0]["lr"], on_step=False, on_epoch=True)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        self.log("val_loss", F.cross_entropy(logits, y), on_epoch=True)
        self.log("val_acc", (logits.argmax(1) == y).float().mean(), on_epoch=True)

    def on_train_epoch_end(self):
        m = self.trainer.callback_metrics
        print(f"epoch {self.current_epoch:2d} train_loss {m['train_loss']:.4f} "
              f"val_loss {m['val_loss']:.4f} val_acc {m['val_acc']:.4f} lr {m['lr']:.2e}")

    def configure_optimizers(self):
        opt = torch.optim.AdamW(self.parameters(), lr=self.hparams.lr, weight_decay=0.05)
        sched = torch.optim.lr_scheduler.OneCycleLR(
            opt, max_lr=self.hparams.lr, total_steps=self.trainer.estimated_stepping_batches, pct_start=0.25)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


model = ResMLP()
trainer = L.Trainer(max_epochs=EPOCHS, accelerator="cpu", devices=1, deterministic=True,
                    gradient_clip_val=1.0, gradient_clip_algorithm="norm",
                    logger=False, enable_checkpointing=False, enable_progress_bar=False,
                    enable_model_summary=False, num_sanity_val_steps=0)
trainer.fit(model, train_loader, val_loader)
res = trainer.validate(model, val_loader, verbose=False)[0]
print(f"final val_loss {res['val_loss']:.4f} val_acc {res['val_acc']:.4f}")
