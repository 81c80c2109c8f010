"""Configurable-depth MLP for a 5-class tabular problem, trained with transformers.Trainer."""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from sklearn.datasets import make_classification
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler
from transformers import Trainer, TrainingArguments, set_seed

torch.set_num_threads(1)
set_seed(1)

X, y = make_classification(n_samples=5000, n_features=20, n_informative=12, n_redundant=2,
                           n_classes=5, n_clusters_per_class=2, class_sep=1.2, random_state=1)
X_train, X_val, y_train, y_val = train_test_split(X, y, test_size=0.2, random_state=1, stratify=y)
sc = StandardScaler().fit(X_train)
X_train, X_val = sc.transform(X_train).astype(np.float32), sc.transform(X_val).astype(np.float32)


class TabDS(torch.utils.data.Dataset):
    def __init__(self, X, y):
        self.X, self.y = torch.from_numpy(X), torch.from_numpy(y)

    def __len__(self):
        return len(self.X)

    def __getitem__(self, i):
        return {"features": self.X[i], "labels": self.y[i]}


class MLP(nn.Module):
    def __init__(self, d_in, hidden_sizes=(64, 64, 32), n_classes=5, dropout=0.1):
        super().__init__()
        sizes = [d_in, *hidden_sizes]
        self.layers = []
        for a, b in zip(sizes[:-1], sizes[1:]):
            self.layers.append(nn.Linear(a, b))
        self.drop = nn.Dropout(dropout)
        self.out = nn.Linear(sizes[-1], n_classes)

    def forward(self, features, labels=None):
        h = features
        for layer in self.layers:
            h = self.drop(F.relu(layer(h)))
        logits = self.out(h)
        loss = F.cross_entropy(logits, labels) if labels is not None else None
        return {"loss": loss, "logits": logits}


model = MLP(X.shape[1])
print("parameters:", sum(p.numel() for p in model.parameters()))
args = TrainingArguments(output_dir="_runs/10", num_train_epochs=12, learning_rate=2e-3,
                         per_device_train_batch_size=64, per_device_eval_batch_size=500,
                         lr_scheduler_type="cosine", warmup_steps=20, weight_decay=1e-4,
                         eval_strategy="epoch", logging_strategy="epoch", save_strategy="no",
                         report_to="none", disable_tqdm=True, use_cpu=True, seed=1)
trainer = Trainer(model=model, args=args, train_dataset=TabDS(X_train, y_train),
                  eval_dataset=TabDS(X_val, y_val),
                  compute_metrics=lambda p: {"accuracy": float((p.predictions.argmax(1) == p.label_ids).mean())})
trainer.train()
res = trainer.evaluate()
print(f"final val_loss={res['eval_loss']:.4f} val_acc={res['eval_accuracy']:.4f}")
