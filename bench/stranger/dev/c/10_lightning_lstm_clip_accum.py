"""Lightning LSTM regressor: predict the next value of a noisy multi-sine series.
Uses gradient_clip_val and accumulate_grad_batches (Lightning scales the loss itself)."""
import lightning as L
import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

L.seed_everything(10, verbose=False)
torch.set_num_threads(1)

rng = np.random.default_rng(10)
t = np.arange(6000)
series = (np.sin(0.07 * t) + 0.5 * np.sin(0.013 * t + 1.0) + 0.1 * rng.normal(size=t.shape)).astype(np.float32)
W = 30
Xw = np.stack([series[i:i + W] for i in range(len(series) - W)])[..., None]
yw = series[W:]
split = int(0.8 * len(Xw))
train_ds = TensorDataset(torch.from_numpy(Xw[:split]), torch.from_numpy(yw[:split]))
val_ds = TensorDataset(torch.from_numpy(Xw[split:]), torch.from_numpy(yw[split:]))


class SeqModel(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(1, 32, batch_first=True)
        self.out = nn.Linear(32, 1)

    def forward(self, x):
        h, _ = self.lstm(x)
        return self.out(h[:, -1]).squeeze(-1)

    def training_step(self, batch, _):
        x, y = batch
        loss = nn.functional.mse_loss(self(x), y)
        self.log("train_mse", loss, on_epoch=True, on_step=False)
        return loss

    def validation_step(self, batch, _):
        x, y = batch
        self.log("val_mse", nn.functional.mse_loss(self(x), y))

    def on_validation_epoch_end(self):
        if self.trainer.sanity_checking:
            return
        m = self.trainer.callback_metrics
        print(f"epoch {self.current_epoch} train_mse {m.get('train_mse', float('nan')):.5f} val_mse {m['val_mse']:.5f}")

    def configure_optimizers(self):
        opt = torch.optim.Adam(self.parameters(), lr=4e-3)
        return {"optimizer": opt, "lr_scheduler": torch.optim.lr_scheduler.ExponentialLR(opt, gamma=0.8)}


trainer = L.Trainer(max_epochs=6, accumulate_grad_batches=2, gradient_clip_val=1.0, accelerator="cpu",
                    logger=False, enable_checkpointing=False, enable_progress_bar=False,
                    enable_model_summary=False, deterministic=True, limit_train_batches=150)
model = SeqModel()
trainer.fit(model, DataLoader(train_ds, batch_size=32, shuffle=True), DataLoader(val_ds, batch_size=512))
naive = nn.functional.mse_loss(val_ds.tensors[0][:, -1, 0], val_ds.tensors[1]).item()
print(f"final val_mse {trainer.callback_metrics['val_mse']:.5f} (persistence baseline {naive:.5f})")
