"""GRU classifier for noisy waveforms (sine / square / sawtooth / triangle), Lightning.

Random frequency, phase and amplitude, additive noise. Adam with gradient-norm
clipping (gradient_clip_val=1.0) and ReduceLROnPlateau on the validation loss.
"""
import lightning as L
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

L.seed_everything(10, workers=True)
torch.set_num_threads(1)
rng = np.random.default_rng(10)
T = 40


def waves(n):
    t = np.arange(T)[None, :]
    kind = rng.integers(0, 4, n)
    freq = rng.uniform(0.03, 0.12, (n, 1))
    phase = rng.uniform(0, 1, (n, 1))
    amp = rng.uniform(0.5, 2.0, (n, 1))
    u = (freq * t + phase) % 1.0
    sine = np.sin(2 * np.pi * u)
    square = np.where(u < 0.5, 1.0, -1.0)
    saw = 2 * u - 1
    tri = 4 * np.abs(u - 0.5) - 1
    x = np.choose(kind[:, None], [sine, square, saw, tri]) * amp
    x = x + rng.normal(0, 0.3, x.shape)
    return torch.tensor(x[..., None], dtype=torch.float32), torch.tensor(kind)


train_dl = DataLoader(TensorDataset(*waves(2400)), batch_size=64, shuffle=True)
val_dl = DataLoader(TensorDataset(*waves(600)), batch_size=300)


class WaveGRU(L.LightningModule):
    def __init__(self, hidden=48, lr=3e-3):
        super().__init__()
        self.save_hyperparameters()
        self.gru = nn.GRU(1, hidden, num_layers=2, batch_first=True, dropout=0.1)
        self.out = nn.Linear(hidden, 4)

    def forward(self, x):
        h, _ = self.gru(x)
        return self.out(h[:, -1])

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss, on_step=False, on_epoch=True)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        self.log("val_loss", F.cross_entropy(logits, y))
        self.log("val_acc", (logits.argmax(1) == y).float().mean())

    def on_validation_epoch_end(self):
        if self.trainer.sanity_checking:
            return
        m = self.trainer.callback_metrics
        print(f"epoch {self.current_epoch} val_loss {m['val_loss']:.4f} "
              f"val_acc {m['val_acc']:.4f} lr {self.trainer.optimizers[0].param_groups[0]['lr']:.5f}")

    def configure_optimizers(self):
        opt = torch.optim.Adam(self.parameters(), lr=self.hparams.lr)
        sched = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, mode="min", factor=0.5,
                                                           patience=2)
        return {"optimizer": opt,
                "lr_scheduler": {"scheduler": sched, "monitor": "val_loss", "interval": "epoch"}}


model = WaveGRU()
trainer = L.Trainer(max_epochs=15, accelerator="cpu", devices=1, gradient_clip_val=1.0,
                    gradient_clip_algorithm="norm", logger=False, enable_checkpointing=False,
                    enable_progress_bar=False, enable_model_summary=False, deterministic=True)
trainer.fit(model, train_dl, val_dl)
res = trainer.validate(model, val_dl, verbose=False)[0]
print(f"final val_loss {res['val_loss']:.4f} val_acc {res['val_acc']:.4f}")
