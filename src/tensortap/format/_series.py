"""The series object: a segment's numbers laid out as columns, one block per series.

Every reduction and every one-element numeric raw value of a segment (losses, metrics, scalars,
norms) is also written, when the segment is published, into a small object beside its index,
grouped by *series* (tensor, statistic, mode). Reading one series, or every series, of a run is
then a few range reads per segment whatever the number of steps inside it, and never touches
the index's 64-byte records or the tensor data. A *rollup* holds the series of several
consecutive segments of one worker, merged (the writer writes one every so many segments, so a
long run is read from few objects).

Layout (all little-endian; see docs/format.md)::

    0   4  magic b"TTSR"
    4   2  u16 format version
    6   2  u16 flags (0)
    8   4  u32 header length H
    12  4  u32 series count S
    16  8  u64 step count T (rows of the step table)
    24  8  u64 value count V
    32  H  header, UTF-8 JSON: worker, first and last segment, the series [tensor, statistic, mode]
    ..     zero padding to a multiple of 8
    ..  24*S  directory (DIRECTORY_DTYPE): each series' first value, count and block CRC
    ..  4+4   CRC-32 of every byte before it, and 4 zero bytes        <- the head ends here
    ..  32*T  step table: global step i8, mode step i8, wall time f8, mode u8 (with its CRC in
              the header's "steps_crc")
    ..  16*V  blocks: series i's global steps (i8) then its values (f8), at 32*T + 16*start

The head is verified as a whole (it is what every read needs); each block and the step table
carry their own CRC so one series is read with one range request and checked on its own.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from typing import Any

import numpy as np

from tensortap.core._dtypes import storage_dtype
from tensortap.core._modes import ModeKeys
from tensortap.core._records import RecordKind
from tensortap.exceptions import FormatError
from tensortap.format._checksum import crc32
from tensortap.format._fields import get_int, get_list, get_str
from tensortap.format._index import REDUCTION_BY_CODE, SegmentIndex, check_version

SERIES_VERSION = 1
MAGIC = b"TTSR"
_PREFIX = struct.Struct("<4sHHIIQQ")
assert _PREFIX.size == 32
DIRECTORY_DTYPE = np.dtype([("start", "<u8"), ("count", "<u8"), ("crc32", "<u4"), ("pad", "<u4")])
STEP_DTYPE = np.dtype(
    [("global_step", "<i8"), ("mode_step", "<i8"), ("wall_time", "<f8"), ("mode", "<u8")]
)
_MODE_VALUES = frozenset(int(m) for m in ModeKeys)
_MAX_HEADER = 64 * 1024 * 1024  # a header claiming more is corrupt (a reader never allocates it)


@dataclass(frozen=True)
class SeriesHead:
    """A decoded head: which worker and segments, the series and where their blocks are."""

    worker: str
    first_seq: int
    last_seq: int
    keys: list[tuple[str, str, int]]  # (tensor, statistic, mode value) of each series
    directory: np.ndarray[Any, Any]  # DIRECTORY_DTYPE
    steps: int  # rows of the step table
    steps_crc: int
    head_size: int  # bytes of the head (the step table starts here)
    first_step: int  # the lowest and highest global step of the step table (-1 when empty)
    last_step: int

    @property
    def blocks_at(self) -> int:
        return self.head_size + STEP_DTYPE.itemsize * self.steps

    def block_range(self, i: int) -> tuple[int, int]:
        """(offset, length) of series ``i``'s block inside the object."""
        entry = self.directory[i]
        return self.blocks_at + 16 * int(entry["start"]), 16 * int(entry["count"])

    @property
    def size(self) -> int:
        """The object's size in bytes, as the head describes it."""
        return self.blocks_at + 16 * int(self.directory["count"].sum())


def encode_series(
    worker: str,
    first_seq: int,
    last_seq: int,
    keys: list[tuple[str, str, int]],
    blocks: list[tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]],
    step_table: np.ndarray[Any, Any],
) -> bytes:
    """A series object: ``blocks[i]`` is (global steps, values) of series ``keys[i]``, sorted
    by step; ``step_table`` a STEP_DTYPE array of the steps the segments published."""
    counts = [len(steps) for steps, _ in blocks]
    directory = np.zeros(len(keys), dtype=DIRECTORY_DTYPE)
    directory["count"] = counts
    directory["start"] = np.concatenate([[0], np.cumsum(counts)[:-1]]) if counts else []
    payload = []
    for i, (steps, values) in enumerate(blocks):
        block = (
            np.ascontiguousarray(steps, dtype="<i8").tobytes()
            + np.ascontiguousarray(values, dtype="<f8").tobytes()
        )
        directory["crc32"][i] = crc32(block)
        payload.append(block)
    table = np.ascontiguousarray(step_table, dtype=STEP_DTYPE).tobytes()
    header = {
        "worker": worker,
        "first_seq": first_seq,
        "last_seq": last_seq,
        "series": [list(k) for k in keys],
        "steps_crc": crc32(table),
        "first_step": int(step_table["global_step"].min()) if len(step_table) else -1,
        "last_step": int(step_table["global_step"].max()) if len(step_table) else -1,
    }
    head = json.dumps(header, separators=(",", ":"), allow_nan=False).encode()
    pad = (-(_PREFIX.size + len(head))) % 8
    prefix = _PREFIX.pack(
        MAGIC, SERIES_VERSION, 0, len(head), len(keys), len(step_table), sum(counts)
    )
    front = b"".join((prefix, head, b"\0" * pad, directory.tobytes()))
    return b"".join((front, struct.pack("<II", crc32(front), 0), table, *payload))


