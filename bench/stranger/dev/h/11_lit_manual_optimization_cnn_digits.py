"""Lightning with manual optimisation (automatic_optimization=False): a small CNN on the
8x8 digits images, SGD with Nesterov momentum, gradient-norm clipping done by hand via
self.clip_gradients, and the epoch-level scheduler stepped manually at epoch end."""
import warnings

import lightning as L
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch.utils.data import DataLoader, TensorDataset

warnings.filterwarnings("ignore")
L.seed_everything(13, workers=True)

X, y = load_digits(return_X_y=True)
X = ((X / 16.0 - 0.5) / 0.5).astype(np.float32).reshape(-1, 1, 8, 8)
X_tr, X_va, y_tr, y_va = train_test_split(X, y, test_size=0.25, random_state=13, stratify=y)


class DigitCNN(L.LightningModule):
    def __init__(self, lr=0.05):
        super().__init__()
        self.save_hyperparameters()
        self.automatic_optimization = False
        self.features = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
            nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 32, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.classifier = nn.Linear(32, 10)

    def forward(self, x):
        return self.classifier(self.features(x))

    def training_step(self, batch, batch_idx):
        opt = self.optimizers()
        x, y = batch
        logits = self(x)
        loss = F.cross_entropy(logits, y)
        self.manual_backward(loss)
        self.clip_gradients(opt, gradient_clip_val=5.0, gradient_clip_algorithm="norm")
        opt.step()
        self.log("train_loss", loss, on_step=False, on_epoch=True)
        self.log("train_acc", (logits.argmax(1) == y).float().mean(), on_step=False, on_epoch=True)

    def on_train_epoch_end(self):
        self.lr_schedulers().step()
        m = self.trainer.callback_metrics
        print(f"epoch {self.current_epoch} train_loss {m['train_loss']:.4f} "
              f"train_acc {m['train_acc']:.4f} val_loss {m['val_loss']:.4f} val_acc {m['val_acc']:.4f}")

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        self.log("val_loss", F.cross_entropy(logits, y))
        self.log("val_acc", (logits.argmax(1) == y).float().mean())

    def configure_optimizers(self):
        opt = torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=0.9, nesterov=True,
                              weight_decay=5e-4)
        return [opt], [torch.optim.lr_scheduler.StepLR(opt, step_size=8, gamma=0.3)]


model = DigitCNN()
trainer = L.Trainer(max_epochs=20, accelerator="cpu", devices=1, logger=False,
                    enable_checkpointing=False, enable_progress_bar=False,
                    enable_model_summary=False, deterministic=True)
train_dl = DataLoader(TensorDataset(torch.tensor(X_tr), torch.tensor(y_tr)), batch_size=32, shuffle=True)
val_dl = DataLoader(TensorDataset(torch.tensor(X_va), torch.tensor(y_va)), batch_size=200)
trainer.fit(model, train_dl, val_dl)
res = trainer.validate(model, val_dl, verbose=False)[0]
print(f"final val_loss {res['val_loss']:.4f} val_acc {res['val_acc']:.4f}")
