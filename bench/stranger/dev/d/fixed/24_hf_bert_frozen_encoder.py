"""Tiny BERT (from scratch) with HF Trainer: label 1 if token 5 occurs more often than token 6 in the sequence.
Cosine schedule, eval each epoch."""
import numpy as np
import torch
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments, set_seed

torch.set_num_threads(1)
set_seed(24)
rng = np.random.default_rng(24)
VOCAB, HALF = 20, 8


def sample(n):
    data = []
    while len(data) < n:
        toks = rng.integers(2, VOCAB, size=2 * HALF)
        a, b = (toks == 5).sum(), (toks == 6).sum()
        if a == b:
            continue
        ids = np.concatenate([[1], toks])
        data.append({"input_ids": torch.tensor(ids), "labels": torch.tensor(int(a > b))})
    return data


train_set, val_set = sample(4000), sample(800)

cfg = BertConfig(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                 intermediate_size=128, max_position_embeddings=2 * HALF + 1, num_labels=2)
model = BertForSequenceClassification(cfg)
# keep the embeddings fixed, train the transformer layers and the classifier
for param in model.bert.embeddings.parameters():
    param.requires_grad = False


def acc(eval_pred):
    logits, labels = eval_pred
    return {"accuracy": float((logits.argmax(-1) == labels).mean())}


args = TrainingArguments(output_dir="hf_out_24", num_train_epochs=6, per_device_train_batch_size=32,
                         per_device_eval_batch_size=200, learning_rate=1e-3, lr_scheduler_type="cosine",
                         warmup_steps=50, eval_strategy="epoch", logging_strategy="epoch", save_strategy="no",
                         report_to="none", use_cpu=True, seed=24, disable_tqdm=True)
trainer = Trainer(model=model, args=args, train_dataset=train_set, eval_dataset=val_set, compute_metrics=acc)
n_trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
print(f"trainable parameters: {n_trainable}")
trainer.train()
m = trainer.evaluate()
print(f"final eval_loss {m['eval_loss']:.4f} eval_accuracy {m['eval_accuracy']:.4f}")