def head_length(prefix: bytes, what: str) -> int:
    """How many bytes the head takes, from the object's first 32 bytes."""
    if len(prefix) < _PREFIX.size:
        raise FormatError(f"{what} is truncated ({len(prefix)} bytes)")
    magic, _version, _flags, head_len, n_series, _steps, _values = _PREFIX.unpack_from(prefix)
    if magic != MAGIC:
        raise FormatError(f"{what} is not a tensortap series object (magic {magic!r})")
    if head_len > _MAX_HEADER or n_series > _MAX_HEADER // DIRECTORY_DTYPE.itemsize:
        raise FormatError(f"{what} claims a header of implausible size: it is corrupt")
    start = _PREFIX.size + head_len + ((-(_PREFIX.size + head_len)) % 8)
    return int(start + n_series * DIRECTORY_DTYPE.itemsize + 8)


def decode_head(raw: bytes | bytearray | memoryview, what: str = "series object") -> SeriesHead:
    """Parse and verify a head (the first :func:`head_length` bytes of the object, or more)."""
    size = head_length(bytes(raw[: _PREFIX.size]), what)
    if len(raw) < size:
        raise FormatError(f"{what} is truncated ({len(raw)} bytes, its head needs {size})")
    (crc,) = struct.unpack_from("<I", raw, size - 8)
    if crc32(memoryview(raw)[: size - 8]) != crc:
        raise FormatError(f"{what} fails its checksum: the object is corrupt")
    _magic, version, _flags, head_len, n_series, n_steps, n_values = _PREFIX.unpack_from(raw)
    check_version(version, what)
    try:
        header = json.loads(bytes(raw[_PREFIX.size : _PREFIX.size + head_len]))
    except (ValueError, RecursionError) as exc:
        raise FormatError(f"{what} has an unreadable header: {type(exc).__name__}") from None
    if not isinstance(header, dict):
        raise FormatError(f"{what} header is not a JSON object")
    worker = get_str(header, "worker", what)
    first, last = get_int(header, "first_seq", what), get_int(header, "last_seq", what)
    if not 0 <= first <= last:
        raise FormatError(f"{what} covers segments {first}..{last}: it is corrupt")
    keys = []
    for entry in get_list(header, "series", what, of=list):
        if (
            len(entry) != 3
            or not isinstance(entry[0], str)
            or not isinstance(entry[1], str)
            or isinstance(entry[2], bool)
            or entry[2] not in _MODE_VALUES
        ):
            raise FormatError(f"{what} lists a series that is not [tensor, statistic, mode]")
        keys.append((entry[0], entry[1], int(entry[2])))
    if len(keys) != n_series:
        raise FormatError(f"{what} lists {len(keys)} series, its prefix says {n_series}")
    at = size - 8 - n_series * DIRECTORY_DTYPE.itemsize
    directory = np.frombuffer(raw, dtype=DIRECTORY_DTYPE, count=n_series, offset=at).copy()
    starts, counts = directory["start"], directory["count"]
    if len(directory) and (
        int(counts.sum()) != n_values
        or (starts != np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.uint64)).any()
    ):
        raise FormatError(f"{what} directory does not add up: it is corrupt")
    if not len(directory) and n_values:
        raise FormatError(f"{what} holds values but no series: it is corrupt")
    return SeriesHead(
        worker,
        first,
        last,
        keys,
        directory,
        int(n_steps),
        get_int(header, "steps_crc", what),
        size,
        get_int(header, "first_step", what, default=-1),
        get_int(header, "last_step", what, default=-1),
    )


