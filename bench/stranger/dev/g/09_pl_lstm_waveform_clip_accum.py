"""Bidirectional LSTM that classifies noisy waveforms (sine / square / sawtooth / chirp).

pytorch_lightning API: Trainer with gradient_clip_val, accumulate_grad_batches,
validation twice per epoch (val_check_interval=0.5), small log_every_n_steps;
Adam with CosineAnnealingLR stepped once per epoch.
"""
import numpy as np
import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

SEQ_LEN, N_CLASSES = 40, 4


def make_waves(n, seed):
    g = np.random.default_rng(seed)
    t = np.linspace(0, 1, SEQ_LEN, dtype=np.float32)
    X = np.empty((n, SEQ_LEN, 1), dtype=np.float32)
    y = g.integers(N_CLASSES, size=n)
    for i in range(n):
        f = g.uniform(1.5, 4.0)
        ph = g.uniform(0, 2 * np.pi)
        amp = g.uniform(0.6, 1.4)
        if y[i] == 0:
            w = np.sin(2 * np.pi * f * t + ph)
        elif y[i] == 1:
            w = np.sign(np.sin(2 * np.pi * f * t + ph))
        elif y[i] == 2:
            w = 2 * ((f * t + ph / (2 * np.pi)) % 1.0) - 1
        else:
            w = np.sin(2 * np.pi * (f * t + 3 * t ** 2) + ph)
        X[i, :, 0] = amp * w + g.normal(0, 0.25, SEQ_LEN)
    return torch.from_numpy(X), torch.from_numpy(y)


class WaveLSTM(pl.LightningModule):
    def __init__(self, hidden=48, lr=3e-3, epochs=10):
        super().__init__()
        self.save_hyperparameters()
        self.lstm = nn.LSTM(1, hidden, num_layers=1, batch_first=True, bidirectional=True)
        self.drop = nn.Dropout(0.3)
        self.fc = nn.Linear(4 * hidden, N_CLASSES)

    def forward(self, x):
        out, _ = self.lstm(x)
        feats = torch.cat([out.mean(1), out.max(1).values], dim=1)
        return self.fc(self.drop(feats))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss, on_step=True, on_epoch=True)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        self.log("val_loss", F.cross_entropy(logits, y))
        self.log("val_acc", (logits.argmax(-1) == y).float().mean())

    def configure_optimizers(self):
        opt = torch.optim.Adam(self.parameters(), lr=self.hparams.lr)
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=self.hparams.epochs, eta_min=1e-4)
        return [opt], [sched]


class Report(pl.Callback):
    def on_validation_end(self, trainer, pl_module):
        if trainer.sanity_checking or trainer.state.fn != "fit":
            return
        m = trainer.callback_metrics
        print(f"epoch {trainer.current_epoch} step {trainer.global_step:4d}  "
              f"train_loss_step {m.get('train_loss_step', float('nan')):.4f}  "
              f"val_loss {m['val_loss']:.4f}  val_acc {m['val_acc']:.4f}")


if __name__ == "__main__":
    pl.seed_everything(9)
    torch.set_num_threads(1)
    Xtr, ytr = make_waves(2000, seed=91)
    Xva, yva = make_waves(500, seed=92)
    train_loader = DataLoader(TensorDataset(Xtr, ytr), batch_size=16, shuffle=True)
    val_loader = DataLoader(TensorDataset(Xva, yva), batch_size=250)
    model = WaveLSTM(hidden=48, lr=3e-3, epochs=8)
    trainer = pl.Trainer(max_epochs=8, accelerator="cpu", gradient_clip_val=1.0,
                         gradient_clip_algorithm="norm", accumulate_grad_batches=4,
                         val_check_interval=0.5, log_every_n_steps=5, logger=False,
                         enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, callbacks=[Report()], deterministic=True)
    trainer.fit(model, train_loader, val_loader)
    res = trainer.validate(model, val_loader, verbose=False)[0]
    print(f"final val_loss {res['val_loss']:.4f}  val_acc {res['val_acc']:.4f}")
