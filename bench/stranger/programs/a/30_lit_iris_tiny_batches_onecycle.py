"""Iris with very small (noisy) batches of 8, BatchNorm, AdamW and a per-step OneCycle schedule."""
import torch
import torch.nn as nn
import torch.nn.functional as F
import lightning as L
from torch.utils.data import DataLoader, TensorDataset
from sklearn.datasets import load_iris
from sklearn.model_selection import StratifiedShuffleSplit
from sklearn.preprocessing import StandardScaler

L.seed_everything(14, verbose=False)
torch.set_num_threads(1)

X, y = load_iris(return_X_y=True)
tr_idx, va_idx = next(StratifiedShuffleSplit(n_splits=1, test_size=0.3, random_state=14).split(X, y))
sc = StandardScaler().fit(X[tr_idx])
train_ds = TensorDataset(torch.tensor(sc.transform(X[tr_idx]), dtype=torch.float32), torch.tensor(y[tr_idx]))
val_ds = TensorDataset(torch.tensor(sc.transform(X[va_idx]), dtype=torch.float32), torch.tensor(y[va_idx]))


class IrisNet(L.LightningModule):
    def __init__(self, max_lr=1e-2):
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(nn.Linear(4, 32), nn.BatchNorm1d(32), nn.ReLU(),
                                 nn.Linear(32, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Linear(32, 3))

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, t = batch
        loss = F.cross_entropy(self(x), t)
        self.log("train_loss", loss, on_step=False, on_epoch=True)
        return loss

    def validation_step(self, batch, batch_idx):
        x, t = batch
        logits = self(x)
        self.log("val_loss", F.cross_entropy(logits, t))
        self.log("val_acc", (logits.argmax(-1) == t).float().mean())

    def on_validation_epoch_end(self):
        e = self.current_epoch + 1
        if not self.trainer.sanity_checking and e % 5 == 0:
            m = self.trainer.callback_metrics
            print(f"epoch {e:2d} lr {self.lr_schedulers().get_last_lr()[0]:.2e} "
                  f"train_loss {m.get('train_loss', float('nan')):.4f} val_loss {m['val_loss']:.4f} val_acc {m['val_acc']:.3f}")

    def configure_optimizers(self):
        opt = torch.optim.AdamW(self.parameters(), lr=self.hparams.max_lr, weight_decay=1e-3)
        sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=self.hparams.max_lr,
                                                    total_steps=self.trainer.estimated_stepping_batches)
        return [opt], [{"scheduler": sched, "interval": "step"}]


trainer = L.Trainer(max_epochs=30, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                    enable_model_summary=False)
# drop_last avoids a BatchNorm batch of size 1
trainer.fit(IrisNet(), DataLoader(train_ds, batch_size=8, shuffle=True, drop_last=True), DataLoader(val_ds, batch_size=64))
print(f"final val_loss {trainer.callback_metrics['val_loss']:.4f} val_acc {trainer.callback_metrics['val_acc']:.3f}")
