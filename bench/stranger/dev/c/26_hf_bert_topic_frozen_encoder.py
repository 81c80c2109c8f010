"""4-topic classifier with BertForSequenceClassification (small config, trained on synthetic token data).
The recipe follows the usual fine-tuning script: freeze the encoder for speed, train the head with Trainer."""
import numpy as np
import torch
from torch.utils.data import Dataset
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments, set_seed

torch.set_num_threads(1)
set_seed(26)
VOCAB, SEQ, K = 70, 16, 4
TOPIC = {k: list(range(4 + 5 * k, 9 + 5 * k)) for k in range(K)}   # topic words 4..23


def build(n, seed):
    rng = np.random.default_rng(seed)
    ids = rng.integers(24, VOCAB, (n, SEQ))
    ids[:, 0] = 2                                  # [CLS]
    labels = rng.integers(0, K, n)
    for r in range(n):
        pos = rng.choice(np.arange(1, SEQ), 2, replace=False)
        ids[r, pos] = rng.choice(TOPIC[labels[r]], 2)
    return [{"input_ids": torch.tensor(i), "labels": int(l)} for i, l in zip(ids, labels)]


class ListDataset(Dataset):
    def __init__(self, rows):
        self.rows = rows

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        return self.rows[i]


config = BertConfig(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                    intermediate_size=128, max_position_embeddings=SEQ, num_labels=K)
model = BertForSequenceClassification(config)
for param in model.bert.parameters():
    param.requires_grad = False
n_train = sum(p.numel() for p in model.parameters() if p.requires_grad)
print(f"trainable parameters: {n_train} / {sum(p.numel() for p in model.parameters())}")

args = TrainingArguments(output_dir="hf_runs/26", num_train_epochs=4, per_device_train_batch_size=32,
                         learning_rate=1e-3, warmup_steps=20, eval_strategy="epoch", logging_steps=40,
                         save_strategy="no", report_to="none", disable_tqdm=True, use_cpu=True, seed=26)
trainer = Trainer(model=model, args=args, train_dataset=ListDataset(build(1600, 0)),
                  eval_dataset=ListDataset(build(400, 1)),
                  compute_metrics=lambda p: {"accuracy": float((p.predictions.argmax(-1) == p.label_ids).mean())})
trainer.train()
r = trainer.evaluate()
print(f"final eval_loss {r['eval_loss']:.4f} eval_accuracy {r['eval_accuracy']:.4f}")
