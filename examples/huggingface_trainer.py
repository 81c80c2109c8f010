"""A Hugging Face Trainer debugged by tensortap: a tiny GPT-2 (built from a config, nothing
downloaded) learns to continue counting sequences, once with a sane learning rate and once with
one far too high; the recommended rules judge both trials.

    python examples/huggingface_trainer.py [--quick] [--out runs/hf]

With ``--plain`` the script adds no callback itself: run it as
``tensortap run examples/huggingface_trainer.py -- --plain`` and tensortap adds it.
"""

from __future__ import annotations

import argparse
import logging
import os

import torch
from torch.utils.data import Dataset
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments
from transformers.utils import logging as hf_logging

import tensortap as tt
from tensortap.report import rules_that_find_problems


class Counting(Dataset):
    """Sequences that count up from a random start (mod 64): next-token prediction learns it."""

    def __init__(self, n: int, seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        self.x = (torch.randint(0, 32, (n, 1), generator=g) + torch.arange(32)) % 64

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.x[i], "labels": self.x[i]}


def train(out: str, lr: float, steps: int, plain: bool) -> str:
    """Train with learning rate ``lr``; returns where the trial is."""
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=64, n_positions=32, n_embd=32, n_layer=2, n_head=2)
    config.eos_token_id = config.bos_token_id = None
    model = GPT2LMHeadModel(config)
    args = TrainingArguments(
        out,
        max_steps=steps,
        per_device_train_batch_size=8,
        gradient_accumulation_steps=2,
        learning_rate=lr,
        lr_scheduler_type="constant",
        max_grad_norm=0.0 if lr > 1 else 1.0,  # the planted run: no clipping to save it
        eval_strategy="steps",
        eval_steps=10,
        logging_steps=10,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        disable_tqdm=True,
    )
    callbacks = []
    if not plain:
        from tensortap.huggingface import TensortapCallback

        callbacks.append(
            TensortapCallback(
                include_collections=["losses", "metrics", "weights", "gradients"],
                save_config=tt.SaveConfig(save_interval=5),
            )
        )
    trainer = Trainer(
        model,
        args,
        train_dataset=Counting(400, 0),
        eval_dataset=Counting(64, 1),
        callbacks=callbacks,
    )
    trainer.train()
    return os.path.join(out, "tensortap")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer steps (the tests use it)")
    parser.add_argument("--out", default="runs/hf")
    parser.add_argument("--plain", action="store_true", help="no callback: tensortap run adds it")
    args = parser.parse_args()
    hf_logging.set_verbosity_error()
    steps = 30 if args.quick else 200
    if args.plain:
        train(args.out, 1e-3, steps, plain=True)
        return
    logging.getLogger("tensortap.rules").setLevel(logging.ERROR)  # the verdicts are printed
    runs = (("healthy", "healthy (lr 1e-3)", 1e-3), ("lr-30", "learning rate far too high", 30.0))
    for name, label, lr in runs:
        path = train(os.path.join(args.out, name), lr, steps, plain=False)
        loss = tt.create_trial(path).tensor("loss")
        first, last = loss.steps(mode=tt.modes.TRAIN)[0], loss.steps(mode=tt.modes.TRAIN)[-1]
        print(f"{label}: trial {path}")
        print(
            f"  loss {loss.value(first, mode=tt.modes.TRAIN).item():.3g} at step {first}, "
            f"{loss.value(last, mode=tt.modes.TRAIN).item():.3g} at step {last}"
        )
        found = rules_that_find_problems(path)
        print(f"  rules that found a problem: {', '.join(found) or 'none'}")


if __name__ == "__main__":
    main()
