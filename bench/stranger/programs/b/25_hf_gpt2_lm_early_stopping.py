"""Tiny GPT-2 language model on synthetic 'arithmetic progression' token streams, Trainer with
EarlyStoppingCallback and load_best_model_at_end; reports validation perplexity."""
import math
import numpy as np
import torch
from transformers import (EarlyStoppingCallback, GPT2Config, GPT2LMHeadModel, Trainer,
                          TrainingArguments, set_seed)

torch.set_num_threads(1)
set_seed(25)
VOCAB, SEQ = 40, 24


def streams(n, rng):
    start = rng.integers(0, VOCAB, size=(n, 1))
    step = rng.integers(1, 4, size=(n, 1))
    seq = (start + step * np.arange(SEQ)[None, :]) % VOCAB
    noise = rng.random((n, SEQ)) < 0.05
    seq = np.where(noise, rng.integers(0, VOCAB, size=(n, SEQ)), seq)
    return [{"input_ids": torch.tensor(s), "labels": torch.tensor(s)} for s in seq]


rng = np.random.default_rng(25)
train_rows, val_rows = streams(2000, rng), streams(400, rng)
model = GPT2LMHeadModel(GPT2Config(vocab_size=VOCAB, n_positions=SEQ, n_embd=32, n_layer=2,
                                   n_head=4, bos_token_id=0, eos_token_id=0))
args = TrainingArguments(output_dir="_runs/25", num_train_epochs=6, learning_rate=3e-3,
                         per_device_train_batch_size=32, per_device_eval_batch_size=250,
                         lr_scheduler_type="cosine", warmup_steps=30, weight_decay=0.01,
                         eval_strategy="epoch", save_strategy="epoch", save_total_limit=1,
                         load_best_model_at_end=True, metric_for_best_model="eval_loss",
                         greater_is_better=False, logging_steps=50, report_to="none",
                         disable_tqdm=True, use_cpu=True, seed=25)
trainer = Trainer(model=model, args=args, train_dataset=train_rows, eval_dataset=val_rows,
                  callbacks=[EarlyStoppingCallback(early_stopping_patience=2, early_stopping_threshold=1e-3)])
trainer.train()
ev = trainer.evaluate()
print(f"final val_loss={ev['eval_loss']:.4f} val_perplexity={math.exp(ev['eval_loss']):.3f} "
      f"(uniform baseline perplexity {VOCAB})")
