"""Where a rollback's checkpoints go, for every framework: the :class:`Checkpoints` protocol,
:class:`FunctionCheckpoints`, your own save and load functions (a JAX, Keras or PyTorch
loop's), and :class:`MemoryCheckpoints`, copies of the training state held in memory, taken and
put back by a trainer's callback (Lightning's ``RollbackCallback``).
``torch.distributed.checkpoint``'s sharded checkpoints are
:class:`~tensortap.pytorch.DistributedCheckpoints`.

A checkpoint of step ``s`` holds the state *before* step ``s`` trains (after steps 0 to s-1),
with ``extra``: a small JSON-able dict the rollback keeps beside it (where the batch stream was).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

from tensortap.exceptions import CheckpointError, InvalidConfigError


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


class MemoryCheckpoints:
    """The newest ``keep`` checkpoints held in memory, each whatever ``capture()`` returned
    (copies of the model's, the optimizers', the schedulers' and the loop's state, made by the
    framework's callback) and put back with ``restore(state)``. The callback that trains binds
    the two functions when training starts (:meth:`bind`): until then, and for a trainer whose
    state it cannot copy, :meth:`save` raises :class:`~tensortap.exceptions.CheckpointError`.
    Nothing is written to disk, so nothing survives the process: for a restart, checkpoint to
    disk as well."""

    def __init__(self, keep: int = 2) -> None:
        if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
            raise InvalidConfigError(
                f"MemoryCheckpoints: keep (checkpoints held in memory) must be an int >= 1, got "
                f"{keep!r}"
            )
        self.keep = keep
        self._capture: Callable[[], object] | None = None
        self._restore: Callable[[Any], object] | None = None
        self._held: dict[int, tuple[Any, dict[str, Any]]] = {}  # step -> (state, extra)

    def bind(self, capture: Callable[[], object], restore: Callable[[Any], object]) -> None:
        """The functions that copy the training state and put a copy back (a trainer's
        callback calls it when training starts; checkpoints held from before are dropped:
        they are another run's)."""
        if not callable(capture) or not callable(restore):
            raise InvalidConfigError(
                "MemoryCheckpoints.bind needs capture() and restore(state) functions, got "
                f"capture={capture!r}, restore={restore!r}"
            )
        self._capture, self._restore = capture, restore
        self._held.clear()

    def save(self, step: int, extra: dict[str, Any]) -> None:
        if self._capture is None:
            raise CheckpointError(
                "MemoryCheckpoints holds copies a trainer's callback takes: give it to a "
                "callback that binds it (tensortap.lightning.RollbackCallback) before training"
            )
        self._held[step] = (self._capture(), dict(extra))
        for old in sorted(self._held)[: -self.keep]:
            del self._held[old]

    def load(self, step: int) -> dict[str, Any]:
        held = self._held.get(step)
        if held is None or self._restore is None:
            raise CheckpointError(f"no checkpoint of step {step} is held in memory")
        self._restore(held[0])
        return dict(held[1])

    def state(self, step: int) -> Any:
        """The copy held as the checkpoint of ``step`` (what ``capture()`` returned)."""
        return self._held[step][0]

    def steps(self) -> list[int]:
        return sorted(self._held)

    def forget(self, step: int) -> None:
        self._held.pop(step, None)


__all__ = ["Checkpoints", "FunctionCheckpoints", "MemoryCheckpoints"]
