"""The segment index: a small binary object listing every record of one segment.

Layout of index version 1 (all little-endian; see docs/format.md for the normative
description)::

    0   4  magic b"TTIX"
    4   2  u16 index version (1)
    6   2  u16 flags (0)
    8   4  u32 header length H
    12  4  u32 record count N
    16  4  u32 dims count D
    20  4  u32 reserved (0)
    24  H  header, UTF-8 JSON
    ..     zero padding to a multiple of 8
    ..  64*N  records (RECORD_DTYPE)
    ..  8*D   dims (i8), referenced by records
    -4  4  u32 CRC-32 of every byte before it

Version 2 (*packed*, what the writer writes) holds the same header, records and dims, packed:
the header is a zlib stream of H bytes, and the records and dims one zlib stream of C bytes
(the reserved field), the records stored as byte-shuffled columns, the steps and data offsets
as differences (see :mod:`tensortap.format._index_rows`). A scalar's row takes about 4-5
bytes instead of 64 (issue 48: bytes per scalar no more than TensorBoard's).

Version 3 is version 2 whose merged index may leave a part's values in that part's own data
object (compaction merges a large segment's index and series, never its bytes): such a part
is ``[seq, session, records, steps, offset, size]`` with ``size`` (> 0) its own data object's,
its records' offsets counted in that object; a part of 5 numbers, or of size 0, is in the
merged data object from ``offset``. The writer writes version 3 only for such a merge.
"""

from __future__ import annotations

import json
import struct
import zlib
from dataclasses import dataclass
from typing import Any

import numpy as np

from tensortap.core._dtypes import ML_DTYPE_NAMES, storage_dtype
from tensortap.core._modes import ModeKeys
from tensortap.core._records import Record, RecordKind
from tensortap.core._reductions import REDUCTION_NAMES
from tensortap.exceptions import FormatError, UnsupportedFormatVersion
from tensortap.format._checksum import crc32
from tensortap.format._fields import (
    get_int,
    get_list,
    get_optional_str,
    get_str,
    int_columns,
    int_rows,
)
from tensortap.format._index_rows import (
    MAX_PACKED_BODY,
    MAX_PACKED_HEADER,
    MOST_INFLATED,
    PACK_LEVEL,
    RECORD_DTYPE,
    inflate,
    pack_rows,
    unpack_rows,
)
from tensortap.format._layout import data_key

FORMAT_VERSION = 1
#: The index versions: 1 plain (64 bytes a record), 2 packed (the writer's; see the module),
#: 3 packed with merged parts that keep their own data objects.
INDEX_PLAIN = 1
INDEX_PACKED = 2
INDEX_KEPT_DATA = 3
MAGIC = b"TTIX"
_PREFIX = struct.Struct("<4sHHIIII")
DATA_ALIGNMENT = 8
_MODE_VALUES = frozenset(int(m) for m in ModeKeys)
_MODE_ARRAY = np.array(sorted(_MODE_VALUES), dtype=np.int64)

# 0 means "no reduction"; codes are part of the format and never renumbered.
REDUCTION_CODES: dict[str, int] = {name: i + 1 for i, name in enumerate(REDUCTION_NAMES)}
REDUCTION_BY_CODE: dict[int, str] = {code: name for name, code in REDUCTION_CODES.items()}


def check_version(version: object, what: str, newest: int = FORMAT_VERSION) -> None:
    """Refuse a version that is not a positive int, or one newer than ``newest``."""
    if not isinstance(version, int):
        raise FormatError(f"{what} has no valid format version (got {version!r})")
    if version > newest:
        raise UnsupportedFormatVersion(
            f"{what} was written with tensortap format version {version}, but this tensortap "
            f"reads versions up to {newest}; upgrade tensortap to read it"
        )
    if version < 1:
        raise FormatError(f"{what} has invalid format version {version}")


