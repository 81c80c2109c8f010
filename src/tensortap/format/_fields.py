"""Typed access to the fields of stored JSON (documents and index headers).

Stored data may be corrupt or hostile: every field a reader uses is checked for its type here,
so that a wrong type is a FormatError naming the object and the field, never a TypeError,
KeyError or AttributeError deep inside the reader.
"""

from __future__ import annotations

import reprlib
from collections.abc import Callable
from typing import Any

import numpy as np

from tensortap.exceptions import FormatError

_MISSING = object()
_SHORT = reprlib.Repr()  # bounded in depth and length, whatever the value holds
_SHORT.maxlevel, _SHORT.maxstring, _SHORT.maxother = 2, 40, 40


_INT64 = (-(1 << 63), (1 << 63) - 1)


def _is_int64(value: object) -> bool:
    return (
        isinstance(value, int) and not isinstance(value, bool) and _INT64[0] <= value <= _INT64[1]
    )


def _get(
    doc: dict[str, Any], name: str, what: str, default: Any, ok: Callable[[Any], bool], kind: str
) -> Any:
    """``doc[name]`` if ``ok`` says it is of the right kind; ``default`` when it is missing (and
    a default is given); otherwise a FormatError naming the object, the field and what it held."""
    value = doc.get(name, _MISSING)
    if value is _MISSING and default is not _MISSING:
        return default
    if not ok(value):
        raise FormatError(f"{what}: field {name!r} must be {kind}, got {_describe(value)}")
    return value


def get_int(doc: dict[str, Any], name: str, what: str, default: Any = _MISSING) -> Any:
    """An integer field that fits 64 bits (booleans are not integers)."""
    return _get(doc, name, what, default, _is_int64, "a 64-bit integer")


def get_optional_int(doc: dict[str, Any], name: str, what: str) -> Any:
    """An integer field that may be missing or null."""
    return _get(doc, name, what, None, lambda v: v is None or _is_int64(v), "a 64-bit integer")


def get_optional_number(doc: dict[str, Any], name: str, what: str) -> Any:
    """A real number (int or float) that may be missing or null."""
    return _get(
        doc,
        name,
        what,
        None,
        lambda v: v is None or (isinstance(v, int | float) and not isinstance(v, bool)),
        "a number",
    )


def get_str(doc: dict[str, Any], name: str, what: str, default: Any = _MISSING) -> Any:
    return _get(doc, name, what, default, lambda v: isinstance(v, str), "a string")


def get_optional_str(doc: dict[str, Any], name: str, what: str) -> Any:
    """A string field that may be missing or null."""
    return _get(doc, name, what, None, lambda v: v is None or isinstance(v, str), "a string")


def get_dict(doc: dict[str, Any], name: str, what: str, default: Any = _MISSING) -> Any:
    return _get(doc, name, what, default, lambda v: isinstance(v, dict), "an object")


def get_list(
    doc: dict[str, Any], name: str, what: str, of: type | None = None, default: Any = _MISSING
) -> Any:
    """A list field; with ``of``, every item must be of that type."""
    return _get(
        doc,
        name,
        what,
        default,
        lambda v: isinstance(v, list) and (of is None or all(isinstance(i, of) for i in v)),
        "a list" if of is None else f"a list of {of.__name__}",
    )


def int_rows(value: list[Any], width: int, what: str, name: str) -> list[list[Any]]:
    """A list of rows of at least ``width`` integers (more entries may follow, e.g. a time)."""
    int_columns(value, width, what, name)
    return value


def int_columns(value: list[Any], width: int, what: str, name: str) -> np.ndarray[Any, Any]:
    """:func:`int_rows`' check, and the rows' first ``width`` integers as an (N, width) int64
    array. An index header lists a step per row (10^5 rows for a long run): rows of plain
    ints within int64 are checked at once (their types as a set, their range by NumPy's
    conversion); any other row is looked at one by one, for the message naming it."""
    if not value:
        return np.empty((0, width), dtype=np.int64)
    if set(map(type, value)) <= {list} and min(map(len, value)) >= width:
        rows = value if len(set(map(len, value))) == 1 else [row[:width] for row in value]
        columns = list(zip(*rows, strict=True))[:width]
        if all(set(map(type, column)) <= {int} for column in columns):
            try:
                table: np.ndarray[Any, Any] = np.array(columns, dtype=np.int64)
                return np.ascontiguousarray(table.T)
            except OverflowError:  # a value beyond int64: named below
                pass
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
    # every row held int64s (an int subclass other than bool, say): as they are
    return np.array([[int(v) for v in row[:width]] for row in value], np.int64).reshape(-1, width)


def _describe(value: object) -> str:
    if value is _MISSING:
        return "nothing (the field is missing)"
    return f"{type(value).__name__} {_SHORT.repr(value)}"
