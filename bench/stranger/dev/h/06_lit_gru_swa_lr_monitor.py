"""Lightning GRU sequence classifier on synthetic noisy waveforms (sine / square /
sawtooth), validated every second epoch (check_val_every_n_epoch=2), with a
LearningRateMonitor writing to a CSVLogger and StochasticWeightAveraging over the last
epochs; the SWA-averaged weights are scored with trainer.validate() and trainer.test()."""
import warnings

import lightning as L
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from lightning.pytorch.callbacks import LearningRateMonitor, StochasticWeightAveraging
from lightning.pytorch.loggers import CSVLogger
from torch.utils.data import DataLoader, TensorDataset

warnings.filterwarnings("ignore")
L.seed_everything(21, workers=True)
rng = np.random.default_rng(21)
T = 40


def make(n):
    t = np.linspace(0, 1, T, dtype=np.float32)
    xs, ys = [], []
    for _ in range(n):
        k = int(rng.integers(0, 3))
        f = rng.uniform(1.5, 4.0); ph = rng.uniform(0, 2 * np.pi); a = rng.uniform(0.5, 1.5)
        u = 2 * np.pi * f * t + ph
        if k == 0:
            s = np.sin(u)
        elif k == 1:
            s = np.sign(np.sin(u))
        else:
            s = 2 * ((u / (2 * np.pi)) % 1.0) - 1
        s = a * s + rng.normal(0, 0.35, T)
        xs.append(s[:, None]); ys.append(k)
    return torch.tensor(np.array(xs, dtype=np.float32)), torch.tensor(ys)


train, val, test = make(1200), make(300), make(300)


class GRUClassifier(L.LightningModule):
    def __init__(self, hidden=48, lr=3e-3):
        super().__init__()
        self.save_hyperparameters()
        self.gru = nn.GRU(1, hidden, num_layers=2, batch_first=True, dropout=0.2)
        self.out = nn.Linear(hidden, 3)

    def forward(self, x):
        h, _ = self.gru(x)
        return self.out(h[:, -1])

    def _step(self, batch, stage):
        x, y = batch
        logits = self(x)
        loss = F.cross_entropy(logits, y)
        self.log(f"{stage}_loss", loss, on_step=False, on_epoch=True)
        self.log(f"{stage}_acc", (logits.argmax(1) == y).float().mean(), on_step=False, on_epoch=True)
        return loss

    def training_step(self, batch, batch_idx):
        return self._step(batch, "train")

    def validation_step(self, batch, batch_idx):
        self._step(batch, "val")

    def test_step(self, batch, batch_idx):
        self._step(batch, "test")

    def on_train_epoch_end(self):
        m = self.trainer.callback_metrics
        lr = self.trainer.optimizers[0].param_groups[0]["lr"]
        line = f"epoch {self.current_epoch} lr {lr:.5f} train_loss {m['train_loss']:.4f} train_acc {m['train_acc']:.4f}"
        if "val_loss" in m:
            line += f" | last val_loss {m['val_loss']:.4f} val_acc {m['val_acc']:.4f}"
        print(line)

    def configure_optimizers(self):
        opt = torch.optim.Adam(self.parameters(), lr=self.hparams.lr)
        sched = torch.optim.lr_scheduler.MultiStepLR(opt, milestones=[8, 12], gamma=0.3)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "epoch"}}


model = GRUClassifier()
trainer = L.Trainer(max_epochs=16, check_val_every_n_epoch=2, accelerator="cpu", devices=1,
                    logger=CSVLogger("/tmp/h06_logs", name="gru"), gradient_clip_val=1.0,
                    callbacks=[LearningRateMonitor(logging_interval="epoch"),
                               StochasticWeightAveraging(swa_lrs=5e-4, swa_epoch_start=12,
                                                         annealing_epochs=2)],
                    enable_checkpointing=False, enable_progress_bar=False,
                    enable_model_summary=False, deterministic=True)
trainer.fit(model, DataLoader(TensorDataset(*train), batch_size=32, shuffle=True),
            DataLoader(TensorDataset(*val), batch_size=150))
v = trainer.validate(model, DataLoader(TensorDataset(*val), batch_size=150), verbose=False)[0]
t = trainer.test(model, DataLoader(TensorDataset(*test), batch_size=150), verbose=False)[0]
print(f"final (SWA weights) val_loss {v['val_loss']:.4f} val_acc {v['val_acc']:.4f}")
print(f"final (SWA weights) test_loss {t['test_loss']:.4f} test_acc {t['test_acc']:.4f}")
