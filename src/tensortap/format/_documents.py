"""The small JSON documents of a trial: the trial marker, worker info, session records, end
marker, collections.

Decoding checks every field a reader uses (see :mod:`tensortap.format._fields`): a corrupt or
hostile document raises FormatError, never an untyped error. Only the trial marker may claim a
newer format version (UnsupportedFormatVersion: the whole trial is newer); any other document
claiming one, inside a trial this reader opened, is corrupt (FormatError).
"""

from __future__ import annotations

import bisect
import itertools
import json
import math
from collections.abc import Iterable, Sequence
from typing import Any

from tensortap.core._modes import ModeKeys
from tensortap.exceptions import FormatError, UnsupportedFormatVersion
from tensortap.format._fields import (
    get_dict,
    get_int,
    get_list,
    get_optional_int,
    get_optional_number,
    get_optional_str,
    get_str,
)
from tensortap.format._index import FORMAT_VERSION, check_version

TRIAL_KIND = "tensortap-trial"


def encode_json(kind: str, body: dict[str, Any]) -> bytes:
    doc = {"kind": kind, "format_version": FORMAT_VERSION, **body}
    return json.dumps(doc, sort_keys=True, indent=1, allow_nan=False).encode()


def decode_json(raw: bytes, kind: str, what: str) -> dict[str, Any]:
    try:
        doc = json.loads(raw)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        reason = "it is nested too deeply" if isinstance(exc, RecursionError) else exc
        raise FormatError(f"{what} is not valid JSON: {reason}") from None
    if not isinstance(doc, dict) or doc.get("kind") != kind:
        raise FormatError(f"{what} is not a tensortap {kind} document")
    try:
        check_version(doc.get("format_version"), what)
    except UnsupportedFormatVersion as exc:
        if kind == TRIAL_KIND:
            raise
        raise FormatError(
            f"{what} claims format version {doc.get('format_version')} inside a trial of "
            f"version {FORMAT_VERSION} or older: the document is corrupt"
        ) from exc
    return doc


def trial_marker() -> bytes:
    return encode_json(TRIAL_KIND, {})


def decode_worker_info(raw: bytes, what: str) -> dict[str, Any]:
    doc = decode_json(raw, "worker", what)
    num = get_int(doc, "num_workers", what, default=1)
    if not 1 <= num <= 1 << 24:
        raise FormatError(f"{what}: num_workers must be between 1 and {1 << 24}, got {num}")
    get_optional_str(doc, "framework", what)
    return doc


def decode_end(raw: bytes, what: str) -> dict[str, Any]:
    """An end marker; the fields readers use are checked (the rest is passed on)."""
    doc = decode_json(raw, "end", what)
    get_int(doc, "last_global_step", what, default=None)
    get_int(doc, "internal_errors", what, default=0)
    get_optional_str(doc, "last_internal_error", what)
    get_optional_str(doc, "session", what)
    status = get_dict(doc, "status", what, default={})
    for name in ("errors", "steps_lost", "segments_published"):
        if get_int(status, name, f"{what} status", default=0) < 0:
            raise FormatError(f"{what}: status {name} must be >= 0, got {status[name]}")
    get_optional_str(status, "last_error", f"{what} status")
    if "published_segments" in doc:
        claimed = get_list(doc, "published_segments", what)
        if claimed and all(_is_step(v) for v in claimed):  # a flat list of numbers: read as runs
            claimed = _flat_to_runs(claimed, f"{what} published_segments")
            doc["published_segments"] = claimed
        _check_ranges(claimed, f"{what} published_segments")
    return doc


#: The most segment numbers an end marker may list one by one (a flat ``published_segments``,
#: as a writer could have kept them before runs; today's writers write runs).
MAX_FLAT_SEGMENTS = 1 << 20


def _flat_to_runs(seqs: list[int], what: str) -> list[list[int]]:
    """A flat list of increasing segment numbers as ``[first, last]`` runs; FormatError when
    it is not increasing, or longer than :data:`MAX_FLAT_SEGMENTS`."""
    if len(seqs) > MAX_FLAT_SEGMENTS:
        raise FormatError(f"{what}: {len(seqs)} segment numbers; at most {MAX_FLAT_SEGMENTS}")
    if any(b <= a for a, b in itertools.pairwise(seqs)):
        raise FormatError(f"{what} must list segment numbers in increasing order")
    runs = SeqRuns()
    for seq in seqs:
        runs.add(seq)
    found = runs.runs()
    if found is None:
        raise FormatError(f"{what}: more than {MAX_PUBLISHED_RANGES} runs of segment numbers")
    return found


#: The most runs of segment numbers an end marker lists (``published_segments``); a writer
#: whose history needs more leaves the field out, and its last session's count is compared.
MAX_PUBLISHED_RANGES = 1 << 16


