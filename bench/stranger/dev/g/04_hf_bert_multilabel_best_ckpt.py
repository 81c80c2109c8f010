"""Tiny BERT multi-label tagger: which of five "tags" occur in a token sequence.

problem_type="multi_label_classification" (BCE-with-logits inside the
model), polynomial decay schedule, checkpoint every epoch and reload the
best one by micro-F1 at the end.
"""
import shutil
import tempfile

import numpy as np
import torch
from torch.utils.data import Dataset
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments, set_seed

set_seed(3)
PAD, CLS, SEP = 0, 1, 2
N_TAGS = 5
WORDS_PER_TAG = 8
FILLER = np.arange(3, 43)
TAG_WORDS = [np.arange(43 + k * WORDS_PER_TAG, 43 + (k + 1) * WORDS_PER_TAG) for k in range(N_TAGS)]
VOCAB = 43 + N_TAGS * WORDS_PER_TAG
MAX_LEN = 26


class TagDataset(Dataset):
    def __init__(self, n, seed):
        g = np.random.default_rng(seed)
        self.seqs, self.targets = [], []
        for _ in range(n):
            y = (g.random(N_TAGS) < 0.35).astype(np.float32)
            toks = list(g.choice(FILLER, size=int(g.integers(6, 12))))
            for k in np.flatnonzero(y):
                toks += list(g.choice(TAG_WORDS[k], size=int(g.integers(2, 4))))
            g.shuffle(toks)
            self.seqs.append([CLS] + [int(t) for t in toks][:MAX_LEN - 2] + [SEP])
            self.targets.append(y)

    def __len__(self):
        return len(self.seqs)

    def __getitem__(self, i):
        s = self.seqs[i]
        pad = MAX_LEN - len(s)
        return {"input_ids": torch.tensor(s + [PAD] * pad),
                "attention_mask": torch.tensor([1] * len(s) + [0] * pad),
                "token_type_ids": torch.zeros(MAX_LEN, dtype=torch.long),
                "labels": torch.from_numpy(self.targets[i])}


train_ds = TagDataset(2000, seed=31)
val_ds = TagDataset(400, seed=32)

config = BertConfig(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                    intermediate_size=128, max_position_embeddings=MAX_LEN, hidden_dropout_prob=0.1,
                    attention_probs_dropout_prob=0.1, num_labels=N_TAGS,
                    problem_type="multi_label_classification", pad_token_id=PAD)
model = BertForSequenceClassification(config)


def compute_metrics(eval_pred):
    logits, labels = eval_pred
    pred = (1 / (1 + np.exp(-logits))) > 0.5
    labels = labels.astype(bool)
    tp = (pred & labels).sum()
    fp = (pred & ~labels).sum()
    fn = (~pred & labels).sum()
    f1 = 2 * tp / max(2 * tp + fp + fn, 1)
    subset_acc = float((pred == labels).all(axis=1).mean())
    return {"micro_f1": float(f1), "subset_acc": subset_acc}


out_dir = tempfile.mkdtemp(prefix="hf_bert_ml_")
args = TrainingArguments(
    output_dir=out_dir,
    num_train_epochs=10,
    per_device_train_batch_size=32,
    per_device_eval_batch_size=200,
    learning_rate=3e-3,
    lr_scheduler_type="polynomial",
    lr_scheduler_kwargs={"power": 1.5, "lr_end": 1e-5},
    warmup_steps=25,
    weight_decay=0.05,
    optim="adamw_torch",
    eval_strategy="epoch",
    save_strategy="epoch",
    save_total_limit=2,
    load_best_model_at_end=True,
    metric_for_best_model="micro_f1",
    greater_is_better=True,
    logging_strategy="epoch",
    report_to="none",
    seed=3,
    use_cpu=True,
    disable_tqdm=True,
)

trainer = Trainer(model=model, args=args, train_dataset=train_ds, eval_dataset=val_ds,
                  compute_metrics=compute_metrics)
result = trainer.train()
for rec in trainer.state.log_history:
    if "loss" in rec:
        print(f"epoch {rec['epoch']:.0f}  train_loss {rec['loss']:.4f}  lr {rec['learning_rate']:.2e}")
    elif "eval_loss" in rec:
        print(f"epoch {rec['epoch']:.0f}  val_loss {rec['eval_loss']:.4f}  micro_f1 {rec['eval_micro_f1']:.3f}  "
              f"subset_acc {rec['eval_subset_acc']:.3f}")
print(f"best checkpoint: {trainer.state.best_model_checkpoint.split('/')[-1]}  "
      f"best micro_f1 {trainer.state.best_metric:.3f}")
final = trainer.evaluate()
print(f"final train_loss {result.training_loss:.4f}")
print(f"final val_loss {final['eval_loss']:.4f}  micro_f1 {final['eval_micro_f1']:.3f}  "
      f"subset_acc {final['eval_subset_acc']:.3f}")
shutil.rmtree(out_dir, ignore_errors=True)
