"""What the dashboard's pages ask of a run, as JSON-ready dicts, cached per run so that
following a live run reads only what is new.

Curves come from the run's series reader (:mod:`tensortap.serve._series`), never from a walk of
its steps: each line at most :data:`~tensortap.serve._series.BUCKETS` buckets of min, max and
last, so a spike is never lost and an answer is small whatever the run's length; NaN and Inf
travel as runs of steps ("gaps"), never as missing points. A page following a run sends the
last step it holds (``after``) and gets only what is newer. The layer-health heat map,
TensorPlot and embeddings read the trial itself (a few steps each).

Reads of a run's series hold ``run.lock``, reads of its trial ``run.trial_lock``; the runs
list takes neither (see :mod:`serve.meta`).
"""

from __future__ import annotations

import math
import sys
import time
from collections import deque
from collections.abc import Iterator
from typing import Any

import numpy as np

from tensortap.core._downsample import minmax_buckets
from tensortap.core._memory_budget import PY_OBJECT_BYTES
from tensortap.core._modes import ModeKeys
from tensortap.core._own_series import is_own_series
from tensortap.core._vitals import ALL_VITALS, Vital
from tensortap.exceptions import InvalidConfigError, StorageError, TensortapError
from tensortap.serve._catalog import REPORT, Run
from tensortap.serve._meta import guard_trips, overview, resumed_sessions, rules, run_config
from tensortap.serve._series import BUCKETS, SeriesKey, buckets, open_reader
from tensortap.trials._index import natural_key
from tensortap.trials._series import SeriesColumns, SeriesReader
from tensortap.trials._trial import Trial, create_trial

TRIAL_REFRESH_SECS = 0.5
MAX_SERIES = 200  # charts drawn per curves request (and listed per page), at most
#: Values read as saved (not bucketed by the series path) when an answer holds no more: short
#: lines keep their extremes at their own steps and every NaN/Inf step (~0.1 s of reading).
#: It bounds what that read holds (3.2 MB), below the series reader's own bound on a bucketed
#: read (:data:`~tensortap.trials._series.BUCKET_READ_VALUES`).
RAW_POINTS = 200_000


class TrialRefused(TensortapError, PermissionError):
    """A run's trial that the dashboard does not read (it lies outside the places served)."""


def trial_of(run: Run, records: bool = True) -> Trial:
    """The run's trial, opened once and refreshed at most every half second (closed by the
    catalog once no page has asked for it for a while). With ``records=False`` it may be an
    outline (``create_trial(..., records=False)``: steps, names, series, never the index's
    rows that locate every saved value, 64 bytes a value: 0.9 GB of a run of 100,000 steps x
    100 scalars); asked for with ``records``, an outline kept is replaced by the trial read
    whole. The caller holds ``run.trial_lock``."""
    if run.refused is not None:
        raise TrialRefused(run.refused)
    cache, now = run.cache, time.monotonic()
    cache.used = now
    if cache.trial is not None and records and not cache.trial.records:
        cache.trial.close()
        cache.trial = None
    if cache.trial is None:
        cache.trial, cache.refreshed = create_trial(run.location, records=records), now
    elif now - cache.refreshed >= TRIAL_REFRESH_SECS:
        cache.trial.refresh()
        cache.refreshed = now
    cache.problems = cache.trial.problems()  # published for the runs list
    return cache.trial


#: A bare trial's report judges its rules only over at most this many saved steps (the
#: recommended rules took 27-30 s over 10^5 steps, per request); over more, the page says the
#: rules were not run. A job's report shows what its rules found beside training.
REPORT_JUDGE_STEPS = 5_000


def report_page(run: Run) -> str:
    """The run's static report (``tensortap report``'s page) over the run's own trial
    (:func:`trial_of`; an outline, as ``tensortap report`` reads it, unless the page reads
    saved values: layer health, activations, rules to run): rules judged within
    :data:`REPORT_JUDGE_STEPS`, lines drawn bucketed. A bare trial's page is kept until its
    trial changes (its rules are judged once per change, not per request); a job's is made
    again (what its rules found changes beside the trial). The caller holds
    ``run.trial_lock``."""
    from tensortap.report._training import reads_values, training_report

    trial = trial_of(run, records=False)
    if not trial.records and reads_values(trial, run.job is not None, None, REPORT_JUDGE_STEPS):
        trial = trial_of(run)
    steps = trial.steps()
    key = (len(steps), steps[-1] if steps else None, len(run.cache.problems))
    kept = run.cache.answers.get(REPORT)
    if run.job is None and kept is not None and kept[0] == key:
        return str(kept[1])
    page = training_report(
        trial, run.job, judge_steps=REPORT_JUDGE_STEPS, location=run.shown or run.location
    )
    if run.job is None:
        run.cache.answers.put(REPORT, (key, page), sys.getsizeof(page) + 256)
    return page


