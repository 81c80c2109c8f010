"""Encoder + classifier head on the wine data with manual optimisation.

automatic_optimization=False: the encoder is updated by SGD with momentum
and the head by Adam at a different rate, both through manual_backward;
each has its own StepLR that the module steps at the end of every epoch.
"""
import lightning as L
import numpy as np
import torch
import torch.nn.functional as F
from sklearn.datasets import load_wine
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class TwoRateClassifier(L.LightningModule):
    def __init__(self, enc_lr=0.05, head_lr=5e-3):
        super().__init__()
        self.save_hyperparameters()
        self.automatic_optimization = False
        self.encoder = nn.Sequential(nn.Linear(13, 64), nn.Tanh(), nn.Dropout(0.3),
                                     nn.Linear(64, 32), nn.Tanh())
        self.head = nn.Linear(32, 3)

    def forward(self, x):
        return self.head(self.encoder(x))

    def training_step(self, batch, batch_idx):
        opt_enc, opt_head = self.optimizers()
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        opt_enc.zero_grad()
        opt_head.zero_grad()
        self.manual_backward(loss)
        self.clip_gradients(opt_enc, gradient_clip_val=2.0, gradient_clip_algorithm="norm")
        opt_enc.step()
        opt_head.step()
        self.log("train_loss", loss, on_step=False, on_epoch=True)

    def on_train_epoch_end(self):
        for sched in self.lr_schedulers():
            sched.step()

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        self.log("val_loss", F.cross_entropy(logits, y))
        self.log("val_acc", (logits.argmax(1) == y).float().mean())

    def configure_optimizers(self):
        opt_enc = torch.optim.SGD(self.encoder.parameters(), lr=self.hparams.enc_lr, momentum=0.9, weight_decay=1e-3)
        opt_head = torch.optim.Adam(self.head.parameters(), lr=self.hparams.head_lr)
        s1 = torch.optim.lr_scheduler.StepLR(opt_enc, step_size=8, gamma=0.3)
        s2 = torch.optim.lr_scheduler.StepLR(opt_head, step_size=8, gamma=0.3)
        return [opt_enc, opt_head], [s1, s2]


class Printer(L.Callback):
    def on_train_epoch_end(self, trainer, pl_module):
        m = trainer.callback_metrics
        if trainer.current_epoch % 3 == 2 or trainer.current_epoch == 0:
            lrs = [o.param_groups[0]["lr"] for o in trainer.optimizers]
            print(f"epoch {trainer.current_epoch:2d}  train_loss {m.get('train_loss', torch.tensor(0.)):.4f}  "
                  f"val_loss {m['val_loss']:.4f}  val_acc {m['val_acc']:.3f}  "
                  f"lr_enc {lrs[0]:.4f}  lr_head {lrs[1]:.5f}")


if __name__ == "__main__":
    L.seed_everything(11)
    torch.set_num_threads(1)
    X, y = load_wine(return_X_y=True)
    X_tr, X_va, y_tr, y_va = train_test_split(X, y, test_size=0.3, stratify=y, random_state=11)
    scaler = StandardScaler().fit(X_tr)
    tt = lambda a: torch.tensor(a, dtype=torch.float32)
    train_loader = DataLoader(TensorDataset(tt(scaler.transform(X_tr)), torch.tensor(y_tr)),
                              batch_size=16, shuffle=True)
    val_loader = DataLoader(TensorDataset(tt(scaler.transform(X_va)), torch.tensor(y_va)), batch_size=64)
    model = TwoRateClassifier()
    trainer = L.Trainer(max_epochs=20, accelerator="cpu", logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, callbacks=[Printer()],
                        deterministic=True)
    trainer.fit(model, train_loader, val_loader)
    res = trainer.validate(model, val_loader, verbose=False)[0]
    print(f"final val_loss {res['val_loss']:.4f}  val_acc {res['val_acc']:.4f}")
