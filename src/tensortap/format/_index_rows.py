"""The records of a segment index: their fixed 64-byte layout (``RECORD_DTYPE``) and how a
packed index (versions 2 and 3, see :mod:`tensortap.format._index`) stores them: byte-shuffled
columns, the fields that grow along a segment as differences, one zlib stream read back
within stated limits."""

from __future__ import annotations

import zlib
from typing import Any

import numpy as np

from tensortap.exceptions import FormatError

#: A packed index unpacks to at most this many bytes of header, and of records and dims (a
#: writer's largest segment holds far fewer): a reader never allocates more for one index.
MAX_PACKED_HEADER = 256 * 1024 * 1024
MAX_PACKED_BODY = 2 * 1024 * 1024 * 1024
#: deflate unpacks to at most 1032 times its size: a claim of more is corrupt before unpacking
MOST_INFLATED = 1032
#: zlib's level for packing: the fastest; the columns already do most of the work.
PACK_LEVEL = 1
#: The record fields stored as differences from the previous record's (they grow by small
#: steps along a segment), modulo 2**64.
_DELTA_FIELDS = frozenset({"global_step", "mode_step", "data_offset"})

RECORD_DTYPE = np.dtype(
    [
        ("name", "<u4"),
        ("dtype", "<u2"),
        ("mode", "u1"),
        ("kind", "u1"),
        ("reduction", "u1"),
        ("abs", "u1"),
        ("ndim", "u1"),
        ("pad0", "u1"),
        ("dims_offset", "<u4"),
        ("global_step", "<i8"),
        ("mode_step", "<i8"),
        ("data_offset", "<u8"),
        ("data_length", "<u8"),
        ("value", "<f8"),
        ("crc32", "<u4"),
        ("pad1", "<u4"),
    ]
)
assert RECORD_DTYPE.itemsize == 64


def pack_rows(records: np.ndarray[Any, Any]) -> bytes:
    """The records as columns, field by field in RECORD_DTYPE's order: for a field of ``k``
    bytes, the first byte of every record's value, then the second, ... (the *shuffle* of
    Blosc and HDF5: the bytes that barely change, such as a float's sign and exponent, lie
    together); the ``_DELTA_FIELDS`` as differences from the previous record's (the first from
    0), modulo 2**64. zlib then packs a scalar's row into about 4-5 bytes."""
    count = len(records)
    parts: list[bytes] = []
    for name in RECORD_DTYPE.names or ():
        column = np.ascontiguousarray(records[name])
        if name in _DELTA_FIELDS and count:
            wide = column.view(np.uint64)
            column = np.empty_like(wide)
            column[0] = wide[0]
            np.subtract(wide[1:], wide[:-1], out=column[1:])
        parts.append(column.view(np.uint8).reshape(count, column.itemsize).T.tobytes())
    return b"".join(parts)


def unpack_rows(raw: bytes, count: int) -> np.ndarray[Any, Any]:
    """:func:`pack_rows`' records back (``raw`` holds at least ``64 * count`` bytes)."""
    rows = np.empty(count, dtype=RECORD_DTYPE)
    at = 0
    for name in RECORD_DTYPE.names or ():
        field = RECORD_DTYPE.fields[name][0]  # type: ignore[index]
        size = field.itemsize * count
        column = np.frombuffer(raw, np.uint8, size, at).reshape(field.itemsize, count).T
        values = np.ascontiguousarray(column).view(field).reshape(count)
        if name in _DELTA_FIELDS and count:
            values = np.cumsum(values.view(np.uint64), dtype=np.uint64).view(field)
        rows[name] = values
        at += size
    return rows


def inflate(packed: bytes | memoryview, limit: int, what: str, part: str) -> bytes:
    """One zlib stream of a packed index, refused (FormatError) when it is not one whole
    stream or unpacks to more than ``limit`` bytes."""
    inflater = zlib.decompressobj()
    try:
        out = inflater.decompress(packed, limit + 1)
    except zlib.error as exc:
        raise FormatError(f"{what}: its packed {part} is unreadable ({exc}): corrupt") from None
    if len(out) > limit or inflater.unconsumed_tail or not inflater.eof or inflater.unused_data:
        raise FormatError(f"{what}: its packed {part} does not unpack as its sizes say: corrupt")
    return out
