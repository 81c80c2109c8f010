"""Two stages: (1) pretrain an autoencoder on ALL digit images without labels (self-supervised),
(2) freeze the pretrained encoder on purpose and train only a small classifier head on the labelled split."""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import lightning as L
from torch.utils.data import DataLoader, TensorDataset
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

L.seed_everything(6, verbose=False)
torch.set_num_threads(1)

digits = load_digits()
X = (digits.data / 16.0).astype(np.float32)
y = digits.target
X_tr, X_va, y_tr, y_va = train_test_split(X, y, test_size=0.25, random_state=6, stratify=y)


class AutoEncoder(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 32), nn.ReLU())
        self.decoder = nn.Sequential(nn.Linear(32, 128), nn.ReLU(), nn.Linear(128, 64))

    def training_step(self, batch, batch_idx):
        (x,) = batch
        loss = F.mse_loss(self.decoder(self.encoder(x)), x)
        self.log("recon", loss, on_epoch=True, on_step=False)
        return loss

    def on_train_epoch_end(self):
        if self.current_epoch % 5 == 4:
            print(f"[pretrain] epoch {self.current_epoch+1} recon_mse {self.trainer.callback_metrics['recon']:.5f}")

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=2e-3)


class LinearProbe(L.LightningModule):
    def __init__(self, encoder):
        super().__init__()
        self.encoder = encoder
        self.encoder.requires_grad_(False)  # keep the pretrained features fixed
        self.head = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10))

    def forward(self, x):
        with torch.no_grad():
            z = self.encoder(x)
        return self.head(z)

    def training_step(self, batch, batch_idx):
        x, t = batch
        loss = F.cross_entropy(self(x), t)
        self.log("train_loss", loss, on_epoch=True, on_step=False)
        return loss

    def validation_step(self, batch, batch_idx):
        x, t = batch
        logits = self(x)
        self.log("val_loss", F.cross_entropy(logits, t))
        self.log("val_acc", (logits.argmax(1) == t).float().mean())

    def on_train_epoch_end(self):
        if self.current_epoch % 3 == 2:
            m = self.trainer.callback_metrics
            print(f"[probe] epoch {self.current_epoch+1} train_loss {m['train_loss']:.4f} val_loss {m['val_loss']:.4f} val_acc {m['val_acc']:.3f}")

    def configure_optimizers(self):
        return torch.optim.Adam(self.head.parameters(), lr=3e-3)


kw = dict(logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
ae = AutoEncoder()
L.Trainer(max_epochs=15, **kw).fit(ae, DataLoader(TensorDataset(torch.from_numpy(X)), batch_size=64, shuffle=True))

probe = LinearProbe(ae.encoder)
trainer = L.Trainer(max_epochs=15, num_sanity_val_steps=0, **kw)
trainer.fit(probe,
            DataLoader(TensorDataset(torch.from_numpy(X_tr), torch.from_numpy(y_tr)), batch_size=32, shuffle=True),
            DataLoader(TensorDataset(torch.from_numpy(X_va), torch.from_numpy(y_va)), batch_size=256))
print(f"final val_acc {trainer.callback_metrics['val_acc']:.3f}")
