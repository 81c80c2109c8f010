"""Vanilla (tanh) RNN that regresses the mean level of a long noisy signal (sequence length 100)."""
import torch
import torch.nn as nn
import torch.nn.functional as F
import lightning as L
from torch.utils.data import DataLoader, TensorDataset

L.seed_everything(2, verbose=False)
torch.set_num_threads(1)

SEQ_LEN = 100


def make_data(n, g):
    level = torch.randn(n, 1, 1, generator=g)
    x = level + 0.5 * torch.randn(n, SEQ_LEN, 1, generator=g)
    return x, x.mean(dim=(1, 2))


g = torch.Generator().manual_seed(2)
train_x, train_y = make_data(2000, g)
val_x, val_y = make_data(500, g)


class RNNRegressor(L.LightningModule):
    def __init__(self, hidden=64, lr=0.1):
        super().__init__()
        self.save_hyperparameters()
        self.rnn = nn.RNN(1, hidden, batch_first=True)
        self.out = nn.Linear(hidden, 1)

    def forward(self, x):
        h, _ = self.rnn(x)
        return self.out(h[:, -1]).squeeze(-1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.mse_loss(self(x), y)
        self.log("train_mse", loss, on_step=False, on_epoch=True)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_mse", F.mse_loss(self(x), y))

    def on_train_epoch_end(self):
        if True:
            m = self.trainer.callback_metrics
            print(f"epoch {self.current_epoch+1}: train_mse {m['train_mse']:.4f} val_mse {m['val_mse']:.4f}")

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=0.9)


print(f"baseline (predict 0) val_mse {(val_y ** 2).mean():.4f}")
trainer = L.Trainer(max_epochs=8, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                    enable_model_summary=False)
trainer.fit(RNNRegressor(), DataLoader(TensorDataset(train_x, train_y), batch_size=32, shuffle=True),
            DataLoader(TensorDataset(val_x, val_y), batch_size=250))
print(f"final val_mse {trainer.callback_metrics['val_mse']:.4f}")
