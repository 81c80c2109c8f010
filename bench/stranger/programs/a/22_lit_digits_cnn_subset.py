import torch
import torch.nn as nn
import torch.nn.functional as F
import lightning as L
from torch.utils.data import DataLoader, TensorDataset, Subset
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

torch.set_num_threads(1)
L.seed_everything(12, verbose=False)

QUICK_RUN_SAMPLES = 40  # subsample the training set for a fast iteration


class DigitsDM(L.LightningDataModule):
    def setup(self, stage):
        d = load_digits()
        x = torch.tensor(d.images / 16.0, dtype=torch.float32).unsqueeze(1)
        y = torch.tensor(d.target)
        xtr, xva, ytr, yva = train_test_split(x, y, test_size=0.25, random_state=12, stratify=y)
        self.train_set = TensorDataset(xtr, ytr)
        if QUICK_RUN_SAMPLES:
            self.train_set = Subset(self.train_set, range(QUICK_RUN_SAMPLES))
        self.val_set = TensorDataset(xva, yva)

    def train_dataloader(self):
        return DataLoader(self.train_set, batch_size=16, shuffle=True)

    def val_dataloader(self):
        return DataLoader(self.val_set, batch_size=256)


class Net(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.Flatten(),
            nn.Linear(64 * 16, 128), nn.ReLU(), nn.Linear(128, 10))

    def forward(self, x):
        return self.body(x)

    def training_step(self, batch, i):
        x, y = batch
        logits = self(x)
        loss = F.cross_entropy(logits, y)
        self.log("train_loss", loss, on_epoch=True, on_step=False)
        self.log("train_acc", (logits.argmax(1) == y).float().mean(), on_epoch=True, on_step=False)
        return loss

    def validation_step(self, batch, i):
        x, y = batch
        logits = self(x)
        self.log("val_loss", F.cross_entropy(logits, y))
        self.log("val_acc", (logits.argmax(1) == y).float().mean())

    def on_train_epoch_end(self):
        m = self.trainer.callback_metrics
        if (self.current_epoch + 1) % 5 == 0:
            print(f"epoch {self.current_epoch+1}: train_loss {m['train_loss']:.4f} train_acc {m['train_acc']:.3f} "
                  f"val_loss {m['val_loss']:.4f} val_acc {m['val_acc']:.3f}")

    def configure_optimizers(self):
        opt = torch.optim.Adam(self.parameters(), lr=1e-3)
        return {"optimizer": opt, "lr_scheduler": torch.optim.lr_scheduler.StepLR(opt, step_size=10, gamma=0.5)}


trainer = L.Trainer(max_epochs=20, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                    enable_model_summary=False, num_sanity_val_steps=0)
trainer.fit(Net(), datamodule=DigitsDM())
print(f"final val_acc {trainer.callback_metrics['val_acc']:.3f}")
