"""Tiny RoBERTa language identifier (3 'languages') trained with the HF Trainer.

Every language draws its words from the same vocabulary but with its own word
frequencies (Dirichlet-sampled unigram distributions), so the class can only be
read from the mix of words. Cosine schedule with warm-up, eval every epoch.
"""
import numpy as np
import torch
from torch.utils.data import Dataset
from transformers import (RobertaConfig, RobertaForSequenceClassification, Trainer,
                          TrainingArguments, set_seed)

set_seed(7)
rng = np.random.default_rng(7)

PAD, BOS, EOS = 0, 1, 2
FIRST_WORD, VOCAB = 3, 80
N_LANG = 3
MAX_LEN = 28
FREQS = rng.dirichlet(np.full(VOCAB - FIRST_WORD, 0.3), size=N_LANG)


def sentence(lang):
    n = int(rng.integers(6, MAX_LEN - 2))
    return [int(w) + FIRST_WORD for w in rng.choice(VOCAB - FIRST_WORD, n, p=FREQS[lang])]


class LangID(Dataset):
    def __init__(self, n):
        self.y = rng.integers(0, N_LANG, n)
        self.x = [sentence(int(k)) for k in self.y]

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        ids = [BOS] + self.x[i] + [EOS]
        k = len(ids)
        return {"input_ids": torch.tensor(ids + [PAD] * (MAX_LEN - k)),
                "attention_mask": torch.tensor([1] * k + [0] * (MAX_LEN - k)),
                "labels": torch.tensor(int(self.y[i]))}


train_ds, val_ds = LangID(1800), LangID(450)

config = RobertaConfig(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2,
                       num_attention_heads=4, intermediate_size=128,
                       max_position_embeddings=MAX_LEN + 2, pad_token_id=PAD,
                       bos_token_id=BOS, eos_token_id=EOS, num_labels=N_LANG)
model = RobertaForSequenceClassification(config)


def compute_metrics(eval_pred):
    logits, y = eval_pred
    return {"accuracy": float((logits.argmax(-1) == y).mean())}


args = TrainingArguments(
    output_dir="/tmp/f07_roberta_langid",
    num_train_epochs=5,
    per_device_train_batch_size=32,
    per_device_eval_batch_size=150,
    learning_rate=5e-4,
    weight_decay=0.01,
    lr_scheduler_type="cosine",
    warmup_steps=25,
    eval_strategy="epoch",
    logging_strategy="epoch",
    save_strategy="no",
    report_to="none",
    seed=7,
    use_cpu=True,
    disable_tqdm=True,
)

trainer = Trainer(model=model, args=args, train_dataset=train_ds, eval_dataset=val_ds,
                  compute_metrics=compute_metrics)
trainer.train()
m = trainer.evaluate()
print(f"final val_loss {m['eval_loss']:.4f} val_acc {m['eval_accuracy']:.4f}")
