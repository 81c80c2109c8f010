"""CRC-32 of saved bytes (the zlib polynomial, as docs/format.md specifies).

zlib-ng's SIMD implementation computes the same checksum about four times faster than the
standard library's zlib; reading a trial verifies every value it reads, so this is on the
path of every rule. The standard library is the fallback where zlib-ng is not installed.
"""

from __future__ import annotations

from typing import Any

import numpy as np

try:
    from zlib_ng.zlib_ng import crc32
except ImportError:  # pragma: no cover - zlib-ng is a dependency; this keeps odd platforms working
    from zlib import crc32

__all__ = ["crc32", "crc32_of_words"]


def _crc_table() -> np.ndarray[Any, Any]:
    table = np.arange(256, dtype=np.uint32)
    for _ in range(8):
        table = np.where(table & 1, (table >> 1) ^ np.uint32(0xEDB88320), table >> 1)
    return table.astype(np.uint32)


_TABLE = _crc_table()
#: Fewer values than this are checksummed one call each (measured: the crossing is at 150-200).
_FEW = 160


def crc32_of_words(values: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """:func:`crc32` of each 8-byte value of ``values`` (a 1-D array of an 8-byte dtype), as
    ``uint32``: one table pass per byte over all of them, for many numbers at once (the same
    checksums as one call each)."""
    data = np.ascontiguousarray(values).view(np.uint8).reshape(-1, 8)
    if len(data) < _FEW:  # one call each costs less than the table's passes
        raw = memoryview(data.tobytes())
        return np.fromiter(
            (crc32(raw[i : i + 8]) for i in range(0, 8 * len(data), 8)),
            dtype=np.uint32,
            count=len(data),
        )
    crc = np.full(len(data), 0xFFFFFFFF, dtype=np.uint32)
    for byte in range(8):
        crc = _TABLE[(crc ^ data[:, byte]) & 0xFF] ^ (crc >> 8)
    result: np.ndarray[Any, Any] = crc ^ np.uint32(0xFFFFFFFF)
    return result
