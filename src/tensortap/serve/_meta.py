"""What the runs list shows of a run, from the run's small documents only: the job's
``job.json`` and ``summary.json``, and the trial's worker info, end markers and session records.

Nothing here reads a segment index or takes the lock that a run's data reads hold (see
:mod:`tensortap.serve._data`), so the runs list answers at once while a long run is being read
ahead; the last step of a run still being written is the one its data reads last found
(published by them lock-free, in :attr:`RunCache.last_step`), and none before they read it.
"""

from __future__ import annotations

import time
from typing import Any

from tensortap.diagnosis import job_diagnosis
from tensortap.exceptions import FormatError, StorageError, TensortapError
from tensortap.format import _layout as layout
from tensortap.format._documents import decode_end, decode_json, decode_session_at
from tensortap.jobs._live import by_gravity, steps_judged
from tensortap.serve._catalog import Run
from tensortap.storage._base import Store
from tensortap.trials._config import first_config
from tensortap.trials._sessions import recorded_sessions, session_time
from tensortap.trials._worker_state import natural_key

#: A guard's trip in a session's events (``tensortap.pytorch._guard.TRIP_EVENT``: the server
#: imports no torch).
TRIP_EVENT = "guard_trip"
#: What a rollback decided (``tensortap.healing._rollback``), at its bad step's global step.
DECISION_EVENT = "rollback_decision"

#: How long a run's metadata is reused before its documents are read again: a run being
#: written, and a bare trial that ended (read again, less often: a new session may resume
#: it; on S3 each read is a few requests per run).
META_SECS = 1.0
ENDED_META_SECS = 10.0


def rules(run: Run, summary: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Each rule's latest status from the job's summary (read here unless given), gravest
    first; none for a bare trial."""
    if run.job is None:
        return []
    if summary is None:
        summary = run.job.summary() or {}  # decoded; {} when it cannot be read
    return [
        {
            **r,
            "name": r.get("RuleConfigurationName"),
            "status": r.get("RuleEvaluationStatus"),
            "steps_judged": steps_judged(r),  # "no step judged" for NoData, never a count
        }
        for r in by_gravity(summary.get("rules", []))
    ]


def _meta_store(run: Run) -> Store:
    """The run's own store for its small documents (one client for an ``s3://`` run), apart
    from the one its data reads use."""
    from tensortap.storage._resolve import open_store

    if run.meta_store is None:
        run.meta_store = open_store(run.location)
    return run.meta_store


def _get(store: Store, key: str) -> bytes | None:
    try:
        return store.get(key)
    except KeyError:
        return None


def trial_meta(run: Run) -> dict[str, Any]:
    """The trial's ``ended`` (every worker wrote its end marker), ``last_step`` (from the end
    markers, else what the run's data reads last found), ``started`` (its first session's
    start) and ``problems`` (what the end markers report, and the damaged parts its data reads
    found), from the small documents only."""
    store = _meta_store(run)
    workers = [w for w in store.list_dir(layout.WORKERS_PREFIX) if layout.is_plain_name(w)]
    reader = run.cache.series
    problems: list[str] = [*run.cache.problems, *(reader.problems if reader is not None else [])]
    ended, last_step, started = bool(workers), run.cache.last_step, None
    for worker in workers:
        raw = _get(store, layout.end_key(worker))
        if raw is None:
            ended = False
        else:
            try:
                end = decode_end(raw, f"end marker of {worker}")
            except FormatError as exc:
                problems.append(f"unreadable {layout.end_key(worker)}: {exc}")
                end = {}
            last = end.get("last_global_step")
            if isinstance(last, int) and last > 0 and (last_step is None or last - 1 > last_step):
                last_step = last - 1  # the end marker holds the step after the last
            status = end.get("status") or {}
            if status.get("errors"):
                problems.append(
                    f"{worker}: {status['errors']} writer errors, {status.get('steps_lost', 0)} "
                    f"steps lost; last: {status.get('last_error')}"
                )
            if end.get("internal_errors"):
                problems.append(
                    f"{worker}: {end['internal_errors']} internal hook errors; last: "
                    f"{end.get('last_internal_error')}"
                )
        sessions = [k for k in store.list(layout.sessions_prefix(worker)) if k.endswith(".json")]
        raw = _get(store, sessions[0]) if sessions else None
        if raw is not None:
            try:
                first = decode_session_at(raw, sessions[0])
            except FormatError:
                continue  # said by the data reads, which read every record
            when = session_time(first.get("started"))
            if when is not None and (started is None or when < started):
                started = when
    return {
        "ended": ended,
        "last_step": last_step,
        "started": started,
        "problems": list(dict.fromkeys(problems)),
    }


def run_config(run: Run) -> tuple[dict[str, Any], list[str]]:
    """The run's configuration (``trial.config()``, from the small configuration documents
    only), and the documents that could not be read."""
    store = _meta_store(run)
    workers = [w for w in store.list_dir(layout.WORKERS_PREFIX) if layout.is_plain_name(w)]
    problems: list[str] = []

    def problem(key: str, exc: BaseException) -> None:
        problems.append(f"unreadable {key}: {exc}")

    return first_config(store, sorted(workers, key=natural_key), problem), problems


def _number(value: Any) -> float | int | None:
    """A configuration's number, for the runs list to show and sort by (None otherwise)."""
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def resumed_sessions(run: Run) -> list[dict[str, Any]]:
    """Each session that resumed the run (a restarted script, a trainer resumed from a
    checkpoint, a rollback's branch), from its session record, at the first global step after
    the one it resumed from: marked on the curves (a branch is drawn from where it forks: its
    ``branch_global_step``). Reused for :data:`META_SECS`."""
    return _sessions(run)[0]


