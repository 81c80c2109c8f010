"""Keyword-spotting classifier: small BERT + classification head, HF Trainer."""
import numpy as np
import torch
from torch.utils.data import Dataset
from transformers import (BertConfig, BertForSequenceClassification, Trainer,
                          TrainingArguments, set_seed)

torch.set_num_threads(1)
set_seed(3)
VOCAB, SEQ, N_CLASSES = 80, 20, 4


def make_data(n, rng):
    # class = which of 4 trigger words occurs most often in the sentence
    ids = rng.integers(10, VOCAB, size=(n, SEQ))
    y = rng.integers(0, N_CLASSES, size=n)
    for i in range(n):
        pos = rng.permutation(np.arange(1, SEQ))
        ids[i, pos[:3]] = 4 + y[i]
        others = [c for c in range(N_CLASSES) if c != y[i]]
        ids[i, pos[3:5]] = 4 + rng.choice(others, size=2, replace=False)
    ids[:, 0] = 1
    return ids, y


class DS(Dataset):
    def __init__(self, ids, y):
        self.ids, self.y = torch.tensor(ids), torch.tensor(y)

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "attention_mask": torch.ones(SEQ, dtype=torch.long),
                "labels": self.y[i]}


rng = np.random.default_rng(3)
train_ds, val_ds = DS(*make_data(3000, rng)), DS(*make_data(800, rng))

config = BertConfig(vocab_size=VOCAB, hidden_size=48, num_hidden_layers=2, num_attention_heads=4,
                    intermediate_size=96, max_position_embeddings=SEQ, num_labels=N_CLASSES)
model = BertForSequenceClassification(config)

n_train = sum(p.numel() for p in model.parameters() if p.requires_grad)
print(f"trainable parameters: {n_train}")

args = TrainingArguments(output_dir="_runs/04", num_train_epochs=5, learning_rate=1e-3,
                         per_device_train_batch_size=32, per_device_eval_batch_size=200,
                         lr_scheduler_type="linear", warmup_steps=20,
                         eval_strategy="epoch", logging_steps=50, save_strategy="no",
                         report_to="none", disable_tqdm=True, use_cpu=True, seed=3)


def acc(p):
    return {"accuracy": float((p.predictions.argmax(-1) == p.label_ids).mean())}


trainer = Trainer(model=model, args=args, train_dataset=train_ds, eval_dataset=val_ds,
                  compute_metrics=acc)
trainer.train()
ev = trainer.evaluate()
print(f"final val_loss={ev['eval_loss']:.4f} val_acc={ev['eval_accuracy']:.4f}")
