"""Two-stage recipe with a tiny BERT: (1) train the encoder on a 'source' task (which of 6 token
families dominates), (2) freeze the encoder on purpose and fit a fresh head for a related
'target' task (is the dominant family one of the first three?) on only 300 labelled examples."""
import copy
import numpy as np
import torch
from torch.utils.data import Dataset
from transformers import (BertConfig, BertForSequenceClassification, Trainer,
                          TrainingArguments, set_seed)

torch.set_num_threads(1)
set_seed(23)
VOCAB, SEQ, FAM = 80, 16, 6


def sample(n, rng):
    x = rng.integers(40, VOCAB, size=(n, SEQ))
    fam = rng.integers(0, FAM, size=n)
    for i in range(n):
        p = rng.permutation(np.arange(1, SEQ))
        x[i, p[:3]] = 4 + 6 * fam[i] + rng.integers(0, 6, size=3)
        x[i, p[3]] = 4 + 6 * rng.integers(0, FAM) + rng.integers(0, 6)
    x[:, 0] = 1
    return x, fam


class Seqs(Dataset):
    def __init__(self, x, y):
        self.x, self.y = torch.tensor(x), torch.tensor(y)

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return {"input_ids": self.x[i], "labels": self.y[i]}


def acc(p):
    return {"accuracy": float((p.predictions.argmax(-1) == p.label_ids).mean())}


def args(tag, epochs, lr):
    return TrainingArguments(output_dir=f"_runs/23_{tag}", num_train_epochs=epochs, learning_rate=lr,
                             per_device_train_batch_size=32, per_device_eval_batch_size=256,
                             warmup_steps=20, eval_strategy="epoch", logging_steps=50,
                             save_strategy="no", report_to="none", disable_tqdm=True,
                             use_cpu=True, seed=23)


rng = np.random.default_rng(23)
src_x, src_y = sample(3000, rng)
cfg = BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                 intermediate_size=64, max_position_embeddings=SEQ, num_labels=FAM)
source_model = BertForSequenceClassification(cfg)
print("== stage 1: source task")
t1 = Trainer(model=source_model, args=args("src", 4, 2e-3), train_dataset=Seqs(src_x, src_y),
             eval_dataset=Seqs(*sample(500, rng)), compute_metrics=acc)
t1.train()
print(f"source val_acc={t1.evaluate()['eval_accuracy']:.4f}")

print("== stage 2: frozen encoder + new head on the target task")
tgt_cfg = copy.deepcopy(cfg)
tgt_cfg.num_labels = 2
target_model = BertForSequenceClassification(tgt_cfg)
target_model.bert.load_state_dict(source_model.bert.state_dict())
for p in target_model.bert.parameters():      # keep the learned encoder fixed
    p.requires_grad = False
tx, tf = sample(300, rng)
vx, vf = sample(600, rng)
t2 = Trainer(model=target_model, args=args("tgt", 20, 1e-2), train_dataset=Seqs(tx, (tf < 3).astype(int)),
             eval_dataset=Seqs(vx, (vf < 3).astype(int)), compute_metrics=acc)
t2.train()
m = t2.evaluate()
print(f"final val_loss={m['eval_loss']:.4f} val_acc={m['eval_accuracy']:.4f}")
