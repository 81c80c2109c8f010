"""The small JSON documents of a trial: the trial marker, worker info, session records, end
marker, collections.

Decoding checks every field a reader uses (see :mod:`tensortap.format._fields`): a corrupt or
hostile document raises FormatError, never an untyped error. Only the trial marker may claim a
newer format version (UnsupportedFormatVersion: the whole trial is newer); any other document
claiming one, inside a trial this reader opened, is corrupt (FormatError).
"""

from __future__ import annotations

import json
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
        _check_ranges(get_list(doc, "published_segments", what), f"{what} published_segments")
    return doc


#: The most runs of segment numbers an end marker lists (``published_segments``); a writer
#: whose history needs more leaves the field out, and its last session's count is compared.
MAX_PUBLISHED_RANGES = 1 << 16


def seq_ranges(seqs: list[int]) -> list[list[int]] | None:
    """Segment numbers as sorted ``[first, last]`` runs of consecutive numbers (what an end
    marker's ``published_segments`` holds); None when they need more than
    :data:`MAX_PUBLISHED_RANGES` runs."""
    runs: list[list[int]] = []
    for seq in sorted(set(seqs)):
        if runs and runs[-1][1] == seq - 1:
            runs[-1][1] = seq
        else:
            if len(runs) == MAX_PUBLISHED_RANGES:
                return None
            runs.append([seq, seq])
    return runs


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


def decode_session(raw: bytes, what: str) -> dict[str, Any]:
    """A session record (see docs/format.md); every field a reader uses is checked."""
    if len(raw) > MAX_SESSION_BYTES:
        raise FormatError(
            f"{what} holds {len(raw)} bytes; a session record holds at most {MAX_SESSION_BYTES}"
        )
    doc = decode_json(raw, "session", what)
    if get_int(doc, "index", what) < 0:
        raise FormatError(f"{what}: index must be >= 0, got {doc['index']}")
    get_str(doc, "session", what)
    get_optional_number(doc, "started", what)
    get_optional_str(doc, "host", what)
    get_optional_int(doc, "pid", what)
    get_optional_int(doc, "resumed_from_step", what)
    get_optional_str(doc, "step_source", what)
    steps = get_dict(doc, "mode_steps", what, default={})
    for name in steps:
        if name not in ModeKeys.__members__ or get_int(steps, name, f"{what} mode_steps") < 0:
            raise FormatError(f"{what}: mode_steps must map mode names to steps >= 0")
    for row in get_list(doc, "rolled_back", what, of=list, default=[]):
        if not (
            len(row) == 3
            and row[0] in ModeKeys.__members__
            and all(isinstance(v, int) and not isinstance(v, bool) for v in row[1:])
        ):
            raise FormatError(f"{what}: rolled_back rows must be [mode name, first, last]")
    events = get_list(doc, "events", what, of=dict, default=[])
    if len(events) > MAX_SESSION_EVENTS:
        raise FormatError(
            f"{what}: {len(events)} events; a session record keeps at most {MAX_SESSION_EVENTS}"
        )
    for event in events:
        if not isinstance(event.get("kind"), str) or not isinstance(event.get("fields"), dict):
            raise FormatError(f"{what}: events must be objects with a kind and fields")
    _check_branch(doc, what)
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
