"""One rank of a Hugging Face ``Trainer.train()`` under DDP (gloo, two CPU processes started
by the test with RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), guarded as
``tensortap run`` guards it (INSTALL ``guard_trainer``) or with the script's own
``CheckpointGuardCallback`` alone (INSTALL ``callback``), saving every 2 steps up to step 6. At the end
of step 4, just before its save, one parameter of rank NAN_RANK only is made NaN (a per-rank
fault: the replicas diverged); it is put back before step 5 runs, so DDP's all-reduce never
spreads it. Rank 0 keeps the bytes of ``checkpoint-2`` as they were before that save was
decided. After ``train()`` the script saves with ``save_model`` itself: on rank 0 alone, then on
every rank with rank NAN_RANK's weight NaN again. With STRATEGY ``best`` the Trainer evaluates
every 2 steps and saves each new best (``save_strategy="best"``, every evaluation a new
best: the save is decided after the callbacks ran), and the weight is made NaN after step 4's evaluation, before its save. Prints a
JSON line. Usage: hf_checkpoint_guard_ranks.py OUT_DIR NAN_RANK INSTALL [STRATEGY]"""

from __future__ import annotations

import hashlib
import json
import math
import os
import sys
from pathlib import Path
from typing import Any

import torch
from transformers import Trainer, TrainerCallback, TrainingArguments
from transformers.utils import logging as hf_logging

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: tests.helpers
from tensortap.huggingface import CheckpointGuardCallback
from tensortap.huggingface._checkpoint_guard import guard_trainer
from tests.helpers.no_pickle import forbid_pickling_collectives
from tests.helpers.ranks import leave_together

POISONED, SAVES = 4, 2


def digests(where: Path) -> dict[str, str]:
    return {
        str(p.relative_to(where)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(where.rglob("*"))
        if p.is_file()
    }


class Poison(TrainerCallback):
    """Writes NaN into ``net.0.weight`` of rank ``rank`` at the end of step 4 (before the
    guard's callback, which comes after it) and puts it back before step 5."""

    def __init__(self, rank: int, out: Path, after_evaluation: bool = False) -> None:
        self.rank, self.out, self.after_evaluation = rank, out, after_evaluation
        self.kept: torch.Tensor | None = None
        self.before: dict[str, str] = {}

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.global_step != POISONED:
            return
        if args.process_index == 0:  # every rank's save of step 2 is done: steps 3, 4 synced
            self.before = digests(self.out / "checkpoint-2")
        if not self.after_evaluation:
            self.poison(args, kwargs)

    def on_evaluate(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.global_step == POISONED and self.after_evaluation:
            self.poison(args, kwargs)  # the evaluation saw finite weights: a new best

    def poison(self, args: Any, kwargs: dict[str, Any]) -> None:
        if args.process_index == self.rank:
            weight = kwargs["model"].get_parameter("net.0.weight")
            self.kept = weight.detach().clone()
            with torch.no_grad():
                weight[0, 0] = math.nan

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.global_step == POISONED and self.kept is not None:
            with torch.no_grad():
                kwargs["model"].get_parameter("net.0.weight").copy_(self.kept)
            self.kept = None


class StepTrainer(Trainer):
    """Each evaluation also scores the step it ran at (``eval_step``): with it as the metric
    of the best model, every evaluation is a new best, whatever the loss did."""

    def evaluate(self, *args: Any, **kwargs: Any) -> dict[str, float]:
        metrics = super().evaluate(*args, **kwargs)
        metrics["eval_step"] = float(self.state.global_step)
        return metrics


def main() -> None:
    hf_logging.set_verbosity_error()
    forbid_pickling_collectives()  # tensortap's ranks agree without pickle (issue 46)
    from tests.helpers.hf_regression import BATCH, Regression, samples

    out, nan_rank, install = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    best = sys.argv[4:] == ["best"]
    strategy: dict[str, Any] = {"save_strategy": "steps", "save_steps": SAVES}
    if best:
        strategy = {
            "save_strategy": "best",
            "eval_strategy": "steps",
            "eval_steps": SAVES,
            "metric_for_best_model": "step",
            "greater_is_better": True,
        }
    args = TrainingArguments(
        str(out),
        max_steps=6,
        per_device_train_batch_size=BATCH,
        learning_rate=0.05,
        lr_scheduler_type="constant",
        optim="sgd",
        **strategy,
        report_to=[],
        use_cpu=True,
        ddp_backend="gloo",
        disable_tqdm=True,
        max_grad_norm=0.0,
        seed=0,
    )
    poison = Poison(nan_rank, out, after_evaluation=best)
    # the guard's callback comes after Poison: it judges the weights Poison left
    own = CheckpointGuardCallback() if install == "callback" else None
    callbacks: list[TrainerCallback] = [poison] if own is None else [poison, own]
    trainer = (StepTrainer if best else Trainer)(
        Regression(None),
        args,
        train_dataset=samples(),
        eval_dataset=samples() if best else None,
        callbacks=callbacks,
    )
    if install == "guard_trainer":
        guard_trainer(trainer)  # what tensortap run does
    # "none": the script as written, guarded (or not) by tensortap run from outside
    found = [
        c for c in trainer.callback_handler.callbacks if isinstance(c, CheckpointGuardCallback)
    ]
    callback = found[0] if found else CheckpointGuardCallback()
    trainer.train()
    model = trainer.model
    assert model is not None
    finite = all(bool(torch.isfinite(p).all()) for p in model.parameters())
    events = [[e.kind, e.step, e.reason] for e in callback.guard.events]
    rank = int(os.environ["RANK"])
    # The script's own save_model: on rank 0 alone (a gather would hang it), then on every
    # rank with rank NAN_RANK's weight NaN again: each rank judges the copy it holds
    if rank == 0:
        trainer.save_model(str(out / "final-rank0"))
    weight = model.get_parameter("net.0.weight")
    kept = weight.detach().clone()
    if rank == nan_rank:
        with torch.no_grad():
            weight[0, 0] = math.nan
    trainer.save_model(str(out / "final"))
    with torch.no_grad():
        weight.copy_(kept)
    own_saves = [[e.kind, e.step, e.message] for e in callback.guard.events[len(events) :]]
    result = {"rank": rank, "events": events, "finite": finite, "before": poison.before}
    result["best"] = [trainer.state.best_global_step, trainer.state.best_model_checkpoint]
    print(json.dumps({**result, "own": own_saves}))
    leave_together()


if __name__ == "__main__":
    main()
