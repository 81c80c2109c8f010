"""The report of a training run (``tensortap report TRIAL [--job JOB]``): one self-contained page.

Sections: the job and what its rules found (each rule's gravest finding marked on the curves),
the loss and metric curves per mode over global steps (where a resumed session starts marked
too, and the sessions listed), per-layer gradient and activation
health over time (heat maps), and TensorPlot of the activations at the last step they were
saved in full. Without a job, the recommended rules that fit the saved collections are run
over the trial. Rules are listed gravest first (problems, errors, rules that judged nothing,
warnings, advice), each with its gravest finding. Charts are inline SVG; TensorPlot carries
plotly.js inline (compressed: :func:`~tensortap.viz._plotly.offline_html`), so the page loads
nothing and opens offline.
"""

from __future__ import annotations

import html
import math
import os
import re
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tensortap.core._vitals import ALL_VITALS, VITALS
from tensortap.diagnosis import build, job_diagnosis, judge_trial, outcome_of
from tensortap.exceptions import InvalidConfigError, MissingCollectionFiles, TensortapError
from tensortap.jobs._live import by_gravity, judged_count, status_text
from tensortap.jobs._record import JobRecord
from tensortap.query._curves import line_modes, shrunk_mode_lines
from tensortap.query._curves import read_series as read_series  # the old path
from tensortap.query._health import HEAT_COLUMNS as HEAT_COLUMNS  # the old path too
from tensortap.query._health import heat_width, layer_health, norm_buckets
from tensortap.report._page import Row, diagnosis_block, page, rule_rows, section, summary_rows
from tensortap.report._svg import MOST_POINTS, heatmap, shrunk_line_chart
from tensortap.rules._rule import Rule
from tensortap.trials._index import natural_key
from tensortap.trials._sessions import Session
from tensortap.trials._trial import Trial, create_trial

#: The saved steps looked at, from the last, for one that holds the activations in full.
MOST_STEPS_LOOKED = 1_000
#: ``save_scalar``'s numbers (the ``scalars`` collection) are drawn this many to a chart, at
#: most :data:`MOST_SCALARS` of them (the others are named): each line is read on its own
#: chart's turn and drawn as at most ``2 * MOST_POINTS`` points, so the page stays under a
#: megabyte and the read holds one chart's series, whatever the run's length or width.
SCALARS_PER_CHART = 8
MOST_SCALARS = 64
#: The most vital-sign charts drawn (one a vital sign: seven today).
MOST_VITAL_CHARTS = 12
#: The collections whose sections (layer health, TensorPlot) read saved values, not series.
VALUE_COLLECTIONS = ("gradients", "relu_activations")


def _saved(trial: Trial, collection: str) -> list[str]:
    try:
        return trial.tensor_names(collection=collection)
    except MissingCollectionFiles:
        return []


def default_rules(trial: Trial) -> list[Rule]:
    """The recommended rules of the framework that wrote the trial
    (``rule_configs.recommended(trial.framework())``) that read something the trial holds: a
    rule none of whose collections were saved is left out rather than shown empty."""
    from tensortap.rules.builtin import BUILTIN_RULES
    from tensortap.rules.rule_configs import recommended_names

    return [
        BUILTIN_RULES[name](trial)
        for name in recommended_names(trial.framework())
        if any(_saved(trial, c) for c in BUILTIN_RULES[name].required_collections())
    ]


def report_trial(
    trial: Trial,
    job: bool = False,
    rules: Sequence[Rule] | None = None,
    judge_steps: int | None = None,
) -> Trial:
    """The trial the page reads: ``trial`` itself, unless it is an outline (opened with
    ``records=False``, as ``tensortap report`` opens it) and the page must read saved values
    (layer health or activations, or rules to run over it: without a ``job`` whose summary
    says what its rules found); then the same trial read whole. A page of series alone (loss,
    metric and scalar curves) thus never reads the rows of the trial's index."""
    if trial.records or not reads_values(trial, job, rules, judge_steps):
        return trial
    return Trial(trial.store, name=trial.name)


