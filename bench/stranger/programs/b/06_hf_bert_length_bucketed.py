"""Review polarity with a small BERT on variable-length synthetic reviews.
To cut padding we sort the examples by length before building the dataset."""
import numpy as np
import torch
from transformers import (BertConfig, BertForSequenceClassification, DataCollatorWithPadding,
                          Trainer, TrainingArguments, set_seed)

torch.set_num_threads(1)
set_seed(5)
PAD, CLS, VOCAB = 0, 1, 64
GOOD, BAD = list(range(10, 18)), list(range(18, 26))


def generate(n, rng):
    texts, labels = [], []
    for _ in range(n):
        length = int(rng.integers(8, 33))
        toks = list(rng.integers(26, VOCAB, size=length))
        lab = int(rng.integers(0, 2))
        words = GOOD if lab == 1 else BAD
        for p in rng.choice(np.arange(length), size=3, replace=False):
            toks[p] = int(rng.choice(words))
        texts.append([CLS] + [int(t) for t in toks])
        labels.append(lab)
    return texts, labels


class Reviews(torch.utils.data.Dataset):
    def __init__(self, texts, labels):
        self.texts, self.labels = texts, labels

    def __len__(self):
        return len(self.texts)

    def __getitem__(self, i):
        ids = self.texts[i]
        return {"input_ids": ids, "attention_mask": [1] * len(ids), "labels": self.labels[i]}


class PadOnly:  # minimal tokenizer stand-in for DataCollatorWithPadding
    pad_token_id = PAD
    padding_side = "right"
    model_input_names = ["input_ids", "attention_mask"]

    def pad(self, features, padding=True, max_length=None, pad_to_multiple_of=None,
            return_tensors="pt", **kw):
        L = max(len(f["input_ids"]) for f in features)
        batch = {"input_ids": [], "attention_mask": [], "labels": []}
        for f in features:
            n = L - len(f["input_ids"])
            batch["input_ids"].append(f["input_ids"] + [PAD] * n)
            batch["attention_mask"].append(f["attention_mask"] + [0] * n)
            batch["labels"].append(f["labels"])
        return {k: torch.tensor(v) for k, v in batch.items()}


rng = np.random.default_rng(5)
train_texts, train_labels = generate(3000, rng)
val_texts, val_labels = generate(600, rng)

# sort by length so that batches need little padding
order = np.argsort([len(t) for t in train_texts], kind="stable")
train_texts = [train_texts[i] for i in order]

train_ds = Reviews(train_texts, train_labels)
val_ds = Reviews(val_texts, val_labels)

model = BertForSequenceClassification(BertConfig(
    vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
    intermediate_size=64, max_position_embeddings=40, num_labels=2, pad_token_id=PAD))

args = TrainingArguments(output_dir="_runs/06", num_train_epochs=5, learning_rate=2e-3,
                         per_device_train_batch_size=32, per_device_eval_batch_size=128,
                         warmup_steps=40, eval_strategy="epoch", logging_steps=60,
                         save_strategy="no", report_to="none", disable_tqdm=True,
                         use_cpu=True, seed=5)
trainer = Trainer(model=model, args=args, train_dataset=train_ds, eval_dataset=val_ds,
                  data_collator=DataCollatorWithPadding(PadOnly()),
                  compute_metrics=lambda p: {"accuracy": float((p.predictions.argmax(-1) == p.label_ids).mean())})
trainer.train()
out = trainer.evaluate()
print(f"final val_loss={out['eval_loss']:.4f} val_acc={out['eval_accuracy']:.4f}")
