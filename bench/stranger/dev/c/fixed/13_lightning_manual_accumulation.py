# Lightning CNN on digits with manual optimization: accumulate 8 micro-batches of 16 before each SGD step
# (effective batch 128), step-wise cosine LR handled by hand.
import math
import lightning as L
import torch
import torch.nn as nn
import torch.nn.functional as F
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch.utils.data import DataLoader, TensorDataset

L.seed_everything(13, verbose=False)
torch.set_num_threads(1)

d = load_digits()
x = torch.tensor(d.images / 16.0, dtype=torch.float32).unsqueeze(1)
y = torch.tensor(d.target)
tr, va = train_test_split(range(len(y)), test_size=0.2, random_state=13)
train_dl = DataLoader(TensorDataset(x[tr], y[tr]), batch_size=16, shuffle=True, drop_last=True)
val_dl = DataLoader(TensorDataset(x[va], y[va]), batch_size=128)


class AccumCNN(L.LightningModule):
    def __init__(self, lr=0.5, accum=8, epochs=30):
        super().__init__()
        self.save_hyperparameters()
        self.automatic_optimization = False
        self.features = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                                      nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1))
        self.fc = nn.Linear(32, 10)

    def forward(self, x):
        return self.fc(self.features(x).flatten(1))

    def training_step(self, batch, batch_idx):
        opt = self.optimizers()
        xb, yb = batch
        loss = F.cross_entropy(self(xb), yb)
        self.manual_backward(loss / self.hparams.accum)
        if (batch_idx + 1) % self.hparams.accum == 0:
            total = self.trainer.num_training_batches * self.hparams.epochs // self.hparams.accum
            step = self.global_step
            for g in opt.param_groups:
                g["lr"] = self.hparams.lr * 0.5 * (1 + math.cos(math.pi * min(step, total) / total))
            opt.step()
            opt.zero_grad()
        self.log("train_loss", loss, on_step=False, on_epoch=True)

    def validation_step(self, batch, batch_idx):
        xb, yb = batch
        out = self(xb)
        self.log("val_loss", F.cross_entropy(out, yb))
        self.log("val_acc", (out.argmax(1) == yb).float().mean())

    def on_train_epoch_end(self):
        m = self.trainer.callback_metrics
        print(f"epoch {self.current_epoch:2d} step {self.global_step:4d} train_loss {m['train_loss']:.4f} "
              f"val_loss {m['val_loss']:.4f} val_acc {m['val_acc']:.4f}")

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=0.9)


model = AccumCNN()
trainer = L.Trainer(max_epochs=30, accelerator="cpu", logger=False, enable_checkpointing=False,
                    enable_progress_bar=False, enable_model_summary=False, deterministic=True)
trainer.fit(model, train_dl, val_dl)
print(f"final val_acc {trainer.callback_metrics['val_acc']:.4f} val_loss {trainer.callback_metrics['val_loss']:.4f}")
