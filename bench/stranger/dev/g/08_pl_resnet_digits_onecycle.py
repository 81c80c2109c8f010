"""Small residual CNN on the 8x8 scikit-learn digits, Lightning style.

LightningDataModule (standardised images, stratified split), residual
blocks with BatchNorm, SGD + Nesterov with a OneCycleLR stepped every
optimisation step (interval "step"), accuracy computed by hand.
"""
import lightning as L
import numpy as np
import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class DigitsDataModule(L.LightningDataModule):
    def __init__(self, batch_size=64):
        super().__init__()
        self.batch_size = batch_size

    def setup(self, stage=None):
        X, y = load_digits(return_X_y=True)
        X = X.astype(np.float32) / 16.0
        X_tr, X_va, y_tr, y_va = train_test_split(X, y, test_size=0.25, stratify=y, random_state=0)
        mean, std = X_tr.mean(), X_tr.std()
        to_t = lambda a: torch.from_numpy((a - mean) / std).view(-1, 1, 8, 8)
        self.train_set = TensorDataset(to_t(X_tr), torch.from_numpy(y_tr))
        self.val_set = TensorDataset(to_t(X_va), torch.from_numpy(y_va))

    def train_dataloader(self):
        return DataLoader(self.train_set, batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self):
        return DataLoader(self.val_set, batch_size=256)


class ResBlock(nn.Module):
    def __init__(self, ch):
        super().__init__()
        self.c1 = nn.Conv2d(ch, ch, 3, padding=1, bias=False)
        self.b1 = nn.BatchNorm2d(ch)
        self.c2 = nn.Conv2d(ch, ch, 3, padding=1, bias=False)
        self.b2 = nn.BatchNorm2d(ch)

    def forward(self, x):
        h = F.relu(self.b1(self.c1(x)))
        return F.relu(x + self.b2(self.c2(h)))


class ResNetDigits(L.LightningModule):
    def __init__(self, max_lr=0.2, epochs=12):
        super().__init__()
        self.save_hyperparameters()
        self.stem = nn.Sequential(nn.Conv2d(1, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU())
        self.blocks = nn.Sequential(ResBlock(32), nn.MaxPool2d(2), ResBlock(32))
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dropout(0.2), nn.Linear(32, 10))
        self.val_correct = 0
        self.val_total = 0

    def forward(self, x):
        return self.head(self.blocks(self.stem(x)))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y, label_smoothing=0.05)
        self.log("train_loss", loss, on_step=False, on_epoch=True)
        return loss

    def on_validation_epoch_start(self):
        self.val_correct, self.val_total = 0, 0

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        self.log("val_loss", F.cross_entropy(logits, y), on_epoch=True)
        self.val_correct += (logits.argmax(1) == y).sum().item()
        self.val_total += y.numel()

    def on_validation_epoch_end(self):
        self.log("val_acc", self.val_correct / max(self.val_total, 1))

    def configure_optimizers(self):
        opt = torch.optim.SGD(self.parameters(), lr=self.hparams.max_lr, momentum=0.9,
                              nesterov=True, weight_decay=5e-4)
        steps = self.trainer.estimated_stepping_batches
        sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=self.hparams.max_lr, total_steps=steps,
                                                    pct_start=0.25)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


class PrintEpoch(L.Callback):
    def on_train_epoch_end(self, trainer, pl_module):
        m = trainer.callback_metrics
        lr = trainer.optimizers[0].param_groups[0]["lr"]
        print(f"epoch {trainer.current_epoch:2d}  train_loss {m.get('train_loss', float('nan')):.4f}  "
              f"val_loss {m['val_loss']:.4f}  val_acc {m['val_acc']:.4f}  lr {lr:.4f}")


if __name__ == "__main__":
    L.seed_everything(8, workers=True)
    torch.set_num_threads(1)
    dm = DigitsDataModule(batch_size=64)
    model = ResNetDigits(max_lr=0.2, epochs=12)
    trainer = L.Trainer(max_epochs=12, accelerator="cpu", devices=1, deterministic=True,
                        logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, callbacks=[PrintEpoch()])
    trainer.fit(model, datamodule=dm)
    res = trainer.validate(model, datamodule=dm, verbose=False)[0]
    print(f"final val_loss {res['val_loss']:.4f}  val_acc {res['val_acc']:.4f}")
