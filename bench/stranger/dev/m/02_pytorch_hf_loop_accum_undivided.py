"""Custom training loop in the style of the transformers examples
(run_*_no_trainer.py): dict batches, a model that returns its own loss,
gradient_accumulation_steps, linear warmup/decay schedule.

Task: 4-class synthetic tabular classification.
"""
import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset
from sklearn.datasets import make_classification
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler
from transformers import get_linear_schedule_with_warmup

torch.set_num_threads(1)


@dataclass
class TrainingArguments:
    per_device_train_batch_size: int = 16
    per_device_eval_batch_size: int = 256
    gradient_accumulation_steps: int = 8
    learning_rate: float = 0.2
    momentum: float = 0.9
    weight_decay: float = 1e-4
    num_train_epochs: int = 15
    warmup_ratio: float = 0.05
    seed: int = 42


args = TrainingArguments()
torch.manual_seed(args.seed)


class TabularDataset(Dataset):
    def __init__(self, features, labels):
        self.features = torch.tensor(features, dtype=torch.float32)
        self.labels = torch.tensor(labels, dtype=torch.long)

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, idx):
        return {"inputs": self.features[idx], "labels": self.labels[idx]}


class TabularClassifier(nn.Module):
    def __init__(self, n_features, n_labels, hidden=128, dropout=0.1):
        super().__init__()
        self.encoder = nn.Sequential(
            nn.Linear(n_features, hidden), nn.ReLU(), nn.Dropout(dropout),
            nn.Linear(hidden, hidden), nn.ReLU(), nn.Dropout(dropout),
        )
        self.classifier = nn.Linear(hidden, n_labels)

    def forward(self, inputs, labels=None):
        logits = self.classifier(self.encoder(inputs))
        loss = F.cross_entropy(logits, labels) if labels is not None else None
        return {"loss": loss, "logits": logits}


X, y = make_classification(n_samples=4000, n_features=30, n_informative=16, n_redundant=6,
                           n_classes=4, n_clusters_per_class=2, class_sep=1.2, random_state=7)
X_tr, X_ev, y_tr, y_ev = train_test_split(X, y, test_size=0.25, random_state=args.seed, stratify=y)
scaler = StandardScaler().fit(X_tr)
train_dataset = TabularDataset(scaler.transform(X_tr), y_tr)
eval_dataset = TabularDataset(scaler.transform(X_ev), y_ev)

train_dataloader = DataLoader(train_dataset, batch_size=args.per_device_train_batch_size,
                              shuffle=True, drop_last=True)
eval_dataloader = DataLoader(eval_dataset, batch_size=args.per_device_eval_batch_size)

model = TabularClassifier(n_features=X.shape[1], n_labels=4)

no_decay = ["bias"]
optimizer_grouped_parameters = [
    {"params": [p for n, p in model.named_parameters() if not any(nd in n for nd in no_decay)],
     "weight_decay": args.weight_decay},
    {"params": [p for n, p in model.named_parameters() if any(nd in n for nd in no_decay)],
     "weight_decay": 0.0},
]
optimizer = torch.optim.SGD(optimizer_grouped_parameters, lr=args.learning_rate,
                            momentum=args.momentum, nesterov=True)

num_update_steps_per_epoch = math.ceil(len(train_dataloader) / args.gradient_accumulation_steps)
max_train_steps = args.num_train_epochs * num_update_steps_per_epoch
lr_scheduler = get_linear_schedule_with_warmup(
    optimizer,
    num_warmup_steps=int(args.warmup_ratio * max_train_steps),
    num_training_steps=max_train_steps,
)


def evaluate():
    model.eval()
    correct, total = 0, 0
    with torch.no_grad():
        for batch in eval_dataloader:
            outputs = model(**batch)
            preds = outputs["logits"].argmax(dim=-1)
            correct += (preds == batch["labels"]).sum().item()
            total += batch["labels"].numel()
    return correct / total


completed_steps = 0
for epoch in range(args.num_train_epochs):
    model.train()
    total_loss = 0.0
    for step, batch in enumerate(train_dataloader):
        outputs = model(**batch)
        loss = outputs["loss"]
        total_loss += loss.detach().float()
        loss.backward()
        if (step + 1) % args.gradient_accumulation_steps == 0 or step == len(train_dataloader) - 1:
            optimizer.step()
            lr_scheduler.step()
            optimizer.zero_grad()
            completed_steps += 1
    eval_acc = evaluate()
    print(f"epoch {epoch}: train_loss {total_loss.item() / len(train_dataloader):.4f} "
          f"eval_accuracy {eval_acc:.4f} lr {lr_scheduler.get_last_lr()[0]:.4f}")

print(f"final eval_accuracy: {evaluate():.4f}")
