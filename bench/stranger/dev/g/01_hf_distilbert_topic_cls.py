"""Tiny DistilBERT topic classifier on synthetic token sequences.

Each "document" mixes filler words with words from one of three topic
vocabularies; the label is the topic. Hugging Face Trainer with step-wise
evaluation, linear schedule with warm-up and a hand-written compute_metrics.
"""
import os
import tempfile

import numpy as np
import torch
from torch.utils.data import Dataset
from transformers import (DistilBertConfig, DistilBertForSequenceClassification,
                          Trainer, TrainingArguments, set_seed)

set_seed(0)
VOCAB = 120
PAD, CLS = 0, 1
SEQ_LEN = 24
N_CLASSES = 3
rng = np.random.default_rng(0)

# token ids 2..39 are filler; 40..119 split into 3 topic vocabularies (with overlap noise)
FILLER = np.arange(2, 40)
TOPICS = [np.arange(40, 67), np.arange(67, 94), np.arange(94, 120)]


def make_docs(n):
    ids, labels = [], []
    for _ in range(n):
        y = int(rng.integers(N_CLASSES))
        length = int(rng.integers(10, SEQ_LEN))
        n_topic = int(rng.integers(2, 5))
        toks = list(rng.choice(FILLER, size=length - n_topic))
        toks += list(rng.choice(TOPICS[y], size=n_topic))
        # one distractor word from another topic
        other = (y + int(rng.integers(1, N_CLASSES))) % N_CLASSES
        toks[int(rng.integers(len(toks)))] = int(rng.choice(TOPICS[other]))
        rng.shuffle(toks)
        seq = [CLS] + [int(t) for t in toks]
        ids.append(seq)
        labels.append(y)
    return ids, labels


class DocDataset(Dataset):
    def __init__(self, ids, labels):
        self.ids, self.labels = ids, labels

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        seq = self.ids[i][:SEQ_LEN]
        pad = SEQ_LEN - len(seq)
        return {
            "input_ids": torch.tensor(seq + [PAD] * pad),
            "attention_mask": torch.tensor([1] * len(seq) + [0] * pad),
            "labels": torch.tensor(self.labels[i]),
        }


train_ds = DocDataset(*make_docs(1600))
val_ds = DocDataset(*make_docs(400))

config = DistilBertConfig(vocab_size=VOCAB, dim=64, hidden_dim=128, n_layers=2, n_heads=4,
                          max_position_embeddings=64, dropout=0.1, attention_dropout=0.1,
                          seq_classif_dropout=0.2, num_labels=N_CLASSES, pad_token_id=PAD)
model = DistilBertForSequenceClassification(config)


def compute_metrics(eval_pred):
    logits, labels = eval_pred
    preds = logits.argmax(-1)
    acc = float((preds == labels).mean())
    per_class = [float((preds[labels == c] == c).mean()) for c in range(N_CLASSES)]
    return {"accuracy": acc, "min_class_recall": min(per_class)}


out_dir = tempfile.mkdtemp(prefix="hf_distilbert_")
args = TrainingArguments(
    output_dir=out_dir,
    num_train_epochs=6,
    per_device_train_batch_size=32,
    per_device_eval_batch_size=128,
    learning_rate=5e-4,
    weight_decay=0.01,
    lr_scheduler_type="linear",
    warmup_steps=30,  # 10% of the 300 optimisation steps
    optim="adamw_torch",
    eval_strategy="steps",
    eval_steps=50,
    logging_strategy="steps",
    logging_steps=25,
    save_strategy="no",
    report_to="none",
    seed=0,
    data_seed=0,
    use_cpu=True,
    dataloader_num_workers=0,
    disable_tqdm=True,
)

trainer = Trainer(model=model, args=args, train_dataset=train_ds, eval_dataset=val_ds,
                  compute_metrics=compute_metrics)
train_out = trainer.train()
for rec in trainer.state.log_history:
    if "loss" in rec:
        print(f"step {rec['step']:4d}  train_loss {rec['loss']:.4f}  lr {rec['learning_rate']:.2e}")
    if "eval_loss" in rec:
        print(f"step {rec['step']:4d}  eval_loss {rec['eval_loss']:.4f}  eval_acc {rec['eval_accuracy']:.3f}")
final = trainer.evaluate()
print(f"final train_loss {train_out.training_loss:.4f}")
print(f"final val_loss {final['eval_loss']:.4f}  val_acc {final['eval_accuracy']:.3f}  "
      f"min_class_recall {final['eval_min_class_recall']:.3f}")
