import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import lightning as L
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch.utils.data import DataLoader, TensorDataset

torch.set_num_threads(1)
L.seed_everything(42, verbose=False)

X, y = load_digits(return_X_y=True)
X = (X / 16.0).astype(np.float32)

X_train, X_val, y_train, y_val = train_test_split(X, y, test_size=0.2, random_state=42, stratify=y)

train_dl = DataLoader(TensorDataset(torch.from_numpy(X_train), torch.from_numpy(y_train)), batch_size=64, shuffle=True)
val_dl = DataLoader(TensorDataset(torch.from_numpy(X_val), torch.from_numpy(y_val)), batch_size=256)


class Classifier(L.LightningModule):
    def __init__(self, lr=2e-3):
        super().__init__()
        self.save_hyperparameters()
        self.model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Dropout(0.1), nn.Linear(256, 10))
        self.train_losses, self.val_correct, self.val_total = [], 0, 0

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self.model(x), y)
        self.train_losses.append(loss.detach())
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.val_correct += (self.model(x).argmax(1) == y).sum().item()
        self.val_total += len(y)

    def on_validation_epoch_end(self):
        self.last_val_acc = self.val_correct / max(self.val_total, 1)
        self.val_correct, self.val_total = 0, 0

    def on_train_epoch_end(self):
        print(f"epoch {self.current_epoch:2d}  train_loss {torch.stack(self.train_losses).mean():.4f}  "
              f"val_acc {self.last_val_acc:.4f}")
        self.train_losses = []

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.hparams.lr)


clf = Classifier()
trainer = L.Trainer(max_epochs=15, accelerator="cpu", logger=False, enable_checkpointing=False,
                    enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0)
trainer.fit(clf, train_dl, val_dl)
print(f"final val_acc {clf.last_val_acc:.4f}")
