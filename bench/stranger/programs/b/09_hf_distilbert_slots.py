"""Small DistilBERT (from a config) for 4-way command classification, Trainer with max_steps."""
import numpy as np
import torch
from torch.utils.data import Dataset, Subset
from transformers import (DistilBertConfig, DistilBertForSequenceClassification, Trainer,
                          TrainingArguments, set_seed)

torch.set_num_threads(1)
set_seed(13)
VOCAB, SEQ, K = 90, 18, 4


class Commands(Dataset):
    """label = the command word that appears most often; two decoy command words are present."""

    def __init__(self, n, seed):
        rng = np.random.default_rng(seed)
        x = rng.integers(20, VOCAB, size=(n, SEQ))
        y = rng.integers(0, K, size=n)
        for i in range(n):
            p = rng.permutation(np.arange(1, SEQ))
            x[i, p[:3]] = 3 + 2 * y[i] + rng.integers(0, 2, size=3)
            decoys = rng.choice([c for c in range(K) if c != y[i]], size=2, replace=False)
            x[i, p[3:5]] = 3 + 2 * decoys
        x[:, 0] = 1
        self.x, self.y = torch.tensor(x), torch.tensor(y)

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return {"input_ids": self.x[i], "labels": self.y[i]}


full_train = Commands(4000, 0)
train_ds = Subset(full_train, range(48))  # quick smoke test
val_ds = Commands(800, 1)
print(f"train examples: {len(train_ds)}  val examples: {len(val_ds)}")

cfg = DistilBertConfig(vocab_size=VOCAB, dim=48, n_layers=2, n_heads=4, hidden_dim=96,
                       max_position_embeddings=SEQ, num_labels=K, seq_classif_dropout=0.1)
model = DistilBertForSequenceClassification(cfg)

args = TrainingArguments(output_dir="_runs/09", max_steps=400, learning_rate=1e-3,
                         per_device_train_batch_size=16, per_device_eval_batch_size=200,
                         warmup_steps=20, lr_scheduler_type="linear",
                         eval_strategy="steps", eval_steps=100, logging_steps=50,
                         save_strategy="no", report_to="none", disable_tqdm=True,
                         use_cpu=True, seed=13)


def compute_metrics(p):
    return {"accuracy": float((p.predictions.argmax(-1) == p.label_ids).mean())}


trainer = Trainer(model=model, args=args, train_dataset=train_ds, eval_dataset=val_ds,
                  compute_metrics=compute_metrics)
trainer.train()
tr = trainer.evaluate(train_ds, metric_key_prefix="train")
va = trainer.evaluate()
print(f"final train_loss={tr['train_loss']:.4f} train_acc={tr['train_accuracy']:.4f} "
      f"val_loss={va['eval_loss']:.4f} val_acc={va['eval_accuracy']:.4f}")
