"""Transaction 'fraud' detector: MLP on tabular features trained with transformers.Trainer.
About 5% of the transactions are fraudulent."""
import numpy as np
import torch
import torch.nn as nn
from sklearn.datasets import make_classification
from sklearn.metrics import balanced_accuracy_score, f1_score, recall_score
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler
from transformers import Trainer, TrainingArguments, set_seed

torch.set_num_threads(1)
set_seed(0)

X, y = make_classification(n_samples=8000, n_features=20, n_informative=6, n_redundant=4,
                           weights=[0.95, 0.05], class_sep=0.7, flip_y=0.01, random_state=0)
X_tr, X_te, y_tr, y_te = train_test_split(X, y, test_size=0.25, stratify=y, random_state=0)
scaler = StandardScaler().fit(X_tr)
X_tr, X_te = scaler.transform(X_tr).astype(np.float32), scaler.transform(X_te).astype(np.float32)
print(f"train fraud rate: {y_tr.mean():.3f}")


class Transactions(torch.utils.data.Dataset):
    def __init__(self, X, y):
        self.X, self.y = torch.from_numpy(X), torch.from_numpy(y).long()

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return {"x": self.X[i], "labels": self.y[i]}


class FraudMLP(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(d, 64), nn.ReLU(), nn.Dropout(0.1),
                                  nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 2))
        self.loss_fn = nn.CrossEntropyLoss()

    def forward(self, x, labels=None):
        logits = self.body(x)
        return {"loss": self.loss_fn(logits, labels) if labels is not None else None,
                "logits": logits}


def compute_metrics(p):
    pred = p.predictions.argmax(-1)
    return {"accuracy": float((pred == p.label_ids).mean()),
            "fraud_recall": recall_score(p.label_ids, pred, zero_division=0),
            "macro_f1": f1_score(p.label_ids, pred, average="macro"),
            "balanced_acc": balanced_accuracy_score(p.label_ids, pred)}


args = TrainingArguments(output_dir="_runs/08", num_train_epochs=10, learning_rate=1e-3,
                         per_device_train_batch_size=64, per_device_eval_batch_size=512,
                         eval_strategy="epoch", logging_strategy="epoch", save_strategy="no",
                         report_to="none", disable_tqdm=True, use_cpu=True, seed=0)
trainer = Trainer(model=FraudMLP(X.shape[1]), args=args,
                  train_dataset=Transactions(X_tr, y_tr), eval_dataset=Transactions(X_te, y_te),
                  compute_metrics=compute_metrics)
trainer.train()
m = trainer.evaluate()
print(f"final val_acc={m['eval_accuracy']:.4f} fraud_recall={m['eval_fraud_recall']:.4f} "
      f"balanced_acc={m['eval_balanced_acc']:.4f} macro_f1={m['eval_macro_f1']:.4f}")
