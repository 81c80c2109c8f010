"""Two-stage Lightning script: (1) pretrain a conv autoencoder on all digit images without labels,
(2) freeze the encoder on purpose and train only a classifier head on the labelled subset (linear probe + small MLP)."""
import lightning as L
import numpy as np
import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.set_num_threads(1)
L.seed_everything(2024)

digits = load_digits()
images = torch.tensor(digits.images / 16.0, dtype=torch.float32).unsqueeze(1)
labels = torch.tensor(digits.target)
idx_tr, idx_va = train_test_split(np.arange(len(labels)), test_size=0.3, random_state=2024, stratify=digits.target)


def make_encoder():
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(),
        nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU(),  # 4x4
        nn.Flatten(), nn.Linear(32 * 16, 32),
    )


class AutoEncoder(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.encoder = make_encoder()
        self.decoder = nn.Sequential(nn.Linear(32, 128), nn.ReLU(), nn.Linear(128, 64), nn.Sigmoid())

    def training_step(self, batch, _):
        (x,) = batch
        loss = F.mse_loss(self.decoder(self.encoder(x)), x.flatten(1))
        self.log("ae_loss", loss, on_epoch=True, on_step=False)
        return loss

    def on_train_epoch_end(self):
        if self.current_epoch % 5 == 4:
            print(f"[pretrain] epoch {self.current_epoch+1} recon_mse={self.trainer.callback_metrics['ae_loss']:.4f}")

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=2e-3)


class ProbeClassifier(L.LightningModule):
    def __init__(self, encoder):
        super().__init__()
        self.encoder = encoder
        self.encoder.requires_grad_(False)  # keep pretrained features fixed
        self.head = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10))

    def forward(self, x):
        with torch.no_grad():
            z = self.encoder(x)
        return self.head(z)

    def training_step(self, batch, _):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss, on_epoch=True, on_step=False)
        return loss

    def validation_step(self, batch, _):
        x, y = batch
        logits = self(x)
        self.log("val_loss", F.cross_entropy(logits, y))
        self.log("val_acc", (logits.argmax(-1) == y).float().mean())

    def on_validation_epoch_end(self):
        m = self.trainer.callback_metrics
        if "train_loss" in m:
            print(f"[probe] epoch {self.current_epoch+1} train_loss={m['train_loss']:.4f} val_loss={m['val_loss']:.4f} val_acc={m['val_acc']:.3f}")

    def configure_optimizers(self):
        return torch.optim.Adam(self.head.parameters(), lr=3e-3)


kw = dict(accelerator="cpu", logger=False, enable_checkpointing=False, enable_progress_bar=False,
          enable_model_summary=False, num_sanity_val_steps=0)

ae = AutoEncoder()
L.Trainer(max_epochs=15, **kw).fit(ae, DataLoader(TensorDataset(images), batch_size=64, shuffle=True))

probe = ProbeClassifier(ae.encoder)
train_dl = DataLoader(TensorDataset(images[idx_tr], labels[idx_tr]), batch_size=32, shuffle=True)
val_dl = DataLoader(TensorDataset(images[idx_va], labels[idx_va]), batch_size=256)
L.Trainer(max_epochs=15, **kw).fit(probe, train_dl, val_dl)
print(f"final val_acc={float(probe.trainer.callback_metrics['val_acc']):.3f}")
