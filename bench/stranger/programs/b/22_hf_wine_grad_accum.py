"""Wine classifier (custom nn.Module) trained with the HF Trainer using tiny per-device batches,
gradient accumulation and gradient clipping."""
import numpy as np
import torch
import torch.nn as nn
from sklearn.datasets import load_wine
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler
from transformers import Trainer, TrainingArguments, set_seed

torch.set_num_threads(1)
set_seed(22)
X, y = load_wine(return_X_y=True)
X_tr, X_va, y_tr, y_va = train_test_split(X, y, test_size=0.3, stratify=y, random_state=22)
scaler = StandardScaler().fit(X_tr)
X_tr, X_va = scaler.transform(X_tr).astype("float32"), scaler.transform(X_va).astype("float32")


class WineSet(torch.utils.data.Dataset):
    def __init__(self, X, y):
        self.rows = [{"x": torch.from_numpy(a), "labels": torch.tensor(int(b))} for a, b in zip(X, y)]

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        return self.rows[i]


class WineNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(13, 32), nn.ReLU(), nn.Dropout(0.1), nn.Linear(32, 3))

    def forward(self, x, labels=None):
        logits = self.net(x)
        out = {"logits": logits}
        if labels is not None:
            out["loss"] = nn.functional.cross_entropy(logits, labels)
        return out


args = TrainingArguments(output_dir="_runs/22", num_train_epochs=30, learning_rate=5e-3,
                         per_device_train_batch_size=4, gradient_accumulation_steps=4,
                         per_device_eval_batch_size=64, max_grad_norm=1.0,
                         lr_scheduler_type="linear", warmup_steps=10,
                         eval_strategy="epoch", logging_steps=20, save_strategy="no",
                         report_to="none", disable_tqdm=True, use_cpu=True, seed=22)
trainer = Trainer(model=WineNet(), args=args, train_dataset=WineSet(X_tr, y_tr),
                  eval_dataset=WineSet(X_va, y_va),
                  compute_metrics=lambda p: {"accuracy": float((p.predictions.argmax(-1) == p.label_ids).mean())})
trainer.train()
m = trainer.evaluate()
print(f"final val_loss={m['eval_loss']:.4f} val_acc={m['eval_accuracy']:.4f}")
