"""Wine cultivar classification with a LightningDataModule and a small MLP."""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset
import lightning as L
from sklearn.datasets import load_wine
from sklearn.model_selection import train_test_split

torch.set_num_threads(1)
L.seed_everything(0, verbose=False)


class WineDataset(Dataset):
    def __init__(self, features, targets, mean, std):
        self.features = torch.as_tensor(features, dtype=torch.float32)
        self.targets = torch.as_tensor(targets, dtype=torch.long)
        self.mean = torch.as_tensor(mean, dtype=torch.float32)
        self.std = torch.as_tensor(std, dtype=torch.float32)

    def __len__(self):
        return len(self.targets)

    def __getitem__(self, idx):
        x = self.features[idx]
        x = (x - self.mean) / (self.std + 1e-6)  # standardise
        return x, self.targets[idx]


class WineDataModule(L.LightningDataModule):
    def __init__(self, batch_size=16):
        super().__init__()
        self.batch_size = batch_size

    def setup(self, stage=None):
        data = load_wine()
        x_tr, x_va, y_tr, y_va = train_test_split(
            data.data, data.target, test_size=0.3, stratify=data.target, random_state=0)
        mean, std = x_tr.mean(axis=0), x_tr.std(axis=0)
        self.train_set = WineDataset(x_tr, y_tr, mean, std)
        self.val_set = WineDataset(x_va, y_va, mean, std)

    def train_dataloader(self):
        return DataLoader(self.train_set, batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self):
        return DataLoader(self.val_set, batch_size=64)


class WineClassifier(L.LightningModule):
    def __init__(self, n_features=13, n_classes=3, lr=1e-3):
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(
            nn.Linear(n_features, 64), nn.ReLU(),
            nn.Linear(64, 32), nn.ReLU(),
            nn.Linear(32, n_classes),
        )

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss, on_step=False, on_epoch=True)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        self.log("val_loss", F.cross_entropy(logits, y), on_epoch=True)
        self.log("val_acc", (logits.argmax(-1) == y).float().mean(), on_epoch=True)

    def on_train_epoch_end(self):
        m = self.trainer.callback_metrics
        print(f"epoch {self.current_epoch:2d}  train_loss {m['train_loss']:.4f}  "
              f"val_loss {m['val_loss']:.4f}  val_acc {m['val_acc']:.4f}")

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.hparams.lr)


if __name__ == "__main__":
    dm = WineDataModule(batch_size=16)
    model = WineClassifier()
    trainer = L.Trainer(max_epochs=40, accelerator="cpu", devices=1, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False)
    trainer.fit(model, datamodule=dm)
    res = trainer.validate(model, datamodule=dm, verbose=False)[0]
    print(f"final val_acc: {res['val_acc']:.4f}")
