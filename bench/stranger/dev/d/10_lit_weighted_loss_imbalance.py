# Imbalanced 3-class tabular problem; class-weighted cross entropy, OneCycleLR stepped per batch
# over trainer.estimated_stepping_batches, per-class recall reported on validation.
import lightning as L
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from sklearn.datasets import make_classification
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler
from torch.utils.data import DataLoader, TensorDataset

torch.set_num_threads(1)
L.seed_everything(77)

X, y = make_classification(n_samples=4000, n_features=20, n_informative=8, n_redundant=4, n_classes=3,
                           weights=[0.85, 0.12, 0.03], class_sep=1.2, flip_y=0.01, random_state=77)
Xtr, Xva, ytr, yva = train_test_split(X, y, test_size=0.25, stratify=y, random_state=77)
sc = StandardScaler().fit(Xtr)
Xtr, Xva = sc.transform(Xtr).astype("float32"), sc.transform(Xva).astype("float32")
counts = np.bincount(ytr, minlength=3)
class_weights = torch.tensor(len(ytr) / (3 * counts), dtype=torch.float32)
print("train class counts:", counts.tolist(), "weights:", [round(w, 2) for w in class_weights.tolist()])


class TabularNet(L.LightningModule):
    def __init__(self, class_weights, max_lr=5e-3):
        super().__init__()
        self.save_hyperparameters(ignore=["class_weights"])
        self.register_buffer("class_weights", class_weights)
        self.model = nn.Sequential(
            nn.Linear(20, 64), nn.BatchNorm1d(64), nn.ReLU(), nn.Dropout(0.1),
            nn.Linear(64, 64), nn.BatchNorm1d(64), nn.ReLU(),
            nn.Linear(64, 3))
        self.val_preds, self.val_targets = [], []

    def forward(self, x):
        return self.model(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y, weight=self.class_weights)
        self.log("train_loss", loss, on_step=False, on_epoch=True)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        self.log("val_loss", F.cross_entropy(logits, y, weight=self.class_weights))
        self.val_preds.append(logits.argmax(1))
        self.val_targets.append(y)

    def on_validation_epoch_end(self):
        p, t = torch.cat(self.val_preds), torch.cat(self.val_targets)
        self.val_preds.clear(); self.val_targets.clear()
        recalls = [((p == c) & (t == c)).sum().item() / max(1, (t == c).sum().item()) for c in range(3)]
        self.log("val_bal_acc", float(np.mean(recalls)))
        if self.trainer.sanity_checking:
            return
        m = self.trainer.callback_metrics
        print(f"epoch {self.current_epoch+1:2d} train_loss(prev) {float(m.get('train_loss', float('nan'))):.4f} val_loss {m['val_loss']:.4f} "
              f"acc {(p == t).float().mean().item():.3f} recall/class {[round(r, 3) for r in recalls]} bal_acc {np.mean(recalls):.3f}")

    def configure_optimizers(self):
        opt = torch.optim.AdamW(self.parameters(), lr=self.hparams.max_lr, weight_decay=1e-2)
        sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=self.hparams.max_lr,
                                                    total_steps=self.trainer.estimated_stepping_batches)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


train_dl = DataLoader(TensorDataset(torch.from_numpy(Xtr), torch.from_numpy(ytr)), batch_size=64, shuffle=True)
val_dl = DataLoader(TensorDataset(torch.from_numpy(Xva), torch.from_numpy(yva)), batch_size=512)
trainer = L.Trainer(max_epochs=12, accelerator="cpu", logger=False, enable_checkpointing=False,
                    enable_progress_bar=False, enable_model_summary=False)
trainer.fit(TabularNet(class_weights), train_dl, val_dl)
print(f"final val_bal_acc {float(trainer.callback_metrics['val_bal_acc']):.3f}")
