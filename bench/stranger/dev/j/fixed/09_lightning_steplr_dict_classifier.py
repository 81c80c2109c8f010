"""Six-class classifier on synthetic tabular data in Lightning: a DataModule
that builds and standardises the data in setup(), SGD with momentum, and a
StepLR schedule (halve the learning rate every 5 epochs) handed to Lightning
through the configure_optimizers dict."""
import tempfile
import warnings

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import lightning as L
from torch.utils.data import DataLoader, TensorDataset
from sklearn.datasets import make_classification
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

warnings.filterwarnings("ignore", ".*does not have many workers.*")
SEED = 31
L.seed_everything(SEED, workers=True)
torch.set_num_threads(2)


class SyntheticTabularDM(L.LightningDataModule):
    def __init__(self, n_samples=3000, batch_size=64):
        super().__init__()
        self.n_samples = n_samples
        self.batch_size = batch_size

    def setup(self, stage=None):
        X, y = make_classification(
            n_samples=self.n_samples, n_features=24, n_informative=14, n_redundant=4,
            n_classes=6, n_clusters_per_class=2, class_sep=1.1, random_state=SEED,
        )
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
        return DataLoader(self.val_set, batch_size=512)


class TabularClassifier(L.LightningModule):
    def __init__(self, in_dim=24, num_classes=6, hidden=128, lr=0.02):
        super().__init__()
        self.save_hyperparameters()
        self.body = nn.Sequential(
            nn.Linear(in_dim, hidden), nn.ReLU(),
            nn.Linear(hidden, hidden), nn.ReLU(),
        )
        self.head = nn.Linear(hidden, num_classes)

    def forward(self, x):
        return self.head(self.body(x))

    def _shared_step(self, batch):
        x, y = batch
        logits = self(x)
        return F.cross_entropy(logits, y), (logits.argmax(-1) == y).float().mean()

    def training_step(self, batch, batch_idx):
        loss, acc = self._shared_step(batch)
        self.log("train_loss", loss, on_step=True, on_epoch=True)
        self.log("train_acc", acc, on_step=False, on_epoch=True)
        return loss

    def validation_step(self, batch, batch_idx):
        loss, acc = self._shared_step(batch)
        self.log("val_loss", loss, on_epoch=True)
        self.log("val_acc", acc, on_epoch=True)

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=0.9)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=5, gamma=0.5)
        return {
            "optimizer": optimizer,
            "lr_scheduler": {"scheduler": scheduler, "interval": "epoch", "frequency": 1},
        }


class PrintMetrics(L.Callback):
    def on_train_epoch_end(self, trainer, pl_module):
        m = trainer.callback_metrics
        lr = trainer.optimizers[0].param_groups[0]["lr"]
        print(
            f"epoch {trainer.current_epoch + 1:02d} train_loss {m['train_loss_epoch']:.4f} "
            f"train_acc {m['train_acc']:.4f} val_loss {m['val_loss']:.4f} "
            f"val_acc {m['val_acc']:.4f} lr {lr:.2e}",
            flush=True,
        )


dm = SyntheticTabularDM()
model = TabularClassifier()
trainer = L.Trainer(
    max_epochs=20,
    accelerator="cpu",
    devices=1,
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