def reads_values(
    trial: Trial,
    job: bool = False,
    rules: Sequence[Rule] | None = None,
    judge_steps: int | None = None,
) -> bool:
    """Whether the page of ``trial`` reads saved values (layer health or activations, or
    rules to run over it: without a ``job`` whose summary says what its rules found, and
    within ``judge_steps`` saved steps), so that an outline of the trial (``records=False``)
    does not do (:func:`report_trial`)."""
    from tensortap.rules.builtin import BUILTIN_RULES
    from tensortap.rules.rule_configs import recommended_names

    judged = (
        bool(rules)
        if rules is not None
        else any(
            _saved(trial, c)
            for name in recommended_names(trial.framework())
            for c in BUILTIN_RULES[name].required_collections()
        )
    )
    if judged and isinstance(judge_steps, int) and not isinstance(judge_steps, bool):
        # over more, the page does not judge (a bad judge_steps is refused by the page)
        judged = len(trial.steps()) <= judge_steps
    return any(_saved(trial, c) for c in VALUE_COLLECTIONS) or (judged and not job)


def rules_that_find_problems(trial: Trial | str | os.PathLike[str]) -> list[str]:
    """Run :func:`default_rules` over the whole of a finished ``trial`` in one shared walk; the
    names of those that found something, in the recommended order (what ``tensortap report``
    shows, in one call). A rule that fails raises its RuleError, as ``invoke_rule`` does."""
    from tensortap.exceptions import RuleError
    from tensortap.rules._finding import Outcome

    if not isinstance(trial, Trial):
        trial = create_trial(trial)
    summaries = judge_trial(trial, default_rules(trial))
    for summary in summaries:
        error = next((f for f in summary.findings if f.outcome is Outcome.ERROR), None)
        if error is not None:
            raise RuleError(summary.rule, error.step, error.message, error.traceback or "")
    return [s.rule for s in summaries if s.triggered]


def _job_summary(record: JobRecord) -> tuple[dict[str, Any], list[str]]:
    """What can be shown of the job's summary (decoded), and what could not be read, why."""
    try:
        found = record.read_summary()
    except (TensortapError, OSError) as exc:
        return {"rules": []}, [f"the job's summary.json cannot be read: {exc}"]
    return ({"rules": []}, []) if found is None else (found.summary, list(found.problems))


def _job_rows(record: JobRecord) -> list[Row]:
    summary = _job_summary(record)[0]
    return [
        (
            str(r.get("RuleConfigurationName", "")),
            status_text(r),
            "" if r.get("gravest_step") is None else str(r["gravest_step"]),
            str(judged_count(r) or "none"),
            f"{r.get('triggered', '')} / {r.get('skipped', '')}",
            str(r.get("gravest_message") or r.get("message") or r.get("StatusDetails") or ""),
        )
        for r in by_gravity(summary.get("rules", []))
    ]


def _job_table(record: JobRecord) -> str:
    summary, unread = _job_summary(record)
    try:
        command = " ".join(record.job().get("command", []))
    except (TensortapError, OSError) as exc:
        command, unread = "?", [*unread, f"the job's job.json cannot be read: {exc}"]
    training = summary.get("training", {})
    cells = [
        ("job", record.name),
        ("status", str(summary.get("status", "Starting" if not unread else "Unreadable"))),
        ("training", f"{training.get('status', '?')} (exit code {training.get('exit_code')})"),
        ("command", command),
        *(("not shown", problem) for problem in unread),
    ]
    rows = "".join(
        f"<tr><th>{k}</th><td class='text {html.escape(v)}'>{html.escape(v)}</td></tr>"
        for k, v in cells
    )
    return f"<table>{rows}</table>"


def _sessions_table(sessions: Sequence[Session]) -> str:
    """The writing sessions, when training was resumed (a first session alone says nothing)."""
    if not any(s.resumed for s in sessions):
        return ""

    def cell(value: object) -> str:
        return f"<td class='text'>{html.escape('-' if value is None else str(value))}</td>"

    rows = []
    for s in sessions:
        started = (
            None
            if s.started is None
            else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(s.started))
        )
        steps = None if s.first_step is None else f"{s.first_step}-{s.last_step}"
        counted = ", ".join(f"{m} {n}" for m, n in s.mode_steps.items())
        again = "; ".join(f"{m} steps {a}-{b} counted again" for m, a, b in s.rolled_back)
        branch = (
            f"a branch of session {s.branch_of} from {s.branch_mode} step {s.branch_step}"
            + (f": {s.branch_reason}" if s.branch_reason else "")
            if s.branched
            else ""
        )
        note = "; ".join(
            x for x in (branch, counted and f"from {counted}", s.step_source, again) if x
        )
        rows.append(
            "<tr>"
            + "".join(
                cell(v)
                for v in (
                    f"session {s.index}",
                    s.worker,
                    started,
                    s.host,
                    s.pid,
                    s.resumed_from_step,
                    steps,
                    note or None,
                )
            )
            + "</tr>"
        )
    head = "".join(
        f"<th>{h}</th>"
        for h in (
            "session",
            "worker",
            "started",
            "host",
            "pid",
            "resumed after step",
            "global steps",
            "step numbers",
        )
    )
    return (
        "<p>Training was resumed: each session (a run of the script or trainer) continued "
        "the step numbers of the one before, marked on the curves.</p>"
        f"<table><tr>{head}</tr>{''.join(rows)}</table>"
    )


