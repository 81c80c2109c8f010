"""A Lightning fit's training state, copied into memory and put back in place: what
:class:`~tensortap.healing.MemoryCheckpoints` holds for Lightning's ``RollbackCallback``.

A copy taken when a training batch starts, at ``trainer.global_step == s``, is the checkpoint
of step ``s`` (the state before step ``s`` trains): the module's ``state_dict``, each
optimizer's and each learning-rate scheduler's ``state_dict``, the random number generators
(Python's, NumPy's, torch's, and CUDA's where it was initialised), and the loop's count of
optimizer steps (so ``trainer.global_step`` is ``s`` again once it is put back, and
``max_steps`` counts from there). Where the batches are is not put back: the fit goes on with
its next batch, in the epoch it is in. So the schedules follow the two counts they step on: a
step-interval scheduler is put back with the step, an epoch-interval one keeps the epoch's
state (and an optimizer only such schedulers drive keeps the learning rate they set), so its
count of epochs stays ``current_epoch``'s. Lightning steps a ``ReduceLROnPlateau`` on a step
interval after the batch's end, on the abandoned batch's metric: :func:`restore_step_plateaus`
puts it back again before the next batch. Only a fit on one device, its whole state in this
process, can be copied so: :func:`refusal` says why another cannot.
"""

from __future__ import annotations

import copy
import random
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

#: The strategies whose whole training state is the module's and the optimizers' in this
#: process (by class name: ``lightning.pytorch`` and ``pytorch_lightning`` each have one).
SINGLE_DEVICE = ("SingleDeviceStrategy", "SingleDeviceXLAStrategy")


@dataclass(frozen=True)
class FitState:
    """One copy of a fit's state (see the module docstring); ``step``: ``global_step`` then."""

    step: int
    module: dict[str, torch.Tensor]
    optimizers: list[dict[str, Any]]
    schedulers: list[dict[str, Any]]
    rng: dict[str, Any]
    loop: dict[str, Any]


def refusal(trainer: Any, module: Any) -> str | None:
    """Why the fit's state cannot be held in memory and put back in place, or None."""
    strategy = type(trainer.strategy).__name__
    if trainer.world_size != 1 or strategy not in SINGLE_DEVICE:
        return (
            "an in-memory rollback copies the whole training state of one process on one "
            f"device (a SingleDeviceStrategy: devices=1, no strategy=); got {strategy} with "
            f"world size {trainer.world_size}. Under DDP or FSDP, roll back to Lightning's own "
            "checkpoints: Rollback(LightningCheckpoints(dirpath)) with fit_with_rollback"
        )
    return None


def capture(trainer: Any, module: Any) -> FitState:
    """Copy the fit's state now (see the module docstring)."""
    loop = trainer.fit_loop.epoch_loop
    return FitState(
        step=int(trainer.global_step),
        module={k: v.detach().clone() for k, v in module.state_dict().items()},
        optimizers=[copy.deepcopy(o.state_dict()) for o in trainer.optimizers],
        schedulers=[copy.deepcopy(c.scheduler.state_dict()) for c in trainer.lr_scheduler_configs],
        rng=_rng_states(),
        loop={
            "automatic": copy.deepcopy(loop.automatic_optimization.optim_progress.state_dict()),
            "manual": copy.deepcopy(loop.manual_optimization.optim_step_progress.state_dict()),
            "schedulers": copy.deepcopy(loop.scheduler_progress.state_dict()),
            "batches_that_stepped": int(loop._batches_that_stepped),
        },
    )


