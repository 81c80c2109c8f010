"""The seam between whatever decides that training went wrong (the PyTorch guard's skip budget)
and whatever rolls it back (restores the last good checkpoint and skips the bad batches).

Framework-free: the guard calls it, a rollback implementation provides it.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable


@runtime_checkable
class RollbackTarget(Protocol):
    """Something that can be asked to roll training back.

    ``request`` is called from a background thread (the guard's reader), a step or more after
    the step it names, on every rank alike: it should only record the request and act at the
    next safe point of the training loop (a step boundary), never block.
    """

    def request(self, step: int, batches: list[object], reason: str) -> None:
        """Roll back before ``step``; ``batches`` are the identities of the offending batches
        (what ``observe(batch=...)`` was given for each skipped step), oldest first."""


__all__ = ["RollbackTarget"]