class IndexBuilder:
    """Collects the index rows of one segment while its data is written."""

    def __init__(self) -> None:
        self._names: dict[str, int] = {}
        self._dtypes: dict[str, int] = {}
        self._rows: list[tuple[Any, ...]] = []
        # rows already in RECORD_DTYPE (blocks of steps of numbers, and the tuples before
        # each), in order before ``_rows``; ``_done`` rows in all
        self._parts: list[np.ndarray[Any, Any]] = []
        self._done = 0
        self._dims: list[int] = []
        self.steps: list[tuple[int, int, int, float]] = []
        # rows holding a raw value of one number, and that number (the segment's series)
        self._scalar_rows: list[int] = []
        self._scalar_values: list[float] = []
        # ... and those of the blocks and the lists before each, in order, as arrays
        self._scalar_parts: list[tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]] = []
        self._array: np.ndarray[Any, Any] | None = None

    def __len__(self) -> int:
        return self._done + len(self._rows)

    def add_step(self, global_step: int, mode: ModeKeys, mode_step: int, wall_time: float) -> None:
        self.steps.append((global_step, int(mode), mode_step, wall_time))

    def add(
        self,
        record: Record,
        global_step: int,
        mode: ModeKeys,
        mode_step: int,
        data_offset: int = 0,
        data_length: int = 0,
        crc32: int = 0,
        scalar: float | None = None,
    ) -> None:
        """One record; ``scalar`` is the number a raw one-element value holds (it joins the
        segment's series)."""
        self.add_step_records(
            global_step, mode, mode_step, [(record, data_offset, data_length, crc32, scalar)]
        )

    def add_step_records(
        self,
        global_step: int,
        mode: ModeKeys,
        mode_step: int,
        rows: list[tuple[Record, int, int, int, float | None]],
    ) -> None:
        """The records of one step at once, each as (record, data_offset, data_length, crc32,
        scalar): the same rows as one :meth:`add` each, for less work per record."""
        mode_id = int(mode)
        names, dtypes, dims, out = self._names, self._dtypes, self._dims, self._rows
        done = self._done
        for record, data_offset, data_length, crc, scalar in rows:
            if scalar is not None:
                self._scalar_rows.append(done + len(out))
                self._scalar_values.append(scalar)
            name_id = names.get(record.name)
            if name_id is None:
                name_id = names[record.name] = len(names)
            dtype_id = dtypes.get(record.dtype)
            if dtype_id is None:
                dtype_id = dtypes[record.dtype] = len(dtypes)
            shape = record.shape
            dims_offset = len(dims)
            if shape:
                dims.extend(shape)
            reduction = record.reduction
            out.append(
                (
                    name_id,
                    dtype_id,
                    mode_id,
                    int(record.kind),
                    REDUCTION_CODES[reduction] if reduction else 0,
                    1 if record.on_abs else 0,
                    len(shape),
                    0,
                    dims_offset,
                    global_step,
                    mode_step,
                    data_offset,
                    data_length,
                    record.value,
                    crc,
                    0,
                )
            )
        self._array = None

    def add_scalar_steps(
        self,
        steps: list[tuple[int, int, int, float]],
        names: tuple[str, ...],
        name_index: np.ndarray[Any, Any],
        dtype: str,
        global_steps: np.ndarray[Any, Any],
        mode_steps: np.ndarray[Any, Any],
        data_offsets: np.ndarray[Any, Any],
        crcs: np.ndarray[Any, Any],
        values: np.ndarray[Any, Any],
        mode: ModeKeys,
    ) -> None:
        """Many steps of raw float64 numbers at once (``steps``: each step's four numbers, as
        :meth:`add_step`), one row per number, in the order of the arrays (a step's numbers
        together): the same rows as :meth:`add_step_records` of one 0-d record each, built
        as columns. Row ``i`` is of ``names[name_index[i]]``, its 8 bytes at
        ``data_offsets[i]``."""
        count = len(values)
        self.steps.extend(steps)
        if not count:
            return
        ids = self._names
        if not all(name in ids for name in names):  # new names numbered in the order seen
            present, first_rows = np.unique(name_index, return_index=True)
            for j in present[np.argsort(first_rows)].tolist():
                if names[j] not in ids:
                    ids[names[j]] = len(ids)
        lookup = np.array([ids.get(name, 0) for name in names], dtype=np.uint32)
        dtype_id = self._dtypes.get(dtype)
        if dtype_id is None:
            dtype_id = self._dtypes[dtype] = len(self._dtypes)
        block = np.zeros(count, dtype=RECORD_DTYPE)
        block["name"] = lookup[name_index]
        block["dtype"] = dtype_id
        block["mode"] = int(mode)
        block["kind"] = int(RecordKind.TENSOR)
        block["dims_offset"] = len(self._dims)
        block["global_step"] = global_steps
        block["mode_step"] = mode_steps
        block["data_offset"] = data_offsets
        block["data_length"] = 8
        block["crc32"] = crcs
        first = len(self)
        if self._rows:  # the tuples before the block keep their place
            self._parts.append(np.array(self._rows, dtype=RECORD_DTYPE))
            self._rows = []
        self._parts.append(block)
        self._done = first + count
        if self._scalar_rows:
            self._scalar_parts.append(self._list_scalars())
            self._scalar_rows, self._scalar_values = [], []
        self._scalar_parts.append(
            (np.arange(first, first + count, dtype=np.int64), values.astype(np.float64))
        )
        self._array = None

    def encode(self, header: dict[str, Any], version: int = INDEX_PACKED) -> bytes:
        """The index object's bytes; ``header`` gets the names, dtypes and steps added."""
        index = self.index(header)
        return encode_index(index.header, index.records, index.dims, version)

    def index(self, header: dict[str, Any]) -> SegmentIndex:
        """The index :meth:`encode` writes, as :func:`decode_index` reads it back (``header``
        with the names, dtypes and steps added): a writer merges its own segments from it
        without reading them back."""
        full = dict(header)
        full["names"] = list(self._names)
        full["dtypes"] = list(self._dtypes)
        full["steps"] = [list(step) for step in self.steps]
        dims = np.asarray(self._dims, dtype="<i8")
        return SegmentIndex(full, full["names"], full["dtypes"], self.records(), dims)

    def records(self) -> np.ndarray[Any, Any]:
        """The rows so far as RECORD_DTYPE (built once until the next ``add``)."""
        if self._array is None:
            rows = self._rows
            last = np.array(rows, dtype=RECORD_DTYPE) if rows else np.empty(0, RECORD_DTYPE)
            self._array = np.concatenate([*self._parts, last]) if self._parts else last
        return self._array

    @property
    def names(self) -> list[str]:
        return list(self._names)

    def scalars(self) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
        """The rows of raw one-element values, and their numbers."""
        if not self._scalar_parts:
            return self._list_scalars()
        parts = [*self._scalar_parts, self._list_scalars()]
        return np.concatenate([r for r, _ in parts]), np.concatenate([v for _, v in parts])

    def _list_scalars(self) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
        return (
            np.asarray(self._scalar_rows, dtype=np.int64),
            np.asarray(self._scalar_values, dtype=np.float64),
        )


