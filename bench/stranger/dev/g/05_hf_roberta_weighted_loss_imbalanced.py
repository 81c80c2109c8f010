"""Tiny RoBERTa alarm detector on an imbalanced set (about 12% positives).

A sequence is positive when an "alarm" word occurs at least twice; many
negatives contain exactly one. The Trainer is subclassed so compute_loss
uses class-weighted cross-entropy (inverse frequency). Small batches,
inverse-sqrt schedule, gradient clipping; reports balanced accuracy and
minority recall/F1.
"""
import tempfile

import numpy as np
import torch
from torch import nn
from torch.utils.data import Dataset
from transformers import RobertaConfig, RobertaForSequenceClassification, Trainer, TrainingArguments, set_seed

set_seed(4)
BOS, PAD, EOS = 0, 1, 2
ALARM = np.arange(3, 7)
NORMAL = np.arange(7, 60)
VOCAB = 60
MAX_LEN = 22


def make_set(n, seed):
    g = np.random.default_rng(seed)
    seqs, ys = [], []
    for _ in range(n):
        y = int(g.random() < 0.12)
        length = int(g.integers(8, MAX_LEN - 2))
        toks = list(g.choice(NORMAL, size=length))
        n_alarm = int(g.integers(2, 4)) if y else int(g.random() < 0.5)
        pos = g.choice(length, size=n_alarm, replace=False)
        for p in pos:
            toks[p] = int(g.choice(ALARM))
        seqs.append([BOS] + [int(t) for t in toks] + [EOS])
        ys.append(y)
    return seqs, np.array(ys)


class SeqDataset(Dataset):
    def __init__(self, seqs, ys):
        self.seqs, self.ys = seqs, ys

    def __len__(self):
        return len(self.seqs)

    def __getitem__(self, i):
        s = self.seqs[i]
        pad = MAX_LEN - len(s)
        return {"input_ids": torch.tensor(s + [PAD] * pad),
                "attention_mask": torch.tensor([1] * len(s) + [0] * pad),
                "labels": torch.tensor(int(self.ys[i]))}


tr_seqs, tr_y = make_set(1500, seed=41)
va_seqs, va_y = make_set(600, seed=42)
counts = np.bincount(tr_y, minlength=2)
class_weights = torch.tensor(len(tr_y) / (2.0 * counts), dtype=torch.float32)
print(f"train class counts {counts.tolist()}  class weights {[round(w, 3) for w in class_weights.tolist()]}")
train_ds, val_ds = SeqDataset(tr_seqs, tr_y), SeqDataset(va_seqs, va_y)


class WeightedLossTrainer(Trainer):
    def __init__(self, *a, class_weights=None, **kw):
        super().__init__(*a, **kw)
        self.loss_fct = nn.CrossEntropyLoss(weight=class_weights)

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        labels = inputs.pop("labels")
        outputs = model(**inputs)
        loss = self.loss_fct(outputs.logits, labels)
        return (loss, outputs) if return_outputs else loss


config = RobertaConfig(vocab_size=VOCAB, hidden_size=48, num_hidden_layers=2, num_attention_heads=4,
                       intermediate_size=96, max_position_embeddings=MAX_LEN + 4,
                       hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1,
                       classifier_dropout=0.2, num_labels=2, pad_token_id=PAD,
                       bos_token_id=BOS, eos_token_id=EOS)
model = RobertaForSequenceClassification(config)


def compute_metrics(eval_pred):
    logits, labels = eval_pred
    pred = logits.argmax(-1)
    tpr = float((pred[labels == 1] == 1).mean())
    tnr = float((pred[labels == 0] == 0).mean())
    tp = int(((pred == 1) & (labels == 1)).sum())
    prec = tp / max(int((pred == 1).sum()), 1)
    f1 = 2 * prec * tpr / max(prec + tpr, 1e-9)
    return {"acc": float((pred == labels).mean()), "balanced_acc": (tpr + tnr) / 2,
            "minority_recall": tpr, "minority_f1": f1}


args = TrainingArguments(
    output_dir=tempfile.mkdtemp(prefix="hf_roberta_"),
    num_train_epochs=6,
    per_device_train_batch_size=8,
    per_device_eval_batch_size=200,
    learning_rate=1e-3,
    lr_scheduler_type="inverse_sqrt",
    warmup_steps=100,
    weight_decay=0.01,
    max_grad_norm=0.5,
    optim="adamw_torch",
    eval_strategy="epoch",
    logging_strategy="steps",
    logging_steps=100,
    save_strategy="no",
    report_to="none",
    seed=4,
    use_cpu=True,
    disable_tqdm=True,
)

trainer = WeightedLossTrainer(model=model, args=args, train_dataset=train_ds, eval_dataset=val_ds,
                              compute_metrics=compute_metrics, class_weights=class_weights)
result = trainer.train()
for rec in trainer.state.log_history:
    if "loss" in rec:
        print(f"step {rec['step']:4d}  train_loss {rec['loss']:.4f}  lr {rec['learning_rate']:.2e}")
    elif "eval_loss" in rec:
        print(f"epoch {rec['epoch']:.0f}  val_loss {rec['eval_loss']:.4f}  acc {rec['eval_acc']:.3f}  "
              f"balanced_acc {rec['eval_balanced_acc']:.3f}  minority_recall {rec['eval_minority_recall']:.3f}")
final = trainer.evaluate()
print(f"final train_loss {result.training_loss:.4f}")
print(f"final val_loss {final['eval_loss']:.4f}  val_acc {final['eval_acc']:.3f}  "
      f"balanced_acc {final['eval_balanced_acc']:.3f}  minority_recall {final['eval_minority_recall']:.3f}  "
      f"minority_f1 {final['eval_minority_f1']:.3f}")
