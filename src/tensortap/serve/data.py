"""What the dashboard's pages ask of a run, as JSON-ready dicts, read through the public trial
API and cached per run so that following a live run reads only what is new.

Curves are kept whole in memory (one float per saved step) and sent downsampled by min/max
buckets (:mod:`tensortap.core.downsample`), so a spike is never lost; NaN and Inf travel as
runs of steps ("gaps"), never as missing points.
"""

from __future__ import annotations

import math
import re
import time
from collections import deque
from typing import Any

import numpy as np

from tensortap.core.downsample import minmax_buckets
from tensortap.core.modes import ModeKeys
from tensortap.diagnosis import job_diagnosis
from tensortap.exceptions import InvalidConfigError, MissingCollectionFiles, TensortapError
from tensortap.jobs.live import by_gravity
from tensortap.serve.catalog import Run
from tensortap.trials.index import natural_key
from tensortap.trials.trial import Trial, create_trial

CURVE_COLLECTIONS = ("losses", "metrics", "scalars")  # a tensor in several: drawn once
BUCKETS = 1000  # per curve: at most ~2,000 points on screen, every bucket's min and max
HEAT_STEPS = 160  # columns of a layer-health heat map
TRIAL_REFRESH_SECS = 0.5
MAX_SERIES = 200  # tensors drawn per curves request, at most: the rest asked for by name


class TrialRefused(TensortapError, PermissionError):
    """A run's trial that the dashboard does not read (it lies outside the places served)."""


def trial_of(run: Run) -> Trial:
    """The run's trial, opened once and refreshed at most every half second (closed by the
    catalog once no page has asked for it for a while)."""
    if run.refused is not None:
        raise TrialRefused(run.refused)
    cache, now = run.cache, time.monotonic()
    cache.used = now
    if cache.trial is None:
        cache.trial, cache.refreshed = create_trial(run.location), now
    elif now - cache.refreshed >= TRIAL_REFRESH_SECS:
        cache.trial.refresh()
        cache.refreshed = now
    return cache.trial


def _names(trial: Trial, collection: str) -> list[str]:
    try:
        return sorted(trial.tensor_names(collection=collection), key=natural_key)
    except MissingCollectionFiles:
        return []


def _scalar(value: np.ndarray) -> float:
    flat = np.asarray(value, dtype=np.float64).reshape(-1)
    if flat.size == 1:
        return float(flat[0])
    if not np.isfinite(flat).all():
        return float(flat[~np.isfinite(flat)][0])  # a NaN in the tensor is a NaN on the curve
    return float(flat.mean())


class _Curve:
    """One tensor in one mode: global steps and values, extended as steps land."""

    def __init__(self, name: str, mode: ModeKeys) -> None:
        self.name, self.mode = name, mode
        self.mode_steps: list[int] = []
        self.x: list[int] = []
        self.y: list[float] = []

    def update(self, trial: Trial) -> None:
        tensor = trial.tensor(self.name)
        steps = tensor.steps(mode=self.mode)
        if steps[: len(self.mode_steps)] != self.mode_steps:  # not an extension: start over
            self.mode_steps, self.x, self.y = [], [], []
        done = len(self.mode_steps)
        if len(steps) == done:
            return
        new, where = steps[done:], tensor.global_steps(mode=self.mode)[done:]
        raw = tensor.values(mode=self.mode) if len(new) > 64 else {}  # fetched together
        for step in new:
            value = raw.get(step)
            if value is None:
                try:
                    value = tensor.value(step, mode=self.mode)
                except TensortapError:  # only reductions were saved
                    value = np.asarray(tensor.reduction_value(step, "mean", mode=self.mode))
            self.y.append(_scalar(value))
        self.mode_steps.extend(new)
        self.x.extend(where)

    def json(self, x0: float | None, x1: float | None, buckets: int) -> dict[str, Any]:
        x, y = np.asarray(self.x, dtype=np.float64), np.asarray(self.y, dtype=np.float64)
        if x0 is not None or x1 is not None:
            keep = (x >= (-math.inf if x0 is None else x0)) & (
                x <= (math.inf if x1 is None else x1)
            )
            x, y = x[keep], y[keep]
        shrunk = minmax_buckets(x, y, buckets)
        return {
            "name": self.name,
            "mode": self.mode.name,
            "x": shrunk.x.astype(np.int64).tolist(),
            "y": shrunk.y.tolist(),
            "gaps": [[int(a), int(b), kind] for a, b, kind in shrunk.gaps],
            "points": len(self.x),
            "last": None
            if not self.y
            else (self.y[-1] if math.isfinite(self.y[-1]) else str(self.y[-1])),
        }


