"""A plain Hugging Face Trainer script (it never imports tensortap) for the outcome tests: a
tiny BERT (built from a config, nothing downloaded) classifies token sequences by whether
their first token is in the lower half of the vocabulary, evaluated every 10 steps. --shuffle
trains on labels that do not follow from the inputs (held-out accuracy at chance); --smooth
sets label_smoothing_factor (the Trainer computes the loss, not the model)."""

import argparse

import torch
from torch.utils.data import Dataset
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments
from transformers.utils import logging as hf_logging

parser = argparse.ArgumentParser()
parser.add_argument("--shuffle", action="store_true")
parser.add_argument("--smooth", action="store_true")
parser.add_argument("--out", default="hf_out")
args = parser.parse_args()
hf_logging.set_verbosity_error()


class Tokens(Dataset):
    def __init__(self, n: int, seed: int, shuffle: bool) -> None:
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randint(1, 32, (n, 8), generator=g)
        self.y = (self.x[:, 0] < 16).long()
        if shuffle:
            self.y = self.y[torch.randperm(n, generator=g)]

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.x[i], "labels": self.y[i]}


torch.manual_seed(0)
torch.set_num_threads(1)
config = BertConfig(  # type: ignore[call-arg]
    vocab_size=32,
    hidden_size=32,
    num_hidden_layers=1,
    num_attention_heads=2,
    intermediate_size=64,
    max_position_embeddings=16,
    num_labels=2,
)
training = TrainingArguments(
    args.out,
    max_steps=30,
    per_device_train_batch_size=32,
    per_device_eval_batch_size=100,
    learning_rate=3e-3,
    eval_strategy="steps",
    eval_steps=10,
    logging_steps=10,
    save_strategy="no",
    report_to="none",
    use_cpu=True,
    disable_tqdm=True,
    label_smoothing_factor=0.1 if args.smooth else 0.0,
)
trainer = Trainer(
    BertForSequenceClassification(config),
    training,
    train_dataset=Tokens(960, 0, args.shuffle),
    eval_dataset=Tokens(300, 1, False),
)
trainer.train()
print("evaluation", trainer.evaluate())
