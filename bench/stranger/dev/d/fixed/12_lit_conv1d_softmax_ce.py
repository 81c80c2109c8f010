"""1-D CNN in Lightning classifying synthetic waveforms (5 shapes) with noise and random shift."""
import lightning as L
import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset, random_split

torch.set_num_threads(1)
L.seed_everything(31)

rng = np.random.default_rng(31)
N, T = 3000, 64
t = np.linspace(0, 1, T)
labels = rng.integers(0, 5, N)
shift = rng.uniform(0, 1, N)[:, None]
tt = (t[None] + shift) % 1.0
sig = np.zeros((N, T))
sig[labels == 0] = np.sin(2 * np.pi * 3 * tt[labels == 0])
sig[labels == 1] = np.sign(np.sin(2 * np.pi * 3 * tt[labels == 1]))
sig[labels == 2] = 2 * (3 * tt[labels == 2] % 1.0) - 1
sig[labels == 3] = np.sin(2 * np.pi * 6 * tt[labels == 3])
sig[labels == 4] = np.abs(np.sin(2 * np.pi * 3 * tt[labels == 4])) * 2 - 1
sig += 0.5 * rng.standard_normal(sig.shape)
ds = TensorDataset(torch.tensor(sig, dtype=torch.float32).unsqueeze(1), torch.tensor(labels))
train_ds, val_ds = random_split(ds, [2400, 600], generator=torch.Generator().manual_seed(31))


class WaveCNN(L.LightningModule):
    def __init__(self, n_classes=5, lr=0.01):
        super().__init__()
        self.lr = lr
        self.net = nn.Sequential(
            nn.Conv1d(1, 16, 5, padding=2), nn.ReLU(), nn.MaxPool1d(2),
            nn.Conv1d(16, 32, 5, padding=2), nn.ReLU(), nn.AdaptiveAvgPool1d(1),
            nn.Flatten(), nn.Linear(32, n_classes),
        )
        self.criterion = nn.CrossEntropyLoss()

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = self.criterion(self(x), y)
        self.log("train_loss", loss, on_step=False, on_epoch=True)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        probs = self(x)
        self.log("val_loss", self.criterion(probs, y))
        self.log("val_acc", (probs.argmax(1) == y).float().mean())

    def on_train_epoch_end(self):
        m = self.trainer.callback_metrics
        print(f"epoch {self.current_epoch+1:2d}  train_loss {m['train_loss']:.4f}  val_loss {m['val_loss']:.4f}  val_acc {m['val_acc']:.3f}")

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.lr, momentum=0.9)


model = WaveCNN()
trainer = L.Trainer(max_epochs=10, accelerator="cpu", logger=False, enable_checkpointing=False,
                    enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0)
trainer.fit(model, DataLoader(train_ds, batch_size=32, shuffle=True), DataLoader(val_ds, batch_size=200))
print(f"final val_acc {trainer.callback_metrics['val_acc']:.3f} val_loss {trainer.callback_metrics['val_loss']:.4f}")