def reader_of(run: Run) -> SeriesReader:
    """The run's series reader (see :mod:`tensortap.serve._series`), opened once and asked for
    what is new at most every half second; what it found is published for the runs list. The
    caller holds ``run.lock``."""
    if run.refused is not None:
        raise TrialRefused(run.refused)
    cache, now = run.cache, time.monotonic()
    cache.used = now
    if cache.series is None:
        cache.series, cache.series_refreshed = open_reader(run.location, cache.budget), now
        cache.series_version += 1
    elif now - cache.series_refreshed >= TRIAL_REFRESH_SECS:
        if cache.series.refresh():
            cache.series_version += 1
        cache.series_refreshed = now
    reader = cache.series
    last = reader.last_step
    cache.last_step = last if last >= 0 else None
    return reader


#: The vital signs' charts come first, in this order (``vitals/lr/<k>`` after ``vitals/lr``).
_VITAL_RANK = {name: rank for rank, name in enumerate(ALL_VITALS)}


def _vital_rank(name: str) -> float:
    """Where a chart of ``name`` goes among the vital signs (after them: not one)."""
    rank = _VITAL_RANK.get(name)
    if rank is not None:
        return rank
    if name.startswith(Vital.LR + "/"):
        return _VITAL_RANK[Vital.LR] + 0.5
    return len(_VITAL_RANK)


def charts(run: Run) -> list[tuple[str, str]]:
    """Every chart of the run, as (tensor, statistic), in the order shown: the vital signs
    first (the loss of every step, the gradient norm, ... in :data:`ALL_VITALS`' order), then
    raw values (losses first, then metrics and scalars), then reductions, each by name, and
    last tensortap's own series (``core._own_series``); listed again only when the reader found
    something new. The caller holds ``run.lock``."""
    reader = reader_of(run)
    cache = run.cache
    if cache.charts_version != cache.series_version:
        listed = cache.keys = reader.keys()  # listed once per change (100k series: ~0.5 s)
        found = {(k.tensor, k.statistic) for k in listed}
        whole = {name for name, statistic in found if statistic == "value"}
        cache.own = {c for c in found if is_own_series(c[0], c[1], whole)}
        cache.charts = sorted(
            found,
            key=lambda c: (
                c in cache.own,  # tensortap's bookkeeping last, in its own group
                _vital_rank(c[0]) if c[1] == "value" else len(_VITAL_RANK),
                c[1] != "value",
                "loss" not in c[0].casefold(),  # the losses first, where a page opens
                natural_key(c[0]),
                natural_key(c[1]),
            ),
        )
        cache.charts_version = cache.series_version
    return cache.charts


def _chosen(
    run: Run, names: list[str] | None, statistics: list[str] | None, match: str | None
) -> list[tuple[str, str]]:
    """The charts asked for: by name (with each name's statistic when ``statistics`` pairs
    with ``names``, else all of the name's), else those whose name holds ``match``
    (case-insensitive, plain text), else all."""
    listed = charts(run)
    if names:
        if statistics:
            if len(statistics) != len(names):
                raise InvalidConfigError(
                    f"stat pairs with name: one per name, got {len(names)} names and "
                    f"{len(statistics)} statistics; leave stat out for all of each name's"
                )
            pairs = set(zip(names, statistics, strict=True))
            return [c for c in listed if c in pairs]
        wanted = set(names)
        return [c for c in listed if c[0] in wanted]
    if match:
        needle = match.casefold()
        return [c for c in listed if needle in c[0].casefold()]
    return listed


def _limit(limit: object, most: int, what: str) -> int:
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= most:
        raise InvalidConfigError(
            f"limit is the number of {what}, 1..{most}, got {limit!r}; ask for more by name "
            "(name=...), by a part of their name (match=...) or the next page (offset=...)"
        )
    return limit


