"""CRC-32 of saved bytes (the zlib polynomial, as docs/format.md specifies).

zlib-ng's SIMD implementation computes the same checksum about four times faster than the
standard library's zlib; reading a trial verifies every value it reads, so this is on the
path of every rule. The standard library is the fallback where zlib-ng is not installed.
"""

from __future__ import annotations

try:
    from zlib_ng.zlib_ng import crc32
except ImportError:  # pragma: no cover - zlib-ng is a dependency; this keeps odd platforms working
    from zlib import crc32

__all__ = ["crc32"]
