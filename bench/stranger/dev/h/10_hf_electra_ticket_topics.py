"""Hugging Face fine-tuning of a small ELECTRA discriminator-style classifier, trained
from scratch on synthetic "support tickets": the category (one of 5) is the colour
group that occurs most often in the ticket. AdamW via TrainingArguments, linear decay
with warm-up, evaluation each epoch, then trainer.evaluate() and trainer.predict()."""
import numpy as np
import torch
from torch.utils.data import Dataset
from transformers import (ElectraConfig, ElectraForSequenceClassification, Trainer,
                          TrainingArguments, set_seed)

set_seed(10)
rng = np.random.default_rng(10)
PAD, CLS, SEP = 0, 1, 2
N_CAT, PER_CAT = 5, 4
VOCAB = 3 + N_CAT * PER_CAT + 25
SEQ = 24


def ticket():
    counts = rng.multinomial(8, [1 / N_CAT] * N_CAT)
    while (counts == counts.max()).sum() > 1:          # unique majority
        counts = rng.multinomial(8, [1 / N_CAT] * N_CAT)
    words = []
    for c, k in enumerate(counts):
        words += list(3 + c * PER_CAT + rng.integers(0, PER_CAT, size=k))
    words += list(rng.integers(3 + N_CAT * PER_CAT, VOCAB, size=SEQ - 2 - len(words)))
    rng.shuffle(words)
    return [CLS] + [int(w) for w in words] + [SEP], int(counts.argmax())


class Tickets(Dataset):
    def __init__(self, n):
        self.rows = [ticket() for _ in range(n)]

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        ids, lab = self.rows[i]
        return {"input_ids": torch.tensor(ids), "attention_mask": torch.ones(SEQ, dtype=torch.long),
                "labels": torch.tensor(lab)}


train_ds, val_ds, test_ds = Tickets(2000), Tickets(400), Tickets(400)
cfg = ElectraConfig(vocab_size=VOCAB, embedding_size=64, hidden_size=64, num_hidden_layers=2,
                    num_attention_heads=4, intermediate_size=128, max_position_embeddings=SEQ,
                    pad_token_id=PAD, num_labels=N_CAT)
model = ElectraForSequenceClassification(cfg)


def compute_metrics(p):
    return {"accuracy": float((p.predictions.argmax(-1) == p.label_ids).mean())}


args = TrainingArguments(output_dir="/tmp/h10_electra", num_train_epochs=8,
                         per_device_train_batch_size=32, per_device_eval_batch_size=200,
                         learning_rate=5e-2, warmup_steps=30, weight_decay=0.01,
                         eval_strategy="epoch", logging_strategy="epoch", save_strategy="no",
                         report_to="none", use_cpu=True, disable_tqdm=True, seed=10)
trainer = Trainer(model=model, args=args, train_dataset=train_ds, eval_dataset=val_ds,
                  compute_metrics=compute_metrics)
trainer.train()
ev = trainer.evaluate()
pred = trainer.predict(test_ds)
print(f"final val_loss {ev['eval_loss']:.4f} val_acc {ev['eval_accuracy']:.4f}")
print(f"final test_loss {pred.metrics['test_loss']:.4f} test_acc {pred.metrics['test_accuracy']:.4f} "
      f"(chance ~{1 / N_CAT:.2f})")