def series_list(
    run: Run, match: str | None = None, offset: int = 0, limit: int = MAX_SERIES
) -> dict[str, Any]:
    """The run's charts (``name``, ``statistic`` and the ``modes`` drawn) from ``offset``,
    at most ``limit`` (:data:`MAX_SERIES`) of those whose name holds ``match``; ``total`` says
    how many match, so that the page can offer the next ones."""
    limit = _limit(limit, MAX_SERIES, "charts listed")
    if not isinstance(offset, int) or offset < 0:
        raise InvalidConfigError(f"offset is a chart's position, 0 or more, got {offset!r}")
    chosen = _chosen(run, None, None, match)
    page = chosen[offset : offset + limit]
    modes: dict[tuple[str, str], set[str]] = {}
    wanted = set(page)
    for key in run.cache.keys:
        if (key.tensor, key.statistic) in wanted:
            modes.setdefault((key.tensor, key.statistic), set()).add(key.mode.name)
    return {
        "charts": [
            {
                "name": n,
                "statistic": s,
                "modes": sorted(modes.get((n, s), ())),
                "own": (n, s) in run.cache.own,
            }
            for n, s in page
        ],
        "total": len(chosen),
        "offset": offset,
        "last_step": run.cache.last_step,
    }


def json_number(value: float | None) -> float | str | None:
    """JSON has no NaN: a non-finite value travels as "nan", "inf" or "-inf"."""
    if value is None or math.isfinite(value):
        return value
    return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")


def _line(key: SeriesKey, got: dict[str, np.ndarray]) -> dict[str, Any]:
    """One series' buckets as the points a chart draws: a bucket of one value is that point,
    a longer one its minimum and maximum (in the order that ends nearer its last value), so a
    spike is never lost; buckets of NaN or Inf travel as runs of steps ("gaps")."""
    first, last_step = got["first_step"], got["last_step"]
    count, low, high, last = got["count"], got["min"], got["max"], got["last"]
    one = count == 1
    finite_one = one & np.isfinite(last)
    some = ~one & np.isfinite(low)
    rising = np.where(np.isfinite(last), last >= (low + high) / 2, True)
    x = np.concatenate((last_step[finite_one], first[some], last_step[some]))
    y = np.concatenate(
        (last[finite_one], np.where(rising, low, high)[some], np.where(rising, high, low)[some])
    )
    order = np.argsort(x, kind="stable")
    gaps: list[list[Any]] = []
    nonfinite = got.get("nonfinite", np.zeros(len(count), np.int64))
    bad = np.flatnonzero(~np.isfinite(last) | ~np.isfinite(low) | (nonfinite > 0))
    for i in bad.tolist():
        if math.isfinite(last[i]):  # inside the bucket, not at its end: its kind is not known
            kind = "nonfinite"
        else:
            kind = "nan" if math.isnan(last[i]) else ("inf" if last[i] > 0 else "-inf")
        whole = not math.isfinite(low[i]) or math.isfinite(last[i])
        a = int(first[i]) if whole else int(last_step[i])
        b = int(last_step[i])
        if gaps and gaps[-1][2] == kind and gaps[-1][3] == i - 1:
            gaps[-1][1], gaps[-1][3] = b, i
        else:
            gaps.append([a, b, kind, i])
    total = int(count.sum())
    return {
        "name": key.tensor,
        "statistic": key.statistic,
        "mode": key.mode.name,
        "worker": key.worker,
        "x": x[order].astype(np.int64).tolist(),
        "y": y[order].tolist(),
        "gaps": [g[:3] for g in gaps],
        "points": total,
        "last_step": int(last_step[-1]) if total else None,
        "last": json_number(float(last[-1])) if total else None,
    }


