import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import lightning as L
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler
from torch.utils.data import DataLoader, TensorDataset

torch.set_num_threads(1)
L.seed_everything(0, verbose=False)

MICRO_BATCH = 16
ACCUM_STEPS = 8          # effective batch of 128
LR = 0.3
EPOCHS = 12

X, y = load_digits(return_X_y=True)
X_tr, X_va, y_tr, y_va = train_test_split(X, y, test_size=0.25, random_state=0, stratify=y)
scaler = StandardScaler().fit(X_tr)
X_tr, X_va = scaler.transform(X_tr), scaler.transform(X_va)

train_dl = DataLoader(TensorDataset(torch.tensor(X_tr, dtype=torch.float32), torch.tensor(y_tr)),
                      batch_size=MICRO_BATCH, shuffle=True)
val_x = torch.tensor(X_va, dtype=torch.float32)
val_y = torch.tensor(y_va)


class DigitsMLP(L.LightningModule):
    def __init__(self, lr=LR, accum_steps=ACCUM_STEPS):
        super().__init__()
        self.save_hyperparameters()
        self.automatic_optimization = False
        self.net = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 64), nn.ReLU(), nn.Linear(64, 10))
        self._losses = []

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        opt = self.optimizers()
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.manual_backward(loss)
        if (batch_idx + 1) % self.hparams.accum_steps == 0:
            opt.step()
            opt.zero_grad()
        self._losses.append(loss.item())
        return loss

    def on_train_epoch_end(self):
        print(f"epoch {self.current_epoch:2d}  train_loss {np.mean(self._losses):.4f}")
        self._losses = []

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=0.9)


model = DigitsMLP()
trainer = L.Trainer(max_epochs=EPOCHS, accelerator="cpu", logger=False, enable_checkpointing=False,
                    enable_progress_bar=False, enable_model_summary=False)
trainer.fit(model, train_dl)

model.eval()
with torch.no_grad():
    logits = model(val_x)
    val_loss = F.cross_entropy(logits, val_y).item()
    val_acc = (logits.argmax(1) == val_y).float().mean().item()
print(f"final val_loss {val_loss:.4f}  val_acc {val_acc:.4f}")
