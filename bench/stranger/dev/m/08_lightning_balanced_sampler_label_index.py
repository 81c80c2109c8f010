"""Imbalanced 3-class problem: Lightning MLP trained on a class-balanced training set
(each item draws a class uniformly, then an example of that class)."""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset, TensorDataset
import lightning as L
from lightning.pytorch.callbacks import Callback
from sklearn.datasets import make_classification
from sklearn.metrics import balanced_accuracy_score, f1_score
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

torch.set_num_threads(1)
L.seed_everything(11, verbose=False)


class ClassBalancedDataset(Dataset):
    """Oversamples the minority classes: the class is drawn uniformly, then one of its rows."""

    def __init__(self, features, labels):
        self.features = torch.as_tensor(features, dtype=torch.float32)
        self.labels = torch.as_tensor(labels, dtype=torch.long)
        self.rows_by_class = [np.flatnonzero(labels == c) for c in np.unique(labels)]

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, idx):
        cls = np.random.randint(len(self.rows_by_class))
        row = np.random.choice(self.rows_by_class[cls])
        return self.features[idx], self.labels[row]


class LitMLP(L.LightningModule):
    def __init__(self, d_in, n_classes, lr=1e-3):
        super().__init__()
        self.save_hyperparameters()
        self.model = nn.Sequential(
            nn.Linear(d_in, 96), nn.GELU(), nn.Dropout(0.1),
            nn.Linear(96, 96), nn.GELU(),
            nn.Linear(96, n_classes),
        )
        self._val_preds, self._val_targets = [], []

    def forward(self, x):
        return self.model(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss, on_step=False, on_epoch=True)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        self.log("val_loss", F.cross_entropy(logits, y), on_epoch=True)
        self._val_preds.append(logits.argmax(-1).cpu())
        self._val_targets.append(y.cpu())

    def on_validation_epoch_end(self):
        preds = torch.cat(self._val_preds).numpy()
        targets = torch.cat(self._val_targets).numpy()
        self._val_preds.clear()
        self._val_targets.clear()
        self.log("val_bal_acc", balanced_accuracy_score(targets, preds))
        self.log("val_macro_f1", f1_score(targets, preds, average="macro"))

    def configure_optimizers(self):
        opt = torch.optim.AdamW(self.parameters(), lr=self.hparams.lr, weight_decay=1e-3)
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=self.trainer.max_epochs)
        return {"optimizer": opt, "lr_scheduler": sched}


class PrintMetrics(Callback):
    def on_train_epoch_end(self, trainer, pl_module):
        m = trainer.callback_metrics
        print(f"epoch {trainer.current_epoch:2d}: train_loss={m['train_loss']:.4f} "
              f"val_loss={m['val_loss']:.4f} val_bal_acc={m['val_bal_acc']:.4f}")


X, y = make_classification(n_samples=5000, n_features=20, n_informative=10, n_redundant=4,
                           n_classes=3, weights=[0.75, 0.18, 0.07], class_sep=1.0,
                           random_state=5)
x_tr, x_va, y_tr, y_va = train_test_split(X, y, test_size=0.25, stratify=y, random_state=5)
scaler = StandardScaler().fit(x_tr)
x_tr, x_va = scaler.transform(x_tr), scaler.transform(x_va)
print("train class counts:", np.bincount(y_tr))

train_loader = DataLoader(ClassBalancedDataset(x_tr, y_tr), batch_size=64, shuffle=True)
val_loader = DataLoader(TensorDataset(torch.tensor(x_va, dtype=torch.float32),
                                      torch.tensor(y_va)), batch_size=512)

model = LitMLP(d_in=X.shape[1], n_classes=3)
trainer = L.Trainer(max_epochs=15, accelerator="cpu", devices=1, logger=False,
                    enable_checkpointing=False, enable_progress_bar=False,
                    enable_model_summary=False, callbacks=[PrintMetrics()])
trainer.fit(model, train_loader, val_loader)
final = trainer.validate(model, val_loader, verbose=False)[0]
print(f"final val_balanced_accuracy: {final['val_bal_acc']:.4f}  "
      f"val_macro_f1: {final['val_macro_f1']:.4f}")