def _raw_lines(
    reader: SeriesReader, keys: list[SeriesKey], start: int | None, end: int | None
) -> list[dict[str, Any]]:
    """The lines of ``keys`` from their saved values (read in one call), shrunk by
    :func:`~tensortap.core._downsample.minmax_buckets`: each bucket's extremes at their own
    steps, and every run of NaN/Inf exactly."""
    wanted = set(keys)
    names = sorted({k.tensor for k in keys})
    statistics = sorted({k.statistic for k in keys})
    out = []
    for key, part in reader.series(names, statistic=statistics, start=start, end=end).groups():
        if key not in wanted:
            continue
        steps = np.asarray(part["global_step"], dtype=np.int64)
        values = np.asarray(part["value"], dtype=np.float64)
        if not len(steps):
            continue
        shrunk = minmax_buckets(steps.astype(np.float64), values, BUCKETS)
        out.append(
            {
                "name": key.tensor,
                "statistic": key.statistic,
                "mode": key.mode.name,
                "worker": key.worker,
                "x": shrunk.x.astype(np.int64).tolist(),
                "y": shrunk.y.tolist(),
                "gaps": [[int(a), int(b), kind] for a, b, kind in shrunk.gaps],
                "points": len(steps),
                "last_step": int(steps[-1]),
                "last": json_number(float(values[-1])),
            }
        )
    return out


#: Points of a run's clock (global step to wall time) sent with its curves, at most.
CLOCK_POINTS = 600
#: How long a live run's clock is reused (read again when the run has new steps).
CLOCK_SECS = 5.0


def clock(run: Run, reader: SeriesReader) -> dict[str, list[float]] | None:
    """The run's clock, for charts drawn over wall time or epochs: the wall times (seconds)
    of global steps (``steps``, ``wall``), from one series (the vital loss, else a TRAIN
    loss, else the first value series by name; the first worker's), and the epoch of global
    steps (``epoch_steps``, ``epoch``) where a series named ``epoch`` was saved; at most
    :data:`CLOCK_POINTS` of each spread evenly; the page places every other step between
    them. None when neither was saved. Read again at most every :data:`CLOCK_SECS` while
    the run has new steps. The caller holds ``run.lock``."""
    held, version, now = run.cache.clock, run.cache.series_version, time.monotonic()
    if held is not None and (held[0] == version or now - held[1] < CLOCK_SECS):
        return held[2]
    values = [k for k in run.cache.keys if k.statistic == "value"]
    # the series saved at most steps, likely: the vital loss (every step), else a TRAIN loss
    values.sort(
        key=lambda k: (
            k.tensor != Vital.LOSS,
            "loss" not in k.tensor.lower() or k.tensor.startswith(("vitals/", "training_loop/")),
            k.mode != ModeKeys.TRAIN,
            natural_key(k.worker),
            k.tensor,
        )
    )
    found: dict[str, list[float]] = {}
    if values:
        steps, wall = _spread(reader, values[0], "wall_time", positive=True)
        if len(steps):
            found.update(steps=steps, wall=wall)
    # the run's epochs, where it saved them: a series named ``epoch`` (the Trainer's logged
    # epoch, Lightning's, an imported run's ``train/epoch``), TRAIN first
    epochs = [k for k in values if k.tensor.rsplit("/", 1)[-1].lower() == "epoch"]
    epochs.sort(key=lambda k: (k.mode != ModeKeys.TRAIN, natural_key(k.worker), k.tensor))
    if epochs:
        steps, epoch = _spread(reader, epochs[0], "value", positive=False)
        if len(steps):
            found.update(epoch_steps=steps, epoch=epoch)
    run.cache.clock = (version, now, found or None)
    return found or None


def _spread(
    reader: SeriesReader, key: SeriesKey, column: str, positive: bool
) -> tuple[list[float], list[float]]:
    """At most :data:`CLOCK_POINTS` (global step, ``column``) pairs spread evenly over the
    rows of ``key``'s tensor in its mode (every worker's), by step; values not finite (or not
    positive, with ``positive``) left out. A series longer than the reader holds at once
    (:meth:`SeriesReader.series_windows`) is walked twice, a window at a time: its rows
    counted, then the chosen ones taken: the same points, never the whole series held."""

    def windows() -> Iterator[SeriesColumns]:
        return reader.series_windows([key.tensor], mode=key.mode, statistic="value")

    walk = windows()
    first = next(walk, None)
    if first is None:
        return [], []
    second = next(walk, None)
    if second is None:  # it fits: one read
        steps, values = _kept(first, column, positive)
        pick = np.unique(np.linspace(0, len(steps) - 1, CLOCK_POINTS).astype(np.int64))
        return (steps[pick].tolist(), values[pick].tolist()) if len(steps) else ([], [])
    total = len(_kept(first, column, positive)[0]) + len(_kept(second, column, positive)[0])
    del first, second  # one window held at a time
    total += sum(len(_kept(window, column, positive)[0]) for window in walk)
    if not total:
        return [], []
    pick = np.unique(np.linspace(0, total - 1, CLOCK_POINTS).astype(np.int64))
    out_steps: list[float] = []
    out_values: list[float] = []
    at = 0
    for window in windows():
        steps, values = _kept(window, column, positive)
        inside = pick[(pick >= at) & (pick < at + len(steps))] - at
        out_steps += steps[inside].tolist()
        out_values += values[inside].tolist()
        at += len(steps)
    return out_steps, out_values


