"""Completeness from the writer's own record: what a worker's end marker says was published,
compared with the indexes the trial holds.

A writer writes its end marker after its last index, with the segment numbers of every index
the worker published (``published_segments``, its earlier sessions' included) and how many its
last session published (``status.segments_published``). A reader reads the marker before it
lists the indexes, so every index the marker names is listed by then; one that is not was
deleted (or never arrived), and its steps would otherwise be lost without a word. A listed
index that cannot be read (a FIFO, a symlink, a damaged one) is a problem of its own already.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator
from typing import Any

from tensortap.format import _layout as layout
from tensortap.trials._worker_state import WorkerState

#: Missing indexes named one by one; the rest are counted in one more problem.
NAMED = 8


def missing_segments(state: WorkerState, end: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """``(key, reason)`` of each published index of the worker (from its checked end marker)
    that the trial does not list; work in the size of the marker and the listing."""
    claimed = end.get("published_segments")
    if isinstance(claimed, list):
        yield from _missing_from_runs(state, claimed)
        return
    # an end marker from before published_segments: its last session's count of segments
    session = end.get("session")
    count = (end.get("status") or {}).get("segments_published")
    if not isinstance(session, str) or not isinstance(count, int):
        return
    found = state.session_segments.get(session, 0) + state.unreadable_indexes
    if found < count:
        yield (
            layout.index_prefix(state.name),
            f"{count - found} of the {count} segments its last session ({session[:64]}) "
            "published are missing: the worker's end marker counts them, the trial holds no "
            "index of them (deleted); their steps are lost",
        )


def _missing_from_runs(state: WorkerState, runs: list[list[int]]) -> Iterator[tuple[str, str]]:
    listed = sorted(state.index_seqs)
    reason = (
        "missing: the worker's end marker says this index was published, and the trial does "
        "not hold it (deleted); the steps of its segment are lost"
    )
    named = unnamed = 0
    for first, last in runs:
        lo, hi = bisect.bisect_left(listed, first), bisect.bisect_right(listed, last)
        gone = (last - first + 1) - (hi - lo)
        if gone <= 0:
            continue
        seq, at = first, lo
        while named < NAMED and seq <= last:  # each pass names one or passes a listed one
            if at < hi and listed[at] == seq:
                at += 1
            else:
                yield layout.index_key(state.name, seq), reason
                named += 1
                gone -= 1
            seq += 1
        unnamed += gone
    if unnamed:
        yield (
            layout.index_prefix(state.name),
            f"{unnamed} more indexes the worker's end marker says were published are missing "
            "(deleted); the steps of their segments are lost",
        )
