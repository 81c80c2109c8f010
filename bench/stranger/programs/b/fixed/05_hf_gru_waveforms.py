"""GRU classifier for noisy waveforms (sine / square / sawtooth) with transformers.Trainer,
using our own AdamW + linear-decay schedule passed through `optimizers=`."""
import math
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from transformers import Trainer, TrainingArguments, get_linear_schedule_with_warmup, set_seed

torch.set_num_threads(1)
set_seed(11)
T = 40


def waves(n, seed):
    rng = np.random.default_rng(seed)
    t = np.arange(T)
    y = rng.integers(0, 3, size=n)
    freq = rng.uniform(0.05, 0.15, size=(n, 1))
    phase = rng.uniform(0, 2 * math.pi, size=(n, 1))
    arg = 2 * math.pi * freq * t + phase
    sine = np.sin(arg)
    square = np.sign(np.sin(arg))
    saw = 2 * ((arg / (2 * math.pi)) % 1.0) - 1
    x = np.where(y[:, None] == 0, sine, np.where(y[:, None] == 1, square, saw))
    x = x + rng.normal(0, 0.6, size=x.shape)
    return x[..., None].astype(np.float32), y


class WaveSet(torch.utils.data.Dataset):
    def __init__(self, n, seed):
        x, y = waves(n, seed)
        self.x, self.y = torch.from_numpy(x), torch.from_numpy(y).long()

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return {"series": self.x[i], "labels": self.y[i]}


class GRUClassifier(nn.Module):
    def __init__(self, hidden=32, n_classes=3):
        super().__init__()
        self.gru = nn.GRU(1, hidden, batch_first=True)
        self.head = nn.Linear(hidden, n_classes)

    def forward(self, series, labels=None):
        _, h = self.gru(series)
        logits = self.head(h[-1])
        loss = F.cross_entropy(logits, labels) if labels is not None else None
        return {"loss": loss, "logits": logits}


train_set, val_set = WaveSet(3000, 0), WaveSet(600, 1)
model = GRUClassifier()
EPOCHS, BATCH = 8, 32

optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=1e-4)
scheduler = get_linear_schedule_with_warmup(optimizer, num_warmup_steps=1,
                                            num_training_steps=EPOCHS * math.ceil(len(train_set) / BATCH))

args = TrainingArguments(output_dir="_runs/05", num_train_epochs=EPOCHS,
                         per_device_train_batch_size=BATCH, per_device_eval_batch_size=300,
                         eval_strategy="epoch", logging_steps=75, save_strategy="no",
                         report_to="none", disable_tqdm=True, use_cpu=True, seed=11)
trainer = Trainer(model=model, args=args, train_dataset=train_set, eval_dataset=val_set,
                  optimizers=(optimizer, scheduler),
                  compute_metrics=lambda p: {"acc": float((p.predictions.argmax(1) == p.label_ids).mean())})
trainer.train()
r = trainer.evaluate()
print(f"final val_loss={r['eval_loss']:.4f} val_acc={r['eval_acc']:.4f}")
