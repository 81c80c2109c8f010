"""MLP on the scikit-learn wine data with Lightning, SGD with momentum.

Standardised features, a two-hidden-layer MLP that outputs log-probabilities
(log_softmax), a hand-written negative log-likelihood, SGD(momentum=0.9),
batch size 16, StepLR every 10 epochs; validation every epoch.
"""
import lightning as L
import numpy as np
import torch
import torch.nn as nn
from sklearn.datasets import load_wine
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler
from torch.utils.data import DataLoader, TensorDataset

L.seed_everything(12, workers=True)
torch.set_num_threads(1)

X, y = load_wine(return_X_y=True)
X_tr, X_va, y_tr, y_va = train_test_split(X, y, test_size=0.3, random_state=12, stratify=y)
scaler = StandardScaler().fit(X_tr)
X_tr, X_va = scaler.transform(X_tr).astype(np.float32), scaler.transform(X_va).astype(np.float32)
train_dl = DataLoader(TensorDataset(torch.tensor(X_tr), torch.tensor(y_tr)), batch_size=16,
                      shuffle=True)
val_dl = DataLoader(TensorDataset(torch.tensor(X_va), torch.tensor(y_va)), batch_size=64)


def nll(log_probs, target):
    """Mean negative log-likelihood of the target classes."""
    picked = log_probs[torch.arange(len(target)), target]
    return -picked.mean()


class WineMLP(L.LightningModule):
    def __init__(self, lr=0.02):
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(nn.Linear(13, 64), nn.ReLU(), nn.Linear(64, 32), nn.ReLU(),
                                 nn.Linear(32, 3), nn.LogSoftmax(dim=1))

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nll(self(x), y)
        self.log("train_loss", loss, on_step=False, on_epoch=True)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        log_probs = self(x)
        self.log("val_loss", nll(log_probs, y))
        self.log("val_acc", (log_probs.argmax(1) == y).float().mean())

    def on_train_epoch_end(self):
        m = self.trainer.callback_metrics
        print(f"epoch {self.current_epoch} train_loss {m['train_loss']:.4f} "
              f"val_loss {m['val_loss']:.4f} val_acc {m['val_acc']:.4f}")

    def configure_optimizers(self):
        opt = torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=0.9)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=10, gamma=0.5)
        return [opt], [sched]


model = WineMLP()
trainer = L.Trainer(max_epochs=25, accelerator="cpu", devices=1, logger=False,
                    enable_checkpointing=False, enable_progress_bar=False,
                    enable_model_summary=False, deterministic=True)
trainer.fit(model, train_dl, val_dl)
res = trainer.validate(model, val_dl, verbose=False)[0]
print(f"final val_loss {res['val_loss']:.4f} val_acc {res['val_acc']:.4f}")
