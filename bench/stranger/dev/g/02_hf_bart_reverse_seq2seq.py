"""Tiny BART trained from scratch to reverse short integer sequences.

Seq2SeqTrainer + Seq2SeqTrainingArguments, Adafactor with a constant
schedule after warm-up, evaluation once per epoch with teacher-forced
token accuracy and whole-sequence exact match.
"""
import tempfile

import numpy as np
import torch
from torch.utils.data import Dataset
from transformers import (BartConfig, BartForConditionalGeneration, Seq2SeqTrainer,
                          Seq2SeqTrainingArguments, set_seed)

set_seed(1)
BOS, PAD, EOS = 0, 1, 2
FIRST_TOKEN, VOCAB = 3, 15
SRC_LEN = 6


class ReverseDataset(Dataset):
    def __init__(self, n, seed):
        g = np.random.default_rng(seed)
        self.src = g.integers(FIRST_TOKEN, VOCAB, size=(n, SRC_LEN))

    def __len__(self):
        return len(self.src)

    def __getitem__(self, i):
        s = self.src[i].tolist()
        return {
            "input_ids": torch.tensor([BOS] + s + [EOS]),
            "attention_mask": torch.ones(SRC_LEN + 2, dtype=torch.long),
            "labels": torch.tensor(s[::-1] + [EOS]),
        }


train_ds = ReverseDataset(3000, seed=11)
val_ds = ReverseDataset(500, seed=12)

config = BartConfig(vocab_size=VOCAB, d_model=64, encoder_layers=2, decoder_layers=2,
                    encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=128,
                    decoder_ffn_dim=128, max_position_embeddings=32, dropout=0.1,
                    attention_dropout=0.0, activation_function="gelu", pad_token_id=PAD,
                    bos_token_id=BOS, eos_token_id=EOS, decoder_start_token_id=EOS,
                    forced_eos_token_id=None)
model = BartForConditionalGeneration(config)
print(f"parameters: {sum(p.numel() for p in model.parameters()):,}")


def argmax_logits(logits, labels):
    if isinstance(logits, tuple):
        logits = logits[0]
    return logits.argmax(-1)


def compute_metrics(eval_pred):
    preds, labels = eval_pred.predictions, eval_pred.label_ids
    mask = labels != -100
    tok_acc = float((preds[mask] == labels[mask]).mean())
    exact = float(np.all((preds == labels) | ~mask, axis=1).mean())
    return {"token_acc": tok_acc, "exact_match": exact}


args = Seq2SeqTrainingArguments(
    output_dir=tempfile.mkdtemp(prefix="hf_bart_"),
    num_train_epochs=7,
    per_device_train_batch_size=64,
    per_device_eval_batch_size=250,
    optim="adafactor",
    learning_rate=3e-3,
    lr_scheduler_type="constant_with_warmup",
    warmup_steps=40,
    weight_decay=0.0,
    max_grad_norm=1.0,
    eval_strategy="epoch",
    logging_strategy="epoch",
    save_strategy="no",
    predict_with_generate=False,
    report_to="none",
    seed=1,
    use_cpu=True,
    disable_tqdm=True,
    torch_compile=False,
)

trainer = Seq2SeqTrainer(model=model, args=args, train_dataset=train_ds, eval_dataset=val_ds,
                         compute_metrics=compute_metrics,
                         preprocess_logits_for_metrics=argmax_logits)
result = trainer.train()
for rec in trainer.state.log_history:
    if "loss" in rec:
        print(f"epoch {rec['epoch']:4.1f}  train_loss {rec['loss']:.4f}")
    elif "eval_loss" in rec:
        print(f"epoch {rec['epoch']:4.1f}  val_loss {rec['eval_loss']:.4f}  "
              f"token_acc {rec['eval_token_acc']:.3f}  exact_match {rec['eval_exact_match']:.3f}")

# a few greedy decodes as a sanity check
model.eval()
batch = torch.stack([val_ds[i]["input_ids"] for i in range(200)])
with torch.no_grad():
    gen = model.generate(input_ids=batch, max_new_tokens=SRC_LEN + 1, do_sample=False, num_beams=1)
gen = gen[:, 1:SRC_LEN + 1].numpy()
target = np.stack([val_ds.src[i][::-1] for i in range(200)])
gen_exact = float((gen == target).all(axis=1).mean())
final = trainer.evaluate()
print(f"final train_loss {result.training_loss:.4f}")
print(f"final val_loss {final['eval_loss']:.4f}  token_acc {final['eval_token_acc']:.3f}  "
      f"exact_match {final['eval_exact_match']:.3f}  greedy_exact {gen_exact:.3f}")
