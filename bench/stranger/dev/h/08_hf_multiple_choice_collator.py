"""Hugging Face multiple choice: a tiny BERT with a multiple-choice head picks which of
four candidate "answers" matches a "question" token (each question word has one answer
word hidden among filler). Custom data_collator builds (batch, choices, seq) tensors;
small noisy batches (8), cosine schedule with warm-up, evaluation every 100 steps."""
import numpy as np
import torch
from torch.utils.data import Dataset
from transformers import (BertConfig, BertForMultipleChoice, Trainer, TrainingArguments,
                          set_seed)

set_seed(8)
rng = np.random.default_rng(8)
PAD, CLS, SEP = 0, 1, 2
N_Q = 12
Q0, A0 = 3, 3 + N_Q                 # question words 3..14, answer words 15..26
FILL0 = A0 + N_Q
VOCAB = FILL0 + 30
N_CHOICES, CHOICE_LEN = 4, 6


def example():
    q = int(rng.integers(0, N_Q))
    wrong = rng.choice([a for a in range(N_Q) if a != q], size=N_CHOICES - 1, replace=False)
    answers = [q] + [int(w) for w in wrong]
    order = rng.permutation(N_CHOICES)
    choices = []
    for a in np.array(answers)[order]:
        body = list(rng.integers(FILL0, VOCAB, size=CHOICE_LEN))
        body[int(rng.integers(0, CHOICE_LEN))] = A0 + int(a)
        choices.append([CLS, Q0 + q, SEP] + [int(b) for b in body] + [SEP])
    label = int(np.where(order == 0)[0][0])
    return {"choices": choices, "label": label}


class MC(Dataset):
    def __init__(self, n):
        self.rows = [example() for _ in range(n)]

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        return self.rows[i]


def mc_collator(features):
    ids = torch.tensor([f["choices"] for f in features])             # (B, C, L)
    tt = torch.zeros_like(ids)
    tt[:, :, 3:] = 1                                                 # segment B = choice text
    return {"input_ids": ids, "token_type_ids": tt, "attention_mask": torch.ones_like(ids),
            "labels": torch.tensor([f["label"] for f in features])}


def compute_metrics(p):
    return {"accuracy": float((p.predictions.argmax(-1) == p.label_ids).mean())}


train_ds, val_ds = MC(1200), MC(300)
cfg = BertConfig(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                 intermediate_size=128, max_position_embeddings=16, pad_token_id=PAD,
                 type_vocab_size=2)
model = BertForMultipleChoice(cfg)
args = TrainingArguments(output_dir="/tmp/h08_mc", max_steps=1200, per_device_train_batch_size=8,
                         per_device_eval_batch_size=100, learning_rate=5e-4,
                         lr_scheduler_type="cosine", warmup_steps=100, weight_decay=0.01,
                         eval_strategy="steps", eval_steps=100, logging_steps=100,
                         save_strategy="no", report_to="none", use_cpu=True, disable_tqdm=True,
                         seed=8, remove_unused_columns=False)
trainer = Trainer(model=model, args=args, train_dataset=train_ds, eval_dataset=val_ds,
                  data_collator=mc_collator, compute_metrics=compute_metrics)
trainer.train()
ev = trainer.evaluate()
print(f"final val_loss {ev['eval_loss']:.4f} val_acc {ev['eval_accuracy']:.4f} (chance 0.25)")
