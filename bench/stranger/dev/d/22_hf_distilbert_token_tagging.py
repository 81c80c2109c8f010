"""Token tagging with a tiny from-scratch DistilBERT and HF Trainer.
Tag each token 1 if it is larger than the token right before it, else 0 (first token gets 0).
Small noisy batches (8), constant LR with warm-up, padding positions masked with -100."""
import numpy as np
import torch
from transformers import (DistilBertConfig, DistilBertForTokenClassification, Trainer, TrainingArguments,
                          set_seed)

torch.set_num_threads(1)
set_seed(5)
rng = np.random.default_rng(5)
VOCAB, MAXLEN, PAD = 32, 16, 0


def build(n):
    rows = []
    for _ in range(n):
        length = int(rng.integers(6, MAXLEN + 1))
        toks = rng.integers(1, VOCAB, size=length)
        tags = np.zeros(length, dtype=np.int64)
        tags[1:] = (toks[1:] > toks[:-1]).astype(np.int64)
        ids = np.full(MAXLEN, PAD); ids[:length] = toks
        lab = np.full(MAXLEN, -100); lab[:length] = tags
        att = np.zeros(MAXLEN, dtype=np.int64); att[:length] = 1
        rows.append({"input_ids": torch.tensor(ids), "attention_mask": torch.tensor(att), "labels": torch.tensor(lab)})
    return rows


train_rows, val_rows = build(1600), build(400)

config = DistilBertConfig(vocab_size=VOCAB, max_position_embeddings=MAXLEN, n_layers=2, n_heads=4, dim=64,
                          hidden_dim=128, dropout=0.1, attention_dropout=0.1, num_labels=2, pad_token_id=PAD)
model = DistilBertForTokenClassification(config)


def token_accuracy(p):
    preds = p.predictions.argmax(-1)
    mask = p.label_ids != -100
    return {"token_acc": float((preds[mask] == p.label_ids[mask]).mean())}


args = TrainingArguments(output_dir="hf_out_22", num_train_epochs=4, per_device_train_batch_size=8,
                         per_device_eval_batch_size=64, learning_rate=1e-3, lr_scheduler_type="constant_with_warmup",
                         warmup_steps=80, eval_strategy="steps", eval_steps=200, logging_steps=100,
                         save_strategy="no", report_to="none", use_cpu=True, seed=5, disable_tqdm=True)
trainer = Trainer(model=model, args=args, train_dataset=train_rows, eval_dataset=val_rows,
                  compute_metrics=token_accuracy)
trainer.train()
res = trainer.evaluate()
print(f"final eval_loss {res['eval_loss']:.4f} eval_token_acc {res['eval_token_acc']:.4f}")
