"""What a hook hands to a writer: records of one step, batched."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, Protocol

import numpy as np

from tensortap.core._modes import ModeKeys


class Deferred(Protocol):
    """Values of records computed later, off the training thread (by the writer).

    ``resolve()`` fills ``value`` of every record that shares this object; it is called once,
    before the records are written. ``nbytes`` is the memory it holds until then.
    """

    nbytes: int

    def resolve(self) -> None: ...


class RecordKind(IntEnum):
    """What a record holds."""

    TENSOR = 0  # the raw tensor bytes
    REDUCTION = 1  # one float: a reduction or norm of the tensor
    SHAPE = 2  # the tensor's shape only


@dataclass(slots=True)
class Record:
    """One saved item of one tensor at one step."""

    name: str
    kind: RecordKind
    dtype: str
    shape: tuple[int, ...]
    data: np.ndarray[Any, Any] | None = None
    reduction: str = ""
    on_abs: bool = False
    value: float = 0.0
    deferred: Deferred | None = None  # set while ``value`` is still to be computed

    @property
    def nbytes(self) -> int:
        return 0 if self.data is None else int(self.data.nbytes)


@dataclass(slots=True)
class StepBatch:
    """Everything one step saved, plus the collections when they changed during the step."""

    global_step: int
    mode: ModeKeys
    mode_step: int
    wall_time: float
    records: list[Record] = field(default_factory=list)
    collections: dict[str, Any] | None = None

    @property
    def nbytes(self) -> int:
        # one pass, no allocation for a step without deferred values (asked at every submit)
        total = 64 * len(self.records)
        deferred: dict[int, int] | None = None
        for record in self.records:
            data = record.data
            if data is not None:
                total += data.nbytes
            if record.deferred is not None:
                if deferred is None:
                    deferred = {}
                deferred[id(record.deferred)] = record.deferred.nbytes
        return total if deferred is None else total + sum(deferred.values())

    def resolve_deferred(self) -> None:
        """Compute the values still deferred (each shared object once)."""
        for record in self.records:
            deferred = record.deferred
            if deferred is not None:
                deferred.resolve()


class RecordSink(Protocol):
    """Where a recorder hands finished steps (the background writer, or a list in tests)."""

    def submit(self, batch: StepBatch) -> None: ...
