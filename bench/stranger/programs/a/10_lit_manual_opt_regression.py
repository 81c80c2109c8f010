"""California-housing-like synthetic regression with Lightning manual optimization
(manual mode so we can clip gradients and step the scheduler ourselves)."""
import torch
import torch.nn as nn
import torch.nn.functional as F
import lightning as L
from torch.utils.data import DataLoader, TensorDataset, random_split
from sklearn.datasets import make_regression

L.seed_everything(3, verbose=False)
torch.set_num_threads(1)

X, y = make_regression(n_samples=3000, n_features=12, n_informative=8, noise=10.0, random_state=3)
y = (y - y.mean()) / y.std()
ds = TensorDataset(torch.tensor(X, dtype=torch.float32), torch.tensor(y, dtype=torch.float32))
train_ds, val_ds = random_split(ds, [2400, 600], generator=torch.Generator().manual_seed(3))


class Regressor(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.automatic_optimization = False
        self.model = nn.Sequential(nn.Linear(12, 64), nn.SiLU(), nn.Linear(64, 64), nn.SiLU(), nn.Linear(64, 1))

    def forward(self, x):
        return self.model(x).squeeze(-1)

    def training_step(self, batch, batch_idx):
        opt = self.optimizers()
        x, y = batch
        loss = F.mse_loss(self(x), y)
        opt.zero_grad()
        self.manual_backward(loss)
        self.clip_gradients(opt, gradient_clip_val=1.0, gradient_clip_algorithm="norm")
        self.log("train_mse", loss, prog_bar=True, on_epoch=True, on_step=False)

    def on_train_epoch_end(self):
        self.lr_schedulers().step()

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_mse", F.mse_loss(self(x), y))

    def on_validation_epoch_end(self):
        if not self.trainer.sanity_checking:
            m = self.trainer.callback_metrics
            print(f"epoch {self.current_epoch} train_mse {m.get('train_mse', torch.nan):.4f} val_mse {m['val_mse']:.4f}")

    def configure_optimizers(self):
        opt = torch.optim.Adam(self.parameters(), lr=1e-3)
        sched = torch.optim.lr_scheduler.ExponentialLR(opt, gamma=0.9)
        return [opt], [sched]


model = Regressor()
trainer = L.Trainer(max_epochs=12, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                    enable_model_summary=False)
trainer.fit(model, DataLoader(train_ds, batch_size=32, shuffle=True), DataLoader(val_ds, batch_size=200))
print(f"final val_mse {trainer.callback_metrics['val_mse']:.4f} (target variance 1.0)")
