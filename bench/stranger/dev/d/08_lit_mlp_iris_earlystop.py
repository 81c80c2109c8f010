import lightning as L
import numpy as np
import torch
import torch.nn.functional as F
from lightning.pytorch.callbacks import EarlyStopping
from sklearn.datasets import load_iris
from sklearn.model_selection import train_test_split
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.set_num_threads(1)
L.seed_everything(123, workers=True)


class IrisDataModule(L.LightningDataModule):
    def __init__(self, batch_size=8):
        super().__init__()
        self.batch_size = batch_size

    def setup(self, stage=None):
        X, y = load_iris(return_X_y=True)
        Xtr, Xva, ytr, yva = train_test_split(X, y, test_size=0.3, random_state=123, stratify=y)
        mu, sd = Xtr.mean(0), Xtr.std(0)
        self.train_ds = TensorDataset(torch.tensor((Xtr - mu) / sd, dtype=torch.float32), torch.tensor(ytr))
        self.val_ds = TensorDataset(torch.tensor((Xva - mu) / sd, dtype=torch.float32), torch.tensor(yva))

    def train_dataloader(self):
        return DataLoader(self.train_ds, batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self):
        return DataLoader(self.val_ds, batch_size=64)


class IrisClassifier(L.LightningModule):
    def __init__(self, lr=0.01):
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(nn.Linear(4, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 3))

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss, on_epoch=True, on_step=False, prog_bar=True)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        self.log("val_loss", F.cross_entropy(logits, y), prog_bar=True)
        self.log("val_acc", (logits.argmax(1) == y).float().mean(), prog_bar=True)

    def on_validation_epoch_end(self):
        m = self.trainer.callback_metrics
        if "train_loss" in m:
            print(f"epoch {self.current_epoch}: train_loss={m['train_loss']:.4f} val_loss={m['val_loss']:.4f} val_acc={m['val_acc']:.3f}")

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.hparams.lr)


if __name__ == "__main__":
    dm = IrisDataModule()
    model = IrisClassifier()
    trainer = L.Trainer(max_epochs=100, accelerator="cpu", logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, deterministic=True,
                        callbacks=[EarlyStopping(monitor="val_loss", patience=5, mode="min")])
    trainer.fit(model, datamodule=dm)
    res = trainer.validate(model, datamodule=dm, verbose=False)[0]
    print(f"stopped after epoch {trainer.current_epoch}; final val_loss={res['val_loss']:.4f} val_acc={res['val_acc']:.3f}")
