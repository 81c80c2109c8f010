"""Rule parameters: read from strings (as a job configuration gives them) or Python values.

A rule declares its parameters as keyword arguments of ``__init__`` with annotations (or
defaults) that say their type; :func:`coerce` turns ``"0.5"`` into ``0.5``, ``"a,b"`` into
``["a", "b"]``, ``"(-9.5, 9.5)"`` into ``(-9.5, 9.5)``, ``"true"`` into ``True`` and ``"eval"``
into ``modes.EVAL``. Nothing is ever evaluated as code.
"""

from __future__ import annotations

import inspect
import math
import types
import typing
from dataclasses import dataclass
from typing import Any

from tensortap.core._modes import ModeKeys, parse_mode
from tensortap.exceptions import InvalidConfigError

_NONE_WORDS = {"", "none", "null"}
_TRUE_WORDS = {"true", "1", "yes", "on"}
_FALSE_WORDS = {"false", "0", "no", "off"}
# Parameters every rule takes that are not rule parameters.
RESERVED = ("self", "base_trial", "other_trials")


@dataclass(frozen=True)
class ParamSpec:
    """One parameter of a rule: its name, the type it is read as, and its default."""

    name: str
    annotation: Any  # a type, or None when the rule gives none (the value is passed through)
    default: Any = inspect.Parameter.empty

    @property
    def required(self) -> bool:
        return self.default is inspect.Parameter.empty

    def type_text(self) -> str:
        return describe(self.annotation)


def describe(annotation: Any) -> str:
    """A human description of the form a type is written in."""
    if annotation is None:
        return "any value"
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        return " or ".join(describe(a) for a in inner) + " or none"
    if origin is list:
        return f"a list of {describe(args[0]) if args else 'values'} (e.g. 'a,b')"
    if origin is tuple:
        return f"a tuple of {len(args)} numbers (e.g. '(-9.5, 9.5)')"
    if annotation is ModeKeys:
        return "a mode (TRAIN, EVAL, PREDICT or GLOBAL)"
    if annotation is bool:
        return "a boolean (true/false)"
    if annotation is float:
        return "a number"
    if annotation is int:
        return "an integer"
    if annotation is str:
        return "a string"
    return getattr(annotation, "__name__", str(annotation))


def specs_of(init: Any, owner: type) -> list[ParamSpec]:
    """The parameters of a rule's ``__init__`` (beyond self, base_trial and other_trials)."""
    try:
        hints = typing.get_type_hints(init)
    except Exception:  # annotations a user wrote that cannot be resolved: fall back to defaults
        hints = {}
    out = []
    for p in inspect.signature(init).parameters.values():
        if p.name in RESERVED or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        annotation = hints.get(p.name)
        if annotation is None and p.default not in (inspect.Parameter.empty, None):
            annotation = type(p.default)
        if annotation is Any:
            annotation = None
        out.append(ParamSpec(p.name, annotation, p.default))
    return out


class _Unparseable(ValueError):
    pass


def coerce(rule: str, spec: ParamSpec, value: Any) -> Any:
    """``value`` as the type of ``spec``, or InvalidConfigError naming rule, parameter and form."""
    try:
        return _convert(spec.annotation, value)
    except _Unparseable as exc:
        raise InvalidConfigError(
            f"rule {rule}: parameter {spec.name!r} got {value!r}, which is not "
            f"{spec.type_text()}{f' ({exc})' if str(exc) else ''}"
        ) from None


def _convert(annotation: Any, value: Any) -> Any:
    if annotation is None:
        return value
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        if value is None or (isinstance(value, str) and value.strip().lower() in _NONE_WORDS):
            return None
        inner = [a for a in args if a is not type(None)]
        for candidate in inner:
            try:
                return _convert(candidate, value)
            except _Unparseable:
                continue
        raise _Unparseable("")
    if origin is list:
        item = args[0] if args else None
        return [_convert(item, v) for v in _split(value)]
    if origin is tuple:
        items = _split(value)
        if len(items) != len(args):
            raise _Unparseable(f"expected {len(args)} values, got {len(items)}")
        return tuple(_convert(a, v) for a, v in zip(args, items, strict=True))
    if annotation is ModeKeys:
        try:
            return parse_mode(value)
        except InvalidConfigError:
            raise _Unparseable("") from None
    if annotation is bool:
        return _bool(value)
    if annotation is float:
        return _float(value)
    if annotation is int:
        return _int(value)
    if annotation is str:
        if not isinstance(value, str):
            raise _Unparseable("")
        return value
    if isinstance(value, annotation):
        return value
    raise _Unparseable("")


def _split(value: Any) -> list[Any]:
    if isinstance(value, (list, tuple)):
        return list(value)
    if not isinstance(value, str):
        return [value]
    text = value.strip()
    if len(text) >= 2 and text[0] + text[-1] in ("()", "[]"):
        text = text[1:-1]
    if not text.strip():
        return []
    return [part.strip().strip("'\"") for part in text.split(",")]


def _bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        word = value.strip().lower()
        if word in _TRUE_WORDS:
            return True
        if word in _FALSE_WORDS:
            return False
    raise _Unparseable("")


def _float(value: Any) -> float:
    if isinstance(value, bool):
        raise _Unparseable("")
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            number = float(value.strip().rstrip("%"))
        except ValueError:
            raise _Unparseable("") from None
        if math.isnan(number):
            raise _Unparseable("NaN is not a usable parameter")
        return number
    raise _Unparseable("")


def _int(value: Any) -> int:
    if isinstance(value, bool):
        raise _Unparseable("")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        text = value.strip()
        try:
            return int(text)
        except ValueError:
            try:
                number = float(text)
            except ValueError:
                raise _Unparseable("") from None
            if number.is_integer():
                return int(number)
    raise _Unparseable("")


def check(rule: str, name: str, value: Any, ok: bool, expected: str) -> None:
    """Raise InvalidConfigError unless ``ok``: the value of ``name`` is not what is expected."""
    if not ok:
        raise InvalidConfigError(
            f"rule {rule}: parameter {name!r} must be {expected}, got {value!r}"
        )
