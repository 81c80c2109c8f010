"""Wide MLP on a small, noisy tabular problem, trained for a long fixed budget."""
import torch
import torch.nn as nn
import torch.nn.functional as F
import lightning as L
from lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint
from torch.utils.data import DataLoader, TensorDataset
from sklearn.datasets import make_classification
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

L.seed_everything(30, verbose=False)
torch.set_num_threads(1)

X, y = make_classification(n_samples=600, n_features=30, n_informative=5, n_redundant=5, flip_y=0.15,
                           class_sep=0.8, random_state=30)
X_tr, X_va, y_tr, y_va = train_test_split(X, y, test_size=0.4, random_state=30, stratify=y)
sc = StandardScaler().fit(X_tr)
train_dl = DataLoader(TensorDataset(torch.tensor(sc.transform(X_tr), dtype=torch.float32), torch.tensor(y_tr)),
                      batch_size=45, shuffle=True)
val_dl = DataLoader(TensorDataset(torch.tensor(sc.transform(X_va), dtype=torch.float32), torch.tensor(y_va)),
                    batch_size=240)


class WideMLP(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(30, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 2))

    def forward(self, x):
        return self.mlp(x)

    def training_step(self, batch, _):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss, on_epoch=True, on_step=False)
        return loss

    def validation_step(self, batch, _):
        x, y = batch
        logits = self(x)
        self.log("val_loss", F.cross_entropy(logits, y))
        self.log("val_acc", (logits.argmax(1) == y).float().mean())

    def on_validation_epoch_end(self):
        e = self.current_epoch + 1
        if not self.trainer.sanity_checking and self.trainer.state.fn == "fit" and e % 20 == 0:
            m = self.trainer.callback_metrics
            print(f"epoch {e:3d} train_loss {m['train_loss']:.4f} val_loss {m['val_loss']:.4f} val_acc {m['val_acc']:.3f}")

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-3)


model = WideMLP()
ckpt = ModelCheckpoint(monitor="val_loss", mode="min", dirpath="checkpoints_24", filename="best")
trainer = L.Trainer(max_epochs=200, logger=False, enable_progress_bar=False, enable_model_summary=False,
                    callbacks=[EarlyStopping(monitor="val_loss", patience=10), ckpt])
trainer.fit(model, train_dl, val_dl)
print(f"stopped at epoch {trainer.current_epoch}, best val_loss {ckpt.best_model_score:.4f}")
model = WideMLP.load_from_checkpoint(ckpt.best_model_path)
res = trainer.validate(model, val_dl, verbose=False)[0]
print(f"final model: val_loss {res['val_loss']:.4f} val_acc {res['val_acc']:.3f}")
