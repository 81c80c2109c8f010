"""Disease-progression regression on the diabetes data with Lightning manual
optimization: AdamW with separate parameter groups (no weight decay on
biases), gradient-norm clipping via self.clip_gradients, and an
ExponentialLR schedule stepped by hand at the end of every epoch. The target
is standardised for training; MAE is reported in the original units."""
import tempfile
import warnings

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import lightning as L
from torch.utils.data import DataLoader, TensorDataset
from sklearn.datasets import load_diabetes
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

warnings.filterwarnings("ignore", ".*does not have many workers.*")
SEED = 41
L.seed_everything(SEED, workers=True)
torch.set_num_threads(2)

X, y = load_diabetes(return_X_y=True)
X_tr, X_va, y_tr, y_va = train_test_split(X, y, test_size=0.2, random_state=SEED)
x_scaler = StandardScaler().fit(X_tr)
Y_MEAN, Y_STD = float(y_tr.mean()), float(y_tr.std())


def make_set(features, target):
    return TensorDataset(
        torch.tensor(x_scaler.transform(features), dtype=torch.float32),
        torch.tensor((target - Y_MEAN) / Y_STD, dtype=torch.float32).unsqueeze(-1),
    )


train_loader = DataLoader(make_set(X_tr, y_tr), batch_size=32, shuffle=True)
val_loader = DataLoader(make_set(X_va, y_va), batch_size=256)


class ManualRegressor(L.LightningModule):
    def __init__(self, in_dim=10, hidden=32, lr=2e-3, weight_decay=5e-2, clip=1.0):
        super().__init__()
        self.save_hyperparameters()
        self.automatic_optimization = False
        self.net = nn.Sequential(
            nn.Linear(in_dim, hidden), nn.ReLU(), nn.Dropout(0.1),
            nn.Linear(hidden, hidden), nn.ReLU(),
            nn.Linear(hidden, 1),
        )

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        opt = self.optimizers()
        x, y = batch
        opt.zero_grad()
        loss = F.mse_loss(self(x), y)
        self.manual_backward(loss)
        self.clip_gradients(opt, gradient_clip_val=self.hparams.clip, gradient_clip_algorithm="norm")
        opt.step()
        self.log("train_loss", loss, on_step=True, on_epoch=True)

    def on_train_epoch_end(self):
        self.lr_schedulers().step()

    def validation_step(self, batch, batch_idx):
        x, y = batch
        y_hat = self(x)
        self.log("val_loss", F.mse_loss(y_hat, y), on_epoch=True)
        self.log("val_mae", (y_hat - y).abs().mean() * Y_STD, on_epoch=True)

    def configure_optimizers(self):
        decay = [p for n, p in self.named_parameters() if n.endswith("weight")]
        no_decay = [p for n, p in self.named_parameters() if n.endswith("bias")]
        opt = torch.optim.AdamW(
            [{"params": decay, "weight_decay": self.hparams.weight_decay},
             {"params": no_decay, "weight_decay": 0.0}],
            lr=self.hparams.lr,
        )
        sched = torch.optim.lr_scheduler.ExponentialLR(opt, gamma=0.85)
        return [opt], [sched]


class PrintMetrics(L.Callback):
    def on_train_epoch_end(self, trainer, pl_module):
        m = trainer.callback_metrics
        print(
            f"epoch {trainer.current_epoch + 1:02d} train_loss {m['train_loss_epoch']:.4f} "
            f"val_loss {m['val_loss']:.4f} val_mae {m['val_mae']:.3f}",
            flush=True,
        )


model = ManualRegressor()
trainer = L.Trainer(
    max_epochs=15,
    accelerator="cpu",
    devices=1,
    deterministic=True,
    num_sanity_val_steps=0,
    callbacks=[PrintMetrics()],
    logger=False,
    enable_checkpointing=False,
    enable_progress_bar=False,
    enable_model_summary=False,
    default_root_dir=tempfile.mkdtemp(),
)
trainer.fit(model, train_loader, val_loader)
res = trainer.validate(model, val_loader, verbose=False)[0]
print(f"final val_loss {res['val_loss']:.4f} val_mae {res['val_mae']:.3f}")
print(f"(predicting the training mean gives val_mae {np.abs(y_va - Y_MEAN).mean():.3f})")
