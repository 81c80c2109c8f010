"""Lightning: a small and a large MLP are trained one after the other on the breast
cancer data (standardised), each for a fixed budget of optimizer steps (max_steps) with
validation twice per epoch (val_check_interval=0.5), and then compared on the test split."""
import warnings

import lightning as L
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from sklearn.datasets import load_breast_cancer
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler
from torch.utils.data import DataLoader, TensorDataset

warnings.filterwarnings("ignore")

X, y = load_breast_cancer(return_X_y=True)
X_tr, X_te, y_tr, y_te = train_test_split(X, y, test_size=0.25, random_state=3, stratify=y)
X_tr, X_va, y_tr, y_va = train_test_split(X_tr, y_tr, test_size=0.2, random_state=3, stratify=y_tr)
scaler = StandardScaler().fit(X_tr)
X_tr, X_va, X_te = (scaler.transform(a).astype(np.float32) for a in (X_tr, X_va, X_te))


def dl(x, y, shuffle):
    return DataLoader(TensorDataset(torch.tensor(x), torch.tensor(y, dtype=torch.float32)),
                      batch_size=16, shuffle=shuffle)


class BinaryMLP(L.LightningModule):
    def __init__(self, widths, dropout, lr, name):
        super().__init__()
        self.save_hyperparameters()
        layers, d = [], 30
        for w in widths:
            layers += [nn.Linear(d, w), nn.ReLU(), nn.Dropout(dropout)]
            d = w
        layers.append(nn.Linear(d, 1))
        self.net = nn.Sequential(*layers)
        self.val_history = []

    def forward(self, x):
        return self.net(x).squeeze(-1)

    def _shared(self, batch, stage):
        x, y = batch
        logit = self(x)
        loss = F.binary_cross_entropy_with_logits(logit, y)
        acc = ((logit > 0).float() == y).float().mean()
        self.log(f"{stage}_loss", loss, on_step=False, on_epoch=True)
        self.log(f"{stage}_acc", acc, on_step=False, on_epoch=True)
        return loss

    def training_step(self, batch, batch_idx):
        return self._shared(batch, "train")

    def validation_step(self, batch, batch_idx):
        self._shared(batch, "val")

    def test_step(self, batch, batch_idx):
        self._shared(batch, "test")

    def on_validation_epoch_end(self):
        if self.trainer.sanity_checking:
            return
        m = self.trainer.callback_metrics
        self.val_history.append(float(m["val_loss"]))
        print(f"[{self.hparams.name}] step {self.global_step} val_loss {m['val_loss']:.4f} "
              f"val_acc {m['val_acc']:.4f}")

    def configure_optimizers(self):
        opt = torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=0.9,
                              nesterov=True, weight_decay=1e-4)
        sched = torch.optim.lr_scheduler.ExponentialLR(opt, gamma=0.9)
        return [opt], [sched]


summary = {}
for name, widths, dropout in [("small", [8], 0.0), ("large", [128, 128, 64], 0.4)]:
    L.seed_everything(3, workers=True)
    model = BinaryMLP(widths, dropout, lr=0.01, name=name)
    trainer = L.Trainer(max_steps=500, val_check_interval=0.5, accelerator="cpu", devices=1,
                        logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, deterministic=True)
    trainer.fit(model, dl(X_tr, y_tr, True), dl(X_va, y_va, False))
    test = trainer.test(model, dl(X_te, y_te, False), verbose=False)[0]
    n_params = sum(p.numel() for p in model.parameters())
    summary[name] = (n_params, min(model.val_history), test["test_loss"], test["test_acc"])
    print(f"[{name}] params {n_params} epochs {trainer.current_epoch} "
          f"test_loss {test['test_loss']:.4f} test_acc {test['test_acc']:.4f}")

for name, (n, best_val, tl, ta) in summary.items():
    print(f"final {name}: params {n} best_val_loss {best_val:.4f} test_loss {tl:.4f} test_acc {ta:.4f}")
