"""Tiny DistilBERT from scratch on a synthetic "sentiment" task: label 1 when a review contains more
positive words than negative words. transformers.Trainer, constant LR, eval each epoch."""
import numpy as np
import torch
from torch.utils.data import Dataset
from transformers import DistilBertConfig, DistilBertForSequenceClassification, Trainer, TrainingArguments, set_seed

torch.set_num_threads(1)
set_seed(25)
VOCAB, SEQ, CLS = 64, 20, 1
POS, NEG = list(range(4, 10)), list(range(10, 16))


class Reviews(Dataset):
    def __init__(self, n, seed):
        rng = np.random.default_rng(seed)
        self.rows = []
        for _ in range(n):
            ids = rng.integers(16, VOCAB, SEQ)
            n_pos, n_neg = rng.choice([(1, 0), (0, 1), (2, 1), (1, 2), (3, 1), (1, 3), (2, 0), (0, 2)])
            slots = rng.choice(np.arange(1, SEQ), n_pos + n_neg, replace=False)
            ids[slots[:n_pos]] = rng.choice(POS, n_pos)
            ids[slots[n_pos:]] = rng.choice(NEG, n_neg)
            ids[0] = CLS
            self.rows.append((torch.tensor(ids), int(n_pos > n_neg)))

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        ids, y = self.rows[i]
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": y}


config = DistilBertConfig(vocab_size=VOCAB, dim=64, n_layers=2, n_heads=4, hidden_dim=128,
                          max_position_embeddings=SEQ, num_labels=2)
model = DistilBertForSequenceClassification(config)

training_args = TrainingArguments(
    output_dir="hf_runs/25",
    learning_rate=0.05,
    lr_scheduler_type="constant",
    num_train_epochs=4,
    per_device_train_batch_size=32,
    per_device_eval_batch_size=256,
    eval_strategy="epoch",
    logging_steps=40,
    save_strategy="no",
    report_to="none",
    disable_tqdm=True,
    use_cpu=True,
    seed=25,
)


def accuracy(eval_pred):
    logits, labels = eval_pred
    return {"accuracy": float((np.argmax(logits, -1) == labels).mean())}


trainer = Trainer(model=model, args=training_args, train_dataset=Reviews(1500, 0), eval_dataset=Reviews(500, 1),
                  compute_metrics=accuracy)
trainer.train()
res = trainer.evaluate()
print(f"final eval_loss={res['eval_loss']:.4f} eval_accuracy={res['eval_accuracy']:.4f}")