def _kept(window: SeriesColumns, column: str, positive: bool) -> tuple[np.ndarray, np.ndarray]:
    """A window's (global step, ``column``) rows kept (finite; positive with ``positive``),
    sorted by step (stably: rows of one step in the order read)."""
    steps = np.asarray(window["global_step"], dtype=np.int64)
    values = np.asarray(window[column], dtype=np.float64)
    kept = np.isfinite(values) & (values > 0 if positive else True)
    steps, values = steps[kept], values[kept]
    order = np.argsort(steps, kind="stable")
    return steps[order], values[order]


def curves(
    run: Run,
    x0: float | None = None,
    x1: float | None = None,
    names: list[str] | None = None,
    match: str | None = None,
    limit: int = MAX_SERIES,
    after: int | None = None,
    statistics: list[str] | None = None,
) -> dict[str, Any]:
    """The lines of the first ``limit`` charts (at most :data:`MAX_SERIES`) among those
    asked for (see :func:`_chosen`), one per mode and worker, each at most :data:`BUCKETS`
    buckets of its steps in ``[x0, x1]`` (all when not given) or, with the cursor ``after``
    (the last step the page holds), of its steps after it only; and the findings and resumed
    sessions to mark on them. ``total`` says how many charts were asked for, ``truncated``
    whether some were left out, ``last_step`` the step to send as ``after`` next time. The
    caller holds ``run.lock``."""
    limit = _limit(limit, MAX_SERIES, "charts drawn")
    reader = reader_of(run)
    last_step = run.cache.last_step  # what reader_of found (asking the reader again costs)
    chosen = _chosen(run, names, statistics, match)
    start = None if x0 is None else max(0, math.floor(x0))
    end = None if x1 is None else math.floor(x1) + 1
    if after is not None:
        start = max(start or 0, after + 1)
    wanted = set(chosen[:limit])
    keys = [k for k in run.cache.keys if (k.tensor, k.statistic) in wanted]
    order = {c: i for i, c in enumerate(chosen[:limit])}
    keys.sort(key=lambda k: (order[(k.tensor, k.statistic)], k.mode, natural_key(k.worker)))
    out: list[dict[str, Any]] = []
    answers, version = run.cache.answers, run.cache.series_version
    missing = []
    for key in keys:
        line = answers.get((key, start, end, version))
        if line is None:
            missing.append(key)
        else:
            out.append(line)
    if missing and not (after is not None and (last_step is None or after >= last_step)):
        found = buckets(reader, missing, start, end, BUCKETS)
        if sum(int(got["count"].sum()) for got in found.values()) <= RAW_POINTS:
            lines = _raw_lines(reader, list(found), start, end)  # short: exact extremes, gaps
        else:
            lines = [_line(key, got) for key, got in found.items()]
        for line in lines:
            key = SeriesKey(line["name"], line["statistic"], ModeKeys[line["mode"]], line["worker"])
            answers.put((key, start, end, version), line, _line_bytes(line))
            out.append(line)
    out = [line for line in out if line["points"]]
    out.sort(key=lambda line: (order[(line["name"], line["statistic"])], line["mode"]))
    return {
        "series": out,
        "total": len(chosen),
        "series_names": min(limit, len(chosen)),
        "truncated": len(chosen) > limit,
        "after": after,
        "last_step": last_step,
        "findings": findings(run),
        "sessions": resumed_sessions(run),
        "trips": guard_trips(run),
        "clock": clock(run, reader),
    }


def _line_bytes(line: dict[str, Any]) -> int:
    """What an answered line costs in memory, conservatively: a list slot and an object per
    x and y, four per gap, its names, and the dict."""
    names = sum(len(str(line[k])) for k in ("name", "statistic", "worker"))
    return (
        1024
        + 2 * PY_OBJECT_BYTES * len(line["x"])
        + 4 * PY_OBJECT_BYTES * len(line["gaps"])
        + 4 * names
    )


