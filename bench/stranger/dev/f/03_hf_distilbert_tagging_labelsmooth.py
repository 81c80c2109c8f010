"""Token classification (toy NER) with a tiny DistilBERT and label smoothing.

Entities are one or two words: the first word comes from a person, location or
organisation lexicon; an optional second word comes from a shared set whose tag
depends on the word before it. Trained with the HF Trainer, label_smoothing_factor=0.1,
evaluation every epoch; we report token accuracy and entity-token F1.
"""
import numpy as np
import torch
from torch.utils.data import Dataset
from transformers import (DistilBertConfig, DistilBertForTokenClassification, Trainer,
                          TrainingArguments, set_seed)

set_seed(2)
rng = np.random.default_rng(2)

PAD, CLS, SEP = 0, 1, 2
FILLER = list(range(3, 30))
LEXICON = {1: list(range(30, 45)), 2: list(range(45, 60)), 3: list(range(60, 75))}
SHARED = list(range(75, 90))           # second word of a span: type from context
VOCAB = 90
TAGS = ["O", "PER", "LOC", "ORG"]
MAX_LEN = 32


def sentence():
    ids, tags = [], []
    while len(ids) < MAX_LEN - 5:
        if rng.random() < 0.25:
            t = int(rng.integers(1, 4))
            ids.append(int(rng.choice(LEXICON[t])))
            tags.append(t)
            if rng.random() < 0.5:
                ids.append(int(rng.choice(SHARED)))
                tags.append(t)
        else:
            ids.append(int(rng.choice(FILLER)))
            tags.append(0)
    return ids, tags


class NERData(Dataset):
    def __init__(self, n):
        self.items = [sentence() for _ in range(n)]

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        ids, tags = self.items[i]
        ids = [CLS] + ids + [SEP]
        labels = [-100] + tags + [-100]
        n = len(ids)
        return {"input_ids": torch.tensor(ids + [PAD] * (MAX_LEN - n)),
                "attention_mask": torch.tensor([1] * n + [0] * (MAX_LEN - n)),
                "labels": torch.tensor(labels + [-100] * (MAX_LEN - n))}


train_ds = NERData(1500)
val_ds = NERData(400)

config = DistilBertConfig(vocab_size=VOCAB, dim=64, n_layers=2, n_heads=4, hidden_dim=128,
                          max_position_embeddings=MAX_LEN, num_labels=len(TAGS),
                          dropout=0.1, attention_dropout=0.1)
model = DistilBertForTokenClassification(config)


def compute_metrics(eval_pred):
    logits, labels = eval_pred
    preds = logits.argmax(-1)
    valid = labels != -100
    p, y = preds[valid], labels[valid]
    acc = (p == y).mean()
    tp = ((p == y) & (y != 0)).sum()
    pred_ent = (p != 0).sum()
    true_ent = (y != 0).sum()
    prec = tp / max(pred_ent, 1)
    rec = tp / max(true_ent, 1)
    f1 = 2 * prec * rec / max(prec + rec, 1e-9)
    return {"token_acc": float(acc), "entity_f1": float(f1)}


args = TrainingArguments(
    output_dir="/tmp/f03_distilbert_ner",
    num_train_epochs=6,
    per_device_train_batch_size=32,
    per_device_eval_batch_size=128,
    learning_rate=1e-3,
    label_smoothing_factor=0.1,
    weight_decay=0.01,
    warmup_steps=20,
    eval_strategy="epoch",
    logging_strategy="epoch",
    save_strategy="no",
    report_to="none",
    seed=2,
    use_cpu=True,
    disable_tqdm=True,
)

trainer = Trainer(model=model, args=args, train_dataset=train_ds, eval_dataset=val_ds,
                  compute_metrics=compute_metrics)
trainer.train()
m = trainer.evaluate()
print(f"final val_loss {m['eval_loss']:.4f} token_acc {m['eval_token_acc']:.4f} "
      f"entity_f1 {m['eval_entity_f1']:.4f}")
