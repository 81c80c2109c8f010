"""Tiny GPT-2 causal language model on a synthetic "arithmetic progression" language.

Each sentence starts at a random token and then walks with a fixed random
stride modulo the vocabulary, with a little token noise. After two tokens
the rest is predictable, so perplexity should fall far below the vocabulary
size. Trainer with gradient accumulation, cosine schedule and perplexity
reported from the evaluation loss.
"""
import math
import tempfile

import numpy as np
import torch
from torch.utils.data import Dataset
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments, set_seed

set_seed(2)
N_SYMBOLS = 48          # content tokens 0..47
BOS = N_SYMBOLS         # 48
VOCAB = N_SYMBOLS + 1
SEQ_LEN = 20
NOISE = 0.05


def make_corpus(n, seed):
    g = np.random.default_rng(seed)
    out = np.empty((n, SEQ_LEN), dtype=np.int64)
    for i in range(n):
        start = g.integers(N_SYMBOLS)
        stride = g.choice([1, 2, 3, 5, 7])
        seq = (start + stride * np.arange(SEQ_LEN - 1)) % N_SYMBOLS
        flip = g.random(SEQ_LEN - 1) < NOISE
        seq[flip] = g.integers(N_SYMBOLS, size=flip.sum())
        out[i, 0] = BOS
        out[i, 1:] = seq
    return out


class LMDataset(Dataset):
    def __init__(self, data):
        self.data = torch.from_numpy(data)

    def __len__(self):
        return len(self.data)

    def __getitem__(self, i):
        x = self.data[i]
        return {"input_ids": x, "attention_mask": torch.ones_like(x), "labels": x.clone()}


train_ds = LMDataset(make_corpus(3000, seed=21))
val_ds = LMDataset(make_corpus(400, seed=22))

config = GPT2Config(vocab_size=VOCAB, n_positions=32, n_embd=64, n_layer=2, n_head=4,
                    resid_pdrop=0.1, embd_pdrop=0.1, attn_pdrop=0.1,
                    bos_token_id=BOS, eos_token_id=BOS)
model = GPT2LMHeadModel(config)

args = TrainingArguments(
    output_dir=tempfile.mkdtemp(prefix="hf_gpt2_"),
    num_train_epochs=8,
    per_device_train_batch_size=16,
    gradient_accumulation_steps=4,      # effective batch 64
    per_device_eval_batch_size=200,
    learning_rate=2e-3,
    lr_scheduler_type="cosine",
    warmup_steps=20,
    weight_decay=0.1,
    adam_beta2=0.98,
    max_grad_norm=1.0,
    fp16=False,
    eval_strategy="epoch",
    logging_strategy="steps",
    logging_steps=20,
    save_strategy="no",
    report_to="none",
    seed=2,
    use_cpu=True,
    disable_tqdm=True,
)

trainer = Trainer(model=model, args=args, train_dataset=train_ds, eval_dataset=val_ds)
initial = trainer.evaluate()
print(f"before training: val_loss {initial['eval_loss']:.4f}  ppl {math.exp(initial['eval_loss']):.2f}")
result = trainer.train()
for rec in trainer.state.log_history:
    if "loss" in rec:
        print(f"step {rec['step']:4d}  train_loss {rec['loss']:.4f}  lr {rec['learning_rate']:.2e}  "
              f"grad_norm {rec['grad_norm']:.3f}")
    elif "eval_loss" in rec and rec.get("epoch", 0) > 0:
        print(f"epoch {rec['epoch']:.0f}  val_loss {rec['eval_loss']:.4f}  "
              f"val_ppl {math.exp(rec['eval_loss']):.2f}")
final = trainer.evaluate()
print(f"final train_loss {result.training_loss:.4f}")
print(f"final val_loss {final['eval_loss']:.4f}  val_perplexity {math.exp(final['eval_loss']):.2f} "
      f"(uniform would be {VOCAB})")