def curve_names(run: Run) -> list[tuple[str, str]]:
    """(name, collection) of every loss, metric and scalar, by name (a tensor in several
    collections once), listed once per refresh of the trial: cheap to ask for again."""
    trial = trial_of(run)
    key = (id(trial), trial.steps(show_incomplete_steps=True)[-1:], len(trial.tensor_names()))
    if run.cache.names_key != key:
        seen: dict[str, str] = {}
        for collection in CURVE_COLLECTIONS:
            for name in _names(trial, collection):
                seen.setdefault(name, collection)
        run.cache.names = sorted(seen.items(), key=lambda item: natural_key(item[0]))
        run.cache.names_key = key
    return run.cache.names


def curves(
    run: Run,
    x0: float | None = None,
    x1: float | None = None,
    names: list[str] | None = None,
    match: str | None = None,
    limit: int = MAX_SERIES,
) -> dict[str, Any]:
    """Losses and metrics per mode (TRAIN and EVAL separate series over global steps), and
    the findings to mark on them: the first ``limit`` tensors by name (at most
    :data:`MAX_SERIES`) among ``names`` when given, else among those whose name holds
    ``match`` (case-insensitive; plain text, not a pattern), else all. ``total`` says how many
    there were and ``truncated`` whether some were left out (ask for them by name)."""
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= MAX_SERIES:
        raise InvalidConfigError(
            f"limit is the number of tensors drawn, 1..{MAX_SERIES}, got {limit!r}; ask for "
            "more by name (names=...) or by a part of their name (match=...)"
        )
    trial = trial_of(run)
    cached: dict[tuple[str, ModeKeys], _Curve] = run.cache.curves
    chosen = curve_names(run)
    if names:
        wanted = set(names)
        chosen = [item for item in chosen if item[0] in wanted]
    elif match:
        needle = match.casefold()
        chosen = [item for item in chosen if needle in item[0].casefold()]
    out = []
    for name, collection in chosen[:limit]:
        for mode in trial.modes():
            curve = cached.get((name, mode))
            if curve is None:
                if not trial.tensor(name).steps(mode=mode):
                    continue
                curve = cached[(name, mode)] = _Curve(name, mode)
            curve.update(trial)
            if curve.x:
                out.append({**curve.json(x0, x1, BUCKETS), "collection": collection})
    steps = trial.steps(show_incomplete_steps=True)
    return {
        "series": out,
        "total": len(chosen),
        "series_names": min(limit, len(chosen)),
        "truncated": len(chosen) > limit,
        "last_step": steps[-1] if steps else None,
        "findings": findings(run),
        "sessions": resumed_sessions(trial),
    }


def resumed_sessions(trial: Trial) -> list[dict[str, Any]]:
    """Each session that resumed the run (a restarted script, a trainer resumed from a
    checkpoint), at the first global step it published: marked on the curves."""
    return [
        {**s.to_dict(), "step": s.first_step}
        for s in trial.sessions()
        if s.resumed and s.first_step is not None
    ]


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
    try:
        new, run.cache.events_offset = run.job.events(run.cache.events_offset)
    except OSError:
        return run.cache.events
    run.cache.events.extend(new)
    return run.cache.events


