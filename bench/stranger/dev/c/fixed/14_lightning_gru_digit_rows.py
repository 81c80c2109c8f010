"""Read each 8x8 digit row by row with a GRU (8 time steps of 8 pixels). Lightning + Adam."""
import lightning as L
import torch
from torch import nn
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch.utils.data import DataLoader, TensorDataset
from torchmetrics.functional import accuracy

L.seed_everything(14, verbose=False)
torch.set_num_threads(1)


class RowGRU(L.LightningModule):
    def __init__(self, hidden=64, lr=5e-3):
        super().__init__()
        self.save_hyperparameters()
        self.gru = nn.GRU(8, hidden, num_layers=1, batch_first=True)
        self.cls = nn.Linear(hidden, 10)
        self.loss = nn.CrossEntropyLoss()

    def forward(self, x):          # x: (B, 8, 8)
        out, _ = self.gru(x)
        return self.cls(out[:, -1])

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = self.loss(self(x), y)
        self.log("train_loss", loss, on_epoch=True, on_step=False)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        self.log("val_loss", self.loss(logits, y))
        self.log("val_acc", accuracy(logits, y, task="multiclass", num_classes=10))

    def on_train_epoch_end(self):
        m = self.trainer.callback_metrics
        print(f"epoch {self.current_epoch:2d}  train_loss={m['train_loss']:.4f}  "
              f"val_loss={m['val_loss']:.4f}  val_acc={m['val_acc']:.4f}")

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.hparams.lr)


digits = load_digits()
X = torch.tensor(digits.images / 16.0, dtype=torch.float32)
y = torch.tensor(digits.target)
i_tr, i_va = train_test_split(range(len(y)), test_size=0.2, random_state=14, stratify=digits.target)
train_loader = DataLoader(TensorDataset(X[i_tr], y[i_tr]), batch_size=32, shuffle=True)
val_loader = DataLoader(TensorDataset(X[i_va], y[i_va]), batch_size=360)

trainer = L.Trainer(max_epochs=15, accelerator="cpu", logger=False, enable_checkpointing=False,
                    enable_progress_bar=False, enable_model_summary=False, deterministic=True)
trainer.fit(RowGRU(), train_loader, val_loader)
print(f"final val_acc={trainer.callback_metrics['val_acc']:.4f} val_loss={trainer.callback_metrics['val_loss']:.4f}")
