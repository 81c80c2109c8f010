import random

import numpy as np
import torch
from torch.utils.data import Dataset
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments, set_seed

torch.set_num_threads(1)
set_seed(0)

PAD, CLS, SEP = 0, 1, 2
VOCAB = 60
MARKERS = {3, 4, 5}          # a sequence is "positive" if it contains any of these tokens
rng = random.Random(0)


def make_example():
    n = rng.randint(6, 30)
    label = rng.random() < 0.5
    toks = [rng.randint(6, VOCAB - 1) for _ in range(n)]
    if label:
        for _ in range(rng.randint(1, 2)):
            toks[rng.randrange(n)] = rng.choice(sorted(MARKERS))
    return toks, int(label)


def build_split(n):
    seqs, labels = zip(*(make_example() for _ in range(n)))
    return [[CLS] + list(s) + [SEP] for s in seqs], list(labels)


train_ids, train_labels = build_split(3000)
val_ids, val_labels = build_split(600)

# bucket by length so that padded batches waste less compute
order = sorted(range(len(train_ids)), key=lambda i: len(train_ids[i]))
train_ids = [train_ids[i] for i in order]
train_labels = [train_labels[i] for i in order]


class TokenDataset(Dataset):
    def __init__(self, ids, labels):
        self.ids, self.labels = ids, labels

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.labels[i]}


def collate(batch):
    width = max(len(b["input_ids"]) for b in batch)
    ids = torch.full((len(batch), width), PAD, dtype=torch.long)
    mask = torch.zeros((len(batch), width), dtype=torch.long)
    for r, b in enumerate(batch):
        ids[r, : len(b["input_ids"])] = torch.tensor(b["input_ids"])
        mask[r, : len(b["input_ids"])] = 1
    return {"input_ids": ids, "attention_mask": mask,
            "labels": torch.tensor([b["labels"] for b in batch])}


def compute_metrics(pred):
    return {"accuracy": float((np.argmax(pred.predictions, -1) == pred.label_ids).mean())}


config = BertConfig(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                    intermediate_size=128, max_position_embeddings=64, num_labels=2, pad_token_id=PAD)
model = BertForSequenceClassification(config)

args = TrainingArguments(
    output_dir="/tmp/hf_len_sort_run",
    num_train_epochs=4,
    per_device_train_batch_size=32,
    per_device_eval_batch_size=128,
    learning_rate=1e-3,
    warmup_steps=20,
    weight_decay=0.01,
    logging_strategy="epoch",
    eval_strategy="epoch",
    save_strategy="no",
    report_to="none",
    disable_tqdm=True,
    use_cpu=True,
    seed=0,
)
trainer = Trainer(model=model, args=args, train_dataset=TokenDataset(train_ids, train_labels),
                  eval_dataset=TokenDataset(val_ids, val_labels), data_collator=collate,
                  compute_metrics=compute_metrics)
trainer.train()
for rec in trainer.state.log_history:
    if "loss" in rec:
        print(f"epoch {rec['epoch']:.0f}  train_loss {rec['loss']:.4f}")
metrics = trainer.evaluate()
print(f"final val_loss {metrics['eval_loss']:.4f}  val_acc {metrics['eval_accuracy']:.4f}")
