"""Tabular 3-class problem in Lightning: a DataModule that shuffles, standardises and splits the data."""
import lightning as L
import numpy as np
import torch
from torch import nn
from sklearn.datasets import make_classification
from torch.utils.data import DataLoader, TensorDataset

L.seed_everything(12, verbose=False)
torch.set_num_threads(1)


class TabularDM(L.LightningDataModule):
    def __init__(self, n=3000, batch_size=64, seed=12):
        super().__init__()
        self.n, self.batch_size, self.seed = n, batch_size, seed

    def setup(self, stage=None):
        X, y = make_classification(n_samples=self.n, n_features=20, n_informative=8, n_redundant=4,
                                   n_classes=3, n_clusters_per_class=2, class_sep=1.5, random_state=self.seed)
        rng = np.random.default_rng(self.seed)
        perm = rng.permutation(len(X))
        X, y = X[perm], y[perm]
        n_val = int(0.2 * len(X))
        Xtr, ytr, Xva, yva = X[n_val:], y[n_val:], X[:n_val], y[:n_val]
        mu, sd = Xtr.mean(0), Xtr.std(0)
        self.train_ds = TensorDataset(torch.tensor((Xtr - mu) / sd, dtype=torch.float32), torch.tensor(ytr))
        self.val_ds = TensorDataset(torch.tensor((Xva - mu) / sd, dtype=torch.float32), torch.tensor(yva))

    def train_dataloader(self):
        return DataLoader(self.train_ds, batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self):
        return DataLoader(self.val_ds, batch_size=600)


class Net(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(20, 128), nn.BatchNorm1d(128), nn.ReLU(),
                                  nn.Linear(128, 64), nn.BatchNorm1d(64), nn.ReLU(), nn.Linear(64, 3))
        self.crit = nn.CrossEntropyLoss()

    def training_step(self, batch, i):
        x, y = batch
        loss = self.crit(self.body(x), y)
        self.log("train_loss", loss, on_epoch=True, on_step=False)
        return loss

    def validation_step(self, batch, i):
        x, y = batch
        out = self.body(x)
        self.log_dict({"val_loss": self.crit(out, y), "val_acc": (out.argmax(1) == y).float().mean()})

    def on_train_epoch_end(self):
        m = self.trainer.callback_metrics
        print(f"epoch {self.current_epoch:2d} | train_loss {m['train_loss']:.4f} | "
              f"val_loss {m['val_loss']:.4f} | val_acc {m['val_acc']:.4f}")

    def configure_optimizers(self):
        opt = torch.optim.AdamW(self.parameters(), lr=2e-3, weight_decay=1e-3)
        return [opt], [torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=self.trainer.max_epochs)]


trainer = L.Trainer(max_epochs=20, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                    enable_model_summary=False, accelerator="cpu", deterministic=True)
trainer.fit(Net(), datamodule=TabularDM())
print(f"final: val_acc {trainer.callback_metrics['val_acc']:.4f} val_loss {trainer.callback_metrics['val_loss']:.4f}")
