"""4-class classifier on synthetic tabular data in Lightning, with a custom focal-style loss, Adam."""
import warnings
import torch
import torch.nn as nn
import torch.nn.functional as F
import lightning as L
from torch.utils.data import DataLoader, TensorDataset
from sklearn.datasets import make_classification
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

warnings.filterwarnings("ignore", ".*does not have many workers.*")
L.seed_everything(13, verbose=False)
torch.set_num_threads(1)

X, y = make_classification(n_samples=3000, n_features=20, n_informative=10, n_redundant=4,
                           n_classes=4, n_clusters_per_class=2, class_sep=1.5, random_state=13)
X_train, X_val, y_train, y_val = train_test_split(X, y, test_size=0.2, random_state=13, stratify=y)
scaler = StandardScaler().fit(X_train)
X_train = torch.tensor(scaler.transform(X_train), dtype=torch.float32)
X_val = torch.tensor(scaler.transform(X_val), dtype=torch.float32)
train_loader = DataLoader(TensorDataset(X_train, torch.tensor(y_train)), batch_size=128, shuffle=True)
val_loader = DataLoader(TensorDataset(X_val, torch.tensor(y_val)), batch_size=1024)


def focal_loss(logits, target, gamma=2.0):
    """Focal loss: down-weights easy examples."""
    log_p = F.log_softmax(logits, dim=-1).gather(1, target[:, None]).squeeze(1)
    p = log_p.exp()
    return -((1 - p) ** gamma * log_p).mean()


class TabularNet(L.LightningModule):
    def __init__(self, lr=2e-3):
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(
            nn.Linear(20, 128), nn.SiLU(), nn.Dropout(0.1),
            nn.Linear(128, 64), nn.SiLU(),
            nn.Linear(64, 4),
        )

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = focal_loss(self(x), y)
        self.log("train_loss", loss, on_step=False, on_epoch=True)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        self.log("val_ce", F.cross_entropy(logits, y))
        self.log("val_acc", (logits.argmax(-1) == y).float().mean())

    def on_train_epoch_end(self):
        m = self.trainer.callback_metrics
        print(f"epoch {self.current_epoch:2d} train_loss {m['train_loss']:.4f} "
              f"val_ce {m['val_ce']:.4f} val_acc {m['val_acc']:.4f}")

    def configure_optimizers(self):
        opt = torch.optim.Adam(self.parameters(), lr=self.hparams.lr)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=8, gamma=0.5)
        return [opt], [sched]


model = TabularNet()
trainer = L.Trainer(max_epochs=20, accelerator="cpu", devices=1, deterministic=True,
                    logger=False, enable_checkpointing=False, enable_progress_bar=False,
                    enable_model_summary=False, num_sanity_val_steps=0)
trainer.fit(model, train_loader, val_loader)
res = trainer.validate(model, val_loader, verbose=False)[0]
print(f"final val_ce {res['val_ce']:.4f} val_acc {res['val_acc']:.4f}")
