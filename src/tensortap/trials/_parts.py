"""What a trial offers the pieces of ``trials/`` that read it for it: :class:`TrialParts`.

:class:`~tensortap.trials._tensor.Tensor`, :class:`~tensortap.trials._step_block.StepBlock`,
the read-ahead of step blocks, the column readers and the waiting for steps all work on a
trial's insides (its index, its value reader, its mode parsing). They ask for them through
this protocol, never through a trial's private names, and never import ``trial.py``:
``trial.py`` imports them, so imports inside ``trials/`` point one way. A trial hands them
``trial.parts`` (``trial.py``'s ``_Parts``), the one object that reads its insides for them:
the user's :class:`~tensortap.trials._trial.Trial` carries none of the members below that
are not in the user guide (``saved_index``, ``value_reader``, ``mode_key``, ``read_raw``,
``refresh_if_stale``, ``last_saved_step``, ``raise_missing``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, NoReturn, Protocol

import numpy as np

from tensortap.core._collections import Collection
from tensortap.core._modes import ModeKeys
from tensortap.storage._base import Store
from tensortap.trials._index import TrialIndex
from tensortap.trials._reader import RawRef, ValueReader


class TrialParts(Protocol):
    """The part of a :class:`~tensortap.trials._trial.Trial` its helpers in ``trials/`` use."""

    @property
    def store(self) -> Store:
        """Where the trial is read from."""
        ...

    #: How many values (raw or reduced) were read: the helpers count what they read.
    values_read: int

    @property
    def saved_index(self) -> TrialIndex:
        """What the trial has loaded of its index files: workers, segments, steps, names."""
        ...

    @property
    def value_reader(self) -> ValueReader:
        """The reader of saved raw values (its cache, ranged reads)."""
        ...

    @staticmethod
    def mode_key(mode: Any) -> ModeKeys | None:
        """A mode as the user gave it, parsed; None stays None."""
        ...

    def read_raw(self, raw: RawRef) -> np.ndarray:
        """One saved raw value, counted in ``values_read``."""
        ...

    def refresh(self) -> bool:
        """Read whatever was published since the last refresh; True if anything was new."""
        ...

    def refresh_if_stale(self) -> bool:
        """``refresh`` unless a look was taken recently enough; True if anything was new."""
        ...

    def steps(self, mode: Any = None, show_incomplete_steps: bool = False) -> list[int]:
        """Saved steps: global step numbers, or the step numbers within ``mode``."""
        ...

    def last_saved_step(self, mode: Any) -> int | None:
        """The last step saved in ``mode`` (by any worker); None before the first."""
        ...

    def workers(self) -> list[str]:
        """The workers that saved something."""
        ...

    def tensor_names(
        self,
        step: int | None = None,
        mode: Any = None,
        regex: str | Iterable[str] | None = None,
        collection: str | Collection | None = None,
    ) -> list[str]:
        """Names of saved tensors, optionally only those at a step, a regex's, a collection's."""
        ...

    def raise_missing(self, name: str, step: int, mode: ModeKeys | None) -> NoReturn:
        """Raise the error that says why tensor ``name`` has no value at ``step``."""
        ...


__all__ = ["TrialParts"]