def _attribution_marks(session: Session) -> list[tuple[float, str]]:
    """(global step, label) of each attribution by replay the session recorded (see
    :mod:`tensortap.pytorch._replay`), and of each rollback decision made from it
    (:func:`_decision_label`); an event that is neither, or is damaged, marks nothing."""
    out = []
    for event in session.events:
        fields, at = event.get("fields"), event.get("global_step")
        if not isinstance(fields, dict) or not isinstance(at, int) or isinstance(at, bool):
            continue
        if event.get("kind") == "attribution":
            out.append((float(at), f"replay: {fields.get('kind')} (step {fields.get('step')})"))
        elif event.get("kind") == "rollback_decision":
            out.append((float(at), _decision_label(fields)))
    return out


def _decisions_table(sessions: Sequence[Session]) -> str:
    """What a rollback decided from the replays' evidence, one row per decision (a mark on the
    curve can fall past the last saved step: a stop is decided after it)."""
    rows = []
    for s in sessions:
        for event in s.events:
            fields = event.get("fields")
            if event.get("kind") != "rollback_decision" or not isinstance(fields, dict):
                continue
            cells = (
                s.index,
                fields.get("step"),
                _decision_label(fields).removeprefix("rollback: ").split(" (")[0],
                fields.get("evidence") or "no replay",
                fields.get("layer"),
                fields.get("reason"),
            )
            rows.append(
                "<tr>"
                + "".join(
                    f"<td class='text'>{html.escape('-' if c is None else str(c))}</td>"
                    for c in cells
                )
                + "</tr>"
            )
    if not rows:
        return ""
    head = "".join(
        f"<th>{h}</th>" for h in ("session", "step", "decision", "evidence", "layer", "why")
    )
    return (
        "<p>Rollback decisions, from what the replays said about the failed steps:</p>"
        f"<table><tr>{head}</tr>{''.join(rows)}</table>"
    )


def _decision_label(fields: dict[str, Any]) -> str:
    """``rollback: stop (numerics in blocks.2, step 61)``: what a rollback decided, from what."""
    why = [str(fields.get("evidence") or "no replay")]
    if fields.get("layer"):
        why.append(f"in {fields['layer']}")
    action = str(fields.get("action"))
    if fields.get("remedy"):
        action += f" {fields['remedy']}"
    return f"rollback: {action} ({' '.join(why)}, step {fields.get('step')})"


def _spike_marks(session: Session) -> list[tuple[float, str]]:
    """(global step, label) of each spike warning the session recorded (see
    :mod:`tensortap.pytorch._spike_watch`); a damaged event marks nothing."""
    out = []
    for event in session.events:
        fields, at = event.get("fields"), event.get("global_step")
        if event.get("kind") != "spike_warning" or not isinstance(fields, dict):
            continue
        if isinstance(at, int) and not isinstance(at, bool):
            out.append((float(at), f"spike warning: {fields.get('signal')}"))
    return out


def scalar_charts(trial: Trial) -> tuple[list[list[str]], list[str]]:
    """The scalars the report draws (the ``scalars`` collection, less those drawn as losses
    or metrics), in natural order: their charts' names, :data:`SCALARS_PER_CHART` to a chart,
    and the names left undrawn past :data:`MOST_SCALARS`."""
    drawn = {n for collection in ("losses", "metrics") for n in _saved(trial, collection)}
    names = sorted((n for n in _saved(trial, "scalars") if n not in drawn), key=natural_key)
    shown = names[:MOST_SCALARS]
    groups = [shown[i : i + SCALARS_PER_CHART] for i in range(0, len(shown), SCALARS_PER_CHART)]
    return groups, names[MOST_SCALARS:]


