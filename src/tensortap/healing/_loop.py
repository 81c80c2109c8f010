"""A training loop's steps driven by a rollback (:meth:`tensortap.healing.Rollback.steps`):
checkpoints every ``every`` steps, a request acted on at each boundary, the data read again
from where a restored checkpoint took it. Talks to the rollback through :class:`Driven`."""

from __future__ import annotations

from collections.abc import Hashable, Iterator
from typing import Any, Protocol

from tensortap.healing._checkpoints import Checkpoints
from tensortap.healing._skip_batches import SkipBatches

_END = object()


class Driven(Protocol):
    """What the loop asks of a rollback."""

    checkpoints: Checkpoints
    should_stop: bool

    def restore(self) -> int | None: ...

    def checkpoint(self, step: int) -> None: ...

    def trained(self, step: int, batch_id: Hashable) -> None: ...


def drive(
    rollback: Driven, batches: SkipBatches[Any], every: int, total_steps: int, start: int
) -> Iterator[tuple[int, Hashable, Any]]:
    """Yield ``(step, batch_id, batch)`` until ``total_steps`` (see ``Rollback.steps``)."""
    step = start
    stream: Iterator[Any] = iter(batches)
    while True:
        resumed = rollback.restore()
        if rollback.should_stop:
            return
        if resumed is not None:
            step, stream = resumed, iter(batches)
        if step >= total_steps:
            return
        if step % every == 0 and step not in rollback.checkpoints.steps():
            rollback.checkpoint(step)
        batch = next(stream, _END)
        if batch is _END:  # a pass over the data ended: the next one
            stream = iter(batches)
            batch = next(stream, _END)
            if batch is _END:
                return  # nothing left to read
        batch_id = batches.last_id
        rollback.trained(step, batch_id)
        yield step, batch_id, batch
        step += 1
