"""Toxic-comment style detector with a small BERT: only ~8% of comments are toxic, so the
Trainer subclass uses a class-weighted cross-entropy."""
import numpy as np
import torch
import torch.nn as nn
from sklearn.metrics import balanced_accuracy_score, f1_score, recall_score
from transformers import (BertConfig, BertForSequenceClassification, Trainer,
                          TrainingArguments, set_seed)

torch.set_num_threads(1)
set_seed(24)
VOCAB, SEQ = 60, 20
TOXIC = np.arange(3, 9)


def comments(n, rng):
    x = rng.integers(9, VOCAB, size=(n, SEQ))
    y = (rng.random(n) < 0.08).astype(int)
    for i in np.where(y == 1)[0]:
        x[i, rng.choice(np.arange(1, SEQ), size=2, replace=False)] = rng.choice(TOXIC, size=2)
    for i in np.where(y == 0)[0]:            # benign comments may contain one borderline word
        if rng.random() < 0.3:
            x[i, rng.integers(1, SEQ)] = rng.choice(TOXIC)
    x[:, 0] = 1
    return [{"input_ids": torch.tensor(a), "labels": torch.tensor(b)} for a, b in zip(x, y)]


rng = np.random.default_rng(24)
train_rows, val_rows = comments(3000, rng), comments(1000, rng)
n_pos = sum(int(r["labels"]) for r in train_rows)
weights = torch.tensor([len(train_rows) / (2 * (len(train_rows) - n_pos)), len(train_rows) / (2 * n_pos)])
print(f"toxic in train: {n_pos}/{len(train_rows)}  class weights: {weights.tolist()}")


class WeightedTrainer(Trainer):
    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        labels = inputs.pop("labels")
        outputs = model(**inputs)
        loss = nn.functional.cross_entropy(outputs.logits, labels, weight=weights.to(outputs.logits.device))
        return (loss, outputs) if return_outputs else loss


def metrics(p):
    pred = p.predictions.argmax(-1)
    return {"accuracy": float((pred == p.label_ids).mean()),
            "toxic_recall": recall_score(p.label_ids, pred),
            "toxic_f1": f1_score(p.label_ids, pred),
            "balanced_acc": balanced_accuracy_score(p.label_ids, pred)}


model = BertForSequenceClassification(BertConfig(
    vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
    intermediate_size=64, max_position_embeddings=SEQ, num_labels=2))
args = TrainingArguments(output_dir="_runs/24", num_train_epochs=5, learning_rate=2e-3,
                         per_device_train_batch_size=32, per_device_eval_batch_size=250,
                         warmup_steps=30, weight_decay=0.01, eval_strategy="epoch",
                         logging_steps=50, save_strategy="no", report_to="none",
                         disable_tqdm=True, use_cpu=True, seed=24)
trainer = WeightedTrainer(model=model, args=args, train_dataset=train_rows, eval_dataset=val_rows,
                          compute_metrics=metrics)
trainer.train()
m = trainer.evaluate()
print(f"final val_acc={m['eval_accuracy']:.4f} toxic_recall={m['eval_toxic_recall']:.4f} "
      f"toxic_f1={m['eval_toxic_f1']:.4f} balanced_acc={m['eval_balanced_acc']:.4f}")
