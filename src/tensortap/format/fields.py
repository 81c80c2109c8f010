"""Typed access to the fields of stored JSON (documents and index headers).

Stored data may be corrupt or hostile: every field a reader uses is checked for its type here,
so that a wrong type is a FormatError naming the object and the field, never a TypeError,
KeyError or AttributeError deep inside the reader.
"""

from __future__ import annotations

import math
import reprlib
from typing import Any

from tensortap.exceptions import FormatError

_MISSING = object()
_SHORT = reprlib.Repr()  # bounded in depth and length, whatever the value holds
_SHORT.maxlevel, _SHORT.maxstring, _SHORT.maxother = 2, 40, 40


def _type_name(value: object) -> str:
    return type(value).__name__


_INT64 = (-(1 << 63), (1 << 63) - 1)


def _is_int64(value: object) -> bool:
    return (
        isinstance(value, int) and not isinstance(value, bool) and _INT64[0] <= value <= _INT64[1]
    )


def get_int(doc: dict[str, Any], name: str, what: str, default: Any = _MISSING) -> Any:
    """An integer field that fits 64 bits (booleans are not integers)."""
    value = doc.get(name, _MISSING)
    if value is _MISSING and default is not _MISSING:
        return default
    if not _is_int64(value):
        raise FormatError(
            f"{what}: field {name!r} must be a 64-bit integer, got {_describe(value)}"
        )
    return value


def get_number(doc: dict[str, Any], name: str, what: str, default: Any = _MISSING) -> Any:
    value = doc.get(name, _MISSING)
    if value is _MISSING and default is not _MISSING:
        return default
    if (
        not isinstance(value, int | float)
        or isinstance(value, bool)
        or not math.isfinite(float(value))
    ):
        raise FormatError(f"{what}: field {name!r} must be a number, got {_describe(value)}")
    return value


def get_str(doc: dict[str, Any], name: str, what: str, default: Any = _MISSING) -> Any:
    value = doc.get(name, _MISSING)
    if value is _MISSING and default is not _MISSING:
        return default
    if not isinstance(value, str):
        raise FormatError(f"{what}: field {name!r} must be a string, got {_describe(value)}")
    return value


def get_list(
    doc: dict[str, Any], name: str, what: str, of: type | None = None, default: Any = _MISSING
) -> Any:
    value = doc.get(name, _MISSING)
    if value is _MISSING and default is not _MISSING:
        return default
    if not isinstance(value, list):
        raise FormatError(f"{what}: field {name!r} must be a list, got {_describe(value)}")
    if of is not None and not all(isinstance(v, of) for v in value):
        raise FormatError(f"{what}: field {name!r} must hold only {of.__name__} values")
    return value


def get_dict(doc: dict[str, Any], name: str, what: str, default: Any = _MISSING) -> Any:
    value = doc.get(name, _MISSING)
    if value is _MISSING and default is not _MISSING:
        return default
    if not isinstance(value, dict):
        raise FormatError(f"{what}: field {name!r} must be an object, got {_describe(value)}")
    return value


def int_rows(value: list[Any], width: int, what: str, name: str) -> list[list[Any]]:
    """A list of rows of at least ``width`` integers (more entries may follow, e.g. a time)."""
    for row in value:
        if (
            not isinstance(row, list)
            or len(row) < width
            or not all(_is_int64(v) for v in row[:width])
        ):
            raise FormatError(
                f"{what}: every entry of {name!r} must start with {width} integers, got "
                f"{_describe(row)}"
            )
    return value


def _describe(value: object) -> str:
    if value is _MISSING:
        return "nothing (the field is missing)"
    return f"{_type_name(value)} {_SHORT.repr(value)}"
