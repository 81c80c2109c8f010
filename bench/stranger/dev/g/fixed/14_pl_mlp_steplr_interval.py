"""Five-class MLP on a synthetic make_classification problem (Lightning).

Plain SGD with a StepLR that halves the learning rate every 10 epochs,
handed to Lightning through the lr_scheduler config dict; 30 epochs,
batch 32, training and validation metrics printed every epoch.
"""
import lightning as L
import torch
import torch.nn.functional as F
from sklearn.datasets import make_classification
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class MLP(L.LightningModule):
    def __init__(self, lr=0.05):
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(nn.Linear(20, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 5))

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        loss = F.cross_entropy(logits, y)
        self.log("train_loss", loss, on_step=False, on_epoch=True)
        self.log("train_acc", (logits.argmax(1) == y).float().mean(), on_step=False, on_epoch=True)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        self.log("val_loss", F.cross_entropy(logits, y))
        self.log("val_acc", (logits.argmax(1) == y).float().mean())

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=self.hparams.lr)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=10, gamma=0.5)
        return {"optimizer": optimizer,
                "lr_scheduler": {"scheduler": scheduler, "interval": "epoch", "frequency": 1}}


class EpochLog(L.Callback):
    def on_train_epoch_end(self, trainer, pl_module):
        m = trainer.callback_metrics
        lr = trainer.optimizers[0].param_groups[0]["lr"]
        print(f"epoch {trainer.current_epoch:2d}  train_loss {m['train_loss']:.4f}  train_acc {m['train_acc']:.3f}  "
              f"val_loss {m['val_loss']:.4f}  val_acc {m['val_acc']:.3f}  lr {lr:.2e}")


if __name__ == "__main__":
    L.seed_everything(14)
    torch.set_num_threads(1)
    X, y = make_classification(n_samples=3000, n_features=20, n_informative=12, n_redundant=4,
                               n_classes=5, n_clusters_per_class=2, class_sep=1.2, random_state=14)
    X_tr, X_va, y_tr, y_va = train_test_split(X, y, test_size=0.25, random_state=14, stratify=y)
    sc = StandardScaler().fit(X_tr)
    f32 = lambda a: torch.tensor(a, dtype=torch.float32)
    train_loader = DataLoader(TensorDataset(f32(sc.transform(X_tr)), torch.tensor(y_tr)), batch_size=32,
                              shuffle=True)
    val_loader = DataLoader(TensorDataset(f32(sc.transform(X_va)), torch.tensor(y_va)), batch_size=500)
    model = MLP(lr=0.05)
    trainer = L.Trainer(max_epochs=30, accelerator="cpu", logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, callbacks=[EpochLog()],
                        deterministic=True)
    trainer.fit(model, train_loader, val_loader)
    res = trainer.validate(model, val_loader, verbose=False)[0]
    print(f"final val_loss {res['val_loss']:.4f}  val_acc {res['val_acc']:.4f}")
