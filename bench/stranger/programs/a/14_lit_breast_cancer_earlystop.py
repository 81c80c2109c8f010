import torch
import torch.nn as nn
import lightning as L
from lightning.pytorch.callbacks import EarlyStopping
from torch.utils.data import DataLoader, TensorDataset
from sklearn.datasets import load_breast_cancer
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

L.seed_everything(77, verbose=False)
torch.set_num_threads(1)

X, y = load_breast_cancer(return_X_y=True)
X_tmp, X_test, y_tmp, y_test = train_test_split(X, y, test_size=0.2, stratify=y, random_state=77)
X_tr, X_val, y_tr, y_val = train_test_split(X_tmp, y_tmp, test_size=0.2, stratify=y_tmp, random_state=77)
scaler = StandardScaler().fit(X_tr)
to_ds = lambda a, b: TensorDataset(torch.tensor(scaler.transform(a), dtype=torch.float32), torch.tensor(b, dtype=torch.float32))


class LogReg(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.model = nn.Sequential(nn.Linear(30, 16), nn.ReLU(), nn.Dropout(0.2), nn.Linear(16, 1))
        self.crit = nn.BCEWithLogitsLoss()

    def forward(self, x):
        return self.model(x).squeeze(-1)

    def _step(self, batch, name):
        x, y = batch
        logit = self(x)
        loss = self.crit(logit, y)
        self.log(f"{name}_loss", loss, on_epoch=True, on_step=False)
        self.log(f"{name}_acc", ((logit > 0).float() == y).float().mean(), on_epoch=True, on_step=False)
        return loss

    def training_step(self, batch, batch_idx):
        return self._step(batch, "train")

    def validation_step(self, batch, batch_idx):
        self._step(batch, "val")

    def test_step(self, batch, batch_idx):
        self._step(batch, "test")

    def on_train_epoch_end(self):
        m = self.trainer.callback_metrics
        print(f"epoch {self.current_epoch+1:3d} train_loss {m['train_loss']:.4f} val_loss {m['val_loss']:.4f} val_acc {m['val_acc']:.3f}")

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-3, weight_decay=1e-4)


model = LogReg()
trainer = L.Trainer(max_epochs=300, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                    enable_model_summary=False, num_sanity_val_steps=0,
                    callbacks=[EarlyStopping("val_loss", patience=5, min_delta=1e-3)])
trainer.fit(model, DataLoader(to_ds(X_tr, y_tr), batch_size=32, shuffle=True), DataLoader(to_ds(X_val, y_val), batch_size=128))
res = trainer.test(model, DataLoader(to_ds(X_test, y_test), batch_size=128), verbose=False)[0]
print(f"stopped after {trainer.current_epoch} epochs; test_loss {res['test_loss']:.4f} test_acc {res['test_acc']:.3f}")
