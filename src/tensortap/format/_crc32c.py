"""CRC-32C (Castagnoli) and TFRecord's masked form, for reading smdebug's TFRecord event files.

Nothing in tensortap computed CRC-32C before (TensorBoard output goes through the optional
tensorboard package's record writer), so this is the one copy. The C implementation of the
``crc32c`` or ``google-crc32c`` package is used where installed; otherwise a table-driven pure
Python loop (about 10 MB/s), enough for the smdebug trials read here.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["crc32c", "masked_crc32c"]

_POLY = 0x82F63B78  # CRC-32C, reflected
_TABLE = []
for _n in range(256):
    _c = _n
    for _ in range(8):
        _c = (_c >> 1) ^ _POLY if _c & 1 else _c >> 1
    _TABLE.append(_c)


def _crc32c_python(data: bytes | bytearray | memoryview) -> int:
    crc = 0xFFFFFFFF
    table = _TABLE
    for byte in bytes(data):
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def _fast() -> Callable[[bytes], int] | None:
    try:
        from crc32c import crc32c as fast  # type: ignore[import-not-found,unused-ignore]

        return fast  # type: ignore[no-any-return,unused-ignore]
    except ImportError:
        pass
    try:
        import google_crc32c  # type: ignore[import-not-found,unused-ignore]

        return lambda data: int(google_crc32c.value(bytes(data)))
    except ImportError:
        return None


_IMPL = _fast() or _crc32c_python


def crc32c(data: bytes | bytearray | memoryview) -> int:
    """The CRC-32C of ``data``."""
    return int(_IMPL(bytes(data))) & 0xFFFFFFFF


def masked_crc32c(data: bytes | bytearray | memoryview) -> int:
    """TFRecord's masked CRC-32C: rotated right by 15 bits plus 0xA282EAD8 (mod 2**32)."""
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF
