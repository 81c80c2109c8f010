"""A Hugging Face ``Trainer.train()`` (it never imports tensortap): a tiny GPT-2 built from a
config (nothing downloaded) learns counting sequences with gradient accumulation, clipping and
an evaluation every 10 steps, logging every step; it writes ``trainer.state.log_history`` to
``--log`` (JSON). ``--spike-at K`` multiplies the inputs' embeddings' gradient path for the
optimizer step K (1-based, the Trainer's ``global_step``) by scaling that step's loss by 300:
the logged ``grad_norm`` jumps about 300x, the rest of the run is unchanged."""

import argparse
import json

import torch
from torch.utils.data import Dataset
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

parser = argparse.ArgumentParser()
parser.add_argument("--log", required=True)
parser.add_argument("--steps", type=int, default=30)
parser.add_argument("--spike-at", type=int, default=-1)
args = parser.parse_args()


class Counting(Dataset):
    def __init__(self, n: int, seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        self.x = (torch.randint(0, 32, (n, 1), generator=g) + torch.arange(16)) % 64

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.x[i], "labels": self.x[i]}


class Spiking(Trainer):
    """Scales the loss of one optimizer step's micro-batches (a bad batch, say)."""

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        loss = super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        if self.state.global_step + 1 == args.spike_at:
            return loss * 300 if not return_outputs else (loss[0] * 300, loss[1])
        return loss


torch.manual_seed(0)
torch.set_num_threads(1)
config = GPT2Config(vocab_size=64, n_positions=16, n_embd=16, n_layer=1, n_head=2)
config.eos_token_id = config.bos_token_id = None
trainer = Spiking(
    GPT2LMHeadModel(config),
    TrainingArguments(
        "out",
        max_steps=args.steps,
        per_device_train_batch_size=4,
        gradient_accumulation_steps=2,
        learning_rate=1e-3,
        lr_scheduler_type="linear",
        max_grad_norm=1.0,
        eval_strategy="steps",
        eval_steps=10,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        disable_tqdm=True,
    ),
    train_dataset=Counting(256, 0),
    eval_dataset=Counting(16, 1),
)
trainer.train()
with open(args.log, "w") as f:
    json.dump(trainer.state.log_history, f)
