"""Two-stage Lightning script on the breast-cancer data.

Stage 1 pre-trains an autoencoder (encoder + decoder) on the training
features. Stage 2 freezes that encoder on purpose and trains only a small
classifier head on top, with EarlyStopping and ModelCheckpoint on val_loss,
then tests the best checkpoint. Accuracy is computed by hand.
"""
import tempfile

import lightning as L
import numpy as np
import torch
import torch.nn.functional as F
from lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint
from sklearn.datasets import load_breast_cancer
from sklearn.model_selection import train_test_split
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class FeatureAE(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(30, 24), nn.GELU(), nn.Linear(24, 8))
        self.decoder = nn.Sequential(nn.GELU(), nn.Linear(8, 24), nn.GELU(), nn.Linear(24, 30))

    def training_step(self, batch, batch_idx):
        x, _ = batch
        loss = F.mse_loss(self.decoder(self.encoder(x)), x)
        self.log("ae_loss", loss, on_epoch=True, on_step=False)
        return loss

    def validation_step(self, batch, batch_idx):
        x, _ = batch
        self.log("ae_val_loss", F.mse_loss(self.decoder(self.encoder(x)), x))

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=3e-3, weight_decay=1e-4)


class FrozenEncoderClassifier(L.LightningModule):
    def __init__(self, encoder, lr=1e-2):
        super().__init__()
        self.save_hyperparameters(ignore=["encoder"])
        self.encoder = encoder
        self.encoder.requires_grad_(False)          # pre-trained above; kept fixed on purpose
        self.head = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Dropout(0.3), nn.Linear(16, 2))
        self._correct = self._seen = 0

    def forward(self, x):
        with torch.no_grad():
            z = self.encoder(x)
        return self.head(z)

    def on_train_epoch_start(self):
        self.encoder.eval()

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss, on_epoch=True, on_step=False)
        return loss

    def _eval_step(self, batch, prefix):
        x, y = batch
        logits = self(x)
        self.log(f"{prefix}_loss", F.cross_entropy(logits, y))
        self._correct += int((logits.argmax(1) == y).sum())
        self._seen += len(y)

    def validation_step(self, batch, batch_idx):
        self._eval_step(batch, "val")

    def test_step(self, batch, batch_idx):
        self._eval_step(batch, "test")

    def on_validation_epoch_start(self):
        self._correct = self._seen = 0

    on_test_epoch_start = on_validation_epoch_start

    def on_validation_epoch_end(self):
        self.log("val_acc", self._correct / max(self._seen, 1))

    def on_test_epoch_end(self):
        self.log("test_acc", self._correct / max(self._seen, 1))

    def configure_optimizers(self):
        return torch.optim.Adam(self.head.parameters(), lr=self.hparams.lr)


class Printer(L.Callback):
    def __init__(self, keys, every=1):
        self.keys, self.every = keys, every

    def on_train_epoch_end(self, trainer, pl_module):
        if (trainer.current_epoch + 1) % self.every:
            return
        m = trainer.callback_metrics
        vals = "  ".join(f"{k} {float(m[k]):.4f}" for k in self.keys if k in m)
        print(f"[{type(pl_module).__name__}] epoch {trainer.current_epoch:2d}  {vals}")


if __name__ == "__main__":
    L.seed_everything(12)
    torch.set_num_threads(1)
    X, y = load_breast_cancer(return_X_y=True)
    X_tr, X_te, y_tr, y_te = train_test_split(X, y, test_size=0.2, stratify=y, random_state=12)
    X_tr, X_va, y_tr, y_va = train_test_split(X_tr, y_tr, test_size=0.2, stratify=y_tr, random_state=12)
    mu, sd = X_tr.mean(0), X_tr.std(0)
    mk = lambda a, b, bs, sh: DataLoader(
        TensorDataset(torch.tensor((a - mu) / sd, dtype=torch.float32), torch.tensor(b)), batch_size=bs, shuffle=sh)
    train_loader, val_loader, test_loader = mk(X_tr, y_tr, 32, True), mk(X_va, y_va, 128, False), mk(X_te, y_te, 128, False)

    ae = FeatureAE()
    L.Trainer(max_epochs=60, accelerator="cpu", logger=False, enable_checkpointing=False,
              enable_progress_bar=False, enable_model_summary=False, check_val_every_n_epoch=10,
              callbacks=[Printer(["ae_loss", "ae_val_loss"], every=10)]).fit(ae, train_loader, val_loader)

    clf = FrozenEncoderClassifier(ae.encoder)
    ckpt_dir = tempfile.mkdtemp(prefix="pl_frozen_")
    ckpt = ModelCheckpoint(dirpath=ckpt_dir, monitor="val_loss", mode="min", save_top_k=1)
    stop = EarlyStopping(monitor="val_loss", mode="min", patience=8, min_delta=1e-4)
    trainer = L.Trainer(max_epochs=120, accelerator="cpu", logger=False, enable_progress_bar=False,
                        enable_model_summary=False, log_every_n_steps=2, deterministic=True,
                        callbacks=[ckpt, stop, Printer(["train_loss", "val_loss", "val_acc"])])
    trainer.fit(clf, train_loader, val_loader)
    print(f"stopped at epoch {trainer.current_epoch}, best checkpoint {ckpt.best_model_path.split('/')[-1]} "
          f"val_loss {float(ckpt.best_model_score):.4f}")
    test = trainer.test(clf, test_loader, ckpt_path="best", verbose=False)[0]
    val = trainer.validate(clf, val_loader, ckpt_path="best", verbose=False)[0]
    print(f"final val_loss {val['val_loss']:.4f}  val_acc {val['val_acc']:.4f}")
    print(f"final test_loss {test['test_loss']:.4f}  test_acc {test['test_acc']:.4f}")