def vital_charts(trial: Trial) -> list[tuple[str, list[str]]]:
    """The vital signs the trial holds (the ``vitals`` collection: the loss, gradient and
    update norms, learning rates ... of every step), a chart each in the table's order
    (:data:`~tensortap.core._vitals.ALL_VITALS`; a parameter group's learning rate on its
    group's chart, a name of a later tensortap after them): their scales differ by decades."""
    saved = sorted(_saved(trial, VITALS), key=natural_key)
    charts: list[tuple[str, list[str]]] = []
    for vital in ALL_VITALS:
        names = [n for n in saved if n == vital or n.startswith(f"{vital}/")]
        if names:
            charts.append((vital, names))
    drawn = {n for _, names in charts for n in names}
    charts.extend((n, [n]) for n in saved if n not in drawn)
    return charts[:MOST_VITAL_CHARTS]


def _chart(trial: Trial, names: Sequence[str], title: str, marks: dict[float, str]) -> str:
    """A chart of each tensor per mode over global steps, each line shrunk as it is read
    (:func:`~tensortap.query._curves.shrunk_mode_lines`: a long line is never held whole)."""
    lines = shrunk_mode_lines(trial, names, MOST_POINTS)
    return shrunk_line_chart(lines, title, "global step", marks, line_modes(trial, names))


