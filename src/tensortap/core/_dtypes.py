"""Which values can be saved, and how dtypes are named on disk.

Stored dtype names are NumPy's little-endian ``dtype.str`` ("<f4", "|b1", "<c16") for NumPy's own
numeric types, or the ``ml_dtypes`` name ("bfloat16", "float8_e4m3fn", ...) for the types that
package adds. bfloat16 is stored as its exact 16 bits and read back as float32 (every bfloat16
value is exactly a float32), so reading needs no extra package.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np

from tensortap.exceptions import FormatError, InvalidTensorError

_NUMERIC_KINDS = frozenset("biufc")
# Extension float types from ml_dtypes; all are stored as their raw bytes.
_ML_DTYPE_NAMES = frozenset(
    {
        "bfloat16",
        "float8_e3m4",
        "float8_e4m3",
        "float8_e4m3b11fnuz",
        "float8_e4m3fn",
        "float8_e4m3fnuz",
        "float8_e5m2",
        "float8_e5m2fnuz",
        "float8_e8m0fnu",
        "float6_e2m3fn",
        "float6_e3m2fn",
        "float4_e2m1fn",
        "int2",
        "int4",
        "uint2",
        "uint4",
    }
)
ML_DTYPE_NAMES = _ML_DTYPE_NAMES
BFLOAT16 = "bfloat16"


def as_saveable_array(value: Any, name: str) -> np.ndarray:
    """Return ``value`` as a NumPy array of a saveable dtype, or raise InvalidTensorError."""
    try:
        array = np.asarray(value)
    except Exception as exc:  # ragged lists and the like
        raise InvalidTensorError(
            f"tensor {name!r}: cannot turn a {type(value).__name__} into an array ({exc}); "
            "pass a NumPy array or a number"
        ) from exc
    kind = array.dtype.kind
    if kind in _NUMERIC_KINDS or (kind == "V" and array.dtype.name in _ML_DTYPE_NAMES):
        return array
    raise InvalidTensorError(
        f"tensor {name!r} has dtype {array.dtype} ({_describe_kind(kind)}); expected a numeric "
        "dtype (bool, int, uint, float, complex, or bfloat16/float8 from ml_dtypes). "
        "Convert it to numbers before saving"
    )


def _describe_kind(kind: str) -> str:
    return {
        "O": "Python objects",
        "U": "strings",
        "S": "bytes",
        "V": "raw/structured records",
        "M": "datetimes",
        "m": "timedeltas",
    }.get(kind, f"kind {kind!r}")


@dataclass(frozen=True, slots=True)
class DtypeInfo:
    """How values of one in-memory dtype are stored."""

    stored_name: str
    storage: np.dtype[Any]  # the dtype of the bytes written (little-endian; bits for bfloat16)


_INFO_CACHE: dict[np.dtype[Any], DtypeInfo] = {}


def dtype_info(dtype: np.dtype[Any]) -> DtypeInfo:
    """Cached storage facts of a saveable dtype (the hot path calls this once per tensor)."""
    info = _INFO_CACHE.get(dtype)
    if info is None:
        name = stored_dtype_name(dtype)
        if name == BFLOAT16:
            storage = np.dtype("<u2")
        elif dtype.byteorder == ">":
            storage = dtype.newbyteorder("<")
        else:
            storage = dtype
        info = _INFO_CACHE[dtype] = DtypeInfo(name, storage)
    return info


def stored_dtype_name(dtype: np.dtype[Any]) -> str:
    """The on-disk name of a saveable dtype."""
    if dtype.name in _ML_DTYPE_NAMES:
        return str(dtype.name)
    return str(dtype.newbyteorder("<").str if dtype.byteorder == ">" else dtype.str)


def _ml_dtypes() -> Any:
    try:
        import ml_dtypes
    except ImportError:
        return None
    return ml_dtypes


@functools.lru_cache(maxsize=256)
def storage_dtype(name: str) -> np.dtype[Any]:
    """The NumPy dtype used to view the stored bytes of a dtype name."""
    if name == BFLOAT16:
        return np.dtype("<u2")
    if name in _ML_DTYPE_NAMES:
        module = _ml_dtypes()
        if module is None:
            raise FormatError(
                f"this tensor is stored as {name}; reading it needs ml_dtypes: "
                "pip install 'tensortap[dtypes]'"
            )
        found: np.dtype[Any] = np.dtype(getattr(module, name))
        return found
    try:
        dtype = np.dtype(name)
    except (TypeError, ValueError) as exc:
        raise FormatError(f"unknown stored dtype {name[:40]!r}") from exc
    if dtype.kind not in _NUMERIC_KINDS:
        raise FormatError(f"stored dtype {name!r} is not numeric; the file is not a tensortap file")
    return dtype


def bfloat16_bits_to_float32(bits: np.ndarray) -> np.ndarray:
    """Exact conversion of raw bfloat16 bits (uint16) to float32."""
    return (bits.astype(np.uint32) << 16).view(np.float32)


def decode_array(
    raw: bytes | bytearray | memoryview, name: str, shape: tuple[int, ...]
) -> np.ndarray:
    """Turn stored bytes back into an array; bfloat16 comes back as float32."""
    array = np.frombuffer(raw, dtype=storage_dtype(name)).reshape(shape)
    if name == BFLOAT16:
        return bfloat16_bits_to_float32(array)
    return array
