"""Lightning: token-sequence sentiment (synthetic reviews) with an Embedding + GRU encoder and a linear head."""
import os
import warnings
import logging
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset
import lightning as L

warnings.filterwarnings("ignore")
logging.getLogger("lightning").setLevel(logging.ERROR)
logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
L.seed_everything(17, verbose=False)

VOCAB, SEQ_LEN, PAD = 300, 40, 0
POS_WORDS = np.arange(10, 30)     # "great", "loved", ...
NEG_WORDS = np.arange(30, 50)     # "awful", "boring", ...


def make_reviews(n, rng):
    X = rng.integers(50, VOCAB, size=(n, SEQ_LEN))          # neutral filler words
    y = rng.integers(0, 2, size=n)
    for i in range(n):
        n_major = rng.integers(3, 7)
        n_minor = rng.integers(0, n_major - 1)
        major, minor = (POS_WORDS, NEG_WORDS) if y[i] == 1 else (NEG_WORDS, POS_WORDS)
        pos = rng.choice(SEQ_LEN, size=n_major + n_minor, replace=False)
        X[i, pos[:n_major]] = rng.choice(major, n_major)
        X[i, pos[n_major:]] = rng.choice(minor, n_minor)
        length = rng.integers(25, SEQ_LEN + 1)
        X[i, length:] = PAD if pos.max() < length else X[i, length:]
    return torch.tensor(X), torch.tensor(y)


class ReviewClassifier(L.LightningModule):
    def __init__(self, emb=32, hidden=64, lr=2e-3):
        super().__init__()
        self.save_hyperparameters()
        self.embed = nn.Embedding(VOCAB, emb, padding_idx=PAD)
        self.encoder = nn.GRU(emb, hidden, batch_first=True, bidirectional=True)
        self.head = nn.Linear(2 * hidden, 2)

    def features(self, tokens):
        out, _ = self.encoder(self.embed(tokens))
        mask = (tokens != PAD).unsqueeze(-1).float()
        return (out * mask).sum(1) / mask.sum(1)             # masked mean pooling

    def forward(self, tokens):
        feats = self.features(tokens).detach()
        return self.head(feats)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss, on_step=False, on_epoch=True)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        self.log("val_loss", F.cross_entropy(logits, y), on_epoch=True)
        self.log("val_acc", (logits.argmax(1) == y).float().mean(), on_epoch=True)

    def on_train_epoch_end(self):
        # runs after this epoch's validation loop, so both train and val metrics are in
        m = self.trainer.callback_metrics
        print(f"epoch {self.current_epoch + 1:02d} train_loss {m.get('train_loss', float('nan')):.4f} "
              f"val_loss {m['val_loss']:.4f} val_acc {m['val_acc']:.4f}")

    def configure_optimizers(self):
        opt = torch.optim.AdamW(self.parameters(), lr=self.hparams.lr, weight_decay=0.01)
        sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=self.hparams.lr,
                                                    total_steps=self.trainer.estimated_stepping_batches)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


if __name__ == "__main__":
    rng = np.random.default_rng(17)
    Xtr, ytr = make_reviews(3000, rng)
    Xva, yva = make_reviews(800, rng)
    train_loader = DataLoader(TensorDataset(Xtr, ytr), batch_size=64, shuffle=True)
    val_loader = DataLoader(TensorDataset(Xva, yva), batch_size=256)

    model = ReviewClassifier()
    trainer = L.Trainer(max_epochs=12, accelerator="cpu", devices=1, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, deterministic=True)
    trainer.fit(model, train_loader, val_loader)
    res = trainer.validate(model, val_loader, verbose=False)[0]
    print(f"final val_loss {res['val_loss']:.4f} val_acc {res['val_acc']:.4f}")