class SeqRuns:
    """A set of segment numbers kept as sorted ``[first, last]`` runs of consecutive numbers:
    what a writer publishes for a whole run (one run when its segments follow each other),
    in memory bounded by :data:`MAX_PUBLISHED_RANGES` runs; past that it keeps nothing more
    and says so (:meth:`runs` is None: an end marker then leaves the field out)."""

    def __init__(self, runs: Iterable[Sequence[int]] | None = ()) -> None:
        """``runs``: ``(first, last)`` runs to start from; None for runs that already
        outgrew the bound."""
        self._runs: list[list[int]] = []
        self.overflowed = runs is None
        for first, last in runs or ():
            self.add_run(first, last)

    def add(self, seq: int) -> None:
        """Add one segment number (the next one: constant time)."""
        self.add_run(seq, seq)

    def add_run(self, first: int, last: int) -> None:
        """Add the numbers ``first`` to ``last``: constant time after the last run, otherwise
        a logarithmic search and a list insert."""
        runs = self._runs
        if self.overflowed:
            return
        if runs and runs[-1][0] <= first <= runs[-1][1] + 1:  # the common case: what follows
            runs[-1][1] = max(runs[-1][1], last)
            return
        at = bisect.bisect_right(runs, [first, 2**63])  # the runs starting at or before first
        if at and runs[at - 1][1] >= first - 1:
            at -= 1
            runs[at][1] = max(runs[at][1], last)
        elif len(runs) == MAX_PUBLISHED_RANGES:
            self.overflowed = True
            self._runs = []
            return
        else:
            runs.insert(at, [first, last])
        self._merge(at)

    def _merge(self, at: int) -> None:
        runs = self._runs
        while at + 1 < len(runs) and runs[at + 1][0] <= runs[at][1] + 1:
            runs[at][1] = max(runs[at][1], runs[at + 1][1])
            del runs[at + 1]

    def runs(self) -> list[list[int]] | None:
        """The runs (copies), or None when they outgrew :data:`MAX_PUBLISHED_RANGES`."""
        return None if self.overflowed else [list(run) for run in self._runs]

    def __len__(self) -> int:
        return len(self._runs)


def _check_ranges(runs: list[Any], what: str) -> None:
    """``[first, last]`` runs of segment numbers: integers in [0, 2**63), each run after the
    one before it, at most :data:`MAX_PUBLISHED_RANGES` of them."""
    if len(runs) > MAX_PUBLISHED_RANGES:
        raise FormatError(f"{what}: {len(runs)} runs; at most {MAX_PUBLISHED_RANGES}")
    previous = -2
    for run in runs:
        if not (
            isinstance(run, list)
            and len(run) == 2
            and all(isinstance(v, int) and not isinstance(v, bool) for v in run)
            and previous + 1 < run[0] <= run[1] < 2**63
        ):
            raise FormatError(
                f"{what} must be increasing [first, last] runs of segment numbers >= 0, got "
                f"{str(run)[:60]} after {previous}"
            )
        previous = run[1]


#: A session record's budget: its bytes, its events (the writer keeps at most this many and
#: counts the rest), the length of a branch's parent id and reason (the writer cuts longer ones).
MAX_SESSION_BYTES = 4 * 1024 * 1024
MAX_SESSION_EVENTS = 256
MAX_SESSION_ID = 256
MAX_BRANCH_REASON = 4096
#: The longest host name, step source and event kind a session record holds (a host name is
#: at most 255 bytes; the writer's step sources and a hook's event kinds are short phrases).
MAX_SESSION_TEXT = 4096
#: The deepest an event's fields nest (the hook refuses deeper ones); a session record is then
#: at most :data:`MAX_SESSION_DEPTH` deep.
MAX_EVENT_DEPTH = 32
MAX_SESSION_DEPTH = MAX_EVENT_DEPTH + 8
#: The latest time a record may hold: 9999-12-31, what ``time.localtime`` and ``datetime``
#: take (a session record's ``started`` of 1e300 made the report raise OverflowError).
MAX_TIME = 253_402_300_799.0
#: A process id: what any system's pids fit in (Linux's are at most 2**22).
MAX_PID = (1 << 32) - 1
_MAX_STEP = (1 << 63) - 1


