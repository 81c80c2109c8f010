"""Two-block CNN on digits with Lightning; Adam optimizer."""
import torch
import torch.nn as nn
import torch.nn.functional as F
import lightning as L
from torch.utils.data import DataLoader, TensorDataset
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

L.seed_everything(5, verbose=False)
torch.set_num_threads(1)

d = load_digits()
imgs = torch.tensor(d.images / 16.0, dtype=torch.float32).unsqueeze(1)
labels = torch.tensor(d.target)
tr_x, va_x, tr_y, va_y = train_test_split(imgs, labels, test_size=0.2, random_state=5)


class SmallCNN(L.LightningModule):
    def __init__(self, learning_rate=1e-3):
        super().__init__()
        self.save_hyperparameters()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.fc1 = nn.Linear(32 * 2 * 2, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = F.relu(self.fc1(x.flatten(1)))
        return self.fc2(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("loss", loss, on_epoch=True, on_step=False)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        self.log("val_loss", F.cross_entropy(logits, y), on_epoch=True)
        self.log("val_acc", (logits.argmax(dim=1) == y).float().mean(), on_epoch=True)

    def on_train_epoch_end(self):
        m = self.trainer.callback_metrics
        print(f"epoch {self.current_epoch+1:2d}  loss {m['loss']:.4f}  val_loss {m['val_loss']:.4f}  val_acc {m['val_acc']:.3f}")

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.hparams.learning_rate)


trainer = L.Trainer(max_epochs=10, accelerator="cpu", logger=False, enable_checkpointing=False,
                    enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0)
model = SmallCNN()
trainer.fit(model, DataLoader(TensorDataset(tr_x, tr_y), batch_size=32, shuffle=True),
            DataLoader(TensorDataset(va_x, va_y), batch_size=128))
print(f"final val_acc {trainer.callback_metrics['val_acc']:.3f}")