def rules(run: Run, summary: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Each rule's latest status from the job's summary (read here unless given), gravest
    first; none for a bare trial."""
    if run.job is None:
        return []
    if summary is None:
        summary = run.job.summary() or {}
    return [
        {**r, "name": r.get("RuleConfigurationName"), "status": r.get("RuleEvaluationStatus")}
        for r in by_gravity(summary.get("rules", []))
    ]


def overview(run: Run) -> dict[str, Any]:
    """What the runs list shows of a run: status, rule outcomes, start time, steps."""
    started: float | None = None
    status = "Unknown"
    summary: dict[str, Any] = {}
    if run.job is not None:
        summary = run.job.summary() or {}
        status = str(summary.get("status") or "Starting")
        try:
            started = float(run.job.job()["created"])
        except (KeyError, TypeError, ValueError, TensortapError, OSError):
            started = None
    last_step = None
    problems: list[str] = []
    try:
        trial = trial_of(run)
        steps = trial.steps(show_incomplete_steps=True)
        last_step = steps[-1] if steps else None
        if run.job is None:
            status = "Ended" if trial.loaded_all_steps else "Running"
        if started is None and steps:
            started = trial.wall_time(steps[0])
        problems = trial.problems()
    except TensortapError as exc:
        problems = [str(exc)]
    found = rules(run, summary)  # the summary read once for status and rules
    return {
        "id": run.id,
        "name": run.name,
        "kind": "job" if run.job is not None else "trial",
        "location": run.location,
        "status": status,
        "started": started,
        "last_step": last_step,
        "rules": [
            {k: r.get(k) for k in ("name", "status", "severity", "gravest_step", "evaluated")}
            for r in found
        ],
        "problems_found": sum(r.get("severity") == "problem" for r in found),
        "diagnosis": None if run.job is None else job_diagnosis(summary).to_dict(),
        "problems": problems,
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
    return {**overview(run), "all_rules": rules(run), "timeline": timeline, "log_tail": log_tail}


def health(run: Run) -> dict[str, Any]:
    """Layer health over up to :data:`HEAT_STEPS` steps spread over the run (the newest
    always among them): the L2 norm of every gradient (exact zeros kept: a dead layer) and
    the share of exact zeros of every ReLU activation saved in full."""
    trial = trial_of(run)
    grads, acts = _names(trial, "gradients"), _names(trial, "relu_activations")
    steps = trial.steps(show_incomplete_steps=True)
    if len(steps) > HEAT_STEPS:
        picks = np.unique(np.linspace(0, len(steps) - 1, HEAT_STEPS).round().astype(int))
        steps = [steps[i] for i in picks]
    rows = run.cache.health
    for step in steps:
        if step in rows and step != steps[-1]:
            continue
        block = trial.step_block(step)
        present = [n for n in grads if n in block]
        norms = (
            dict(zip(present, block.reduce(present, "l2").tolist(), strict=True)) if present else {}
        )
        raw = [n for n in acts if block.has_raw(n)]
        shares: dict[str, float] = {}
        if raw:
            counted = block.count_where(raw, lambda x: x == 0) / np.maximum(block.sizes(raw), 1)
            shares = dict(zip(raw, counted.tolist(), strict=True))
        rows[step] = ([_number(norms.get(n)) for n in grads], [shares.get(n) for n in acts])
    steps = [s for s in steps if any(v is not None for v in (*rows[s][0], *rows[s][1]))]
    return {  # steps holding neither (an EVAL step, say) are left out: no blank columns
        "steps": steps,
        "gradient_names": grads,
        "gradient_norms": [[rows[s][0][i] for s in steps] for i in range(len(grads))],
        "activation_names": acts,
        "zero_share": [[rows[s][1][i] for s in steps] for i in range(len(acts))],
    }


EMBEDDING_FRAMES = 20  # steps drawn, spread over the run
_FEATURES = re.compile(r"bottleneck|embed|hidden|feature|latent", re.IGNORECASE)
_LABELS = re.compile(r"label|target", re.IGNORECASE)


def embeddings(
    run: Run, tensor: str | None, labels: str | None, mode: str | None
) -> dict[str, Any]:
    """An animated 2-D embedding (PCA) of ``tensor``'s samples coloured by ``labels``, over up
    to :data:`EMBEDDING_FRAMES` steps of ``mode`` spread over the run. Without names, a
    bottleneck/embedding-like tensor and a label-like one are guessed; ``figure`` is None
    (with a ``note`` saying why) when there is nothing to draw."""
    from tensortap.viz.embeddings import embeddings_over_time, plot_embeddings

    trial = trial_of(run)
    names = sorted(trial.tensor_names(), key=natural_key)
    modes = [m.name for m in trial.modes()]
    chosen = mode or ("EVAL" if "EVAL" in modes else (modes[0] if modes else "TRAIN"))
    tensor = tensor or next((n for n in names if _FEATURES.search(n)), None)
    labels = labels or next((n for n in names if _LABELS.search(n) and n != tensor), None)
    out: dict[str, Any] = {
        "names": names,
        "modes": modes,
        "tensor": tensor,
        "labels": labels,
        "mode": chosen,
        "figure": None,
        "note": "",
    }
    if tensor is None or labels is None:
        out["note"] = "choose the tensor to embed and the tensor of its labels"
        return out
    steps = trial.tensor(tensor).steps(mode=chosen) if trial.has_tensor(tensor) else []
    if len(steps) > EMBEDDING_FRAMES:
        picks = np.unique(np.linspace(0, len(steps) - 1, EMBEDDING_FRAMES).round().astype(int))
        steps = [steps[i] for i in picks]
    try:
        frames = embeddings_over_time(trial, tensor, labels, mode=chosen, steps=steps)
        out["figure"] = plot_embeddings(frames, title=tensor)
        out["steps"] = [f.step for f in frames]
    except TensortapError as exc:
        out["note"] = str(exc)
    return out


def _number(value: float | None) -> float | str | None:
    """JSON has no NaN: a non-finite value travels as "nan", "inf" or "-inf"."""
    if value is None or math.isfinite(value):
        return value
    return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")


__all__ = [
    "MAX_SERIES",
    "curve_names",
    "curves",
    "detail",
    "embeddings",
    "findings",
    "health",
    "overview",
    "rules",
    "trial_of",
]
