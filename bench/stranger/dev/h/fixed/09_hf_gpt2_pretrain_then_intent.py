"""Two-stage Hugging Face run: pre-train a tiny GPT-2 as a causal language model on
synthetic "command" sequences, then fine-tune GPT2ForSequenceClassification (encoder
weights copied with load_state_dict) to predict the intent of each command. Sequences
that are too short are dropped before fine-tuning."""
import numpy as np
import torch
from torch.utils.data import Dataset
from transformers import (GPT2Config, GPT2ForSequenceClassification, GPT2LMHeadModel, Trainer,
                          TrainingArguments, set_seed)

set_seed(4)
rng = np.random.default_rng(4)
PAD, BOS = 0, 1
VOCAB, SEQ = 72, 16
N_INTENT = 3
# each intent has a verb set and an object set; commands are verb + object + filler
VERBS = {c: list(range(2 + 6 * c, 5 + 6 * c)) for c in range(N_INTENT)}
OBJS = {c: list(range(5 + 6 * c, 8 + 6 * c)) for c in range(N_INTENT)}
FILL = list(range(2 + 6 * N_INTENT, VOCAB))


def command(intent):
    n = int(rng.integers(3, SEQ - 1))
    toks = [BOS, int(rng.choice(VERBS[intent]))]
    while len(toks) < n:
        toks.append(int(rng.choice(OBJS[intent])) if rng.random() < 0.3 else int(rng.choice(FILL)))
    return toks


def pad(toks):
    return toks + [PAD] * (SEQ - len(toks)), [1] * len(toks) + [0] * (SEQ - len(toks))


class LMData(Dataset):
    def __init__(self, seqs):
        self.seqs = seqs

    def __len__(self):
        return len(self.seqs)

    def __getitem__(self, i):
        ids, mask = pad(self.seqs[i])
        labels = [t if m else -100 for t, m in zip(ids, mask)]
        return {"input_ids": torch.tensor(ids), "attention_mask": torch.tensor(mask),
                "labels": torch.tensor(labels)}


class ClsData(Dataset):
    def __init__(self, seqs, labels):
        self.seqs, self.labels = seqs, labels

    def __len__(self):
        return len(self.seqs)

    def __getitem__(self, i):
        ids, mask = pad(self.seqs[i])
        return {"input_ids": torch.tensor(ids), "attention_mask": torch.tensor(mask),
                "labels": torch.tensor(int(self.labels[i]))}


cfg_kwargs = dict(vocab_size=VOCAB, n_positions=SEQ, n_embd=64, n_layer=2, n_head=4,
                  bos_token_id=BOS, eos_token_id=BOS, pad_token_id=PAD)

# ---------------- stage 1: causal LM pre-training on unlabelled commands ----------------
unlab = [command(int(rng.integers(0, N_INTENT))) for _ in range(2500)]
lm = GPT2LMHeadModel(GPT2Config(**cfg_kwargs))
lm_args = TrainingArguments(output_dir="/tmp/h09_lm", num_train_epochs=3,
                            per_device_train_batch_size=32, learning_rate=1e-3, warmup_steps=20,
                            logging_steps=60, eval_strategy="epoch", save_strategy="no",
                            report_to="none", use_cpu=True, disable_tqdm=True, seed=4)
lm_trainer = Trainer(model=lm, args=lm_args, train_dataset=LMData(unlab[:2200]),
                     eval_dataset=LMData(unlab[2200:]))
lm_trainer.train()
print(f"stage1 lm eval_loss {lm_trainer.evaluate()['eval_loss']:.4f}")

# ---------------- stage 2: intent classification ----------------
intents = rng.integers(0, N_INTENT, size=1500)
commands = [command(int(c)) for c in intents]
# drop commands with fewer than 5 tokens (too short to be useful)
all_commands = commands
commands = [c for c in all_commands if len(c) >= 5]
intents = np.array([c for c, s in zip(intents, all_commands) if len(s) >= 5])
print(f"labelled commands kept: {len(commands)}")
train_ds = ClsData(commands[:1000], intents[:1000])
val_ds = ClsData(commands[1000:], intents[1000:])

clf = GPT2ForSequenceClassification(GPT2Config(**cfg_kwargs, num_labels=N_INTENT))
res = clf.transformer.load_state_dict(lm.transformer.state_dict())
print(f"copied transformer weights: {res}")


def compute_metrics(p):
    return {"accuracy": float((p.predictions.argmax(-1) == p.label_ids).mean())}


clf_args = TrainingArguments(output_dir="/tmp/h09_clf", num_train_epochs=8,
                             per_device_train_batch_size=32, per_device_eval_batch_size=250,
                             learning_rate=5e-4, warmup_steps=20, weight_decay=0.01,
                             eval_strategy="epoch", logging_strategy="epoch", save_strategy="no",
                             report_to="none", use_cpu=True, disable_tqdm=True, seed=4)
trainer = Trainer(model=clf, args=clf_args, train_dataset=train_ds, eval_dataset=val_ds,
                  compute_metrics=compute_metrics)
trainer.train()
ev = trainer.evaluate()
print(f"final val_loss {ev['eval_loss']:.4f} val_acc {ev['eval_accuracy']:.4f}")