def encode_index(
    header: dict[str, Any],
    records: np.ndarray[Any, Any],
    dims: np.ndarray[Any, Any],
    version: int = INDEX_PACKED,
) -> bytes:
    """An index object's bytes from its full header (names, dtypes and steps included), its
    records (RECORD_DTYPE) and its dims: packed (version 2; 3 for a merged index with kept
    parts) unless ``version`` is 1."""
    head = json.dumps(header, separators=(",", ":"), allow_nan=False).encode()
    return assemble_index(head, records, dims, version)


def assemble_index(
    head: bytes, records: np.ndarray[Any, Any], dims: np.ndarray[Any, Any], version: int
) -> bytes:
    """An index object's bytes from its header's JSON bytes (taken as they are), records and
    dims, in index ``version`` 1 or 2."""
    dims = np.asarray(dims, dtype="<i8")
    records = np.ascontiguousarray(records, dtype=RECORD_DTYPE)
    if version in (INDEX_PACKED, INDEX_KEPT_DATA):
        packed_head = zlib.compress(head, PACK_LEVEL)
        packed = zlib.compress(pack_rows(records) + dims.tobytes(), PACK_LEVEL)
        prefix = _PREFIX.pack(
            MAGIC, version, 0, len(packed_head), len(records), len(dims), len(packed)
        )
        body = b"".join((prefix, packed_head, packed))
    elif version == INDEX_PLAIN:
        pad = (-(_PREFIX.size + len(head))) % 8
        body = b"".join(
            (
                _PREFIX.pack(MAGIC, INDEX_PLAIN, 0, len(head), len(records), len(dims), 0),
                head,
                b"\0" * pad,
                records.tobytes(),
                dims.tobytes(),
            )
        )
    else:
        raise ValueError(f"index version must be 1, 2 or 3, got {version}")
    return body + struct.pack("<I", crc32(body))


