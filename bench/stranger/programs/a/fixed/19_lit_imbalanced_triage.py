"""3-class triage classifier (normal / warning / critical) on tabular features."""
import numpy as np
import torch
import torch.nn as nn
import lightning as L
from torch.utils.data import DataLoader, TensorDataset
from sklearn.datasets import make_classification
from sklearn.metrics import balanced_accuracy_score, classification_report, recall_score
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

L.seed_everything(4, verbose=False)
torch.set_num_threads(1)

X, y = make_classification(n_samples=5000, n_features=16, n_informative=6, n_redundant=2, n_classes=3,
                           n_clusters_per_class=1, weights=[0.93, 0.05, 0.02], class_sep=0.9, random_state=4)
X_tr, X_va, y_tr, y_va = train_test_split(X, y, test_size=0.3, stratify=y, random_state=4)
sc = StandardScaler().fit(X_tr)
X_tr, X_va = sc.transform(X_tr), sc.transform(X_va)
print("train class counts:", np.bincount(y_tr))


class Triage(L.LightningModule):
    def __init__(self, class_weights=None):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 3))
        self.loss_fn = nn.CrossEntropyLoss(weight=class_weights)
        self.preds = []

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = self.loss_fn(self(x), y)
        self.log("train_loss", loss, on_step=False, on_epoch=True)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        self.log("val_loss", self.loss_fn(logits, y))
        self.preds.append(logits.argmax(1))

    def on_validation_epoch_end(self):
        pred = torch.cat(self.preds).numpy()
        self.preds.clear()
        if self.trainer.sanity_checking:
            return
        acc = (pred == y_va).mean()
        bal = balanced_accuracy_score(y_va, pred)
        rec = recall_score(y_va, pred, average=None, labels=[0, 1, 2])
        print(f"epoch {self.current_epoch+1}: val_loss {self.trainer.callback_metrics['val_loss']:.4f} "
              f"acc {acc:.3f} balanced_acc {bal:.3f} recall per class {np.round(rec, 2)}")
        self.last_bal = bal

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-3)


counts = np.bincount(y_tr)
model = Triage(class_weights=torch.tensor(len(y_tr) / (3 * counts), dtype=torch.float32))
trainer = L.Trainer(max_epochs=8, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                    enable_model_summary=False, check_val_every_n_epoch=2)
trainer.fit(model,
            DataLoader(TensorDataset(torch.tensor(X_tr, dtype=torch.float32), torch.tensor(y_tr)), batch_size=64, shuffle=True),
            DataLoader(TensorDataset(torch.tensor(X_va, dtype=torch.float32), torch.tensor(y_va)), batch_size=512))
print(f"final balanced_acc {model.last_bal:.3f}")
