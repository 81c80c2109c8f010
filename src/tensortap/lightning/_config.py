"""What the Lightning callback learns of the run's configuration (``trial.config()``) when
training starts: the module's ``hparams`` (what ``save_hyperparameters()`` kept), the Trainer's
flags, its optimizers and learning-rate schedulers, and the first training batch's size. The
model's class and size come from the PyTorch hook (:mod:`tensortap.pytorch._config`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tensortap.pytorch._config import (
    base_learning_rate,
    class_name,
    optimizer_config,
    scheduler_config,
)

#: The Trainer's flags recorded (attributes of the Trainer, where it has them).
TRAINER_FLAGS = (
    "max_epochs",
    "min_epochs",
    "max_steps",
    "min_steps",
    "accumulate_grad_batches",
    "gradient_clip_val",
    "gradient_clip_algorithm",
    "precision",
    "num_devices",
    "num_nodes",
    "check_val_every_n_epoch",
    "val_check_interval",
    "log_every_n_steps",
    "limit_train_batches",
    "limit_val_batches",
    "num_sanity_val_steps",
    "default_root_dir",
)


def trainer_flags(trainer: Any) -> dict[str, Any]:
    """The Trainer's class and the flags of :data:`TRAINER_FLAGS` it holds."""
    flags: dict[str, Any] = {}
    for name in TRAINER_FLAGS:
        try:
            value = getattr(trainer, name)
        except Exception:  # a property that needs a state the Trainer is not in
            continue
        if value is None or isinstance(value, (bool, int, float, str)):
            flags[name] = value
    return {"class": class_name(trainer), "flags": flags}


def fit_config(trainer: Any, module: Any) -> dict[str, Any]:
    """``{"trainer", "hparams", "optimizer"(s), "schedulers"}`` at the start of training."""
    found: dict[str, Any] = {"trainer": trainer_flags(trainer)}
    hparams = getattr(module, "hparams", None)
    if isinstance(hparams, Mapping) and hparams:
        found["hparams"] = dict(hparams)
    torch_optimizers = list(getattr(trainer, "optimizers", None) or [])
    optimizers = [optimizer_config(o) for o in torch_optimizers]
    if optimizers:
        found["optimizer"] = optimizers[0]
        found["learning_rate"] = base_learning_rate(torch_optimizers[0])
        if len(optimizers) > 1:
            found["optimizers"] = optimizers
    schedulers = [
        scheduler_config(c.scheduler)
        for c in getattr(trainer, "lr_scheduler_configs", None) or []
        if getattr(c, "scheduler", None) is not None
    ]
    if schedulers:
        found["schedulers"] = schedulers
    return found