#: The most events of one job the dashboard keeps (the newest): a job writes a few per rule
#: and step that fired; an events.jsonl of millions of lines is not one tensortap wrote.
MAX_EVENTS_KEPT = 100_000


def findings(run: Run) -> list[dict[str, Any]]:
    """Each rule's first finding (from the job's events) and its gravest, with step, message
    and severity; a bare trial has none (its rules run with ``tensortap report``)."""
    if run.job is None:
        return []
    seen: dict[tuple[str, int], dict[str, Any]] = {}
    for event in _events(run):
        if event.get("event") == "rule_fired" and isinstance(event.get("step"), int):
            key = (str(event.get("rule")), event["step"])
            seen[key] = {
                "rule": key[0],
                "step": key[1],
                "message": str(event.get("message", "")),
                "severity": event.get("severity") or "problem",
            }
    for rule in rules(run):
        step = rule.get("gravest_step")
        if isinstance(step, int) and (rule["name"], step) not in seen:
            seen[(rule["name"], step)] = {
                "rule": rule["name"],
                "step": step,
                "message": str(rule.get("gravest_message") or rule.get("message") or ""),
                "severity": rule.get("severity") or "problem",
            }
    return sorted(seen.values(), key=lambda f: (f["step"], f["rule"]))


def _events(run: Run) -> list[dict[str, Any]]:
    """The job's events so far (read on from where the last call stopped); none new while
    the events file is refused (a symlink, a FIFO: see :meth:`JobRecord.read`)."""
    assert run.job is not None
    with run.events_lock:
        try:
            new, run.cache.events_offset = run.job.events(run.cache.events_offset)
        except OSError:
            return list(run.cache.events)
        run.cache.events.extend(new)
        if len(run.cache.events) > MAX_EVENTS_KEPT:  # a budget: the newest are kept
            del run.cache.events[: len(run.cache.events) - MAX_EVENTS_KEPT]
        return list(run.cache.events)


#: The checkpoint guard's events the timeline shows (the saves refused, the checkpoint kept,
#: the resumes sent to an older checkpoint: docs/jobs.md).
CHECKPOINT_EVENTS = {
    "checkpoint_refused",
    "checkpoint_pinned",
    "checkpoint_fallback",
    "checkpoint_resumed",
}


def detail(run: Run, log_lines: int = 200) -> dict[str, Any]:
    """One run's page besides its curves: rules, the rule timeline, the training log's tail."""
    timeline = []
    log_tail: list[str] = []
    if run.job is not None:
        wanted = {
            "training_started",
            "rule_fired",
            "rule_error",
            "rule_ended",
            "action",
            "action_failed",
            "stop_requested",
            "training_ended",
            "job_finalised",
        }
        wanted |= CHECKPOINT_EVENTS
        timeline = [
            {k: v for k, v in e.items() if k != "log_tail" and k != "traceback"}
            for e in _events(run)
            if e.get("event") in wanted
        ]
        try:
            text = run.job.log_tail(64 * 1024).decode("utf-8", errors="replace")
            log_tail = list(deque(text.splitlines(), maxlen=log_lines))
        except OSError as exc:  # refused (a symlink, a FIFO, a device): said, not followed
            log_tail = [f"[the training log is not shown: {exc}]"]
    config: dict[str, Any] = {}
    if run.refused is None:
        try:
            config = run_config(run)[0]
        except (TensortapError, StorageError, OSError):
            pass  # the runs list says what could not be read
    shown = overview(run)
    if run.job is not None and run.job.skipped_events:  # said, never dropped unsaid
        shown = {
            **shown,
            "problems": [
                *shown["problems"],
                f"{run.job.skipped_events} lines of the job's events.jsonl are not events "
                "tensortap writes (not JSON, nested too deep, a number too large, no time or "
                "name): left out of the timeline",
            ],
        }
    return {
        **shown,
        "all_rules": rules(run),
        "timeline": timeline,
        "log_tail": log_tail,
        "config": config,
    }


__all__ = [
    "MAX_SERIES",
    "charts",
    "curves",
    "detail",
    "findings",
    "json_number",
    "overview",
    "reader_of",
    "rules",
    "series_list",
    "trial_of",
]
