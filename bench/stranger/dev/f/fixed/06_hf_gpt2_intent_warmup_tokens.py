"""Tiny GPT-2 sequence classifier for 5 'intents' (HF Trainer).

An utterance is a sequence of word ids; each intent has its own trigger words
which appear among shared filler words (plus some distractor triggers from other
intents). GPT2ForSequenceClassification reads the last non-pad token. The
schedule is linear warm-up (6% of training) then linear decay.
"""
import numpy as np
import torch
from torch.utils.data import Dataset
from transformers import (GPT2Config, GPT2ForSequenceClassification, Trainer,
                          TrainingArguments, set_seed)

set_seed(6)
rng = np.random.default_rng(6)

PAD, EOS = 0, 1
N_INTENTS = 5
TRIGGERS = [list(range(2 + 6 * k, 8 + 6 * k)) for k in range(N_INTENTS)]
FILLER = list(range(32, 120))
VOCAB = 120
MAX_LEN = 32
EPOCHS = 5
BATCH = 32


def utterance(intent):
    n = int(rng.integers(10, MAX_LEN - 1))
    words = [int(w) for w in rng.choice(FILLER, n)]
    for pos in rng.choice(n, 3, replace=False):
        words[pos] = int(rng.choice(TRIGGERS[intent]))
    if rng.random() < 0.5:
        other = int(rng.integers(N_INTENTS))
        words[int(rng.integers(n))] = int(rng.choice(TRIGGERS[other]))
    return words + [EOS]


class Utterances(Dataset):
    def __init__(self, n):
        self.y = rng.integers(0, N_INTENTS, n)
        self.x = [utterance(int(k)) for k in self.y]

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        ids = self.x[i]
        k = len(ids)
        return {"input_ids": torch.tensor(ids + [PAD] * (MAX_LEN - k)),
                "attention_mask": torch.tensor([1] * k + [0] * (MAX_LEN - k)),
                "labels": torch.tensor(int(self.y[i]))}


train_ds = Utterances(2000)
val_ds = Utterances(500)

config = GPT2Config(vocab_size=VOCAB, n_positions=MAX_LEN, n_embd=64, n_layer=2, n_head=4,
                    num_labels=N_INTENTS, pad_token_id=PAD, eos_token_id=EOS)
model = GPT2ForSequenceClassification(config)

# warm up over the first 6% of training
total_steps = (len(train_ds) + BATCH - 1) // BATCH * EPOCHS
warmup = int(0.06 * total_steps)
print(f"warmup_steps {warmup}")


def compute_metrics(eval_pred):
    logits, y = eval_pred
    return {"accuracy": float((logits.argmax(-1) == y).mean())}


args = TrainingArguments(
    output_dir="/tmp/f06_gpt2_intent",
    num_train_epochs=EPOCHS,
    per_device_train_batch_size=BATCH,
    per_device_eval_batch_size=125,
    learning_rate=1e-3,
    weight_decay=0.01,
    warmup_steps=warmup,
    lr_scheduler_type="linear",
    eval_strategy="epoch",
    logging_strategy="epoch",
    save_strategy="no",
    report_to="none",
    seed=6,
    use_cpu=True,
    disable_tqdm=True,
)

trainer = Trainer(model=model, args=args, train_dataset=train_ds, eval_dataset=val_ds,
                  compute_metrics=compute_metrics)
trainer.train()
m = trainer.evaluate()
print(f"final val_loss {m['eval_loss']:.4f} val_acc {m['eval_accuracy']:.4f}")
