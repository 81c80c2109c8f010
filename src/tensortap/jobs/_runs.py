"""One row per job, as a runs table shows it (``tensortap jobs``): the verdict first, then the
status, steps, duration, last loss, best validation metric, key hyperparameters and command.

Renderer-free: :func:`run_row` reads a job's documents through their one validated decoder
(:mod:`tensortap.jobs._documents`, via :class:`~tensortap.jobs._record.JobRecord`) and the
trial's series and configuration documents (never its segment index), and
:func:`sort_rows`, :func:`filter_rows` and :func:`group_rows` answer values; the command line
draws them. A document that cannot be read is one of the row's ``problems``, never an error:
a damaged job is listed with its reason beside the others.
"""

from __future__ import annotations

import math
import re
import shlex
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tensortap.core._modes import ModeKeys
from tensortap.core._vitals import Vital
from tensortap.exceptions import InvalidConfigError, TensortapError
from tensortap.jobs._live import by_gravity, status_text
from tensortap.jobs._record import JobRecord
from tensortap.rules._verdict import job_diagnosis

#: Statuses of a job whose training has not ended.
RUNNING = frozenset({"Starting", "InProgress"})
#: The hyperparameters a row shows when a job's configuration holds them, in order.
KEY_HYPERPARAMETERS = ("learning_rate", "batch_size", "optimizer")
#: Short names a user may give for a hyperparameter (``--where lr=0.1``).
ALIASES = {"lr": "learning_rate", "bs": "batch_size", "batch": "batch_size", "opt": "optimizer"}
#: Where a hyperparameter not at the configuration's top level is looked for, in order.
_NESTED = (("hparams",), ("trainer", "arguments"), ("trainer", "params"), ("trainer", "flags"))
#: A metric whose name says higher is better, and one whose name says lower is.
_HIGHER = re.compile(r"acc|auc|f1|precision|recall|map\b|ndcg|r2|iou|dice|bleu|rouge", re.I)
_LOWER = re.compile(r"loss|err|rmse|mae|mse|mape|perplexity|nloglik|deviance", re.I)
_SKIPPED_SERIES = ("vitals/", "training_loop/")
#: The last part of a metric named ``<metric>/<split>`` (``Accuracy/test``, ``loss/val``).
_SPLIT_NAMES = frozenset({"test", "val", "valid", "validation", "eval", "train"})

Scalar = str | int | float | bool


@dataclass(frozen=True)
class BestMetric:
    """A run's best validation metric: its name as saved, its best value, and whether higher
    is better."""

    name: str
    value: float
    higher_is_better: bool


