"""Five-class tabular classifier in Lightning with manual optimization
(automatic_optimization = False): SGD with momentum and weight decay, and a cosine
schedule stepped by hand once per epoch."""
import tempfile
import warnings

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import lightning as L
from torch.utils.data import DataLoader, TensorDataset
from sklearn.datasets import make_classification
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

warnings.filterwarnings("ignore", ".*does not have many workers.*")
SEED = 29
MAX_EPOCHS = 15
L.seed_everything(SEED, workers=True)
torch.set_num_threads(2)

X, y = make_classification(
    n_samples=4000, n_features=20, n_informative=12, n_redundant=4,
    n_classes=5, n_clusters_per_class=2, class_sep=1.0, random_state=SEED,
)
X_tr, X_va, y_tr, y_va = train_test_split(X, y, test_size=0.25, stratify=y, random_state=SEED)
scaler = StandardScaler().fit(X_tr)
train_set = TensorDataset(torch.tensor(scaler.transform(X_tr), dtype=torch.float32), torch.tensor(y_tr))
val_set = TensorDataset(torch.tensor(scaler.transform(X_va), dtype=torch.float32), torch.tensor(y_va))
train_loader = DataLoader(train_set, batch_size=64, shuffle=True)
val_loader = DataLoader(val_set, batch_size=500)


class ManualTabularNet(L.LightningModule):
    def __init__(self, in_dim=20, hidden=128, num_classes=5, lr=0.05):
        super().__init__()
        self.save_hyperparameters()
        self.automatic_optimization = False
        self.model = nn.Sequential(
            nn.Linear(in_dim, hidden), nn.ReLU(),
            nn.Linear(hidden, hidden), nn.ReLU(),
            nn.Linear(hidden, num_classes),
        )

    def forward(self, x):
        return self.model(x)

    def training_step(self, batch, batch_idx):
        opt = self.optimizers()
        x, y = batch
        logits = self(x)
        loss = F.cross_entropy(logits, y)
        opt.zero_grad()
        self.manual_backward(loss)
        opt.step()
        acc = (logits.argmax(-1) == y).float().mean()
        self.log("train_loss", loss, on_step=True, on_epoch=True)
        self.log("train_acc", acc, on_step=False, on_epoch=True)

    def on_train_epoch_end(self):
        self.lr_schedulers().step()

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        self.log("val_loss", F.cross_entropy(logits, y), on_epoch=True)
        self.log("val_acc", (logits.argmax(-1) == y).float().mean(), on_epoch=True)

    def configure_optimizers(self):
        opt = torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=0.9, weight_decay=5e-4)
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=MAX_EPOCHS)
        return [opt], [sched]


class PrintMetrics(L.Callback):
    def on_train_epoch_end(self, trainer, pl_module):
        m = trainer.callback_metrics
        print(
            f"epoch {trainer.current_epoch + 1:02d} train_loss {m['train_loss_epoch']:.4f} "
            f"train_acc {m['train_acc']:.4f} val_loss {m['val_loss']:.4f} val_acc {m['val_acc']:.4f}",
            flush=True,
        )


model = ManualTabularNet()
trainer = L.Trainer(
    max_epochs=MAX_EPOCHS,
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
print(f"final val_loss {res['val_loss']:.4f} val_acc {res['val_acc']:.4f}")
