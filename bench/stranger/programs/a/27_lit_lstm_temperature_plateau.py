"""LSTM forecaster for a synthetic daily-temperature series (seasonality + trend + noise), predicting the
next value from a 30-day window. ReduceLROnPlateau on the validation loss."""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import lightning as L
from torch.utils.data import DataLoader, TensorDataset

L.seed_everything(10, verbose=False)
torch.set_num_threads(1)

rng = np.random.default_rng(10)
days = np.arange(2400)
temp = 12 + 8 * np.sin(2 * np.pi * days / 365.0) + 2 * np.sin(2 * np.pi * days / 7.0) + 0.002 * days
temp = temp + rng.normal(0, 0.6, size=len(days))
split = 2000
mu, sd = temp[:split].mean(), temp[:split].std()
z = ((temp - mu) / sd).astype(np.float32)
WIN = 30


def make_windows(series):
    idx = np.arange(len(series) - WIN)
    xs = np.stack([series[i:i + WIN] for i in idx])[..., None]
    return torch.from_numpy(xs), torch.from_numpy(series[idx + WIN])


train_x, train_y = make_windows(z[:split])
val_x, val_y = make_windows(z[split - WIN:])


class LSTMForecaster(L.LightningModule):
    def __init__(self, hidden=32):
        super().__init__()
        self.lstm = nn.LSTM(1, hidden, batch_first=True)
        self.fc = nn.Linear(hidden, 1)

    def forward(self, x):
        out, _ = self.lstm(x)
        return self.fc(out[:, -1]).squeeze(-1)

    def training_step(self, batch, _):
        x, y = batch
        loss = F.mse_loss(self(x), y)
        self.log("train_loss", loss, on_epoch=True, on_step=False)
        return loss

    def validation_step(self, batch, _):
        x, y = batch
        self.log("val_loss", F.mse_loss(self(x), y))

    def on_train_epoch_end(self):
        m = self.trainer.callback_metrics
        lr = self.optimizers().param_groups[0]["lr"]
        print(f"epoch {self.current_epoch+1:2d} lr {lr:.1e} train_mse {m['train_loss']:.4f} val_mse {m['val_loss']:.4f} "
              f"(val RMSE {np.sqrt(m['val_loss'].item()) * sd:.2f} degC)")

    def configure_optimizers(self):
        opt = torch.optim.Adam(self.parameters(), lr=5e-3)
        sched = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, mode="min", factor=0.5, patience=1)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "monitor": "val_loss"}}


trainer = L.Trainer(max_epochs=10, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                    enable_model_summary=False, num_sanity_val_steps=0)
trainer.fit(LSTMForecaster(), DataLoader(TensorDataset(train_x, train_y), batch_size=64, shuffle=True),
            DataLoader(TensorDataset(val_x, val_y), batch_size=512))
print(f"final val_mse {trainer.callback_metrics['val_loss']:.4f} (noise floor ~{(0.6 / sd) ** 2:.4f})")
