"""What a hook hands to a writer: records of one step, batched."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, Protocol

import numpy as np

from tensortap.core._dtypes import dtype_info
from tensortap.core._modes import ModeKeys

#: The stored dtype name of a float64 number (``<f8``), the dtype of :class:`ScalarSteps`' values.
F8_NAME = dtype_info(np.dtype(np.float64)).stored_name


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


@dataclass(slots=True)
class ScalarSteps:
    """Many whole steps of one mode that save float64 numbers only, as columns: what one
    :class:`StepBatch` per step of 0-d ``<f8`` records would hold, handed on at once (the
    vital signs a framework gathered on its device and read back together).

    Row ``i`` is global step ``global_steps[i]``, mode step ``mode_steps[i]``; its records are
    ``values[i, j]`` under ``names[j]`` where ``kept[i, j]`` (all when ``kept`` is None), in
    the order of ``names``. Every row keeps at least one value; steps go forward."""

    global_steps: np.ndarray[Any, Any]  # int64 (N,)
    mode: ModeKeys
    mode_steps: np.ndarray[Any, Any]  # int64 (N,)
    wall_time: float
    names: tuple[str, ...]
    values: np.ndarray[Any, Any]  # float64 (N, len(names))
    kept: np.ndarray[Any, Any] | None = None  # bool (N, len(names))
    collections: dict[str, Any] | None = None  # the collections, when they changed (as a step's)

    def __len__(self) -> int:
        return len(self.global_steps)

    @property
    def global_step(self) -> int:
        """The first step's (what a log line names)."""
        return int(self.global_steps[0]) if len(self.global_steps) else -1

    @property
    def nbytes(self) -> int:
        # as the steps' batches would count (64 a record, plus its 8 bytes)
        count = self.values.size if self.kept is None else int(self.kept.sum())
        return 72 * count

    def batches(self) -> Iterator[StepBatch]:
        """The same steps, one :class:`StepBatch` each, for what reads steps one by one (the
        TensorBoard export)."""
        names, mode, kept, dtype = self.names, self.mode, self.kept, F8_NAME
        for i, row in enumerate(self.values):
            records = [
                Record(name, RecordKind.TENSOR, dtype, (), row[j : j + 1].reshape(()))
                for j, name in enumerate(names)
                if kept is None or kept[i, j]
            ]
            yield StepBatch(
                int(self.global_steps[i]),
                mode,
                int(self.mode_steps[i]),
                self.wall_time,
                records,
                self.collections if i == 0 else None,
            )


class RecordSink(Protocol):
    """Where a recorder hands finished steps (the background writer, or a list in tests):
    one step at a time, or many steps of numbers at once (:class:`ScalarSteps`)."""

    def submit(self, batch: StepBatch) -> None: ...

    def submit_steps(self, block: ScalarSteps) -> None: ...
