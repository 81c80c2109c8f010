"""One worker's published segment as the reader holds it (:class:`Segment`), the check that an
index is the one its place says (:func:`check_identity`), and its records as step-ordered
columns (:class:`StepColumns`, :func:`build_columns`): what reading a whole step at once slices."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from tensortap.exceptions import FormatError
from tensortap.format import _layout as layout
from tensortap.format._index import SegmentIndex


@dataclass(frozen=True)
class StepColumns:
    """A segment's records ordered by global step (in record order within a step), as
    columns: what reading a whole step at once slices, with no per-record Python objects."""

    names: np.ndarray[Any, Any]  # the tensor name of each record (object array)
    kind: np.ndarray[Any, Any]
    offset: np.ndarray[Any, Any]  # int64
    length: np.ndarray[Any, Any]  # int64
    crc: np.ndarray[Any, Any]
    dtype: np.ndarray[Any, Any]  # codes into TrialIndex.dtype_names
    dims_offset: np.ndarray[Any, Any]
    ndim: np.ndarray[Any, Any]
    reduction: np.ndarray[Any, Any]
    abs: np.ndarray[Any, Any]
    value: np.ndarray[Any, Any]


@dataclass(frozen=True)
class Segment:
    """One published segment of one worker."""

    worker: str
    index: SegmentIndex
    by_step: np.ndarray[Any, Any]  # record numbers ordered by global step (stable)


def check_identity(index: SegmentIndex, worker: str, key: str) -> None:
    """An index must be the one its place says: its worker's, with its own sequence number and
    data object (an index copied into another worker's folder would hand back that worker's
    values under this one's name)."""
    seq = layout.seq_of(key)
    header = index.header
    if header["worker"] != worker or header["seq"] != seq:
        raise FormatError(
            f"the index belongs to worker {header['worker']!r} segment {header['seq']}, not to "
            f"{worker!r} segment {seq}: it was copied or moved here, and is not trusted"
        )
    if seq is None or index.data_key != layout.data_key(worker, seq):
        raise FormatError(
            f"the index points at {index.data_key!r}, not at its own segment's data object"
        )


def build_columns(segment: Segment, dtype_names: list[str]) -> StepColumns:
    """A segment's records as step-ordered columns; the dtypes they name are added to
    ``dtype_names`` (the trial's, which :attr:`StepColumns.dtype` codes index)."""
    index = segment.index
    records = index.records[segment.by_step]
    codes = []
    for name in index.dtypes:
        if name not in dtype_names:
            dtype_names.append(name)
        codes.append(dtype_names.index(name))
    names = np.empty(len(index.names), dtype=object)
    names[:] = index.names
    return StepColumns(
        names=names[records["name"]],
        kind=records["kind"].copy(),
        offset=records["data_offset"].astype(np.int64),
        length=records["data_length"].astype(np.int64),
        crc=records["crc32"].copy(),
        dtype=np.asarray(codes, dtype=np.intp)[records["dtype"]],
        dims_offset=records["dims_offset"].copy(),
        ndim=records["ndim"].copy(),
        reduction=records["reduction"].copy(),
        abs=records["abs"].astype(bool),
        value=records["value"].copy(),
    )
