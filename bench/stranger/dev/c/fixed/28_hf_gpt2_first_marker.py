"""GPT2ForSequenceClassification (2 layers, from config) with transformers.Trainer: predict which of four marker
tokens appears first in a sequence. Fixed number of optimisation steps, evaluation every 100 steps."""
import numpy as np
import torch
from torch.utils.data import Dataset, Subset
from transformers import GPT2Config, GPT2ForSequenceClassification, Trainer, TrainingArguments, set_seed

torch.set_num_threads(1)
set_seed(28)
VOCAB, SEQ, MARKERS = 48, 16, [3, 4, 5, 6]
DEBUG_SUBSET = None        # e.g. 64 for a quick smoke test


class FirstMarker(Dataset):
    def __init__(self, n, seed):
        rng = np.random.default_rng(seed)
        ids = rng.integers(8, VOCAB, (n, SEQ))
        labels = np.empty(n, dtype=np.int64)
        for r in range(n):
            pos = np.sort(rng.choice(SEQ, 3, replace=False))
            marks = rng.choice(MARKERS, 3, replace=False)
            ids[r, pos] = marks
            labels[r] = marks[0] - MARKERS[0]
        self.ids, self.labels = torch.tensor(ids), torch.tensor(labels)

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.labels[i]}


train_ds, val_ds = FirstMarker(3000, 0), FirstMarker(500, 1)
if DEBUG_SUBSET:
    train_ds = Subset(train_ds, range(DEBUG_SUBSET))
print("training examples:", len(train_ds))

cfg = GPT2Config(vocab_size=VOCAB, n_positions=SEQ, n_embd=64, n_layer=2, n_head=4, num_labels=4, pad_token_id=0)
model = GPT2ForSequenceClassification(cfg)
args = TrainingArguments(output_dir="hf_runs/28", max_steps=300, per_device_train_batch_size=32,
                         learning_rate=1e-3, warmup_steps=30, lr_scheduler_type="linear", weight_decay=0.01,
                         eval_strategy="steps", eval_steps=100, logging_steps=50, save_strategy="no",
                         report_to="none", disable_tqdm=True, use_cpu=True, seed=28)
trainer = Trainer(model=model, args=args, train_dataset=train_ds, eval_dataset=val_ds,
                  compute_metrics=lambda p: {"accuracy": float((p.predictions.argmax(-1) == p.label_ids).mean())})
trainer.train()
out = trainer.evaluate()
print(f"final train_loss {trainer.state.log_history[-2].get('train_loss', float('nan')):.4f} "
      f"eval_loss {out['eval_loss']:.4f} eval_accuracy {out['eval_accuracy']:.4f}")
