"""Lightning residual MLP with BatchNorm on a synthetic 6-class tabular problem
(scikit-learn make_classification, standardised), SGD + momentum with a StepLR schedule
meant to halve the learning rate every 10 epochs; validation each epoch, then
trainer.test() on a held-out split."""
import warnings

import lightning as L
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from sklearn.datasets import make_classification
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler
from torch.utils.data import DataLoader, TensorDataset

warnings.filterwarnings("ignore")
L.seed_everything(17, workers=True)

X, y = make_classification(n_samples=4000, n_features=40, n_informative=24, n_redundant=8,
                           n_classes=6, n_clusters_per_class=2, class_sep=1.2, flip_y=0.02,
                           random_state=17)
X_tr, X_te, y_tr, y_te = train_test_split(X, y, test_size=0.2, random_state=17, stratify=y)
X_tr, X_va, y_tr, y_va = train_test_split(X_tr, y_tr, test_size=0.2, random_state=17, stratify=y_tr)
sc = StandardScaler().fit(X_tr)
X_tr, X_va, X_te = (sc.transform(a).astype(np.float32) for a in (X_tr, X_va, X_te))


class ResBlock(nn.Module):
    def __init__(self, d, p):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(d, d), nn.BatchNorm1d(d), nn.ReLU(), nn.Dropout(p),
                                  nn.Linear(d, d), nn.BatchNorm1d(d))

    def forward(self, x):
        return F.relu(x + self.body(x))


class ResMLP(L.LightningModule):
    def __init__(self, d=128, blocks=3, lr=0.01):
        super().__init__()
        self.save_hyperparameters()
        self.inp = nn.Linear(40, d)
        self.blocks = nn.Sequential(*[ResBlock(d, 0.2) for _ in range(blocks)])
        self.out = nn.Linear(d, 6)

    def forward(self, x):
        return self.out(self.blocks(F.relu(self.inp(x))))

    def _step(self, batch, stage):
        x, y = batch
        logits = self(x)
        loss = F.cross_entropy(logits, y)
        self.log(f"{stage}_loss", loss, on_step=False, on_epoch=True)
        self.log(f"{stage}_acc", (logits.argmax(1) == y).float().mean(), on_step=False, on_epoch=True)
        return loss

    def training_step(self, batch, batch_idx):
        return self._step(batch, "train")

    def validation_step(self, batch, batch_idx):
        self._step(batch, "val")

    def test_step(self, batch, batch_idx):
        self._step(batch, "test")

    def on_train_epoch_end(self):
        m = self.trainer.callback_metrics
        lr = self.trainer.optimizers[0].param_groups[0]["lr"]
        print(f"epoch {self.current_epoch} lr {lr:.2e} train_loss {m['train_loss']:.4f} "
              f"val_loss {m['val_loss']:.4f} val_acc {m['val_acc']:.4f}")

    def configure_optimizers(self):
        opt = torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=0.9, weight_decay=1e-4)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=10, gamma=0.5)
        return {"optimizer": opt,
                "lr_scheduler": {"scheduler": sched, "interval": "step", "frequency": 1}}


model = ResMLP()
trainer = L.Trainer(max_epochs=30, accelerator="cpu", devices=1, logger=False,
                    enable_checkpointing=False, enable_progress_bar=False,
                    enable_model_summary=False, deterministic=True)
train_dl = DataLoader(TensorDataset(torch.tensor(X_tr), torch.tensor(y_tr)), batch_size=64, shuffle=True)
val_dl = DataLoader(TensorDataset(torch.tensor(X_va), torch.tensor(y_va)), batch_size=256)
trainer.fit(model, train_dl, val_dl)
val = trainer.validate(model, val_dl, verbose=False)[0]
test = trainer.test(model, DataLoader(TensorDataset(torch.tensor(X_te), torch.tensor(y_te)),
                                      batch_size=256), verbose=False)[0]
print(f"final val_loss {val['val_loss']:.4f} val_acc {val['val_acc']:.4f} "
      f"test_loss {test['test_loss']:.4f} test_acc {test['test_acc']:.4f}")