def guard_trips(run: Run) -> list[dict[str, Any]]:
    """Each step a guard tripped on (``tensortap.pytorch.Guard``: its update skipped, or only
    recorded), from the sessions' events: ``{"global_step", "reason", "skipped", "session",
    "worker"}``,
    marked on the curves at that step. Reused for :data:`META_SECS`."""
    return _sessions(run)[1]


def _sessions(run: Run) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    cached = run.sessions
    now = time.monotonic()
    if cached is not None and now - cached[0] < META_SECS:
        return cached[1], cached[2]
    out: list[dict[str, Any]] = []
    trips: list[dict[str, Any]] = []
    if run.refused is None:
        store = _meta_store(run)
        for worker in store.list_dir(layout.WORKERS_PREFIX):
            if not layout.is_plain_name(worker):
                continue
            records: dict[int, dict[str, Any]] = {}
            for key in store.list(layout.sessions_prefix(worker)):
                raw = _get(store, key) if key.endswith(".json") else None
                try:
                    doc = None if raw is None else decode_session_at(raw, key)
                except FormatError:
                    continue  # said by the data reads, which read every record
                if doc is not None:
                    trips.extend(_trips(doc, worker))
                    records[int(doc["index"])] = doc
            for session in recorded_sessions(worker, records):
                if session.resumed_from_step is None:
                    continue
                out.append(
                    {
                        "worker": worker,
                        "index": session.index,
                        "id": session.id,
                        "started": session_time(session.started),
                        "host": session.host,
                        "pid": session.pid,
                        "resumed_from_step": session.resumed_from_step,
                        "mode_steps": dict(session.mode_steps),
                        "step_source": session.step_source,
                        "rolled_back": [list(r) for r in session.rolled_back],
                        "step": session.resumed_from_step + 1,
                        "branch_of": session.branch_of,
                        "branch_step": session.branch_step,
                        "branch_mode": session.branch_mode,
                        "branch_global_step": session.branch_global_step,
                        "branch_reason": session.branch_reason,
                    }
                )
    run.sessions = (now, out, trips)
    return out, trips


def _trips(doc: dict[str, Any], worker: str) -> list[dict[str, Any]]:
    """The guard's trips and the rollbacks' decisions a session record holds (decoded: each
    event is a dict with a kind; its fields are checked here, an odd one is left out)."""
    out = []
    for event in doc.get("events") or []:
        fields = event.get("fields")
        kind = event.get("kind")
        if kind not in (TRIP_EVENT, DECISION_EVENT) or not isinstance(fields, dict):
            continue
        at = fields.get("at")
        if isinstance(at, bool) or not isinstance(at, int) or at < 0:
            continue
        reason = fields.get("reason")
        mark: dict[str, Any] = {
            "global_step": at,
            "reason": reason[:300] if isinstance(reason, str) else "",
            "skipped": fields.get("skipped") is True,
            "session": doc.get("index"),
            "worker": worker,
        }
        if kind == DECISION_EVENT:  # what a rollback decided, from what evidence
            mark["decision"] = " ".join(
                str(fields[k])[:80]
                for k in ("action", "evidence", "layer", "remedy")
                if isinstance(fields.get(k), str)
            )
            # apart, for the page's list of decisions (the report's table has the same)
            for k in ("action", "evidence", "layer", "remedy"):
                value = fields.get(k)
                mark[k] = value[:80] if isinstance(value, str) else None
            step = fields.get("step")
            mark["step"] = step if isinstance(step, int) and not isinstance(step, bool) else None
        out.append(mark)
    return out


