import torch
import torch.nn as nn
import torch.nn.functional as F
import lightning as L
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch.utils.data import DataLoader, TensorDataset

torch.set_num_threads(1)
L.seed_everything(1, verbose=False)


class DigitsDataModule(L.LightningDataModule):
    def __init__(self, batch_size=64):
        super().__init__()
        self.batch_size = batch_size

    def setup(self, stage=None):
        X, y = load_digits(return_X_y=True)
        X = torch.tensor(X / 16.0, dtype=torch.float32).view(-1, 1, 8, 8)
        y = torch.tensor(y)
        idx_tr, idx_va = train_test_split(range(len(y)), test_size=0.2, random_state=0, stratify=y.numpy())
        self.train_set = TensorDataset(X[idx_tr], y[idx_tr])
        self.val_set = TensorDataset(X[idx_va], y[idx_va])

    def train_dataloader(self):
        return DataLoader(self.train_set, batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self):
        return DataLoader(self.val_set, batch_size=256)


class SmallCNN(L.LightningModule):
    def __init__(self, max_lr=3e-3, epochs=8):
        super().__init__()
        self.save_hyperparameters()
        self.features = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
            nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        )
        self.head = nn.Sequential(nn.Flatten(), nn.Dropout(0.2), nn.Linear(32 * 16, 10))
        self._train_losses = []
        self._val = [0, 0]

    def forward(self, x):
        return self.head(self.features(x))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self._train_losses.append(loss.item())
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self._val[0] += (self(x).argmax(1) == y).sum().item()
        self._val[1] += len(y)

    def on_validation_epoch_end(self):
        self.val_acc = self._val[0] / max(self._val[1], 1)
        self._val = [0, 0]

    def on_train_epoch_end(self):
        lr = self.lr_schedulers().get_last_lr()[0]
        print(f"epoch {self.current_epoch}  train_loss {sum(self._train_losses) / len(self._train_losses):.4f}  "
              f"val_acc {self.val_acc:.4f}  lr {lr:.2e}")
        self._train_losses = []

    def configure_optimizers(self):
        opt = torch.optim.AdamW(self.parameters(), lr=self.hparams.max_lr, weight_decay=1e-4)
        sched = torch.optim.lr_scheduler.OneCycleLR(
            opt, max_lr=self.hparams.max_lr, total_steps=self.trainer.estimated_stepping_batches)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


dm = DigitsDataModule()
model = SmallCNN()
trainer = L.Trainer(max_epochs=8, accelerator="cpu", logger=False, enable_checkpointing=False,
                    enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0)
trainer.fit(model, datamodule=dm)
print(f"final val_acc {model.val_acc:.4f}")
