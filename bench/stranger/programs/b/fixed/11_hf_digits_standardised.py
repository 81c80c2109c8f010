"""Digits classifier (two hidden layers, dropout) with transformers.Trainer.
Features are standardised per pixel with the training-set statistics."""
import numpy as np
import torch
import torch.nn as nn
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from transformers import Trainer, TrainingArguments, set_seed

torch.set_num_threads(1)
set_seed(4)

X, y = load_digits(return_X_y=True)
X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.25, random_state=4)
mu, sigma = X_train.mean(axis=0), X_train.std(axis=0)
sigma[sigma == 0] = 1.0
X_train = ((X_train - mu) / sigma).astype(np.float32)
X_test = ((X_test - mu) / sigma).astype(np.float32)


class Digits(torch.utils.data.Dataset):
    def __init__(self, X, y):
        self.X = torch.tensor(X)
        self.y = torch.tensor(y)

    def __len__(self):
        return len(self.y)

    def __getitem__(self, idx):
        return {"inputs": self.X[idx], "labels": self.y[idx]}


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Dropout(0.2),
                                 nn.Linear(128, 64), nn.ReLU(), nn.Linear(64, 10))
        self.criterion = nn.CrossEntropyLoss()

    def forward(self, inputs, labels=None):
        logits = self.mlp(inputs)
        if labels is None:
            return {"logits": logits}
        return {"loss": self.criterion(logits, labels), "logits": logits}


def accuracy(eval_pred):
    logits, labels = eval_pred
    return {"accuracy": float((np.argmax(logits, axis=1) == labels).mean())}


args = TrainingArguments(output_dir="_runs/11", num_train_epochs=10, learning_rate=1e-3,
                         per_device_train_batch_size=32, per_device_eval_batch_size=256,
                         eval_strategy="epoch", logging_steps=40, save_strategy="no",
                         report_to="none", disable_tqdm=True, use_cpu=True, seed=4)
trainer = Trainer(model=Net(), args=args, train_dataset=Digits(X_train, y_train),
                  eval_dataset=Digits(X_test, y_test), compute_metrics=accuracy)
trainer.train()
scores = trainer.evaluate()
print(f"final val_loss={scores['eval_loss']:.4f} val_acc={scores['eval_accuracy']:.4f}")
