"""Digits classifier = encoder (64->8 bottleneck, same shape as our autoencoder's) + small head."""
import numpy as np
import torch
from torch import nn
import torch.nn.functional as F
import lightning as L
from torch.utils.data import DataLoader, TensorDataset
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import MinMaxScaler

L.seed_everything(21, verbose=False)
torch.set_num_threads(1)


def make_encoder():
    return nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 8))


class EncoderClassifier(L.LightningModule):
    def __init__(self, n_classes=10, lr=2e-3, freeze_encoder=True):
        super().__init__()
        self.save_hyperparameters()
        self.encoder = make_encoder()
        self.head = nn.Sequential(nn.ReLU(), nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, n_classes))
        if freeze_encoder:
            self.encoder.requires_grad_(False)

    def forward(self, x):
        return self.head(self.encoder(x))

    def _shared(self, batch):
        x, y = batch
        logits = self(x)
        return F.cross_entropy(logits, y), (logits.argmax(-1) == y).float().mean()

    def training_step(self, batch, batch_idx):
        loss, acc = self._shared(batch)
        self.log("train_loss", loss, on_epoch=True, on_step=False)
        self.log("train_acc", acc, on_epoch=True, on_step=False)
        return loss

    def validation_step(self, batch, batch_idx):
        loss, acc = self._shared(batch)
        self.log("val_loss", loss)
        self.log("val_acc", acc)

    def configure_optimizers(self):
        params = [p for p in self.parameters() if p.requires_grad]
        return torch.optim.Adam(params, lr=self.hparams.lr)


class PrintMetrics(L.Callback):
    def on_train_epoch_end(self, trainer, pl_module):
        m = trainer.callback_metrics
        if trainer.current_epoch % 3 == 2 or trainer.current_epoch == trainer.max_epochs - 1:
            print(f"epoch {trainer.current_epoch+1}: train_loss={m['train_loss']:.4f} train_acc={m['train_acc']:.3f} "
                  f"val_loss={m['val_loss']:.4f} val_acc={m['val_acc']:.3f}")


X, y = load_digits(return_X_y=True)
X_tr, X_va, y_tr, y_va = train_test_split(X, y, test_size=0.25, random_state=21, stratify=y)
scaler = MinMaxScaler().fit(X_tr)
tr = TensorDataset(torch.tensor(scaler.transform(X_tr), dtype=torch.float32), torch.tensor(y_tr))
va = TensorDataset(torch.tensor(scaler.transform(X_va), dtype=torch.float32), torch.tensor(y_va))

model = EncoderClassifier()
trainer = L.Trainer(max_epochs=15, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                    enable_model_summary=False, callbacks=[PrintMetrics()], num_sanity_val_steps=0)
trainer.fit(model, DataLoader(tr, batch_size=32, shuffle=True), DataLoader(va, batch_size=128))
print(f"final val_acc {trainer.callback_metrics['val_acc']:.3f}")
