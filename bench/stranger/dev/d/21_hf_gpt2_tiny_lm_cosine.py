# Tiny GPT-2 causal LM trained with HF Trainer on synthetic "arithmetic progression mod 40" sequences.
# Cosine schedule with warm-up, gradient accumulation 2, eval perplexity each epoch.
import math
import random

import numpy as np
import torch
from transformers import (GPT2Config, GPT2LMHeadModel, Trainer,
                          TrainingArguments, set_seed)

torch.set_num_threads(1)
set_seed(21)
random.seed(21)

MOD, BOS, L = 40, 40, 20  # tokens 0..39 numbers, 40 = BOS


def sample_sequences(n, rng):
    out = []
    for _ in range(n):
        start, step = rng.randrange(MOD), rng.randrange(1, 8)
        out.append([BOS] + [(start + k * step) % MOD for k in range(L - 1)])
    return out


rng = random.Random(21)
train_seqs, eval_seqs = sample_sequences(2500, rng), sample_sequences(300, rng)


class LMData(torch.utils.data.Dataset):
    def __init__(self, seqs):
        self.seqs = seqs

    def __len__(self):
        return len(self.seqs)

    def __getitem__(self, i):
        ids = torch.tensor(self.seqs[i])
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids.clone()}


cfg = GPT2Config(vocab_size=MOD + 1, n_positions=L, n_embd=48, n_layer=2, n_head=4, bos_token_id=BOS,
                 eos_token_id=BOS, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
model = GPT2LMHeadModel(cfg)
print("parameters:", sum(p.numel() for p in model.parameters()))

args = TrainingArguments(
    output_dir="hf_out_21", num_train_epochs=6, per_device_train_batch_size=16, gradient_accumulation_steps=2,
    per_device_eval_batch_size=100, learning_rate=3e-3, lr_scheduler_type="cosine", warmup_steps=30,
    adam_beta2=0.98, max_grad_norm=1.0, weight_decay=0.05, eval_strategy="epoch", logging_steps=50,
    save_strategy="no", report_to="none", use_cpu=True, seed=21, disable_tqdm=True,
)
trainer = Trainer(model=model, args=args, train_dataset=LMData(train_seqs), eval_dataset=LMData(eval_seqs))
trainer.train()
ev = trainer.evaluate()
# the first two numbers of each sequence are unpredictable; the rest are determined
print(f"final eval_loss {ev['eval_loss']:.4f} eval_perplexity {math.exp(ev['eval_loss']):.3f} "
      f"(uniform guess would be {MOD})")
