"""What the reader knows of one worker of a trial (:class:`WorkerState`), and the order workers
are listed in (:func:`natural_key`: worker_2 before worker_10)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tensortap.core._modes import ModeKeys


@dataclass
class WorkerState:
    """What the reader knows of one worker."""

    name: str
    num_workers: int = 1
    info_read: bool = False  # its worker.json (written just after the worker's directory)
    framework: str | None = None  # the framework whose hook wrote it, if it said
    end: dict[str, Any] | None = None
    complete: bool = False  # end marker seen, and a listing made after it
    last_index_key: str | None = None
    last_collections_key: str | None = None
    steps: set[int] = field(default_factory=set)
    max_step: int = -1
    dropped: list[list[int]] = field(default_factory=list)
    hook_errors: int = 0  # internal hook errors, as of the latest segment
    last_hook_error: str | None = None
    # (mode, mode_step) -> global step, and back
    mode_to_global: dict[tuple[ModeKeys, int], int] = field(default_factory=dict)
    global_to_mode: dict[int, tuple[ModeKeys, int]] = field(default_factory=dict)
    wall_time: dict[int, float] = field(default_factory=dict)
    # each writing session's first and last published global step, by session id, in the
    # order they first published; and the session records read so far, by index
    session_spans: dict[str, list[int]] = field(default_factory=dict)
    session_docs: dict[int, dict[str, Any]] = field(default_factory=dict)
    last_session_key: str | None = None
    # the segment numbers of its listed indexes (read or not), the segments each session
    # published (by id, from the indexes read) and how many listed indexes could not be read:
    # compared with what its end marker says was published
    index_seqs: set[int] = field(default_factory=set)
    session_segments: dict[str, int] = field(default_factory=dict)
    unreadable_indexes: int = 0
    # segment number -> its Segment's id in TrialIndex.segments (what was taken in), and the
    # merged segments read (compaction: each replaces some, read from it once each)
    ingested: dict[int, int] = field(default_factory=dict)
    merged_seqs: set[int] = field(default_factory=set)

    def has_passed(self, global_step: int) -> bool:
        """True once this worker has published a later step (or ended after this one)."""
        return self.max_step >= global_step


def natural_key(name: str) -> tuple[Any, ...]:
    """Sort worker_2 before worker_10."""
    head = name.rstrip("0123456789")
    tail = name[len(head) :]
    return (head, int(tail) if tail else -1, name)
