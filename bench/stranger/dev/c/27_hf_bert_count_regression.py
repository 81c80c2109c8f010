"""Sequence regression with a tiny BertForSequenceClassification (num_labels=1): predict the (standardised)
sum of the "digit" tokens in a sequence. transformers.Trainer with a custom Huber loss via compute_loss_func."""
import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import Dataset
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments, set_seed

torch.set_num_threads(1)
set_seed(27)
VOCAB, SEQ = 40, 12
DIGIT_TOKENS = np.arange(10)          # token id d carries value d; ids 10..39 are noise words


class DigitSum(Dataset):
    def __init__(self, n, seed):
        rng = np.random.default_rng(seed)
        ids = rng.integers(10, VOCAB, (n, SEQ))
        n_digits = rng.integers(1, 5, n)
        for r in range(n):
            pos = rng.choice(SEQ, n_digits[r], replace=False)
            ids[r, pos] = rng.choice(DIGIT_TOKENS, n_digits[r])
        total = np.where(ids < 10, ids, 0).sum(1).astype(np.float32)
        self.ids = torch.tensor(ids)
        self.y = torch.tensor((total - 9.0) / 6.0)

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.y[i]}


def huber_loss(outputs, labels, num_items_in_batch=None):
    return F.smooth_l1_loss(outputs.logits, labels)


def regression_metrics(p):
    pred = p.predictions.reshape(-1)
    mse = float(((pred - p.label_ids) ** 2).mean())
    return {"mse": mse, "r2": 1.0 - mse / float(p.label_ids.var())}


config = BertConfig(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                    intermediate_size=128, max_position_embeddings=SEQ, num_labels=1, problem_type="regression")
model = BertForSequenceClassification(config)
args = TrainingArguments(output_dir="hf_runs/27", num_train_epochs=4, per_device_train_batch_size=32,
                         learning_rate=1e-3, warmup_steps=20, weight_decay=0.01, eval_strategy="epoch",
                         logging_steps=40, save_strategy="no", report_to="none", disable_tqdm=True,
                         use_cpu=True, seed=27)
trainer = Trainer(model=model, args=args, train_dataset=DigitSum(2000, 0), eval_dataset=DigitSum(400, 1),
                  compute_loss_func=huber_loss, compute_metrics=regression_metrics)
trainer.train()
res = trainer.evaluate()
print(f"final eval_mse {res['eval_mse']:.4f} eval_r2 {res['eval_r2']:.3f}")
