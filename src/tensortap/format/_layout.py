"""Where things live inside a trial. Keys are '/'-separated and relative to the trial root.

Tensor and collection names never appear in keys: they are data inside index and JSON objects.
Only worker names do, and those are validated here.
"""

from __future__ import annotations

import re
from typing import TypeGuard

from tensortap.exceptions import InvalidConfigError

TRIAL_MARKER = "tensortap.json"
WORKERS_PREFIX = "workers/"
INDEX_SUFFIX = ".ttidx"
SERIES_SUFFIX = ".ttser"
DATA_SUFFIX = ".ttdat"
_WORKER_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")


def is_plain_name(name: object) -> TypeGuard[str]:
    """1-128 letters, digits, '_', '.', '-', starting with a letter or digit, without '..':
    safe as one path component (worker names; job names use the same rule)."""
    return isinstance(name, str) and bool(_WORKER_RE.match(name)) and ".." not in name


def validate_worker_name(name: str) -> str:
    if not is_plain_name(name):
        raise InvalidConfigError(
            f"invalid worker name {name!r}: expected 1-128 characters of letters, digits, "
            "'_', '.', '-' starting with a letter or digit (e.g. 'worker_0')"
        )
    return name


def worker_name(worker: str | int | None) -> str:
    """Normalise a worker given as a rank (0 -> 'worker_0') or a name."""
    if worker is None:
        return "worker_0"
    if isinstance(worker, int) and not isinstance(worker, bool):
        if worker < 0:
            raise InvalidConfigError(f"a worker rank must be >= 0, got {worker}")
        return f"worker_{worker}"
    return validate_worker_name(worker)  # type: ignore[arg-type]


def worker_prefix(worker: str) -> str:
    return f"{WORKERS_PREFIX}{worker}/"


def worker_info_key(worker: str) -> str:
    return f"{worker_prefix(worker)}worker.json"


def end_key(worker: str) -> str:
    return f"{worker_prefix(worker)}end.json"


def index_prefix(worker: str) -> str:
    return f"{worker_prefix(worker)}index/"


def data_prefix(worker: str) -> str:
    return f"{worker_prefix(worker)}data/"


def series_prefix(worker: str) -> str:
    return f"{worker_prefix(worker)}series/"


def rollups_prefix(worker: str) -> str:
    return f"{worker_prefix(worker)}rollups/"


def series_key(worker: str, seq: int) -> str:
    """The series object of segment ``seq``."""
    return f"{series_prefix(worker)}{seq:012d}{SERIES_SUFFIX}"


def rollup_key(worker: str, first: int, last: int) -> str:
    """A rollup of segments ``first``..``last``: named by its last segment first, so a new
    rollup sorts after every older one (a reader lists only what follows the last it saw)."""
    return f"{rollups_prefix(worker)}{last:012d}-{first:012d}{SERIES_SUFFIX}"


def rollup_span(key: str) -> tuple[int, int] | None:
    """(first, last) segment of a rollup key (None for another key)."""
    base = key.rsplit("/", 1)[-1]
    if not base.endswith(SERIES_SUFFIX):
        return None
    last, _, first = base[: -len(SERIES_SUFFIX)].partition("-")
    if not (last.isdigit() and first.isdigit()):
        return None
    return int(first), int(last)


def merged_series_key(worker: str, seq: int, first: int, last: int) -> str:
    """The series of merged segment ``seq``, which replaced segments ``first``..``last``: a
    rollup of those and ``seq`` (a reader from before compaction ignores the name, and reads
    the merged segment's series from its index)."""
    return f"{rollups_prefix(worker)}{seq:012d}-{first:012d}-{last:012d}{SERIES_SUFFIX}"


def merged_series_span(key: str) -> tuple[int, int, int] | None:
    """(merged segment, first, last replaced) of a :func:`merged_series_key` (None for
    another key)."""
    base = key.rsplit("/", 1)[-1]
    if not base.endswith(SERIES_SUFFIX):
        return None
    fields = base[: -len(SERIES_SUFFIX)].split("-")
    if len(fields) != 3 or not all(f.isdigit() for f in fields):
        return None
    seq, first, last = (int(f) for f in fields)
    if not first <= last < seq:
        return None
    return seq, first, last


def collections_prefix(worker: str) -> str:
    return f"{worker_prefix(worker)}collections/"


def sessions_prefix(worker: str) -> str:
    return f"{worker_prefix(worker)}sessions/"


def session_key(worker: str, index: int) -> str:
    """The record of a worker's session number ``index`` (0 for the first writer)."""
    return f"{sessions_prefix(worker)}{index:06d}.json"


def config_prefix(worker: str) -> str:
    return f"{worker_prefix(worker)}config/"


def config_key(worker: str, index: int) -> str:
    """The run configuration a worker's session number ``index`` recorded."""
    return f"{config_prefix(worker)}{index:06d}.json"


def index_key(worker: str, seq: int) -> str:
    return f"{index_prefix(worker)}{seq:012d}{INDEX_SUFFIX}"


def data_key(worker: str, seq: int) -> str:
    return f"{data_prefix(worker)}{seq:012d}{DATA_SUFFIX}"


def collections_key(worker: str, seq: int) -> str:
    return f"{collections_prefix(worker)}{seq:012d}.json"


def seq_of(key: str) -> int | None:
    """The sequence number of an index, data or collections key (None for other keys)."""
    base = key.rsplit("/", 1)[-1].split(".", 1)[0]
    return int(base) if base.isdigit() else None
