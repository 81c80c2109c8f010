"""Tiny GPT-2 language model on a synthetic grammar.

Sentences follow DET (ADJ) NOUN VERB DET NOUN '.', with number agreement between
the subject noun and the verb (singular nouns take singular verbs). The model is
trained with the HF Trainer: gradient accumulation (4 x 16), cosine schedule with
warm-up, evaluation each epoch; we report eval loss/perplexity and the accuracy
of the verb that must agree with the subject.
"""
import math

import numpy as np
import torch
from torch.utils.data import Dataset
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments, set_seed

set_seed(1)
rng = np.random.default_rng(1)

BOS, EOS, PAD, DOT = 0, 1, 2, 3
DETS = [4, 5]
ADJS = list(range(6, 12))
NOUNS_SG = list(range(12, 20))
NOUNS_PL = list(range(20, 28))
VERBS_SG = list(range(28, 34))
VERBS_PL = list(range(34, 40))
VOCAB = 40
SEQ_LEN = 48


def sentence():
    plural = rng.random() < 0.5
    toks = [int(rng.choice(DETS))]
    if rng.random() < 0.5:
        toks.append(int(rng.choice(ADJS)))
    toks.append(int(rng.choice(NOUNS_PL if plural else NOUNS_SG)))
    toks.append(int(rng.choice(VERBS_PL if plural else VERBS_SG)))
    toks.append(int(rng.choice(DETS)))
    toks.append(int(rng.choice(NOUNS_SG + NOUNS_PL)))
    toks.append(DOT)
    return toks


def document():
    toks = [BOS]
    while len(toks) < SEQ_LEN - 8:
        toks += sentence()
    toks.append(EOS)
    return toks[:SEQ_LEN]


class GrammarLM(Dataset):
    def __init__(self, n):
        self.docs = [document() for _ in range(n)]

    def __len__(self):
        return len(self.docs)

    def __getitem__(self, i):
        d = self.docs[i]
        ids = d + [PAD] * (SEQ_LEN - len(d))
        mask = [1] * len(d) + [0] * (SEQ_LEN - len(d))
        labels = d + [-100] * (SEQ_LEN - len(d))
        return {"input_ids": torch.tensor(ids), "attention_mask": torch.tensor(mask),
                "labels": torch.tensor(labels)}


train_ds = GrammarLM(1500)
val_ds = GrammarLM(300)

config = GPT2Config(vocab_size=VOCAB, n_positions=SEQ_LEN, n_embd=64, n_layer=2, n_head=4,
                    bos_token_id=BOS, eos_token_id=EOS, pad_token_id=PAD)
model = GPT2LMHeadModel(config)

VERB_SET = np.array(VERBS_SG + VERBS_PL)


def compute_metrics(eval_pred):
    logits, labels = eval_pred
    preds = logits[:, :-1].argmax(-1)
    targets = labels[:, 1:]
    is_verb = np.isin(targets, VERB_SET)
    # agreement: predicted verb has the same number as the true verb
    pred_pl = np.isin(preds, VERBS_PL)
    true_pl = np.isin(targets, VERBS_PL)
    pred_is_verb = np.isin(preds, VERB_SET)
    agree = (pred_is_verb & (pred_pl == true_pl))[is_verb].mean()
    valid = targets != -100
    tok_acc = (preds == targets)[valid].mean()
    return {"verb_agreement": float(agree), "token_acc": float(tok_acc)}


args = TrainingArguments(
    output_dir="/tmp/f02_gpt2_grammar",
    num_train_epochs=5,
    per_device_train_batch_size=16,
    gradient_accumulation_steps=4,
    per_device_eval_batch_size=64,
    learning_rate=3e-3,
    weight_decay=0.05,
    lr_scheduler_type="cosine",
    warmup_steps=10,
    eval_strategy="epoch",
    logging_strategy="epoch",
    save_strategy="no",
    report_to="none",
    seed=1,
    use_cpu=True,
    disable_tqdm=True,
)

trainer = Trainer(model=model, args=args, train_dataset=train_ds, eval_dataset=val_ds,
                  compute_metrics=compute_metrics)
trainer.train()
m = trainer.evaluate()
print(f"final val_loss {m['eval_loss']:.4f} perplexity {math.exp(m['eval_loss']):.2f} "
      f"token_acc {m['eval_token_acc']:.4f} verb_agreement {m['eval_verb_agreement']:.4f}")
