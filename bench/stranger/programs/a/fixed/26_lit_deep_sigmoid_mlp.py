"""Deep fully-connected classifier (6 hidden layers) on breast-cancer features."""
import torch
import torch.nn as nn
import torch.nn.functional as F
import lightning as L
from torch.utils.data import DataLoader, TensorDataset
from sklearn.datasets import load_breast_cancer
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

L.seed_everything(9, verbose=False)
torch.set_num_threads(1)


class DeepNet(L.LightningModule):
    def __init__(self, depth=6, width=64, lr=0.05):
        super().__init__()
        self.save_hyperparameters()
        layers, d_in = [], 30
        for _ in range(depth):
            layers += [nn.Linear(d_in, width), nn.ReLU()]
            d_in = width
        layers.append(nn.Linear(width, 2))
        self.net = nn.Sequential(*layers)

    def forward(self, x):
        return self.net(x)

    def step(self, batch, stage):
        x, y = batch
        logits = self(x)
        loss = F.cross_entropy(logits, y)
        acc = (logits.argmax(1) == y).float().mean()
        self.log(f"{stage}_loss", loss, on_epoch=True, on_step=False)
        self.log(f"{stage}_acc", acc, on_epoch=True, on_step=False)
        return loss

    def training_step(self, batch, batch_idx):
        return self.step(batch, "train")

    def validation_step(self, batch, batch_idx):
        self.step(batch, "val")

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=0.9)


class Report(L.Callback):
    def on_validation_end(self, trainer, module):
        if trainer.sanity_checking or (trainer.current_epoch + 1) % 4:
            return
        m = trainer.callback_metrics
        print(f"epoch {trainer.current_epoch+1}: train_loss {m['train_loss']:.4f} train_acc {m['train_acc']:.3f} "
              f"val_loss {m['val_loss']:.4f} val_acc {m['val_acc']:.3f}")


X, y = load_breast_cancer(return_X_y=True)
Xtr, Xva, ytr, yva = train_test_split(X, y, test_size=0.3, random_state=9, stratify=y)
sc = StandardScaler().fit(Xtr)
tr = TensorDataset(torch.tensor(sc.transform(Xtr), dtype=torch.float32), torch.tensor(ytr))
va = TensorDataset(torch.tensor(sc.transform(Xva), dtype=torch.float32), torch.tensor(yva))

trainer = L.Trainer(max_epochs=20, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                    enable_model_summary=False, callbacks=[Report()])
trainer.fit(DeepNet(), DataLoader(tr, batch_size=32, shuffle=True), DataLoader(va, batch_size=256))
print(f"final val_acc {trainer.callback_metrics['val_acc']:.3f}")