def overview(run: Run) -> dict[str, Any]:
    """What the runs list shows of a run: status, rule outcomes, start time, last step, and
    what went wrong saving it; reused for :data:`META_SECS`."""
    cached = run.meta
    now = time.monotonic()
    if cached is not None:
        ended = cached[1]["status"] == "Ended"  # a bare trial whose workers all ended
        if now - cached[0] < (ENDED_META_SECS if ended else META_SECS):
            return cached[1]
    started: float | None = None
    status = "Unknown"
    summary: dict[str, Any] = {}
    unread: list[str] = []  # what of the job's own documents could not be read, and why
    if run.job is not None:
        try:
            document = run.job.read_summary()
        except (TensortapError, OSError) as exc:
            document, status = None, "Unreadable"
            unread.append(f"the job's summary.json cannot be read: {exc}")
        if document is not None:
            summary = document.summary
            unread += document.problems
        if status != "Unreadable":  # decoded: a string, none yet, or none it could keep
            status = "Starting" if document is None else summary.get("status", "Unreadable")
        try:
            created = run.job.job().get("created")
        except (TensortapError, OSError) as exc:
            created = None
            unread.append(f"the job's job.json cannot be read: {exc}")
        started = None if created is None else float(created)
    last_step = None
    problems: list[str] = []
    config: dict[str, Any] = {}
    if run.refused is not None:
        problems = [run.refused]
    else:
        try:
            trial = trial_meta(run)
            config, unreadable = run_config(run)
        except (TensortapError, StorageError, OSError) as exc:
            problems = [str(exc)]
        else:
            last_step, problems = trial["last_step"], [*trial["problems"], *unreadable]
            if run.job is None:
                status = "Ended" if trial["ended"] else "Running"
            if started is None:
                started = trial["started"]
    found = rules(run, summary)  # the summary read once for status and rules
    out = {
        "id": run.id,
        "name": run.name,
        "kind": "job" if run.job is not None else "trial",
        "location": run.shown or run.location,
        "status": status,
        "started": started,
        "last_step": last_step,
        "rules": [
            {k: r.get(k) for k in ("name", "status", "severity", "gravest_step", "evaluated")}
            for r in found
        ],
        "problems_found": sum(r.get("severity") == "problem" for r in found),
        "diagnosis": None if run.job is None else job_diagnosis(summary).to_dict(),
        "problems": [*run.source_problems, *unread, *problems],
        # of the run's configuration, what the runs list shows and sorts by (the run's page
        # gets all of it: serve._data.detail)
        "learning_rate": _number(config.get("learning_rate")),
        "batch_size": _number(config.get("batch_size")),
    }
    run.meta = (now, out)  # one assignment: a reader sees the old pair or the new one
    return out


__all__ = [
    "DECISION_EVENT",
    "ENDED_META_SECS",
    "META_SECS",
    "TRIP_EVENT",
    "guard_trips",
    "overview",
    "resumed_sessions",
    "rules",
    "run_config",
    "trial_meta",
]


def saved_names(store: Store, collections: tuple[str, ...]) -> dict[str, set[str]] | None:
    """The tensor names each of ``collections`` holds, from every worker's newest collections
    document (small; no index read); None when one cannot be read (the caller reads the
    trial instead)."""
    found: dict[str, set[str]] = {name: set() for name in collections}
    try:
        for worker in store.list_dir(layout.WORKERS_PREFIX):
            if worker.startswith(".") or not layout.is_plain_name(worker):
                continue
            keys = [k for k in store.list(layout.collections_prefix(worker)) if k.endswith(".json")]
            if not keys:
                continue
            doc = decode_json(store.get(keys[-1]), "collections", keys[-1])
            for entry in doc.get("collections") or []:
                name = entry.get("name") if isinstance(entry, dict) else None
                if name in found:
                    names = entry.get("tensor_names") or []
                    found[name].update(n for n in names if isinstance(n, str))
    except (KeyError, FormatError, StorageError, AttributeError, TypeError):
        return None
    return found