def index_layout(
    raw: bytes,
) -> tuple[int, bytes, np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """The version, header JSON bytes, records (a writable copy) and dims of an index object,
    only its layout checked (not its CRC, header or records): for a tool that rewrites an
    index (``tensortap.testing``'s crafted trials), with :func:`assemble_index`."""
    _magic, version, _flags, head_len, n_rec, n_dims, packed_len = _PREFIX.unpack_from(raw, 0)
    start = _PREFIX.size
    if version >= INDEX_PACKED:
        view = memoryview(raw)
        head = inflate(view[start : start + head_len], MAX_PACKED_HEADER, "index", "header")
        body = inflate(
            view[start + head_len : start + head_len + packed_len],
            MAX_PACKED_BODY,
            "index",
            "records",
        )
        records = unpack_rows(body, n_rec)
        dims = np.frombuffer(body, "<i8", n_dims, RECORD_DTYPE.itemsize * n_rec).copy()
        return version, head, records, dims
    rec_start = start + head_len + (-(start + head_len)) % 8
    records = np.frombuffer(raw, RECORD_DTYPE, n_rec, rec_start).copy()
    dims = np.frombuffer(raw, "<i8", n_dims, rec_start + RECORD_DTYPE.itemsize * n_rec).copy()
    return version, bytes(raw[start : start + head_len]), records, dims


@dataclass(frozen=True)
class IndexPart:
    """One segment a merged index replaces (see :func:`index_parts`): its number and session,
    and where its records, steps and data bytes lie in the merged segment."""

    seq: int
    session: str
    records: tuple[int, int]  # [first, end) of the merged index's records
    steps: tuple[int, int]  # [first, end) of its steps
    data_offset: int  # where the segment's data object begins in the merged one
    #: > 0: the size of its own data object, where its values stayed (its records' offsets
    #: count in that object; ``data_offset`` holds no bytes of it); 0: in the merged one
    kept_data: int = 0


@dataclass(frozen=True)
class SegmentIndex:
    """A decoded index: its header, name/dtype tables, records and dims."""

    header: dict[str, Any]
    names: list[str]
    dtypes: list[str]
    records: np.ndarray[Any, Any]
    dims: np.ndarray[Any, Any]
    version: int = INDEX_PACKED

    @property
    def data_key(self) -> str:
        return str(self.header["data_key"])

    @property
    def steps(self) -> list[list[Any]]:
        """[global_step, mode, mode_step, wall_time] of every step published in this segment."""
        return list(self.header.get("steps", []))

    @property
    def parts(self) -> list[IndexPart]:
        """The segments this one replaces, when it is a merged one (empty otherwise)."""
        return index_parts(self.header, len(self.records), "index", self.version)

    def part(self, part: IndexPart) -> SegmentIndex:
        """The index of one replaced segment, as it reads from the merged one: its records,
        steps and session, its values in the merged data object (or in its own, where the
        merge kept it)."""
        header = dict(self.header)
        header.pop("parts", None)
        header["seq"] = part.seq
        header["session"] = part.session
        header["steps"] = self.steps[part.steps[0] : part.steps[1]]
        if part.kept_data:
            header["data_key"] = data_key(str(header["worker"]), part.seq)
            header["data_size"] = part.kept_data
        lo, hi = part.records
        return SegmentIndex(
            header, self.names, self.dtypes, self.records[lo:hi], self.dims, self.version
        )

    def shape_of(self, row: int) -> tuple[int, ...]:
        rec = self.records[row]
        start = int(rec["dims_offset"])
        return tuple(int(d) for d in self.dims[start : start + int(rec["ndim"])])


def decode_index(raw: bytes, what: str = "index", records: bool = True) -> SegmentIndex:
    """Parse and verify an index object (magic, CRC, version, sizes, header fields, and that
    every record refers inside its tables and inside its data object).

    With ``records=False`` the records and dims are neither kept nor checked (the object's
    CRC still is): the index's ``records`` is then a read-only view of zeros of the right
    length that holds no memory, for a reader of the header alone (names, steps, sessions,
    parts), which must not look at the records.

    The CRC is checked before the version: a flipped bit anywhere, the version field included,
    is corruption (FormatError), and only an intact index claiming a newer version raises
    UnsupportedFormatVersion."""
    if len(raw) < _PREFIX.size + 4:
        raise FormatError(f"{what} is truncated ({len(raw)} bytes)")
    magic, version, _flags, head_len, n_rec, n_dims, packed_len = _PREFIX.unpack_from(raw, 0)
    if magic != MAGIC:
        raise FormatError(f"{what} is not a tensortap index (magic {magic!r})")
    (crc,) = struct.unpack_from("<I", raw, len(raw) - 4)
    if crc32(memoryview(raw)[:-4]) != crc:
        raise FormatError(f"{what} fails its checksum: the object is corrupt")
    check_version(version, what, newest=INDEX_KEPT_DATA)
    start = _PREFIX.size
    if version >= INDEX_PACKED:
        if start + head_len + packed_len + 4 != len(raw):
            raise FormatError(f"{what} sizes do not add up: the object is corrupt")
        view = memoryview(raw)
        head = inflate(view[start : start + head_len], MAX_PACKED_HEADER, what, "header")
        body_size = RECORD_DTYPE.itemsize * n_rec + 8 * n_dims
        if body_size > min(MAX_PACKED_BODY, MOST_INFLATED * packed_len + 64):
            raise FormatError(
                f"{what} claims {n_rec} records and {n_dims} dims ({body_size} bytes), more "
                f"than its {packed_len} packed bytes can hold or a reader takes "
                f"({MAX_PACKED_BODY} bytes): the index is corrupt"
            )
        body: bytes | None = None
        if records:
            packed = view[start + head_len : start + head_len + packed_len]
            body = inflate(packed, body_size, what, "records")
            if len(body) != body_size:
                raise FormatError(f"{what}: its packed records are not as many as it says")
    else:
        rec_start = start + head_len + ((-(start + head_len)) % 8)
        dims_start = rec_start + n_rec * RECORD_DTYPE.itemsize
        if dims_start + 8 * n_dims + 4 != len(raw):
            raise FormatError(f"{what} sizes do not add up: the object is corrupt")
        head = bytes(raw[start : start + head_len])
    try:
        header = json.loads(head)
    except (ValueError, RecursionError) as exc:
        raise FormatError(f"{what} has an unreadable header: {type(exc).__name__}") from None
    if not isinstance(header, dict):
        raise FormatError(f"{what} header is not a JSON object")
    names, dtypes = _check_header(header, what)
    parts = index_parts(header, n_rec, what, version)
    if not records:  # the header alone: nothing refers to ``raw`` afterwards
        zeros = np.broadcast_to(np.zeros(1, dtype=RECORD_DTYPE), (n_rec,))
        return SegmentIndex(header, names, dtypes, zeros, np.empty(0, dtype="<i8"), version)
    if version >= INDEX_PACKED:
        assert body is not None
        rows = unpack_rows(body, n_rec)
        dims = np.frombuffer(body, dtype="<i8", count=n_dims, offset=RECORD_DTYPE.itemsize * n_rec)
    else:
        rows = np.frombuffer(raw, dtype=RECORD_DTYPE, count=n_rec, offset=rec_start)
        dims = np.frombuffer(raw, dtype="<i8", count=n_dims, offset=dims_start)
    _check_records(rows, len(names), len(dtypes), n_dims, what)
    _check_extents(rows, dims, dtypes, _data_limits(header, parts, n_rec), what)
    return SegmentIndex(header, names, dtypes, rows, dims, version)


def _data_limits(header: dict[str, Any], parts: list[IndexPart], count: int) -> np.ndarray:
    """The size of the data object each record's value lies in: the index's own, or a kept
    part's."""
    limits = np.full(count, int(header.get("data_size", 0)), dtype=np.uint64)
    for part in parts:
        if part.kept_data:
            limits[part.records[0] : part.records[1]] = part.kept_data
    return limits


def _check_header(header: dict[str, Any], what: str) -> tuple[list[str], list[str]]:
    """The header fields a reader uses, checked for type (a wrong type is corruption)."""
    names = get_list(header, "names", what, of=str)
    dtypes = get_list(header, "dtypes", what, of=str)
    for name in dtypes:
        _check_dtype(name, what)
    for field in ("worker", "data_key"):
        get_str(header, field, what)
    get_int(header, "seq", what)
    if get_int(header, "data_size", what, default=0) < 0:
        raise FormatError(f"{what}: data_size is negative")
    steps = get_list(header, "steps", what, default=[])
    numbers = int_columns(steps, 3, what, "steps")  # [global step, mode, mode step] a row
    bad = ~np.isin(numbers[:, 1], _MODE_ARRAY) | (numbers[:, 0] < 0) | (numbers[:, 2] < 0)
    if steps and set(map(len, steps)) == {4}:  # what a writer writes: one pass in C
        timed = set(map(type, list(zip(*steps, strict=True))[3]))
    else:
        timed = {type(row[3]) for row in steps if len(row) > 3}
    if bad.any() or not timed <= {int, float}:
        _check_steps(steps, what)
    int_rows(get_list(header, "dropped", what, default=[]), 3, what, "dropped")
    get_int(header, "hook_errors", what, default=0)
    get_optional_str(header, "last_hook_error", what)
    return names, dtypes


def _check_steps(steps: list[list[Any]], what: str) -> None:
    """The steps' rows one by one (their first three are int64s), raising at the first bad one:
    a mode that is none, a negative step, a wall time that is not a number."""
    for row in steps:
        if row[1] not in _MODE_VALUES:
            raise FormatError(f"{what}: step {row[0]} has unknown mode {row[1]}")
        if row[0] < 0 or row[2] < 0:  # a writer numbers steps from 0
            raise FormatError(f"{what}: step {row[0]} (mode step {row[2]}) is negative")
        if len(row) > 3 and (isinstance(row[3], bool) or not isinstance(row[3], int | float)):
            raise FormatError(f"{what}: step {row[0]} has a wall time that is not a number")


def index_parts(
    header: dict[str, Any], n_records: int, what: str, version: int = INDEX_PACKED
) -> list[IndexPart]:
    """The ``parts`` of a merged index's header, checked: each ``[seq, session, records,
    steps, data_offset]`` (from index version 3, also with its kept data's size: see the
    module) in order, segment numbers increasing and below the merged one's, and the parts'
    records and steps adding up to the index's (empty for a plain index)."""
    rows = header.get("parts")
    if rows is None:
        return []
    if not isinstance(rows, list):
        raise FormatError(f"{what}: parts is not a list: the index is corrupt")
    parts: list[IndexPart] = []
    record_at = step_at = 0
    last_seq, last_offset = -1, 0
    sizes = (5, 6) if version >= INDEX_KEPT_DATA else (5,)
    for row in rows:
        if (
            not isinstance(row, list)
            or len(row) not in sizes
            or not isinstance(row[1], str)
            or not all(type(v) is int and 0 <= v < 2**63 for v in (row[0], *row[2:]))
        ):
            shape = "[seq, session, records, steps, offset" + (", size]" if len(sizes) > 1 else "]")
            raise FormatError(f"{what}: a part is not {shape}")
        seq, session, records, steps, offset = row[:5]
        if seq <= last_seq or offset < last_offset:
            raise FormatError(f"{what}: parts out of order: the index is corrupt")
        parts.append(
            IndexPart(
                seq,
                session,
                (record_at, record_at + records),
                (step_at, step_at + steps),
                offset,
                row[5] if len(row) > 5 else 0,
            )
        )
        record_at, step_at, last_seq, last_offset = (
            record_at + records,
            step_at + steps,
            seq,
            offset,
        )
    seq = header.get("seq")
    if parts and (
        record_at != n_records
        or step_at != len(header.get("steps") or [])
        or not isinstance(seq, int)
        or last_seq >= seq
    ):
        raise FormatError(f"{what}: its parts do not add up to it: the index is corrupt")
    return parts


def _check_dtype(name: str, what: str) -> None:
    try:
        storage_dtype(name)
    except FormatError as exc:
        if name in ML_DTYPE_NAMES:  # valid, only ml_dtypes is missing: said when it is read
            return
        raise FormatError(f"{what}: {exc}") from None


def _check_records(
    records: np.ndarray[Any, Any], n_names: int, n_dtypes: int, n_dims: int, what: str
) -> None:
    """Every reference a record makes must land inside its index (a reader indexes with them)."""
    if not len(records):
        return
    problems = {
        "names": records["name"] >= n_names,
        "dtypes": records["dtype"] >= n_dtypes,
        "dims": records["dims_offset"].astype(np.int64) + records["ndim"] > n_dims,
        "kinds": records["kind"] > max(RecordKind),
        "modes": ~np.isin(records["mode"], list(_MODE_VALUES)),
        "reductions": records["reduction"] > len(REDUCTION_NAMES),
    }
    for table, bad in problems.items():
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            raise FormatError(
                f"{what} record {row} refers to unknown {table}: the index is corrupt"
            )
    negative = (records["global_step"] < 0) | (records["mode_step"] < 0)
    if negative.any():  # a writer numbers steps from 0
        row = int(np.flatnonzero(negative)[0])
        raise FormatError(f"{what} record {row} has a negative step: the index is corrupt")


def _check_extents(
    records: np.ndarray[Any, Any],
    dims: np.ndarray[Any, Any],
    dtypes: list[str],
    limits: np.ndarray[Any, Any],
    what: str,
) -> None:
    """Shapes are non-negative, and every raw value lies inside its data object (of
    ``limits[row]`` bytes: the index's own, or a kept part's) and is as long as its shape and
    dtype say: a reader never allocates or requests more than the data object holds (whose
    real size the store checks in turn)."""
    if (dims < 0).any():
        raise FormatError(f"{what} holds a negative dimension: the index is corrupt")
    tensor = records["kind"] == int(RecordKind.TENSOR)
    raw, limit = records[tensor], limits[tensor]
    if not len(raw):
        return
    offset, length = raw["data_offset"], raw["data_length"]
    beyond = (offset > limit) | (length > limit - np.minimum(offset, limit))
    if beyond.any():
        row = int(np.flatnonzero(beyond)[0])
        raise FormatError(
            f"{what}: a value claims bytes [{int(offset[row])}, +{int(length[row])}) of a data "
            f"object of {int(limit[row])} bytes: the index is corrupt"
        )
    itemsize = np.array([_itemsize(name) for name in dtypes], dtype=np.float64)
    sizes = np.ones(len(raw), dtype=np.float64)
    starts, ndims = raw["dims_offset"].astype(np.int64), raw["ndim"].astype(np.int64)
    dims_f = dims.astype(np.float64)
    for k in range(int(ndims.max())):  # one pass per dimension, over every record at once
        has = ndims > k
        sizes[has] *= dims_f[starts[has] + k]
    expected = sizes * itemsize[raw["dtype"]]
    wrong = expected != length.astype(np.float64)
    if wrong.any():
        row = int(np.flatnonzero(wrong)[0])
        raise FormatError(
            f"{what}: a value of {int(length[row])} bytes does not match its shape and dtype "
            f"({int(expected[row])} bytes): the index is corrupt"
        )


def _itemsize(name: str) -> float:
    try:
        return float(storage_dtype(name).itemsize)
    except FormatError:  # an ml_dtypes type without ml_dtypes: every such type is one byte
        return 2.0 if name == "bfloat16" else 1.0