def _is_step(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= _MAX_STEP


def _check_plain(doc: Any, what: str, deepest: int) -> None:
    """A document as tensortap writes it: every number finite (the writer refuses NaN and
    infinities), at most ``deepest`` deep; checked without recursion, in one pass."""
    stack = [(doc, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > deepest:
            raise FormatError(f"{what} is nested more than {deepest} deep; tensortap writes none")
        if isinstance(item, float) and not math.isfinite(item):
            raise FormatError(f"{what} holds the number {item}; tensortap writes finite ones")
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)


def _check_text(doc: dict[str, Any], name: str, what: str, longest: int) -> None:
    value = get_optional_str(doc, name, what)
    if value is not None and len(value) > longest:
        raise FormatError(f"{what}: {name} holds {len(value)} chars; at most {longest}")


def decode_session(raw: bytes, what: str) -> dict[str, Any]:
    """A session record (see docs/format.md); every field a reader uses is checked here, once,
    for its kind and its range (a time a clock can show, steps in [0, 2**63), a pid, bounded
    text), so that no reader meets an unchecked value."""
    if len(raw) > MAX_SESSION_BYTES:
        raise FormatError(
            f"{what} holds {len(raw)} bytes; a session record holds at most {MAX_SESSION_BYTES}"
        )
    doc = decode_json(raw, "session", what)
    _check_plain(doc, what, MAX_SESSION_DEPTH)
    if get_int(doc, "index", what) < 0:
        raise FormatError(f"{what}: index must be >= 0, got {doc['index']}")
    if not 0 < len(get_str(doc, "session", what)) <= MAX_SESSION_ID:
        raise FormatError(f"{what}: session must be an id of 1 to {MAX_SESSION_ID} chars")
    get_optional_str(doc, "worker", what)
    started = get_optional_number(doc, "started", what)
    if started is not None and not 0 <= started <= MAX_TIME:  # NaN fails both comparisons
        raise FormatError(
            f"{what}: started must be a time in seconds since 1970, at most {MAX_TIME:.0f} "
            f"(9999-12-31), got {str(started)[:40]}; the record was not written by tensortap"
        )
    _check_text(doc, "host", what, MAX_SESSION_TEXT)
    pid = get_optional_int(doc, "pid", what)
    if pid is not None and not 0 <= pid <= MAX_PID:
        raise FormatError(f"{what}: pid must be a process id in [0, {MAX_PID}], got {pid}")
    resumed = get_optional_int(doc, "resumed_from_step", what)
    if resumed is not None and resumed < 0:
        raise FormatError(f"{what}: resumed_from_step must be a step >= 0, got {resumed}")
    _check_text(doc, "step_source", what, MAX_SESSION_TEXT)
    steps = get_dict(doc, "mode_steps", what, default={})
    for name in steps:
        if name not in ModeKeys.__members__ or get_int(steps, name, f"{what} mode_steps") < 0:
            raise FormatError(f"{what}: mode_steps must map mode names to steps >= 0")
    for row in get_list(doc, "rolled_back", what, of=list, default=[]):
        if not (
            len(row) == 3
            and row[0] in ModeKeys.__members__
            and _is_step(row[1])
            and _is_step(row[2])
            and row[1] <= row[2]
        ):
            raise FormatError(
                f"{what}: rolled_back rows must be [mode name, first, last] with steps "
                f"0 <= first <= last < 2**63, got {str(row)[:60]}"
            )
    events = get_list(doc, "events", what, of=dict, default=[])
    if len(events) > MAX_SESSION_EVENTS:
        raise FormatError(
            f"{what}: {len(events)} events; a session record keeps at most {MAX_SESSION_EVENTS}"
        )
    for event in events:
        kind, step = event.get("kind"), event.get("global_step")
        if not (
            isinstance(kind, str)
            and 0 < len(kind) <= MAX_SESSION_TEXT
            and isinstance(event.get("fields"), dict)
            and (step is None or _is_step(step))
        ):
            raise FormatError(
                f"{what}: events must be objects with a kind, fields and a global_step (a "
                f"step >= 0 or null), got {str(event)[:80]}"
            )
    _check_branch(doc, what)
    return doc


def decode_session_at(raw: bytes, key: str) -> dict[str, Any]:
    """The session record stored at ``key`` (``.../sessions/<index>.json``): decoded as
    :func:`decode_session` does, and refused when it names another index than its key's (it
    would shadow that session's record)."""
    doc = decode_session(raw, f"session record {key}")
    name = key.rsplit("/", 1)[-1].removesuffix(".json")
    if not name.isdigit() or int(name) != doc["index"]:
        raise FormatError(
            f"session record {key} says it is session {doc['index']} of its worker, not "
            f"{name}: a record lies at its own index's key; it was not written by tensortap"
        )
    return doc


def _check_branch(doc: dict[str, Any], what: str) -> None:
    """The branch fields of a rollback's session, when present (see docs/format.md)."""
    parent = get_optional_str(doc, "branch_of", what)
    if parent is None:
        return
    if not 0 < len(parent) <= MAX_SESSION_ID:
        raise FormatError(f"{what}: branch_of must be a session id of 1 to {MAX_SESSION_ID} chars")
    for name in ("branch_step", "branch_global_step"):
        value = get_optional_int(doc, name, what)
        if value is not None and not 0 <= value < 2**63:
            raise FormatError(f"{what}: {name} must be a step >= 0, got {value}")
    mode = get_optional_str(doc, "branch_mode", what)
    if mode is not None and mode not in ModeKeys.__members__:
        raise FormatError(f"{what}: branch_mode must be a mode name, got {mode[:40]!r}")
    reason = get_optional_str(doc, "branch_reason", what)
    if reason is not None and len(reason) > MAX_BRANCH_REASON:
        raise FormatError(f"{what}: branch_reason is longer than {MAX_BRANCH_REASON} chars")
