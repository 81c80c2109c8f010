"""Sessions: each writer that starts on a worker is one *session* of it, and continues its steps.

A script started again on the same ``out_dir``, a trainer resumed from its checkpoint, a process
killed and restarted: each is a new session of the same worker. Its writer, once it holds the
worker (see :mod:`tensortap.writer._ownership`), reads what the earlier sessions published (every
index of the worker, and the end marker a closed one left) and starts its steps where they end:
the global step after the last one, and each mode's step after that mode's last one. So a new
session never writes a step number an earlier one published. A worker whose history cannot be
read (a damaged index) is refused (:class:`~tensortap.exceptions.ResumeRefused`): its next step
number is unknown, and a guess could shadow published steps.

Each session is recorded in ``workers/<worker>/sessions/<index>.json`` (index 0 for the first
session; a trial written before sessions were recorded counts its earlier sessions from the
``session`` field of its index headers): when it started, on which host and pid, the last global
step the worker held before it (``resumed_from_step``, null for a first session), where its mode
steps continue, and, when a trainer's or optimizer's count took over the numbering
(:meth:`tensortap.hook._hook.Hook.continue_at`), what said so and which step numbers it counts
again.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tensortap.core._modes import ModeKeys
from tensortap.exceptions import FormatError, ResumeRefused, StorageError
from tensortap.format import _layout as layout
from tensortap.format._documents import SeqRuns, decode_end, decode_session, encode_json
from tensortap.format._index import decode_index
from tensortap.storage._base import Store


@dataclass(frozen=True)
class SessionStart:
    """Where a new session of a worker begins."""

    index: int
    #: The last global step the worker had published (None: nothing, a first session).
    last_step: int | None
    #: This session's first global step number.
    global_step: int
    #: Each mode's next step number (modes the worker has counted steps in).
    mode_steps: dict[ModeKeys, int] = field(default_factory=dict)
    #: The segment numbers of the indexes the earlier sessions published, as ``(first,
    #: last)`` runs (what this session's end marker says the worker published, with its own);
    #: None when they outgrew the runs an end marker holds.
    published: tuple[tuple[int, int], ...] | None = ()

    @property
    def resumed(self) -> bool:
        return self.last_step is not None


def read_history(store: Store, worker: str) -> SessionStart:
    """Where a new session of ``worker`` starts, from what its earlier sessions left; raises
    ResumeRefused when a part of that history cannot be read."""
    keys = [k for k in store.list(layout.index_prefix(worker)) if k.endswith(layout.INDEX_SUFFIX)]
    last_step: int | None = None
    next_mode: dict[ModeKeys, int] = {}
    seen: set[str] = set()  # sessions that published, by id
    published = SeqRuns()
    for key, raw in zip(keys, _get_each(store, keys), strict=True):
        try:
            if raw is None:
                raise FormatError("it was listed but could not be read")
            index = decode_index(raw, f"index {key}")
        except (FormatError, StorageError) as exc:
            raise ResumeRefused(
                f"tensortap cannot tell where the steps of {worker} in the trial at "
                f"{store.location} end: {key} is unreadable ({exc}). A new session could write "
                "over steps it holds. Write this run to a new out_dir (or move the damaged "
                "index out of the trial, accepting that its steps are lost)"
            ) from exc
        seen.add(str(index.header.get("session")))
        seen.update(part.session for part in index.parts)  # a merged segment's (compaction)
        seq = layout.seq_of(key)
        if seq is not None:
            published.add(seq)
        for entry in index.steps:
            global_step, mode, mode_step = int(entry[0]), ModeKeys(int(entry[1])), int(entry[2])
            last_step = global_step if last_step is None else max(last_step, global_step)
            next_mode[mode] = max(next_mode.get(mode, 0), mode_step + 1)
    next_global = 0 if last_step is None else last_step + 1
    end = _end_marker(store, worker)
    if end is not None:  # a closed session also counted the steps it did not save
        counted = end.get("last_global_step")
        if isinstance(counted, int) and counted > next_global:
            next_global = counted
        modes = end.get("last_mode_steps")
        for name, step in (modes if isinstance(modes, dict) else {}).items():
            if name in ModeKeys.__members__ and isinstance(step, int) and step > 0:
                mode = ModeKeys[name]
                next_mode[mode] = max(next_mode.get(mode, 0), step)
    runs = published.runs()
    return SessionStart(
        _next_index(store, worker, seen),
        last_step,
        next_global,
        next_mode,
        None if runs is None else tuple((first, last) for first, last in runs),
    )


def _get_each(store: Store, keys: list[str]) -> list[bytes | None]:
    try:
        return list(store.get_many(keys))
    except (KeyError, StorageError):
        out: list[bytes | None] = []
        for key in keys:
            try:
                out.append(store.get(key))
            except (KeyError, StorageError):
                out.append(None)
        return out


def _end_marker(store: Store, worker: str) -> dict[str, Any] | None:
    """The end marker the last session left (None if it left none, or one that is damaged: it
    only ever moves the start later, so without it the published steps decide)."""
    key = layout.end_key(worker)
    try:
        return decode_end(store.get(key), key)
    except (KeyError, FormatError, StorageError):
        return None


def _next_index(store: Store, worker: str, published_by: set[str]) -> int:
    """The number of this session: after every recorded session, and after the sessions that
    published without a record (written by a tensortap from before sessions were recorded)."""
    recorded: set[str] = set()
    highest = -1
    keys = [k for k in store.list(layout.sessions_prefix(worker)) if k.endswith(".json")]
    for key, raw in zip(keys, _get_each(store, keys), strict=True):
        number = layout.seq_of(key)
        highest = max(highest, -1 if number is None else number)  # a damaged one took it too
        try:
            if raw is not None:
                recorded.add(decode_session(raw, key)["session"])
        except FormatError:
            pass
    return max(highest + 1, len(recorded | published_by))


def session_record(
    info: dict[str, Any], start: SessionStart, updates: dict[str, Any] | None = None
) -> bytes:
    """The session record of a writer (``info``: its worker info) starting at ``start``."""
    body = {
        "worker": info["worker"],
        "index": start.index,
        "session": info["session"],
        "started": info["started"],
        "host": info["host"],
        "pid": info["pid"],
        "resumed_from_step": start.last_step,
        "mode_steps": {mode.name: step for mode, step in start.mode_steps.items() if step > 0},
        "step_source": None,
        "rolled_back": [],
    }
    body.update(updates or {})
    return encode_json("session", body)