class TrainingReport:
    """Builds the page; ``job`` is the job that wrote the trial (its rules' statuses are shown
    instead of running rules here), ``rules`` the rules to run when there is no job. With
    ``judge_steps``, rules are run only over a trial of at most that many saved steps (the
    dashboard's budget: judging a 10^5-step trial took a minute); over a longer one the page
    says they were not run, and how to have them judged."""

    def __init__(
        self,
        trial: Trial,
        job: JobRecord | None = None,
        rules: Sequence[Rule] | None = None,
        title: str | None = None,
        judge_steps: int | None = None,
        location: str | None = None,
    ) -> None:
        if judge_steps is not None and (
            not isinstance(judge_steps, int) or isinstance(judge_steps, bool) or judge_steps < 0
        ):
            raise InvalidConfigError(
                f"judge_steps is the most saved steps the rules judge, a whole number >= 0 or "
                f"None (no limit), got {judge_steps!r}"
            )
        self.trial, self.job, self.title = trial, job, title
        self.rules = list(rules) if rules is not None else None
        self.judge_steps = judge_steps
        self.location = trial.path if location is None else location
        self.rows: list[Row] = []

    def _rules_section(self, trial: Trial) -> str:
        parts = []
        if self.job is not None:
            parts.append(_job_table(self.job))
            self.rows = _job_rows(self.job)
            found = job_diagnosis(_job_summary(self.job)[0])
            origin = "The job's rules, evaluated beside training:"
        elif self.judge_steps is not None and (saved := len(trial.steps())) > self.judge_steps:
            parts.append(
                f"<p class='NoData'>Rules were not run for this page: the trial holds {saved:,} "
                f"saved steps, more than the {self.judge_steps:,} judged here. Judge them all "
                f"with <code>tensortap report {html.escape(self.location)}</code> (it takes its "
                "time), or run training as a job (<code>tensortap run</code>), whose rules judge "
                "beside it and whose report shows what they found.</p>"
            )
            found = None
        else:
            summaries = judge_trial(
                trial, default_rules(trial) if self.rules is None else self.rules
            )
            self.rows = summary_rows(summaries)
            found = build(outcome_of(s) for s in summaries)
            origin = "Built-in rules for the saved collections, evaluated over the trial now:"
        if found is not None:
            parts.append(diagnosis_block(found))
            parts.append(f"<p>{origin}</p>" + rule_rows(self.rows, link_steps=True))
        problems = trial.problems()
        if problems:
            items = "".join(f"<li>{html.escape(p)}</li>" for p in problems)
            parts.append(f"<p class='Error'>Problems while saving:</p><ul>{items}</ul>")
        return f"<div>{''.join(parts)}</div>"

    def _marks(self) -> dict[float, str]:
        """Where each rule's gravest finding is (rows are filled by the rules section, drawn
        first)."""
        by_step: dict[float, list[str]] = {}
        for rule, _, first, *_ in self.rows:
            try:  # a job's summary.json is data: a step that is no number marks nothing
                at = float(first)
            except ValueError:
                continue
            if math.isfinite(at):
                by_step.setdefault(at, []).append(rule)
        return {step: ", ".join(rules) for step, rules in by_step.items()}

    def _curves(self, trial: Trial) -> str:
        marks = self._marks()
        sessions = trial.sessions()
        for s in sessions:  # where a resumed session starts is marked too
            if s.resumed and s.first_step is not None:
                at, label = float(s.first_step), f"session {s.index} resumed"
                marks[at] = f"{marks[at]}, {label}" if at in marks else label
            for at, label in _attribution_marks(s):  # what a replay said about a step
                marks[at] = f"{marks[at]}, {label}" if at in marks else label
            for at, label in _spike_marks(s):  # a forecast of a loss spike
                marks[at] = f"{marks[at]}, {label}" if at in marks else label
        charts = [
            _chart(trial, names, collection, marks)
            for collection in ("losses", "metrics")
            if (names := sorted(_saved(trial, collection)))
        ]
        charts.extend(_chart(trial, names, title, marks) for title, names in vital_charts(trial))
        groups, undrawn = scalar_charts(trial)
        shown = sum(len(group) for group in groups)
        for at, group in enumerate(groups):
            first = at * SCALARS_PER_CHART + 1
            title = (
                "scalars"
                if len(groups) == 1 and not undrawn
                else f"scalars ({first}-{first + len(group) - 1} of {shown + len(undrawn):,})"
            )
            charts.append(_chart(trial, group, title, marks))
        if undrawn:
            named = ", ".join(html.escape(n) for n in undrawn[:5])
            charts.append(
                f"<p>{len(undrawn):,} more scalars are not drawn here ({named}, ...): "
                "<code>tensortap serve</code> draws any of them, "
                "<code>trial.series(name)</code> reads them.</p>"
            )
        return (
            _sessions_table(sessions)
            + _decisions_table(sessions)
            + ("".join(charts) or "<p>No losses, metrics, vital signs or scalars saved.</p>")
        )

    def _layer_health(self, trial: Trial) -> dict[str, Any]:
        """:func:`~tensortap.query._health.layer_health` over at most :data:`HEAT_COLUMNS`
        columns, each a bucket of steps (see :func:`~tensortap.query._health.heat_width`). A
        gradient norm is the largest of its bucket where the hook saved the norm (``l2``, from
        ``trial.series_buckets``: every step counted,
        :func:`~tensortap.query._health.norm_buckets`); else, and for the share of zero
        activations (which needs the raw values), the value at the bucket's last step. Adds
        ``spans`` (each column's first and last step) and ``bucketed``."""
        steps = np.asarray(trial.steps(), dtype=np.int64)
        width = heat_width(steps.tolist(), HEAT_COLUMNS)
        start = int(steps[0]) if len(steps) else 0
        numbers, column = np.unique((steps - start) // width, return_inverse=True)
        column, count = column.reshape(-1), len(numbers)
        ends = np.flatnonzero(np.diff(column, append=count))  # each column's last step
        starts = np.concatenate(([0], ends[:-1] + 1)) if count else ends
        data = layer_health(trial, steps=steps[ends].tolist())  # raises: nothing saved
        names, norms = data["gradient_names"], data["gradient_norms"]
        if names and count:
            end = int(steps[-1]) + 1
            saved = trial.series_buckets(
                names, statistic="l2", start=start, end=end, count=-(-(end - start) // width)
            )
            row_of = {name: row for row, name in enumerate(names)}
            for tensor, by_bucket in norm_buckets(saved, start, width).items():
                bucket = np.fromiter(by_bucket, dtype=np.int64, count=len(by_bucket))
                at = np.minimum(np.searchsorted(numbers, bucket), count - 1)
                known = numbers[at] == bucket
                highs = np.fromiter(by_bucket.values(), dtype=np.float64, count=len(by_bucket))
                norms[row_of[tensor]] = np.nan
                norms[row_of[tensor], at[known]] = highs[known]  # NaN: none finite
        data["spans"] = np.stack([steps[starts], steps[ends]], axis=1) if count else steps
        data["bucketed"] = width > 1
        return data

    def _health(self, trial: Trial) -> str:
        try:
            data = self._layer_health(trial)
        except InvalidConfigError:
            return "<p>No gradients or ReLU activations saved (gradients, relu_activations).</p>"
        with np.errstate(divide="ignore", invalid="ignore"):
            logs = np.log10(data["gradient_norms"])  # an exact zero stays: -inf, drawn black
        logs[logs == np.inf] = math.nan
        bucketed = data["bucketed"]
        panels = (
            (
                logs,
                data["gradient_names"],
                "log10 gradient norm per layer"
                + (" (each column: the largest of its steps)" if bucketed else ""),
                {"low": "#fff7ec", "high": "#7f0000", "zero": "#000000"},
            ),
            (
                data["zero_fraction"],
                data["activation_names"],
                "share of zero activations per layer"
                + (" (each column: its last step)" if bucketed else ""),
                {"low": "#f7fbff", "high": "#08306b", "scale": (0.0, 1.0), "percent": True},
            ),
        )
        charts = []
        for matrix, names, title, style in panels:
            known = ~np.isnan(matrix)
            rows, columns = known.any(axis=1), known.any(axis=0)  # layers and steps with data
            if rows.any():
                charts.append(
                    heatmap(
                        matrix[rows][:, columns].tolist(),
                        [n for n, keep in zip(names, rows, strict=True) if keep],
                        data["spans"][columns][:, 0].tolist(),
                        title,
                        spans=data["spans"][columns].tolist() if bucketed else None,
                        **style,
                    )
                )
        return "".join(charts)

    def _activations(self, trial: Trial) -> str:
        saved = _saved(trial, "relu_activations")
        names = [n for n in saved if "_output" in n] or saved  # outputs, not what went in
        if not names:
            return "<p>No activations saved in full (collection relu_activations).</p>"
        from tensortap.viz._tensor_plot import TensorPlot  # plotting (1-2 s) only to plot

        steps = trial.steps()
        looked = steps[: -MOST_STEPS_LOOKED - 1 : -1]  # from the end, a bounded number
        last = next(  # the last step that saved them in full
            (s for s in looked if any(trial.step_block(s).has_raw(n) for n in names)), None
        )
        if last is None:
            where = "" if len(steps) <= MOST_STEPS_LOOKED else f" in the last {len(looked):,} steps"
            return f"<p>No activations saved in full{where} (collection relu_activations).</p>"
        regex = "^(" + "|".join(re.escape(n) for n in names) + ")$"
        plot = TensorPlot(regex, trial, steps=[last], batch_sample_id=-1, title="ReLU outputs")
        return (
            f"<p>Step {last}, summed over the batch (units that never fire stay dark).</p>"
            + plot.to_html(full_html=False)
        )

    def html(self) -> str:
        trial = self.trial
        heading = self.title or f"Training report: {self.job.name if self.job else trial.name}"
        sections = [
            section("Job and rules" if self.job else "Rules", self._rules_section, trial, "rules"),
            section("Losses and metrics", self._curves, trial, "curves"),
            section("Layer health", self._health, trial, "health"),
            section("Activations (TensorPlot)", self._activations, trial, "activations"),
        ]
        return page(heading, trial, "steps", sections, self.location)


def training_report(
    trial: Trial | str | os.PathLike[str],
    job: JobRecord | str | os.PathLike[str] | None = None,
    rules: Sequence[Rule] | None = None,
    title: str | None = None,
    judge_steps: int | None = None,
    location: str | None = None,
) -> str:
    """The report as one HTML page (see the module docstring); ``judge_steps``: see
    :class:`TrainingReport`; ``location`` names where the trial is (see
    :func:`~tensortap.report._page.page`)."""
    if not isinstance(trial, Trial):
        trial = create_trial(trial, records=False)
    if job is not None and not isinstance(job, JobRecord):
        job = JobRecord(job)
        if not job.exists():  # a clear error if it is not a job directory
            job.job()
    trial = report_trial(trial, job is not None, rules, judge_steps)
    return TrainingReport(trial, job, rules, title, judge_steps, location).html()


def write_training_report(
    trial: Trial | str | os.PathLike[str],
    out: str | os.PathLike[str],
    job: JobRecord | str | os.PathLike[str] | None = None,
    **kwargs: Any,
) -> Path:
    """Write the report to ``out`` (an .html file); returns its path."""
    path = Path(out)
    path.write_text(training_report(trial, job, **kwargs), encoding="utf-8")
    return path


__all__ = [
    "TrainingReport",
    "default_rules",
    "report_trial",
    "scalar_charts",
    "training_report",
    "write_training_report",
]