def restore(trainer: Any, module: Any, state: FitState, *, at_batch_end: bool) -> None:
    """Put ``state`` back in place: the same parameter and optimizer objects hold the copy's
    values (copied again, so the held copy stays as it was for a later restore).
    ``at_batch_end``: called in ``on_train_batch_end``, before Lightning counts the batch for
    its loggers (its ``_batches_that_stepped`` is then one short of the copy's)."""
    if len(state.optimizers) != len(trainer.optimizers) or len(state.schedulers) != len(
        trainer.lr_scheduler_configs
    ):
        raise ValueError(
            f"the checkpoint of step {state.step} holds {len(state.optimizers)} optimizer(s) and "
            f"{len(state.schedulers)} scheduler(s), the fit now {len(trainer.optimizers)} and "
            f"{len(trainer.lr_scheduler_configs)}"
        )
    module.load_state_dict(state.module, strict=True)  # copies into the same parameters
    by_epoch = _epoch_driven(trainer)
    kept = [_hyperparameters(trainer.optimizers[i]) for i in by_epoch]
    for optimizer, saved in zip(trainer.optimizers, state.optimizers, strict=True):
        optimizer.load_state_dict(copy.deepcopy(saved))  # it may keep the tensors it is given
    for i, groups in zip(by_epoch, kept, strict=True):
        _set_hyperparameters(trainer.optimizers[i], groups)  # the epoch's, as its schedulers'
    for config, saved in zip(trainer.lr_scheduler_configs, state.schedulers, strict=True):
        if config.interval == "step":  # an epoch-interval one goes on with the epoch
            config.scheduler.load_state_dict(copy.deepcopy(saved))
    _set_rng_states(state.rng)
    loop = trainer.fit_loop.epoch_loop
    loop.automatic_optimization.optim_progress.load_state_dict(
        copy.deepcopy(state.loop["automatic"])
    )
    loop.manual_optimization.optim_step_progress.load_state_dict(
        copy.deepcopy(state.loop["manual"])
    )
    loop.scheduler_progress.load_state_dict(copy.deepcopy(state.loop["schedulers"]))
    loop._batches_that_stepped = state.loop["batches_that_stepped"] - (1 if at_batch_end else 0)


def restore_step_plateaus(trainer: Any, state: FitState) -> None:
    """Put the step-interval ``ReduceLROnPlateau`` schedulers of ``state`` back again, with
    the learning rates of their optimizers and Lightning's count of scheduler steps: after a
    restore at a batch's end, Lightning still steps them on that batch's metric."""
    for config, saved in zip(trainer.lr_scheduler_configs, state.schedulers, strict=True):
        if config.interval != "step" or not config.reduce_on_plateau:
            continue
        config.scheduler.load_state_dict(copy.deepcopy(saved))
        optimizer = config.scheduler.optimizer
        index = next(i for i, o in enumerate(trainer.optimizers) if o is optimizer)
        for group, held in zip(
            optimizer.param_groups, state.optimizers[index]["param_groups"], strict=True
        ):
            group["lr"] = held["lr"]
    loop = trainer.fit_loop.epoch_loop
    loop.scheduler_progress.load_state_dict(copy.deepcopy(state.loop["schedulers"]))


def _epoch_driven(trainer: Any) -> list[int]:
    """The optimizers (their indices) that only epoch-interval schedulers drive."""
    intervals: dict[int, set[str]] = {}
    for config in trainer.lr_scheduler_configs:
        for i, optimizer in enumerate(trainer.optimizers):
            if config.scheduler.optimizer is optimizer:
                intervals.setdefault(i, set()).add(config.interval)
    return [i for i, found in sorted(intervals.items()) if found == {"epoch"}]


def _hyperparameters(optimizer: Any) -> list[dict[str, Any]]:
    """Each parameter group's settings (the learning rate, momentum...), without its tensors."""
    return [
        {k: copy.deepcopy(v) for k, v in group.items() if k != "params"}
        for group in optimizer.param_groups
    ]


def _set_hyperparameters(optimizer: Any, groups: list[dict[str, Any]]) -> None:
    for group, held in zip(optimizer.param_groups, groups, strict=True):
        group.update(held)


def _rng_states() -> dict[str, Any]:
    states: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def _set_rng_states(states: dict[str, Any]) -> None:
    random.setstate(states["python"])
    np.random.set_state(states["numpy"])
    torch.set_rng_state(states["torch"])
    if "cuda" in states:
        torch.cuda.set_rng_state_all(states["cuda"])


__all__ = ["SINGLE_DEVICE", "FitState", "capture", "refusal", "restore", "restore_step_plateaus"]