def decode_block(
    raw: bytes | bytearray | memoryview, head: SeriesHead, i: int, what: str
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """Series ``i``'s (global steps, values) from its block's bytes, checked."""
    count = int(head.directory["count"][i])
    if len(raw) != 16 * count:
        raise FormatError(f"{what}: a block of {len(raw)} bytes, expected {16 * count}")
    if crc32(raw) != int(head.directory["crc32"][i]):
        raise FormatError(f"{what}: series {head.keys[i][:2]} fails its checksum: corrupt")
    steps = np.frombuffer(raw, dtype="<i8", count=count)
    values = np.frombuffer(raw, dtype="<f8", count=count, offset=8 * count)
    return steps, values


def decode_steps(raw: bytes | bytearray | memoryview, head: SeriesHead, what: str) -> np.ndarray:
    """The step table, checked."""
    if len(raw) != STEP_DTYPE.itemsize * head.steps:
        raise FormatError(f"{what}: a step table of {len(raw)} bytes, expected {head.steps} rows")
    if crc32(raw) != head.steps_crc:
        raise FormatError(f"{what}: its step table fails its checksum: corrupt")
    return np.frombuffer(raw, dtype=STEP_DTYPE, count=head.steps)


def statistic_name(reduction_code: int, on_abs: bool) -> str:
    """A record's statistic: ``value`` for a raw value, else its reduction (``abs_`` first for
    a reduction of the absolute values), as ``tensortap export`` names them."""
    if reduction_code == 0:
        return "value"
    name = REDUCTION_BY_CODE[reduction_code]
    return f"abs_{name}" if on_abs else name


def group_series(
    names: list[str],
    records: np.ndarray[Any, Any],
    raw_rows: np.ndarray[Any, Any],
    raw_values: np.ndarray[Any, Any],
) -> tuple[list[tuple[str, str, int]], list[tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]]]:
    """A segment's series from its index records (RECORD_DTYPE): every reduction, and the raw
    records at ``raw_rows`` whose one value is ``raw_values``; each series sorted by step (in
    record order within a step)."""
    reduced = np.flatnonzero(records["kind"] == int(RecordKind.REDUCTION))
    rows = np.concatenate([reduced, np.asarray(raw_rows, dtype=np.int64)])
    if not len(rows):
        return [], []
    picked = records[rows]
    values = np.concatenate([picked["value"][: len(reduced)], np.asarray(raw_values, np.float64)])
    stat = picked["reduction"].astype(np.int64) * 2 + picked["abs"].astype(np.int64)
    stat[len(reduced) :] = 0
    name, mode, step = picked["name"], picked["mode"], picked["global_step"]
    order = np.lexsort((rows, step, mode, stat, name))
    name, stat, mode, step, values = (
        name[order],
        stat[order],
        mode[order],
        step[order],
        values[order],
    )
    change = np.flatnonzero((np.diff(name) != 0) | (np.diff(stat) != 0) | (np.diff(mode) != 0))
    starts = np.concatenate([[0], change + 1])
    ends = np.concatenate([change + 1, [len(order)]])
    keys, blocks = [], []
    for lo, hi in zip(starts.tolist(), ends.tolist(), strict=True):
        code = int(stat[lo])
        keys.append(
            (names[int(name[lo])], statistic_name(code // 2, bool(code % 2)), int(mode[lo]))
        )
        blocks.append((step[lo:hi].astype(np.int64), values[lo:hi]))
    return keys, blocks


def step_table(steps: list[list[Any]] | list[tuple[Any, ...]]) -> np.ndarray[Any, Any]:
    """STEP_DTYPE rows from an index's steps ([global step, mode, mode step, wall time])."""
    table = np.zeros(len(steps), dtype=STEP_DTYPE)
    for i, entry in enumerate(steps):
        table[i] = (
            int(entry[0]),
            int(entry[2]),
            float(entry[3]) if len(entry) > 3 else np.nan,
            int(entry[1]),
        )
    return table


def merge_series(
    parts: list[
        tuple[
            list[tuple[str, str, int]],
            list[tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]],
            np.ndarray[Any, Any],
        ]
    ],
) -> tuple[
    list[tuple[str, str, int]],
    list[tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]],
    np.ndarray[Any, Any],
]:
    """Consecutive segments' (keys, blocks, step table), merged in order (a rollup)."""
    pieces: dict[tuple[str, str, int], list[tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]]]
    pieces = {}
    for keys, blocks, _ in parts:
        for key, block in zip(keys, blocks, strict=True):
            pieces.setdefault(key, []).append(block)
    keys = list(pieces)
    blocks = []
    for key in keys:
        steps = np.concatenate([b[0] for b in pieces[key]])
        values = np.concatenate([b[1] for b in pieces[key]])
        if len(steps) > 1 and (np.diff(steps) < 0).any():  # a re-counted step: keep both
            order = np.argsort(steps, kind="stable")
            steps, values = steps[order], values[order]
        blocks.append((steps, values))
    table = np.concatenate([p[2] for p in parts]) if parts else np.zeros(0, STEP_DTYPE)
    return keys, blocks, table


def number_rows(index: SegmentIndex) -> np.ndarray[Any, Any]:
    """The rows of an index's raw values of one number (bool, integer or float, one element):
    with its reductions, what a segment's series hold."""
    records = index.records
    if not len(records):
        return np.zeros(0, np.int64)
    not_one = np.concatenate([[0], np.cumsum(index.dims != 1)])
    start = records["dims_offset"].astype(np.int64)
    one = (not_one[start + records["ndim"]] - not_one[start]) == 0
    numeric = np.array([_numeric(d) for d in index.dtypes], dtype=bool)
    return np.flatnonzero(
        (records["kind"] == int(RecordKind.TENSOR)) & one & numeric[records["dtype"]]
    )


def _numeric(name: str) -> bool:
    try:
        kind = storage_dtype(name).kind
    except FormatError:
        return True  # a low-precision float without ml_dtypes: read as a float later
    return kind in "biuf" or kind == "V"
