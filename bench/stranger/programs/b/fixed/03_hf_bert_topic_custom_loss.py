"""5-way topic classification with a small BERT trained from scratch.
A Trainer subclass computes the loss itself (so that label smoothing could be added later)."""
import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import Dataset
from transformers import (BertConfig, BertForSequenceClassification, Trainer,
                          TrainingArguments, set_seed)

torch.set_num_threads(1)
set_seed(7)

N_TOPICS, VOCAB, SEQ = 5, 100, 24
TOPIC_WORDS = {t: np.arange(10 + 8 * t, 18 + 8 * t) for t in range(N_TOPICS)}  # ids 10..49


def synth(n, seed):
    rng = np.random.default_rng(seed)
    ids = rng.integers(50, VOCAB, size=(n, SEQ))
    y = rng.integers(0, N_TOPICS, size=n)
    for i in range(n):
        slots = rng.permutation(np.arange(1, SEQ))
        k = rng.integers(2, 4)
        ids[i, slots[:k]] = rng.choice(TOPIC_WORDS[y[i]], size=k)
        other = rng.choice([t for t in range(N_TOPICS) if t != y[i]])
        ids[i, slots[k:k + 1]] = rng.choice(TOPIC_WORDS[other], size=1)
    ids[:, 0] = 1
    return ids, y


class Topics(Dataset):
    def __init__(self, n, seed):
        ids, y = synth(n, seed)
        self.ids, self.y = torch.from_numpy(ids).long(), torch.from_numpy(y).long()

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.y[i]}


class TopicTrainer(Trainer):
    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        labels = inputs.pop("labels")
        outputs = model(**inputs)
        loss = nn.CrossEntropyLoss()(outputs.logits, labels)
        return (loss, outputs) if return_outputs else loss


cfg = BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                 intermediate_size=64, max_position_embeddings=SEQ, num_labels=N_TOPICS)
model = BertForSequenceClassification(cfg)

args = TrainingArguments(output_dir="_runs/03", num_train_epochs=3, learning_rate=1e-3,
                         per_device_train_batch_size=32, per_device_eval_batch_size=256,
                         warmup_steps=30, eval_strategy="epoch", logging_steps=40,
                         save_strategy="no", report_to="none", disable_tqdm=True,
                         use_cpu=True, seed=7)
trainer = TopicTrainer(model=model, args=args, train_dataset=Topics(4000, 0),
                       eval_dataset=Topics(1000, 1),
                       compute_metrics=lambda p: {"accuracy": float((p[0].argmax(-1) == p[1]).mean())})
trainer.train()
res = trainer.evaluate()
print(f"final val_loss={res['eval_loss']:.4f} val_acc={res['eval_accuracy']:.4f}")
