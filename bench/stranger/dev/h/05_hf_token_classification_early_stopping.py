"""Hugging Face token classification (BIO tagging of synthetic entity spans) with a
custom padding data_collator (labels padded with -100), label smoothing, and
EarlyStoppingCallback + load_best_model_at_end=True; the restored best model is then
scored with trainer.evaluate() and trainer.predict() (token-level accuracy on real tokens)."""
import numpy as np
import torch
from torch.utils.data import Dataset
from transformers import (BertConfig, BertForTokenClassification, EarlyStoppingCallback,
                          Trainer, TrainingArguments, set_seed)

set_seed(5)
rng = np.random.default_rng(5)
PAD, CLS = 0, 1
VOCAB = 80
ENT = list(range(2, 22))       # words that can form entities
OTHER = list(range(22, VOCAB))
TRIGGER = [22, 23, 24]         # words that introduce an entity ("Mr", "in", "at")
O, B, I = 0, 1, 2
ID2LABEL = {O: "O", B: "B-ENT", I: "I-ENT"}


def sentence():
    toks, tags = [], []
    length = int(rng.integers(8, 30))
    while len(toks) < length:
        if rng.random() < 0.25:
            toks.append(int(rng.choice(TRIGGER))); tags.append(O)
            span = int(rng.integers(1, 4))
            for k in range(span):
                toks.append(int(rng.choice(ENT))); tags.append(B if k == 0 else I)
        else:
            # entity words also occur on their own without a trigger: tagged O
            w = int(rng.choice(ENT)) if rng.random() < 0.15 else int(rng.choice(OTHER[3:]))
            toks.append(w); tags.append(O)
    return [CLS] + toks, [-100] + tags   # no label on [CLS]


class TagData(Dataset):
    def __init__(self, n):
        self.rows = [sentence() for _ in range(n)]

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        ids, tags = self.rows[i]
        return {"input_ids": ids, "labels": tags}


def pad_collator(features):
    longest = max(len(f["input_ids"]) for f in features)
    ids = torch.full((len(features), longest), PAD, dtype=torch.long)
    labels = torch.full((len(features), longest), -100, dtype=torch.long)
    mask = torch.zeros((len(features), longest), dtype=torch.long)
    for r, f in enumerate(features):
        n = len(f["input_ids"])
        ids[r, :n] = torch.tensor(f["input_ids"])
        labels[r, :n] = torch.tensor(f["labels"])
        mask[r, :n] = 1
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def compute_metrics(p):
    preds = p.predictions.argmax(-1)
    keep = p.label_ids != -100
    acc = (preds[keep] == p.label_ids[keep]).mean()
    ent = keep & (p.label_ids != O)
    ent_recall = (preds[ent] == p.label_ids[ent]).mean()
    return {"token_acc": float(acc), "entity_recall": float(ent_recall)}


train_ds, val_ds, test_ds = TagData(1500), TagData(300), TagData(300)
cfg = BertConfig(vocab_size=VOCAB, hidden_size=96, num_hidden_layers=2, num_attention_heads=4,
                 intermediate_size=192, max_position_embeddings=64, pad_token_id=PAD,
                 num_labels=3, id2label=ID2LABEL, label2id={v: k for k, v in ID2LABEL.items()},
                 hidden_dropout_prob=0.2)
model = BertForTokenClassification(cfg)

args = TrainingArguments(output_dir="/tmp/h05_ner", num_train_epochs=30,
                         per_device_train_batch_size=16, per_device_eval_batch_size=100,
                         learning_rate=5e-4, warmup_steps=50, weight_decay=0.01,
                         label_smoothing_factor=0.1, eval_strategy="epoch",
                         save_strategy="epoch", save_total_limit=2, logging_strategy="epoch",
                         load_best_model_at_end=True, metric_for_best_model="eval_loss",
                         greater_is_better=False, report_to="none", use_cpu=True,
                         disable_tqdm=True, seed=5, remove_unused_columns=False)
trainer = Trainer(model=model, args=args, train_dataset=train_ds, eval_dataset=val_ds,
                  data_collator=pad_collator, compute_metrics=compute_metrics,
                  callbacks=[EarlyStoppingCallback(early_stopping_patience=2,
                                                   early_stopping_threshold=1e-3)])
out = trainer.train()
print(f"stopped after epoch {trainer.state.epoch:.0f} of {args.num_train_epochs}; "
      f"best checkpoint {trainer.state.best_model_checkpoint}")
ev = trainer.evaluate()
pred = trainer.predict(test_ds)
print(f"final val_loss {ev['eval_loss']:.4f} val_token_acc {ev['eval_token_acc']:.4f} "
      f"val_entity_recall {ev['eval_entity_recall']:.4f}")
print(f"final test_token_acc {pred.metrics['test_token_acc']:.4f} "
      f"test_entity_recall {pred.metrics['test_entity_recall']:.4f}")
