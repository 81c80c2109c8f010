"""Lightning MLP on digits, SGD with momentum and a StepLR that should halve the LR every 5 epochs."""
import lightning as L
import torch
import torch.nn as nn
import torch.nn.functional as F
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch.utils.data import DataLoader, TensorDataset

L.seed_everything(11, verbose=False)
torch.set_num_threads(1)


class DigitsData(L.LightningDataModule):
    def __init__(self, batch_size=32):
        super().__init__()
        self.batch_size = batch_size

    def setup(self, stage=None):
        X, y = load_digits(return_X_y=True)
        X = X / 16.0
        Xtr, Xva, ytr, yva = train_test_split(X, y, test_size=0.2, random_state=11)
        self.train = TensorDataset(torch.tensor(Xtr, dtype=torch.float32), torch.tensor(ytr))
        self.val = TensorDataset(torch.tensor(Xva, dtype=torch.float32), torch.tensor(yva))

    def train_dataloader(self):
        return DataLoader(self.train, batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self):
        return DataLoader(self.val, batch_size=256)


class Classifier(L.LightningModule):
    def __init__(self, lr=0.05):
        super().__init__()
        self.save_hyperparameters()
        self.model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 10))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self.model(x), y)
        self.log("train_loss", loss, on_step=False, on_epoch=True)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self.model(x)
        self.log("val_loss", F.cross_entropy(logits, y))
        self.log("val_acc", (logits.argmax(-1) == y).float().mean())

    def on_train_epoch_end(self):
        m = self.trainer.callback_metrics
        print(f"epoch {self.current_epoch:2d} lr={self.lr_schedulers().get_last_lr()[0]:.2e} "
              f"train_loss={m['train_loss']:.4f} val_loss={m['val_loss']:.4f} val_acc={m['val_acc']:.4f}")

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=0.9)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=5, gamma=0.5)
        return {"optimizer": optimizer,
                "lr_scheduler": {"scheduler": scheduler, "interval": "epoch", "frequency": 1}}


trainer = L.Trainer(max_epochs=20, accelerator="cpu", logger=False, enable_checkpointing=False,
                    enable_progress_bar=False, enable_model_summary=False, deterministic=True)
trainer.fit(Classifier(), datamodule=DigitsData())
print(f"final val_acc={trainer.callback_metrics['val_acc']:.4f} val_loss={trainer.callback_metrics['val_loss']:.4f}")
