"""LightningModule MLP on the wine data with EarlyStopping on val_loss."""
import lightning as L
import numpy as np
import torch
import torch.nn.functional as F
from lightning.pytorch.callbacks import EarlyStopping
from sklearn.datasets import load_wine
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler
from torch.utils.data import DataLoader, TensorDataset

L.seed_everything(8, verbose=False)
torch.set_num_threads(1)


class WineMLP(L.LightningModule):
    def __init__(self, lr=2e-3):
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(13, 64), torch.nn.ReLU(), torch.nn.Dropout(0.2),
            torch.nn.Linear(64, 3))

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss, on_epoch=True, on_step=False)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        self.log("val_loss", F.cross_entropy(logits, y), prog_bar=True)
        self.log("val_acc", (logits.argmax(1) == y).float().mean(), prog_bar=True)

    def on_validation_epoch_end(self):
        m = self.trainer.callback_metrics
        if "train_loss" in m:
            print(f"epoch {self.current_epoch:3d} train_loss {m['train_loss']:.4f} "
                  f"val_loss {m['val_loss']:.4f} val_acc {m['val_acc']:.4f}")

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.hparams.lr, weight_decay=1e-4)


X, y = load_wine(return_X_y=True)
Xtr, Xva, ytr, yva = train_test_split(X, y, test_size=0.3, random_state=8, stratify=y)
sc = StandardScaler().fit(Xtr)
mk = lambda a, b: TensorDataset(torch.tensor(sc.transform(a), dtype=torch.float32), torch.tensor(b))
train_dl = DataLoader(mk(Xtr, ytr), batch_size=8, shuffle=True)
val_dl = DataLoader(mk(Xva, yva), batch_size=64)

model = WineMLP()
trainer = L.Trainer(max_epochs=100, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                    enable_progress_bar=False, enable_model_summary=False, deterministic=True,
                    callbacks=[EarlyStopping(monitor="val_loss", patience=8, mode="min")])
trainer.fit(model, train_dl, val_dl)
res = trainer.validate(model, val_dl, verbose=False)[0]
print(f"stopped after {trainer.current_epoch} epochs; final val_loss {res['val_loss']:.4f} val_acc {res['val_acc']:.4f}")
