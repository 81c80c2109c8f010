"""Where a rollback's checkpoints go, for every framework: the :class:`Checkpoints` protocol
and :class:`FunctionCheckpoints`, your own save and load functions (a JAX, Keras or PyTorch
loop's). ``torch.distributed.checkpoint``'s sharded checkpoints are
:class:`~tensortap.pytorch.DistributedCheckpoints`.

A checkpoint of step ``s`` holds the state *before* step ``s`` trains (after steps 0 to s-1),
with ``extra``: a small JSON-able dict the rollback keeps beside it (where the batch stream was).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

from tensortap.exceptions import InvalidConfigError


@runtime_checkable
class Checkpoints(Protocol):
    """What :class:`~tensortap.healing.Rollback` saves and restores through."""

    def save(self, step: int, extra: dict[str, Any]) -> None:
        """Save the training state as the checkpoint of ``step`` (every rank calls it). One
        that cannot be saved raises :class:`~tensortap.exceptions.CheckpointError` (or an
        ``OSError``): the rollback records it and training goes on."""

    def load(self, step: int) -> dict[str, Any]:
        """Restore the checkpoint of ``step``; returns the ``extra`` saved with it. A damaged
        checkpoint raises :class:`~tensortap.exceptions.CheckpointError` before anything
        changed (the rollback then tries an older one)."""

    def steps(self) -> list[int]:
        """The steps that have a checkpoint, oldest first."""

    def forget(self, step: int) -> None:
        """Drop the checkpoint of ``step`` from :meth:`steps` (it belongs to an abandoned
        branch); its files may stay."""


class FunctionCheckpoints:
    """Checkpoints through your own functions: ``save(step)`` writes the state (model,
    optimizer, scheduler, ...) and ``load(step)`` restores it in place. The ``extra`` of each
    checkpoint is kept in memory (add ``batches.state_dict()`` to your own checkpoint to resume
    the batch stream after a restart of the process)."""

    def __init__(self, save: Callable[[int], object], load: Callable[[int], object]) -> None:
        if not callable(save) or not callable(load):
            raise InvalidConfigError(
                "FunctionCheckpoints needs save(step) and load(step) functions, got "
                f"save={save!r}, load={load!r}"
            )
        self._save, self._load = save, load
        self._extras: dict[int, dict[str, Any]] = {}

    def save(self, step: int, extra: dict[str, Any]) -> None:
        self._save(step)
        self._extras[step] = dict(extra)

    def load(self, step: int) -> dict[str, Any]:
        self._load(step)
        return dict(self._extras.get(step, {}))

    def steps(self) -> list[int]:
        return sorted(self._extras)

    def forget(self, step: int) -> None:
        self._extras.pop(step, None)


__all__ = ["Checkpoints", "FunctionCheckpoints"]
