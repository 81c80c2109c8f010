"""From-scratch tiny RoBERTa binary classifier with HF Trainer.
Task: label 1 if the sequence contains the bigram (4, 9) anywhere, else 0 (balanced by construction)."""
import numpy as np
import torch
from transformers import RobertaConfig, RobertaForSequenceClassification, Trainer, TrainingArguments, set_seed

torch.set_num_threads(1)
set_seed(23)
rng = np.random.default_rng(23)
VOCAB, LEN = 24, 20


def make_example(positive):
    while True:
        toks = rng.integers(3, VOCAB, size=LEN)
        if positive:
            j = rng.integers(1, LEN - 1)
            toks[j], toks[j + 1] = 4, 9
        has = any(toks[k] == 4 and toks[k + 1] == 9 for k in range(LEN - 1))
        if has == positive:
            toks[0] = 0  # <s>
            return toks


def make_split(n):
    labels = rng.integers(0, 2, size=n)
    return [{"input_ids": torch.tensor(make_example(bool(l))), "labels": torch.tensor(int(l))} for l in labels]


train_data, eval_data = make_split(3000), make_split(600)
config = RobertaConfig(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                       intermediate_size=128, max_position_embeddings=LEN + 2, pad_token_id=1, num_labels=2)
model = RobertaForSequenceClassification(config)


def metrics(p):
    return {"accuracy": float((p.predictions.argmax(-1) == p.label_ids).mean())}


training_args = TrainingArguments(
    output_dir="hf_out_23",
    num_train_epochs=5,
    per_device_train_batch_size=32,
    per_device_eval_batch_size=128,
    learning_rate=2e-7,
    warmup_steps=40,
    weight_decay=0.01,
    eval_strategy="epoch",
    logging_strategy="epoch",
    save_strategy="no",
    report_to="none",
    use_cpu=True,
    seed=23,
    disable_tqdm=True,
)
trainer = Trainer(model=model, args=training_args, train_dataset=train_data, eval_dataset=eval_data,
                  compute_metrics=metrics)
trainer.train()
out = trainer.evaluate()
print(f"final eval_loss {out['eval_loss']:.4f} eval_accuracy {out['eval_accuracy']:.4f}")
