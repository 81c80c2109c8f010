"""A segment's series read from its index (and its one-element raw values from its data
object): for a trial written before series objects existed, or a segment whose series object
is missing or damaged."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from tensortap.core._dtypes import storage_dtype
from tensortap.exceptions import FormatError
from tensortap.format import _layout as layout
from tensortap.format._checksum import crc32
from tensortap.format._index import SegmentIndex, decode_index
from tensortap.format._series import (
    DIRECTORY_DTYPE,
    SeriesHead,
    group_series,
    number_rows,
    step_table,
)
from tensortap.storage._base import Store

_BATCH = 256  # range requests made together


class Parts(NamedTuple):
    """A source's series in memory (read from an index)."""

    head: SeriesHead
    blocks: list[tuple[np.ndarray, np.ndarray]]
    steps: np.ndarray


def parts_from_index(store: Store, key: str, seq: int, last: int) -> Parts:
    """The series of segment ``seq`` from its index at ``key`` (a rollup's span ``seq..last``
    names it), checked to be its own segment's."""
    index = decode_index(store.get(key), f"index {key}")
    if index.header["seq"] != seq or index.data_key != layout.data_key(
        str(index.header["worker"]), seq
    ):
        raise FormatError(f"index {key} is not its own segment's: not trusted")
    rows, values = _raw_scalars(store, index)
    keys, blocks = group_series(index.names, index.records, rows, values)
    table = step_table(index.steps)
    counts = np.array([len(b[0]) for b in blocks], dtype=np.uint64)
    directory = np.zeros(len(keys), dtype=DIRECTORY_DTYPE)
    directory["count"] = counts
    head = SeriesHead(
        str(index.header["worker"]),
        seq,
        last,
        keys,
        directory,
        len(table),
        0,
        0,
        int(table["global_step"].min()) if len(table) else -1,
        int(table["global_step"].max()) if len(table) else -1,
    )
    return Parts(head, blocks, table)


def _raw_scalars(store: Store, index: SegmentIndex) -> tuple[np.ndarray, np.ndarray]:
    """The rows of an index's raw one-element numeric values, and those numbers (read from
    its data object, each checked against its CRC)."""
    records = index.records
    rows = number_rows(index)
    if not len(rows):
        return rows, np.zeros(0, np.float64)
    picked = records[rows]
    ranges = [(index.data_key, int(r["data_offset"]), int(r["data_length"])) for r in picked]
    values = np.zeros(len(rows), np.float64)
    raws: list[bytearray] = []
    for at in range(0, len(ranges), _BATCH):
        raws.extend(store.get_ranges(ranges[at : at + _BATCH]))
    for k, (raw, rec) in enumerate(zip(raws, picked, strict=True)):
        if crc32(raw) != int(rec["crc32"]):
            raise FormatError(f"a value in {index.data_key} fails its checksum: it is corrupt")
        dtype = storage_dtype(index.dtypes[int(rec["dtype"])])
        values[k] = float(np.frombuffer(raw, dtype=dtype, count=1)[0])
    return rows, values
