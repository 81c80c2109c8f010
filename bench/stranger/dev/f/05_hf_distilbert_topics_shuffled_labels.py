"""Tiny DistilBERT topic classifier (4 topics) trained with the HF Trainer.

Documents are sampled from topic-specific word distributions (each topic has its
own keywords, all topics share common filler words). The raw corpus is shuffled
before the train/validation split.
"""
import numpy as np
import torch
from torch.utils.data import Dataset
from transformers import (DistilBertConfig, DistilBertForSequenceClassification, Trainer,
                          TrainingArguments, set_seed)

set_seed(4)
rng = np.random.default_rng(4)

PAD, CLS, SEP = 0, 1, 2
N_TOPICS = 4
KEYWORDS = [list(range(3 + 10 * t, 13 + 10 * t)) for t in range(N_TOPICS)]
COMMON = list(range(43, 100))
VOCAB = 100
MAX_LEN = 32


def document(topic):
    n = int(rng.integers(12, MAX_LEN - 2))
    words = []
    for _ in range(n):
        if rng.random() < 0.25:
            words.append(int(rng.choice(KEYWORDS[topic])))
        elif rng.random() < 0.1:
            words.append(int(rng.choice(KEYWORDS[rng.integers(N_TOPICS)])))
        else:
            words.append(int(rng.choice(COMMON)))
    return words


texts = []
labels = []
for i in range(2000):
    t = i % N_TOPICS
    texts.append(document(t))
    labels.append(t)

# shuffle the corpus before splitting (it was generated topic by topic)
rng.shuffle(texts)
rng.shuffle(labels)
train_texts, val_texts = texts[:1600], texts[1600:]
train_labels, val_labels = labels[:1600], labels[1600:]


class TopicData(Dataset):
    def __init__(self, texts, labels):
        self.texts, self.labels = texts, labels

    def __len__(self):
        return len(self.texts)

    def __getitem__(self, i):
        ids = [CLS] + self.texts[i] + [SEP]
        n = len(ids)
        return {"input_ids": torch.tensor(ids + [PAD] * (MAX_LEN - n)),
                "attention_mask": torch.tensor([1] * n + [0] * (MAX_LEN - n)),
                "labels": torch.tensor(self.labels[i])}


train_ds = TopicData(train_texts, train_labels)
val_ds = TopicData(val_texts, val_labels)

config = DistilBertConfig(vocab_size=VOCAB, dim=64, n_layers=2, n_heads=4, hidden_dim=128,
                          max_position_embeddings=MAX_LEN, num_labels=N_TOPICS)
model = DistilBertForSequenceClassification(config)


def compute_metrics(eval_pred):
    logits, y = eval_pred
    return {"accuracy": float((logits.argmax(-1) == y).mean())}


args = TrainingArguments(
    output_dir="/tmp/f05_distilbert_topics",
    num_train_epochs=5,
    per_device_train_batch_size=32,
    per_device_eval_batch_size=128,
    learning_rate=5e-4,
    weight_decay=0.01,
    warmup_steps=30,
    eval_strategy="epoch",
    logging_strategy="epoch",
    save_strategy="no",
    report_to="none",
    seed=4,
    use_cpu=True,
    disable_tqdm=True,
)

trainer = Trainer(model=model, args=args, train_dataset=train_ds, eval_dataset=val_ds,
                  compute_metrics=compute_metrics)
trainer.train()
m = trainer.evaluate()
print(f"final train_loss {trainer.state.log_history[-2]['train_loss']:.4f}")
print(f"final val_loss {m['eval_loss']:.4f} val_acc {m['eval_accuracy']:.4f}")
