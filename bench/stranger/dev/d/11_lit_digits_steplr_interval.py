import lightning as L
import torch
import torch.nn as nn
import torch.nn.functional as F
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch.utils.data import DataLoader, TensorDataset

torch.set_num_threads(1)
L.seed_everything(8)

X, y = load_digits(return_X_y=True)
X = X / 16.0
Xtr, Xva, ytr, yva = train_test_split(X, y, test_size=0.2, random_state=8)
to_t = lambda a, dt: torch.tensor(a, dtype=dt)
train_loader = DataLoader(TensorDataset(to_t(Xtr, torch.float32), to_t(ytr, torch.long)), batch_size=32, shuffle=True)
val_loader = DataLoader(TensorDataset(to_t(Xva, torch.float32), to_t(yva, torch.long)), batch_size=128)


class DigitMLP(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(64, 100), nn.ReLU(), nn.Linear(100, 10))

    def forward(self, x):
        return self.layers(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss, on_epoch=True, on_step=False)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        out = self(x)
        self.log("val_loss", F.cross_entropy(out, y))
        self.log("val_acc", (out.argmax(dim=1) == y).float().mean())

    def on_train_epoch_end(self):
        m = self.trainer.callback_metrics
        lr = self.trainer.optimizers[0].param_groups[0]["lr"]
        print(f"epoch {self.current_epoch+1:2d} lr {lr:.2e} train_loss {m['train_loss']:.4f} "
              f"val_loss {m['val_loss']:.4f} val_acc {m['val_acc']:.3f}")

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=8, gamma=0.1)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


model = DigitMLP()
trainer = L.Trainer(max_epochs=20, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                    enable_model_summary=False, accelerator="cpu", num_sanity_val_steps=0)
trainer.fit(model, train_loader, val_loader)
print(f"final val_loss {trainer.callback_metrics['val_loss']:.4f} val_acc {trainer.callback_metrics['val_acc']:.3f}")
