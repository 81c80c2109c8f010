"""What every report page shares: the style, sections that cannot spoil each other, and the
table of what the rules found over a trial."""

from __future__ import annotations

import html
import time
from collections.abc import Callable, Sequence

from tensortap.diagnosis import Diagnosis, judge_trial
from tensortap.exceptions import TensortapError
from tensortap.report._colours import css
from tensortap.rules._finding import Outcome, Severity
from tensortap.rules._invoker import RuleSummary
from tensortap.rules._rule import Rule
from tensortap.trials._trial import Trial

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1180px; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.15em; margin-top: 2em; border-bottom: 1px solid #ccc; }
.charts { display: flex; flex-wrap: wrap; gap: 12px; }
table { border-collapse: collapse; margin: 0.5em 0; }
td, th { border: 1px solid #bbb; padding: 3px 8px; text-align: right; font-size: 0.9em; }
th { background: #f0f0f0; } td.text { text-align: left; }
""" + css()  # the colours of every page (the dashboard's too)

Row = tuple[str, str, str, str, str, str]  # rule, status, first fired, evaluated, counts, why


def section(title: str, build: Callable[[Trial], str], trial: Trial, anchor: str = "") -> str:
    """One ``<h2>`` section; an error while building it is shown there and spoils no other."""
    try:
        body = build(trial)
    except (TensortapError, ValueError, IndexError, LookupError) as exc:
        body = f"<p>Could not draw this section: {html.escape(str(exc))}</p>"
    ident = f" id='{anchor}'" if anchor else ""
    return f"<h2{ident}>{html.escape(title)}</h2><div class='charts'>{body}</div>"


def page(
    heading: str, trial: Trial, what: str, sections: Sequence[str], location: str | None = None
) -> str:
    """A whole self-contained page: ``what`` says what the trial's steps are; ``location``
    names where the trial is (its path when None; a trial imported into a temporary
    directory names its source, as the temporary directory is gone when the page is read)."""
    steps = trial.steps()
    span = f" ({steps[0]} to {steps[-1]})" if steps else ""
    where = trial.path if location is None else location
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        f"<title>{html.escape(heading)}</title><style>{STYLE}</style></head><body>"
        f"<h1>{html.escape(heading)}</h1>"
        f"<p>Trial {html.escape(where)}: {len(steps)} saved {what}{span}; made "
        f"{time.strftime('%Y-%m-%d %H:%M')}.</p>{''.join(sections)}</body></html>"
    )


def rule_rows(rows: Sequence[Row], link_steps: bool) -> str:
    """The rules table from (rule, status, first step, steps judged, triggered or skipped,
    why) rows; with ``link_steps`` a first step links to the curves where it is marked."""
    body = []
    for rule, status, first, evaluated, counted, why in rows:
        # every cell may come from a job's summary.json: escaped, like every value of a
        # trial or a job in a page
        shown = html.escape(first)
        step = f"<a href='#curves'>{shown}</a>" if link_steps and first else shown
        body.append(
            f"<tr><td class='text'>{html.escape(rule)}</td>"
            f"<td class='text {html.escape(_classes(status))}'>{html.escape(status)}</td>"
            f"<td>{step}</td><td>{html.escape(evaluated)}</td><td>{html.escape(counted)}</td>"
            f"<td class='text'>{html.escape(why)}</td></tr>"
        )
    return (
        "<table><tr><th>rule</th><th>status</th><th>first fired</th><th>steps judged</th>"
        f"<th>fired / skipped</th><th>why</th></tr>{''.join(body)}</table>"
    )


def _classes(status: str) -> str:
    """A status's CSS classes: ``IssuesFound (advice)`` -> ``IssuesFound advice``, so that a
    label's severity sets its colour as on the dashboard."""
    word, _, rest = status.partition(" ")
    severity = rest.strip("()")
    return f"{word} {severity}" if severity in ("problem", "warning", "advice") else word


def evaluate_rules(trial: Trial, rules: Sequence[Rule]) -> list[Row]:
    """Run each rule over every saved step; a row per rule for :func:`rule_rows`, the gravest
    first, each with its gravest finding (or why it judged nothing)."""
    return summary_rows(judge_trial(trial, rules))


def summary_rows(summaries: Sequence[RuleSummary]) -> list[Row]:
    """A row per finished rule summary for :func:`rule_rows`, the gravest first."""
    rows = []
    for summary in summaries:
        worst, gravest = summary.worst_severity, summary.gravest
        error = next((f for f in summary.findings if f.outcome is Outcome.ERROR), None)
        why = gravest.message if gravest else (error.message if error else summary.details)
        fired = sum(f.outcome is Outcome.TRIGGERED for f in summary.findings)
        status = summary.status.value + (f" ({worst.value})" if worst else "")
        rank = _rank(summary.status.value, worst)
        rows.append(
            (
                rank,
                (
                    summary.rule,
                    status,
                    "" if gravest is None else str(gravest.step),
                    # never the walked, nor a count beside "nothing was judged"
                    str(summary.judged) if summary.judged and status != "NoData" else "none",
                    f"{fired} / {summary.skipped}",
                    why,
                ),
            )
        )
    return [row for _, row in sorted(rows, key=lambda r: r[0])]


def diagnosis_block(found: Diagnosis) -> str:
    """The run's verdict: its root cause first, the fix to try, and the evidence by step."""
    css = {"healthy": "NoIssuesFound", "unknown": "NoData"}.get(found.verdict, "IssuesFound")
    parts = [f"<p class='{css}'>Diagnosis: {html.escape(found.headline())}</p>"]
    for i, problem in enumerate(found.problems):
        if i:
            parts.append(f"<p class='IssuesFound'>Also: {html.escape(problem.headline())}</p>")
        items = "".join(
            f"<li><a href='#curves'>step {e.step}</a>, {html.escape(e.rule)}: "
            f"{html.escape(e.message)}</li>"
            for e in (*problem.evidence, *problem.consequences)
        )
        parts.append(f"<p>Try: {html.escape(problem.cause.fix)}</p><ul>{items}</ul>")
    if found.warnings:
        items = "".join(
            f"<li>step {e.step}, {html.escape(e.rule)} ({e.severity}): "
            f"{html.escape(e.message)}</li>"
            for e in found.warnings
        )
        parts.append(f"<p>To look at (not problems):</p><ul>{items}</ul>")
    return "<div class='diagnosis'>" + "".join(parts) + "</div>"


def _rank(status: str, worst: Severity | None) -> int:
    """Gravest first: problems, errors, NoData, warnings, advice, the rest."""
    if worst is Severity.PROBLEM:
        return 0
    return {"Error": 1, "NoData": 2}.get(status, 3 + (worst.rank if worst else 3))


__all__ = [
    "STYLE",
    "diagnosis_block",
    "evaluate_rules",
    "page",
    "rule_rows",
    "section",
    "summary_rows",
]