@dataclass
class RunRow:
    """What the runs table shows of one job (every field None when unknown)."""

    name: str
    path: str
    status: str
    verdict: str  # healthy, problem, failed, running, unknown or unreadable
    cause: str | None = None  # the problem's root cause, or how training failed
    headline: str = ""
    warnings: int = 0  # findings the diagnosis keeps as "to look at, not problems"
    started: float | None = None
    duration: float | None = None  # seconds
    steps: int | None = None  # TRAIN steps
    last_loss: float | None = None
    best: BestMetric | None = None
    hyperparameters: dict[str, Scalar] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)
    command: str = ""
    rules: list[dict[str, Any]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def verdict_text(self) -> str:
        """``problem: learning rate too high``, ``failed: RuntimeError: ...``, ``healthy``,
        ``healthy (1 warning)``."""
        if self.cause:
            return f"{self.verdict}: {self.cause}"
        if self.warnings:
            return f"{self.verdict} ({self.warnings} warning{'s' if self.warnings > 1 else ''})"
        return self.verdict

    def to_dict(self) -> dict[str, Any]:
        """Every field, as JSON takes it (a loss that is not finite as ``"NaN"``,
        ``"Infinity"`` or ``"-Infinity"``)."""
        best = self.best
        return {
            "name": self.name,
            "path": self.path,
            "status": self.status,
            "verdict": self.verdict,
            "cause": self.cause,
            "headline": self.headline,
            "warnings": self.warnings,
            "started": self.started,
            "duration": self.duration,
            "steps": self.steps,
            "last_loss": _json_number(self.last_loss),
            "best_metric": None
            if best is None
            else {
                "name": best.name,
                "value": _json_number(best.value),
                "higher_is_better": best.higher_is_better,
            },
            "hyperparameters": dict(self.hyperparameters),
            "command": self.command,
            "rules": self.rules,
            "problems": self.problems,
        }

    def value(self, key: str) -> Any:
        """The row's value of a column or a hyperparameter (``--sort``, ``--where``,
        ``--group-by``): ``name``, ``status``, ``verdict``, ``steps``, ``duration``, ``loss``,
        ``best``, ``started``, ``command``, or a key of the run's configuration."""
        column = _COLUMNS.get(key.lower())
        if column is not None:
            return column(self)
        return hyperparameter(self.config, key)


_COLUMNS: dict[str, Any] = {
    "name": lambda r: r.name,
    "job": lambda r: r.name,
    "status": lambda r: r.status,
    "verdict": lambda r: r.verdict_text,
    "steps": lambda r: r.steps,
    "duration": lambda r: r.duration,
    "time": lambda r: r.duration,
    "loss": lambda r: r.last_loss,
    "last_loss": lambda r: r.last_loss,
    "best": lambda r: None if r.best is None else r.best.value,
    "started": lambda r: r.started,
    "command": lambda r: r.command,
}
#: The columns ``--sort`` takes besides hyperparameters.
COLUMNS = tuple(_COLUMNS)


def _json_number(value: float | None) -> float | str | None:
    if value is None or math.isfinite(value):
        return value
    return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")


def _scalar(value: Any) -> Scalar | None:
    return value if isinstance(value, (str, int, float, bool)) else None


def hyperparameter(config: Mapping[str, Any], key: str) -> Scalar | None:
    """A hyperparameter of a run's configuration (``trial.config()``): ``lr``/``bs``/``opt``
    for ``learning_rate``/``batch_size``/``optimizer`` (its class's short name), ``seed``
    (the run's own, else the trainer's or torch's), a dotted path (``trainer.arguments.seed``),
    or a key at the top level, else in Lightning's ``hparams`` or the trainer's arguments,
    parameters or flags; None when the run has no such scalar."""
    name = ALIASES.get(key, key)
    if name == "optimizer":
        optimizer = config.get("optimizer")
        if isinstance(optimizer, Mapping) and isinstance(optimizer.get("class"), str):
            return str(optimizer["class"]).rsplit(".", 1)[-1]
        return _scalar(optimizer)
    if name == "seed" and _scalar(config.get("seed")) is None:
        seeds = config.get("seeds")
        if isinstance(seeds, Mapping):
            for which in ("trainer", "torch", *sorted(seeds)):
                if _scalar(seeds.get(which)) is not None:
                    return _scalar(seeds[which])
    places: list[tuple[str, ...]] = [tuple(name.split("."))] if "." in name else [(name,)]
    places += [(*where, name) for where in _NESTED]
    for path in places:
        value: Any = config
        for part in path:
            value = value.get(part) if isinstance(value, Mapping) else None
        if _scalar(value) is not None:
            return _scalar(value)
    return None


# -- reading a job --


def run_row(record: JobRecord, now: float | None = None, trial: bool = True) -> RunRow:
    """A job's row (see the module docstring); never raises for what a job directory holds.
    With ``trial=False`` only the job's own documents are read: the columns read from the
    trial (steps, loss, best metric, hyperparameters) stay None (the dashboard's row of a run
    whose trial it has not read yet, or may not read)."""
    problems: list[str] = []
    job: dict[str, Any] = {}
    try:
        job = record.job()
    except (TensortapError, OSError) as exc:
        problems.append(f"job.json unreadable: {exc}")
    try:
        found = record.read_summary()
    except (TensortapError, OSError) as exc:
        found = None
        problems.append(f"summary.json unreadable: {exc}")
        status = "Unreadable"
    else:
        # a summary without a status it could keep (the decoder listed why) is not a job
        # starting: the supervisor writes one in every summary
        status = "Starting" if found is None else str(found.summary.get("status", "Unreadable"))
    summary: dict[str, Any] = (
        found.summary if found is not None else {"status": status, "rules": []}
    )
    if found is not None:
        problems += found.problems
    row = RunRow(record.name, str(record.dir), status, "unknown", problems=problems)
    row.started = job.get("created")
    command = job.get("user_command") or job.get("command") or []
    row.command = shlex.join(command)
    row.rules = [_rule(r) for r in by_gravity(summary.get("rules", []))]
    _verdict(row, summary)
    if trial:
        _trial(row, record.trial_location)
    row.duration = _duration(record, summary, row, time.time() if now is None else now)
    row.problems = list(dict.fromkeys(row.problems))
    return row


def _rule(rule: Mapping[str, Any]) -> dict[str, Any]:
    step = rule.get("gravest_step", rule.get("first_fired_step"))
    return {
        "name": rule.get("RuleConfigurationName"),
        "status": rule.get("RuleEvaluationStatus"),
        "severity": rule.get("severity"),
        "step": step,
        "message": rule.get("gravest_message") or rule.get("message"),
        "text": status_text(dict(rule)) + ("" if step is None else f" at step {step}"),
    }


def _verdict(row: RunRow, summary: Mapping[str, Any]) -> None:
    """The verdict: a problem found is shown while the job runs too (the earliest warning);
    otherwise a job not ended is ``running``."""
    if row.status == "Unreadable":
        row.verdict, row.headline = "unreadable", row.problems[0] if row.problems else ""
        return
    diagnosis = job_diagnosis(summary)
    row.headline = diagnosis.headline()
    row.warnings = len(diagnosis.warnings)
    if diagnosis.verdict == "failed":
        failure = summary.get("training", {}).get("failure") or {}
        error = failure.get("error") if isinstance(failure, Mapping) else None
        row.verdict, row.cause = "failed", error or diagnosis.failure
    elif diagnosis.verdict == "problem" and diagnosis.cause is not None:
        row.verdict, row.cause = "problem", diagnosis.cause.title
    elif row.status in RUNNING:
        row.verdict = "running"
    else:
        row.verdict = diagnosis.verdict


def trial_row(name: str, location: str, status: str = "Unknown") -> RunRow:
    """The row of a trial that no job wrote (the dashboard serves bare trials too): its
    steps, loss, best metric and hyperparameters as a job's; no rules ran, so its verdict is
    ``unknown`` (``running`` while ``status`` says it is written)."""
    live = status in RUNNING or status == "Running"  # the dashboard's word for a bare trial
    row = RunRow(name, location, status, "running" if live else "unknown")
    _trial(row, location)
    _imported_verdict(row)
    row.problems = list(dict.fromkeys(row.problems))
    return row


def _imported_verdict(row: RunRow) -> None:
    """A run imported from another tracker (``tensortap import``) was judged when imported:
    its verdict is kept in its configuration's lineage (``imported.diagnosis``)."""
    lineage = row.config.get("imported")
    if not isinstance(lineage, Mapping):
        return
    judged = lineage.get("diagnosis")
    if not isinstance(judged, Mapping) or judged.get("verdict") not in ("healthy", "problem"):
        return
    row.verdict = str(judged["verdict"])
    cause, headline, warnings = judged.get("cause"), judged.get("headline"), judged.get("warnings")
    row.cause = cause if isinstance(cause, str) and row.verdict == "problem" else None
    row.headline = headline if isinstance(headline, str) else ""
    row.warnings = warnings if isinstance(warnings, int) and not isinstance(warnings, bool) else 0
    source = lineage.get("source")
    if isinstance(source, str) and not row.command:
        row.command = f"imported from {lineage.get('format')}: {source}"


def _trial(row: RunRow, location: str) -> None:
    """Steps, last loss, best validation metric and configuration, from the trial's series
    and configuration documents (small reads, no segment index)."""
    from tensortap.format import _layout as layout
    from tensortap.trials._config import first_config
    from tensortap.trials._series import SeriesReader
    from tensortap.trials._worker_state import natural_key

    def problem(key: str, exc: BaseException) -> None:
        row.problems.append(f"unreadable {key}: {exc}")

    try:
        reader = SeriesReader(location)
        store = reader.store
        workers = [w for w in store.list_dir(layout.WORKERS_PREFIX) if layout.is_plain_name(w)]
        if not workers:
            return
        row.config = first_config(store, sorted(workers, key=natural_key), problem)
        keys = reader.keys()
        loss = _loss_name(keys)
        if loss is not None:
            _loss_row(row, reader, loss)
        if row.steps is None and reader.last_step >= 0:
            row.steps = reader.last_step + 1
        row.best = _best(reader, keys)
        row.problems += list(reader.problems)
    except (TensortapError, OSError) as exc:
        row.problems.append(f"the trial cannot be read: {exc}")
    row.hyperparameters = {
        k: v for k in KEY_HYPERPARAMETERS if (v := hyperparameter(row.config, k)) is not None
    }


def _loss_row(row: RunRow, reader: Any, loss: str) -> None:
    """The row's steps (the highest TRAIN step, plus one), last loss (the last worker's
    newest) and start (the first worker's first loss's wall time), from the training loss
    walked a window of steps at a time (never the whole series held)."""
    from tensortap.trials._series_fill import series_order

    highest: int | None = None
    newest: dict[Any, float] = {}
    first_wall: dict[Any, float] = {}
    for window in reader.series_windows([loss], mode=ModeKeys.TRAIN, statistic="value"):
        if not window.rows:
            continue
        top = int(np.max(window["step"]))
        highest = top if highest is None else max(highest, top)
        for key, part in window.groups():  # windows come in step order: the newest last
            newest[key] = float(part["value"][-1])
            first_wall.setdefault(key, float(part["wall_time"][0]))
    if highest is None:
        return
    row.steps = highest + 1
    row.last_loss = newest[max(newest, key=series_order)]
    if row.started is None:
        row.started = first_wall[min(first_wall, key=series_order)]


def _loss_name(keys: Iterable[Any]) -> str | None:
    """The training loss: ``vitals/loss``, else the first TRAIN series named for a loss."""
    train = sorted(k.tensor for k in keys if k.mode == ModeKeys.TRAIN and k.statistic == "value")
    if Vital.LOSS in train:
        return Vital.LOSS
    named = [t for t in train if "loss" in t.lower() and not t.startswith(_SKIPPED_SERIES)]
    return named[0] if named else None


def _is_validation(tensor: str, mode: ModeKeys) -> bool:
    """A validation metric: saved in EVAL mode (a trainer's evaluation), or named for one
    (Keras's ``val_*``; XGBoost's ``<eval set>-<metric>`` of a set other than ``train``)."""
    if tensor.startswith(_SKIPPED_SERIES):
        return False
    if mode == ModeKeys.EVAL:
        return True
    if tensor.startswith(("val_", "eval_", "validation")):
        return True
    head, dash, _ = tensor.partition("-")
    return bool(dash) and head != "train" and "/" not in head and "_output" not in head


def _best(reader: Any, keys: Sequence[Any]) -> BestMetric | None:
    """The best value of a validation metric: one that is not a loss first (accuracy, AUC,
    F1, ...), else a validation loss, else the EVAL loss; None when the run has none."""
    ranked: list[tuple[int, str, ModeKeys, bool]] = []
    for key in keys:
        if key.statistic != "value" or not _is_validation(key.tensor, key.mode):
            continue
        base = key.tensor.rsplit("/", 1)[-1]
        if base.lower() in _SPLIT_NAMES:  # Accuracy/test: the metric is named before the split
            base = key.tensor
        if _LOWER.search(base):
            ranked.append((1, key.tensor, key.mode, False))
        elif _HIGHER.search(base):
            ranked.append((0, key.tensor, key.mode, True))
    if not ranked and any(k.tensor == Vital.LOSS and k.mode == ModeKeys.EVAL for k in keys):
        ranked.append((2, Vital.LOSS, ModeKeys.EVAL, False))
    for _, tensor, mode, higher in sorted(ranked, key=lambda r: (r[0], r[1], int(r[2]))):
        # one bucket per worker: its finite extremes, never the whole series held
        found = reader.buckets([tensor], mode=mode, statistic="value", count=1)
        extremes = found["max"] if higher else found["min"]
        finite = extremes[np.isfinite(extremes)]
        if len(finite):
            best = float(finite.max() if higher else finite.min())
            return BestMetric(tensor, best, higher)
    return None


def _duration(
    record: JobRecord, summary: Mapping[str, Any], row: RunRow, now: float
) -> float | None:
    """How long training ran: from its start to its end (events), to now while it runs;
    else the span of the job's summary."""
    started = ended = None
    try:
        for event in record.iter_events():
            if event["event"] == "training_started" and started is None:
                started = float(event["time"])
            elif event["event"] == "training_ended":
                ended = float(event["time"])
    except (TensortapError, OSError) as exc:
        row.problems.append(f"events.jsonl unreadable: {exc}")
    if started is None:
        started = summary.get("started")
    if ended is None:
        ended = now if row.status in RUNNING else summary.get("updated")
    if started is None or ended is None:
        return None
    return max(float(ended) - float(started), 0.0)


def read_rows(records: Iterable[JobRecord], now: float | None = None) -> list[RunRow]:
    """Every job's row, by start (a job without a start first), then name."""
    rows = [run_row(record, now) for record in records]
    rows.sort(key=lambda r: (r.started or 0.0, r.name))
    return rows


# -- sorting, filtering, grouping --


def hyperparameter_keys(rows: Iterable[RunRow], most: int = 60) -> list[str]:
    """The hyperparameters the rows' configurations hold a scalar for (what a table may group
    or sort by): ``seed`` and the key ones first, then the others by name (top-level keys
    and those in Lightning's ``hparams`` or the trainer's arguments), ``most`` at most."""
    found: set[str] = set()
    first = ("seed", *KEY_HYPERPARAMETERS)
    for row in rows:
        found.update(k for k in first if hyperparameter(row.config, k) is not None)
        places: list[Any] = [row.config]
        for path in _NESTED:
            value: Any = row.config
            for part in path:
                value = value.get(part) if isinstance(value, Mapping) else None
            places.append(value)
        for place in places:
            if isinstance(place, Mapping):
                found.update(
                    str(k) for k, v in place.items() if _scalar(v) is not None and str(k) != "seeds"
                )
    ordered = [k for k in first if k in found]
    return (ordered + sorted(found - set(first)))[:most]


def _order(value: Any) -> tuple[int, Any]:
    """A sort key: numbers by value (NaN after them), then text, then the unknown."""
    if isinstance(value, bool):
        return (1, str(value).lower())
    if isinstance(value, (int, float)):
        return (0, value) if not math.isnan(value) else (2, 0)
    if value is None:
        return (4, 0)
    return (1, str(value).lower())


#: ``--sort verdict``: the gravest first.
_VERDICT_RANK = {"failed": 0, "problem": 1, "unreadable": 2, "unknown": 3, "running": 4}


def sort_rows(rows: Sequence[RunRow], key: str) -> list[RunRow]:
    """``rows`` by ``key`` (a column or a hyperparameter; ``-key`` descending); the rows
    without a value last either way; ``verdict`` the gravest first (failed, problem,
    unreadable, unknown, running, healthy)."""
    descending = key.startswith("-")
    name = key.lstrip("-")
    if name.lower() == "verdict":  # gravest first, then by the cause's text
        return sorted(
            rows,
            key=lambda r: (_VERDICT_RANK.get(r.verdict, 9), r.verdict_text.lower()),
            reverse=descending,
        )
    known = [r for r in rows if r.value(name) is not None]
    unknown = [r for r in rows if r.value(name) is None]
    known.sort(key=lambda r: _order(r.value(name)), reverse=descending)
    return known + unknown


def parse_where(text: str) -> tuple[str, str]:
    """``key=value`` of ``--where``; an InvalidConfigError otherwise."""
    key, eq, value = text.partition("=")
    if not eq or not key.strip():
        raise InvalidConfigError(
            f"--where takes key=value (a hyperparameter or verdict, status, name: "
            f"--where lr=0.01, --where verdict=problem), got {text!r}"
        )
    return key.strip(), value.strip()


def matches(row: RunRow, key: str, wanted: str) -> bool:
    """Whether ``row``'s ``key`` is ``wanted``: numbers by value (``1e-3`` is ``0.001``),
    text without case; ``verdict=problem`` matches any problem, ``verdict=<cause>`` one."""
    if key.lower() == "verdict":
        text = wanted.lower()
        return text in (row.verdict, row.verdict_text.lower(), (row.cause or "").lower())
    value = row.value(key)
    if value is None:
        return False
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            return float(wanted) == float(value)
        except ValueError:
            return False
    return str(value).lower() == wanted.lower()


def filter_rows(
    rows: Iterable[RunRow], text: str | None = None, where: Sequence[tuple[str, str]] = ()
) -> list[RunRow]:
    """The rows whose name, verdict, status, command or hyperparameters hold ``text`` (no
    case), and that match every ``where`` pair."""
    kept = []
    for row in rows:
        if text:
            said = " ".join(
                [row.name, row.verdict_text, row.status, row.command]
                + [f"{k}={v}" for k, v in row.hyperparameters.items()]
            )
            if text.lower() not in said.lower():
                continue
        if all(matches(row, key, value) for key, value in where):
            kept.append(row)
    return kept


@dataclass(frozen=True)
class Group:
    """The runs of one value of a hyperparameter: how many, their verdicts, and the mean
    and spread (sample standard deviation) of their finite last losses."""

    value: Scalar | None
    runs: int
    verdicts: dict[str, int]
    losses: int  # how many runs had a finite last loss
    loss_mean: float | None
    loss_sd: float | None
    names: tuple[str, ...] = ()  # the jobs, in the order given

    def to_dict(self) -> dict[str, Any]:
        return {
            "value": self.value,
            "runs": self.runs,
            "jobs": list(self.names),
            "verdicts": self.verdicts,
            "losses": self.losses,
            "loss_mean": self.loss_mean,
            "loss_sd": self.loss_sd,
        }


def group_rows(rows: Iterable[RunRow], key: str) -> list[Group]:
    """One group per value of ``key`` (a hyperparameter or column), in the value's order,
    the runs without one last."""
    groups: dict[Any, list[RunRow]] = {}
    for row in rows:
        value = row.value(key)
        if key.lower() == "verdict":
            value = row.verdict
        groups.setdefault(value, []).append(row)
    out = []
    for value in sorted(groups, key=_order):
        members = groups[value]
        verdicts: dict[str, int] = {}
        for row in members:
            verdicts[row.verdict] = verdicts.get(row.verdict, 0) + 1
        losses = [
            r.last_loss for r in members if r.last_loss is not None and math.isfinite(r.last_loss)
        ]
        mean = float(np.mean(losses)) if losses else None
        sd = float(np.std(losses, ddof=1)) if len(losses) > 1 else None
        names = tuple(r.name for r in members)
        out.append(Group(value, len(members), verdicts, len(losses), mean, sd, names))
    return out


__all__ = [
    "ALIASES",
    "COLUMNS",
    "KEY_HYPERPARAMETERS",
    "BestMetric",
    "Group",
    "RunRow",
    "filter_rows",
    "group_rows",
    "hyperparameter",
    "hyperparameter_keys",
    "matches",
    "parse_where",
    "read_rows",
    "run_row",
    "sort_rows",
    "trial_row",
]
