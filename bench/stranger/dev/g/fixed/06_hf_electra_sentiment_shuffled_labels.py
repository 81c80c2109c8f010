"""Tiny ELECTRA sentiment classifier on synthetic "reviews".

A review is a bag of neutral words plus some positive and negative words;
it is positive when it has more positive than negative words. The raw
examples are generated grouped by label, so the script shuffles the
training set before handing it to the Trainer. Constant-with-warm-up
schedule, evaluation every epoch.
"""
import tempfile

import numpy as np
import torch
from torch.utils.data import Dataset
from transformers import ElectraConfig, ElectraForSequenceClassification, Trainer, TrainingArguments, set_seed

set_seed(6)
PAD, CLS, SEP = 0, 1, 2
POS_WORDS = np.arange(3, 13)
NEG_WORDS = np.arange(13, 23)
NEUTRAL = np.arange(23, 80)
VOCAB = 80
MAX_LEN = 24
rng = np.random.default_rng(6)


def make_reviews(n_per_class):
    texts, labels = [], []
    for label in (0, 1):                       # grouped by label, like files read class by class
        for _ in range(n_per_class):
            major = int(rng.integers(2, 5))
            minor = int(rng.integers(0, major))
            n_pos, n_neg = (major, minor) if label == 1 else (minor, major)
            toks = list(rng.choice(NEUTRAL, size=int(rng.integers(8, 15))))
            toks += list(rng.choice(POS_WORDS, size=n_pos)) + list(rng.choice(NEG_WORDS, size=n_neg))
            rng.shuffle(toks)
            texts.append([CLS] + [int(t) for t in toks] + [SEP])
            labels.append(label)
    return texts, np.array(labels)


class ReviewDataset(Dataset):
    def __init__(self, texts, labels):
        self.texts, self.labels = texts, labels

    def __len__(self):
        return len(self.texts)

    def __getitem__(self, i):
        s = self.texts[i][:MAX_LEN]
        pad = MAX_LEN - len(s)
        return {"input_ids": torch.tensor(s + [PAD] * pad),
                "attention_mask": torch.tensor([1] * len(s) + [0] * pad),
                "labels": torch.tensor(int(self.labels[i]))}


train_texts, train_labels = make_reviews(800)
val_texts, val_labels = make_reviews(200)

# shuffle the training examples so batches are not all one class
perm = rng.permutation(len(train_texts))
train_texts = [train_texts[i] for i in perm]
train_labels = train_labels[perm]

train_ds = ReviewDataset(train_texts, train_labels)
val_ds = ReviewDataset(val_texts, val_labels)

config = ElectraConfig(vocab_size=VOCAB, embedding_size=32, hidden_size=64, num_hidden_layers=2,
                       num_attention_heads=4, intermediate_size=128, max_position_embeddings=MAX_LEN,
                       hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1, num_labels=2,
                       pad_token_id=PAD)
model = ElectraForSequenceClassification(config)


def compute_metrics(eval_pred):
    logits, labels = eval_pred
    pred = logits.argmax(-1)
    return {"accuracy": float((pred == labels).mean()), "pred_pos_rate": float(pred.mean())}


args = TrainingArguments(
    output_dir=tempfile.mkdtemp(prefix="hf_electra_"),
    num_train_epochs=6,
    per_device_train_batch_size=32,
    per_device_eval_batch_size=200,
    learning_rate=1e-3,
    lr_scheduler_type="constant_with_warmup",
    warmup_steps=30,
    weight_decay=0.01,
    optim="adamw_torch",
    eval_strategy="epoch",
    logging_strategy="epoch",
    save_strategy="no",
    report_to="none",
    seed=6,
    use_cpu=True,
    disable_tqdm=True,
)

trainer = Trainer(model=model, args=args, train_dataset=train_ds, eval_dataset=val_ds,
                  compute_metrics=compute_metrics)
result = trainer.train()
for rec in trainer.state.log_history:
    if "loss" in rec:
        print(f"epoch {rec['epoch']:.0f}  train_loss {rec['loss']:.4f}")
    elif "eval_loss" in rec:
        print(f"epoch {rec['epoch']:.0f}  val_loss {rec['eval_loss']:.4f}  val_acc {rec['eval_accuracy']:.3f}")
final = trainer.evaluate()
print(f"final train_loss {result.training_loss:.4f}")
print(f"final val_loss {final['eval_loss']:.4f}  val_acc {final['eval_accuracy']:.3f}  "
      f"pred_pos_rate {final['eval_pred_pos_rate']:.3f}")
