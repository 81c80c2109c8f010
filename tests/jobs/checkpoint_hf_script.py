"""A Hugging Face ``Trainer.train()`` (it never imports tensortap) saving a checkpoint every 5
steps with ``save_total_limit``: a small classifier whose ``--fault-at``-th training forward
pass (1-based) gives NaN logits, so that step's update makes every weight NaN (as a bad batch
or kernel would). ``--best``: an evaluation every 5 steps and ``save_strategy="best"`` on an
evaluation set of one class, where a model that predicts class 0 everywhere (as NaN logits do)
scores best. ``--resume``: ``train(resume_from_checkpoint=True)``. ``--own-save DIR``: the
script's own ``trainer.save_model(DIR)`` before and after training. Writes what it ended with
to ``--log`` (JSON): the checkpoints on disk, whether the weights are finite, the steps
trained, the best checkpoint, the SHA-256 of DIR's weights after each own save."""

import argparse
import hashlib
import json
import math
import os
from typing import Any

import numpy as np
import torch
from torch import nn
from transformers import Trainer, TrainingArguments

parser = argparse.ArgumentParser()
parser.add_argument("--log", required=True)
parser.add_argument("--out", default="out")
parser.add_argument("--steps", type=int, default=30)
parser.add_argument("--limit", type=int, default=1)
parser.add_argument("--fault-at", type=int, default=-1)
parser.add_argument("--best", action="store_true")
parser.add_argument("--resume", action="store_true")
parser.add_argument("--own-save", default=None)
args = parser.parse_args()


class Classifier(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 2))
        self.calls = 0

    def forward(self, x: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
        logits = self.net(x)
        if self.training:
            self.calls += 1
            if self.calls == args.fault_at:
                logits = logits * math.nan
        return {"loss": nn.functional.cross_entropy(logits, labels), "logits": logits}


def samples(n: int, seed: int, one_class: bool = False) -> list[dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 8, generator=g)
    y = torch.zeros(n, dtype=torch.long) if one_class else (x[:, 0] > 0).long()
    return [{"x": a, "labels": b} for a, b in zip(x, y, strict=True)]


def accuracy(prediction) -> dict[str, float]:
    return {
        "accuracy": float(np.mean(np.argmax(prediction.predictions, -1) == prediction.label_ids))
    }


torch.manual_seed(0)
torch.set_num_threads(1)
best: dict[str, Any] = {
    "eval_strategy": "steps",
    "eval_steps": 5,
    "save_strategy": "best",
    "metric_for_best_model": "accuracy",
    "greater_is_better": True,
    "per_device_eval_batch_size": 64,
}
model = Classifier()
trainer = Trainer(
    model,
    TrainingArguments(
        args.out,
        max_steps=args.steps,
        per_device_train_batch_size=8,
        learning_rate=1e-2,
        logging_steps=1,
        save_steps=5,
        save_total_limit=args.limit,
        report_to="none",
        use_cpu=True,
        disable_tqdm=True,
        **(best if args.best else {}),
    ),
    train_dataset=samples(512, 0),
    eval_dataset=samples(64, 1, one_class=True) if args.best else None,
    compute_metrics=accuracy if args.best else None,
)


def own_save() -> str | None:
    if args.own_save is None:
        return None
    trainer.save_model(args.own_save)
    with open(os.path.join(args.own_save, "model.safetensors"), "rb") as weights:
        return hashlib.sha256(weights.read()).hexdigest()


own_before = own_save()
trainer.train(resume_from_checkpoint=True if args.resume else None)
own_after = own_save()
weights = [p.detach() for p in model.parameters()]
with open(args.log, "w") as f:
    json.dump(
        {
            "checkpoints": sorted(n for n in os.listdir(args.out) if n.startswith("checkpoint-")),
            "finite": all(bool(torch.isfinite(w).all()) for w in weights),
            "steps": [e["step"] for e in trainer.state.log_history if "loss" in e],
            "best": trainer.state.best_model_checkpoint,
            "own_saves": [own_before, own_after],
        },
        f,
    )
