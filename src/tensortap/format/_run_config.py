"""The run's configuration document: ``workers/<worker>/config/<session index>.json``.

One document per writing session of a worker, rewritten (atomically, by the store's ``put``)
each time the session learns more of its configuration: what the framework hooks gathered (the
optimizer, the batch size, the trainer's arguments, ...) and what the script gave to
``hook.log_config``. The body is ``{"worker", "session", "index", "config"}``; ``config`` is a
JSON object within a budget (:data:`MAX_CONFIG_BYTES`, depth, lengths), checked here both when a
hook writes it (:func:`check_config`) and when a reader decodes it (:func:`decode_config`), so a
damaged or hostile document is a FormatError the trial lists as a problem.

Secrets are never kept: a value under a key that names one (``hub_token``, ``password``,
``api_key``, ...) is written as ``"<redacted>"`` (:func:`redact`); environment variables are
not gathered at all.
"""

from __future__ import annotations

import enum
import json
import math
import numbers
import re
from collections.abc import Mapping
from typing import Any

from tensortap.exceptions import FormatError, InvalidConfigError
from tensortap.format._documents import decode_json, encode_json
from tensortap.format._fields import get_dict, get_int, get_str

CONFIG_KIND = "config"
#: The budget of one configuration document and of what it holds.
MAX_CONFIG_BYTES = 256 * 1024
MAX_CONFIG_DEPTH = 12
MAX_CONFIG_STRING = 8192
MAX_CONFIG_ITEMS = 2048
REDACTED = "<redacted>"

# A key that names a secret: its value is never recorded. Whole words at the end of the key
# (``hub_token``, ``api_key``), so ``pad_token_id`` or ``max_tokens`` are kept.
_SECRET_KEY = re.compile(
    r"(^|[_\-. ])(token|secret|secret_?key|password|passwd|passphrase|api_?key|apikey|"
    r"access_?key|private_?key|credentials?|auth)$|secret|password",
    re.IGNORECASE,
)


def is_secret_key(key: str) -> bool:
    """True when ``key`` names a secret (``hub_token``, ``aws_secret_access_key``, ...)."""
    return bool(_SECRET_KEY.search(key))


def redact(value: Any) -> Any:
    """``value`` (JSON) with the values of keys that name secrets replaced by ``"<redacted>"``."""
    if isinstance(value, dict):
        return {
            k: (REDACTED if is_secret_key(k) and v not in (None, "") else redact(v))
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [redact(v) for v in value]
    return value


def check_config(value: Any, what: str) -> None:
    """Raise InvalidConfigError unless ``value`` is a JSON object within the budget."""
    if not isinstance(value, dict):
        raise InvalidConfigError(f"{what} must be a mapping of names to values, got {_kind(value)}")
    problem = _problem(value, 0)
    if problem is not None:
        raise InvalidConfigError(f"{what}: {problem}")
    size = len(encode_config("w", "s", 0, value))
    if size > MAX_CONFIG_BYTES:
        raise InvalidConfigError(
            f"{what} takes {size} bytes as JSON; a run's configuration holds at most "
            f"{MAX_CONFIG_BYTES}: log the settings, not data (no arrays or file contents)"
        )


def _problem(value: Any, depth: int) -> str | None:
    """What is wrong with ``value`` as configuration (None: nothing)."""
    if depth > MAX_CONFIG_DEPTH:
        return f"nested deeper than {MAX_CONFIG_DEPTH} levels"
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, str):
        if len(value) > MAX_CONFIG_STRING:
            return f"a string of {len(value)} characters (at most {MAX_CONFIG_STRING})"
        return None
    if isinstance(value, int):
        return None if -(1 << 63) <= value < 1 << 64 else f"an integer out of range: {value}"
    if isinstance(value, float):
        return None if math.isfinite(value) else f"a non-finite number ({value})"
    if isinstance(value, (dict, list)):
        if len(value) > MAX_CONFIG_ITEMS:
            return f"{len(value)} items in one object or list (at most {MAX_CONFIG_ITEMS})"
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for key, item in items:
            if isinstance(value, dict) and not isinstance(key, str):
                return f"a key that is not a string: {_kind(key)} {str(key)[:40]!r}"
            if isinstance(key, str) and len(key) > 256:
                return f"a key of {len(key)} characters (at most 256)"
            found = _problem(item, depth + 1)
            if found is not None:
                return f"{key}: {found}" if depth < 4 else found
        return None
    return (
        f"{_kind(value)} {str(value)[:60]!r} is not a JSON value (None, bool, int, float, str, "
        "list, dict with str keys); convert it (str(value), float(value)) before logging it"
    )


def _kind(value: Any) -> str:
    return type(value).__name__


def as_json(value: Any, depth: int = 0) -> Any:
    """``value`` as a JSON value, leniently (for what a hook gathers from a framework, never for
    what a script logs): tuples and sets as lists, NumPy and tensor scalars as numbers, enums by
    value, non-finite numbers as strings, anything else as its text (cut to a bounded length)."""
    if value is None or isinstance(value, (bool, str)):
        return value if not isinstance(value, str) else value[:MAX_CONFIG_STRING]
    if isinstance(value, enum.Enum):
        return as_json(value.value, depth)
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        number = float(value)
        return number if math.isfinite(number) else str(number)
    if depth < MAX_CONFIG_DEPTH - 1:
        if isinstance(value, Mapping):
            pairs = list(value.items())[:MAX_CONFIG_ITEMS]
            return {str(k)[:256]: as_json(v, depth + 1) for k, v in pairs}
        if isinstance(value, (list, tuple, set, frozenset)):
            items = sorted(value, key=str) if isinstance(value, (set, frozenset)) else value
            return [as_json(v, depth + 1) for v in list(items)[:MAX_CONFIG_ITEMS]]
    item = getattr(value, "item", None)
    if callable(item) and getattr(value, "size", None) == 1:
        try:
            return as_json(item(), depth)
        except Exception:
            pass
    return str(value)[:200]


def merge(into: dict[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """Merge ``new`` into ``into`` (in place, and returned): objects are merged key by key,
    anything else in ``new`` replaces what ``into`` held."""
    for key, value in new.items():
        old = into.get(key)
        if isinstance(old, dict) and isinstance(value, dict):
            merge(old, value)
        else:
            into[key] = json.loads(json.dumps(value)) if isinstance(value, (dict, list)) else value
    return into


def encode_config(worker: str, session: str, index: int, config: dict[str, Any]) -> bytes:
    """A session's configuration document."""
    body = {"worker": worker, "session": session, "index": index, "config": config}
    return encode_json(CONFIG_KIND, body)


def decode_config(raw: bytes, what: str) -> dict[str, Any]:
    """A configuration document; raises FormatError when it is damaged, hostile or over budget
    (its secrets redacted again, in case another writer kept one)."""
    if len(raw) > MAX_CONFIG_BYTES + 4096:
        raise FormatError(
            f"{what} holds {len(raw)} bytes; a configuration holds at most {MAX_CONFIG_BYTES}"
        )
    doc = decode_json(raw, CONFIG_KIND, what)
    get_str(doc, "worker", what)
    get_str(doc, "session", what)
    if get_int(doc, "index", what) < 0:
        raise FormatError(f"{what}: index must be >= 0, got {doc['index']}")
    config = get_dict(doc, "config", what)
    problem = _problem(config, 0)
    if problem is not None:
        raise FormatError(f"{what}: config {problem}")
    doc["config"] = redact(config)
    return doc
