"""Two-stage Hugging Face run: pre-train a tiny BERT encoder as a masked language
model on unlabelled synthetic "sentences", then fine-tune a sequence classifier whose
encoder is initialised from the pre-trained weights (load_state_dict, no download)."""
import numpy as np
import torch
from torch.utils.data import Dataset
from transformers import (BertConfig, BertForMaskedLM, BertForSequenceClassification,
                          DataCollatorForLanguageModeling, Trainer, TrainingArguments,
                          set_seed)

set_seed(0)
rng = np.random.default_rng(0)

PAD, CLS, SEP, MASK = 0, 1, 2, 3
VOCAB = 64
SEQ = 20
N_CLASSES = 4
# each class owns a group of 5 "topic" tokens; the rest of the vocabulary is filler
TOPIC = {c: list(range(4 + 5 * c, 9 + 5 * c)) for c in range(N_CLASSES)}
FILLER = list(range(4 + 5 * N_CLASSES, VOCAB))


def make_sentence(label):
    body = list(rng.choice(FILLER, size=SEQ - 2))
    # three topic words of the class, scattered; a fourth from a random other class as noise
    pos = rng.choice(SEQ - 2, size=4, replace=False)
    for p in pos[:3]:
        body[p] = int(rng.choice(TOPIC[label]))
    other = int(rng.choice([c for c in range(N_CLASSES) if c != label]))
    body[pos[3]] = int(rng.choice(TOPIC[other]))
    return [CLS] + [int(t) for t in body] + [SEP]


class SeqDataset(Dataset):
    def __init__(self, ids, labels=None):
        self.ids, self.labels = ids, labels

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        item = {"input_ids": torch.tensor(self.ids[i]),
                "attention_mask": torch.ones(SEQ, dtype=torch.long)}
        if self.labels is not None:
            item["labels"] = torch.tensor(self.labels[i])
        return item


class SimpleMaskTokenizer:
    """Just enough of a tokenizer interface for DataCollatorForLanguageModeling."""
    mask_token = "[MASK]"
    mask_token_id = MASK
    pad_token_id = PAD
    pad_token = "[PAD]"
    padding_side = "right"

    def __len__(self):
        return VOCAB

    def get_special_tokens_mask(self, ids, already_has_special_tokens=True):
        return [1 if t in (PAD, CLS, SEP, MASK) else 0 for t in ids]

    def convert_tokens_to_ids(self, tok):
        return MASK

    def pad(self, features, return_tensors="pt", **kw):
        return {k: torch.stack([f[k] for f in features]) for k in features[0]}


# unlabelled corpus for pre-training, small labelled set for fine-tuning
unlab_labels = rng.integers(0, N_CLASSES, size=3000)
unlab = [make_sentence(int(c)) for c in unlab_labels]
y_lab = rng.integers(0, N_CLASSES, size=900)
x_lab = [make_sentence(int(c)) for c in y_lab]
train_ds = SeqDataset(x_lab[:600], y_lab[:600])
val_ds = SeqDataset(x_lab[600:], y_lab[600:])

enc_kwargs = dict(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2,
                  num_attention_heads=4, intermediate_size=128,
                  max_position_embeddings=SEQ, pad_token_id=PAD,
                  hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)
config = BertConfig(**enc_kwargs)

# ---------------- stage 1: masked-LM pre-training ----------------
mlm = BertForMaskedLM(config)
mlm_collator = DataCollatorForLanguageModeling(tokenizer=SimpleMaskTokenizer(), mlm=True,
                                               mlm_probability=0.15)
mlm_args = TrainingArguments(output_dir="/tmp/h01_mlm", num_train_epochs=8,
                             per_device_train_batch_size=64, learning_rate=1e-3,
                             warmup_steps=20, weight_decay=0.01, logging_steps=85,
                             save_strategy="no", report_to="none", use_cpu=True,
                             disable_tqdm=True, seed=0)
mlm_trainer = Trainer(model=mlm, args=mlm_args, train_dataset=SeqDataset(unlab[:2700]),
                      eval_dataset=SeqDataset(unlab[2700:]), data_collator=mlm_collator)
mlm_trainer.train()
mlm_eval = mlm_trainer.evaluate()
print(f"stage1 mlm eval_loss {mlm_eval['eval_loss']:.4f}")

# ---------------- stage 2: classification fine-tuning ----------------
clf = BertForSequenceClassification(BertConfig(**enc_kwargs, num_labels=N_CLASSES))
missing, unexpected = clf.bert.load_state_dict(mlm.bert.state_dict(), strict=False)
print(f"copied encoder weights: missing={len(missing)} unexpected={len(unexpected)}")


def compute_metrics(p):
    preds = p.predictions.argmax(-1)
    return {"accuracy": float((preds == p.label_ids).mean())}


clf_args = TrainingArguments(output_dir="/tmp/h01_clf", num_train_epochs=12,
                             per_device_train_batch_size=32, per_device_eval_batch_size=128,
                             learning_rate=1e-3, warmup_steps=20, weight_decay=0.01,
                             eval_strategy="epoch", logging_strategy="epoch",
                             save_strategy="no", report_to="none", use_cpu=True,
                             disable_tqdm=True, seed=0)
clf_trainer = Trainer(model=clf, args=clf_args, train_dataset=train_ds, eval_dataset=val_ds,
                      compute_metrics=compute_metrics)
clf_trainer.train()
final = clf_trainer.evaluate()
pred = clf_trainer.predict(val_ds)
print(f"final val_loss {final['eval_loss']:.4f} val_acc {final['eval_accuracy']:.4f}")
print(f"predict() accuracy {pred.metrics['test_accuracy']:.4f}")
