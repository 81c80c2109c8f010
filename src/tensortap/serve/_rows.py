"""The dashboard's runs table: one row per run, the rows of ``tensortap jobs``
(:mod:`tensortap.jobs._runs`: read, sorted, filtered and grouped there, never again here).

A row is read from the job's documents and the trial's series and configuration documents
(never a segment index, never under a run's locks), and kept: a finished job's row until its
``summary.json`` or ``events.jsonl`` changes, a live run's for :data:`ROW_SECS`. One answer
reads at most :data:`MAX_ROW_READS` trials; a run past that keeps its last row, or (none
yet) a row of its job's documents only, marked ``pending``, filled by a later answer: the
list never waits for many trials at once. The server's read-ahead reads the rows of the
runs it finds before their charts (:func:`tensortap.serve._server._warm`).
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections import deque
from collections.abc import Sequence
from typing import Any

from tensortap.jobs._runs import (
    RUNNING,
    RunRow,
    filter_rows,
    group_rows,
    hyperparameter_keys,
    run_row,
    sort_rows,
    trial_row,
)
from tensortap.serve import _meta as meta
from tensortap.serve._catalog import Run

log = logging.getLogger(__name__)

#: How long a live run's row is reused before it is read again.
ROW_SECS = 2.0
#: How long a bare trial's row is reused once all its workers ended (a new session may
#: resume it: read again, less often).
ENDED_ROW_SECS = 10.0
#: The most trials one answer reads; the other rows are the last ones read, or pending.
MAX_ROW_READS = 32
#: The default order: the newest run first.
DEFAULT_SORT = "-started"
#: The longest sort key, group key or filter text taken from a request.
MAX_QUERY = 200


def _stamp(run: Run) -> tuple[int, ...]:
    """What says a job's row may have changed: its summary's and events' sizes and times
    (none for a bare trial)."""
    if run.job is None:
        return ()
    out: list[int] = []
    for path in (run.job.summary_file, run.job.events_file):
        try:
            found = os.stat(path)
            out += [found.st_mtime_ns, found.st_size]
        except OSError:
            out += [-1, -1]
    return tuple(out)


def _fresh(run: Run, stamp: tuple[int, ...], now: float) -> RunRow | None:
    """The run's row kept from an earlier answer while it is still true; else None."""
    held = run.row
    if held is None or not held[3]:
        return None
    when, was, row, _ = held
    if run.job is not None:
        fresh = was == stamp and (row.status not in RUNNING or now - when < ROW_SECS)
    else:
        fresh = now - when < (ENDED_ROW_SECS if row.status == "Ended" else ROW_SECS)
    return row if fresh else None


def _read(run: Run, trial: bool) -> RunRow:
    """The run's row; its trial read when ``trial`` (never for a run whose trial is refused)."""
    try:
        if run.job is not None:
            row = run_row(run.job, trial=trial and run.refused is None)
        elif trial and run.refused is None:
            ended = meta.trial_meta(run)["ended"]  # as the runs list says it
            row = trial_row(run.name, run.location, "Ended" if ended else "Running")
        else:
            row = RunRow(run.name, run.location, "Unknown", "unknown")
    except Exception as exc:  # one run never takes the table down for everyone
        log.exception("the runs table left out what it could not read of %s", run.name)
        row = RunRow(run.name, run.location, "Unreadable", "unreadable")
        row.problems.append(f"this run cannot be shown ({type(exc).__name__}: {exc})")
    if run.refused is not None:
        row.problems.insert(0, run.refused)
    row.problems[:0] = run.source_problems
    if run.shown and run.shown != run.location:  # an imported run is named by its source
        row.path = run.shown
    return row


def row_of(run: Run, reads: list[int], now: float) -> tuple[RunRow, bool]:
    """The run's row and whether it is pending (its trial not read yet); reads its trial
    while ``reads[0]`` (the answer's budget, spent here) is above 0."""
    stamp = _stamp(run)
    kept = _fresh(run, stamp, now)
    if kept is not None:
        return kept, False
    if reads[0] > 0:
        reads[0] -= 1
        row = _read(run, trial=True)
        run.row = (now, stamp, row, True)  # one assignment: a reader sees the old or the new
        return row, False
    held = run.row
    if held is not None and held[3]:
        return held[2], False  # the last row read, until a later answer reads it again
    if held is not None and held[1] == stamp and now - held[0] < ROW_SECS:
        return held[2], True  # pending still: its job's documents are as they were
    row = _read(run, trial=False)
    run.row = (now, stamp, row, False)
    return row, True


def _value(value: Any) -> Any:
    """A value as JSON takes it (a number that is not finite as its text)."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def table(
    runs: Sequence[Run],
    sort: str | None = None,
    text: str | None = None,
    group: str | None = None,
    reads: int = MAX_ROW_READS,
) -> dict[str, Any]:
    """The runs table's answer: ``rows`` (filtered by ``text``, sorted by ``sort``: a column
    or a hyperparameter, ``-key`` descending; the newest first by default), ``groups`` by
    ``group`` (a hyperparameter or column: each group's runs, verdicts, mean and spread of the
    last loss, and its rows' ids in order), ``keys`` (what the runs may be grouped by),
    ``total`` runs, ``pending`` (rows whose trial was not read yet) and ``read`` (trials read
    for this answer)."""
    for what, given in (("sort", sort), ("filter", text), ("group", group)):
        if given is not None and len(given) > MAX_QUERY:
            raise ValueError(f"{what} takes at most {MAX_QUERY} characters, got {len(given)}")
    now = time.monotonic()
    budget = [reads]
    found = [(run, *row_of(run, budget, now)) for run in runs]
    by_row = {id(row): (run, pending) for run, row, pending in found}
    rows = sort_rows(filter_rows([row for _, row, _ in found], text or None), sort or DEFAULT_SORT)

    def shown(row: RunRow) -> dict[str, Any]:
        run, pending = by_row[id(row)]
        out = row.to_dict()
        del out["rules"]  # the verdict says what they found; the run's page lists them
        out.update(
            id=run.id,
            kind="job" if run.job is not None else "trial",
            verdict_text=row.verdict_text,
            pending=pending,
            hyperparameters={k: _value(v) for k, v in row.hyperparameters.items()},
        )
        if group:
            out["group_value"] = _value(row.value(group))
        return out

    shown_rows = [shown(row) for row in rows]
    groups = None
    if group:
        waiting: dict[str, deque[str]] = {}
        for row, out in zip(rows, shown_rows, strict=True):
            waiting.setdefault(row.name, deque()).append(out["id"])
        groups = [
            {
                **g.to_dict(),
                "value": _value(g.value),
                "key": group,
                "ids": [waiting[name].popleft() for name in g.names],
            }
            for g in group_rows(rows, group)
        ]
    return {
        "rows": shown_rows,
        "groups": groups,
        "keys": hyperparameter_keys(row for _, row, _ in found),
        "total": len(found),
        "pending": sum(pending for _, _, pending in found),
        "read": reads - budget[0],
        "sort": sort or DEFAULT_SORT,
    }


__all__ = ["DEFAULT_SORT", "ENDED_ROW_SECS", "MAX_ROW_READS", "ROW_SECS", "row_of", "table"]
