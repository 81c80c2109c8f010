"""One task of :func:`tensortap.scale.run_rules`: some rules over one trial (or a range of its
steps), in whatever process or Ray worker runs it. Everything it takes and returns is plain
data (locations, rule specs, dicts), so that any engine can ship it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tensortap.core._process_tree import (
    end_tree,
    guarded_keeper_command,
    hold_own_tree,
    reap_children,
)
from tensortap.rules._finding import Finding, Outcome
from tensortap.rules._invoker import RuleSummary, walk
from tensortap.rules._spec import RuleSpec
from tensortap.trials._trial import Trial


@dataclass(frozen=True)
class Task:
    """Evaluate ``rules`` on the trial at ``location`` over global steps [start, end)."""

    run: str
    location: str
    rules: tuple[RuleSpec, ...]
    start: int = 0
    end: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "run": self.run,
            "location": self.location,
            "rules": [spec.to_dict() for spec in self.rules],
            "start": self.start,
            "end": self.end,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Task:
        rules = tuple(RuleSpec.from_dict(r) for r in data["rules"])
        return cls(data["run"], data["location"], rules, data["start"], data["end"])


def evaluate(task: Task) -> dict[str, list[dict[str, Any]]]:
    """Run the task; ``{"summary": one row per rule, "findings": a row per triggered or failed
    evaluation}``. A trial that cannot be opened or a rule that cannot be built gives Error rows,
    never an exception: one bad trial must not sink a thousand."""
    started = time.perf_counter()
    where = {"run": task.run, "trial": task.location, "start": task.start, "end": task.end}
    try:
        trial = Trial(task.location)
    except Exception as exc:
        return _failed(task, where, f"the trial could not be opened: {type(exc).__name__}: {exc}")
    rules, summaries, rows = [], {}, []
    for spec in task.rules:
        try:
            rule = spec.create(trial)
        except Exception as exc:
            summary = RuleSummary(spec.name)
            reason = f"the rule could not be created: {type(exc).__name__}: {exc}"
            summary.add(_error(spec.name, reason))
            summary.details = reason
            summaries[spec.name] = summary
            continue
        rules.append(rule)
        summaries[spec.name] = RuleSummary(spec.name, max_kept=0)
    if rules:
        # quiet steps counted in runs (only what fired or failed becomes a row)
        for finding in walk(rules, task.start, task.end, timeout=0.0):
            summaries[finding.rule].add(finding)
            if finding.outcome is Outcome.ERROR and not summaries[finding.rule].details:
                summaries[finding.rule].details = finding.message  # the first error's reason
            fired_or_failed = finding.outcome in (Outcome.TRIGGERED, Outcome.ERROR)
            if fired_or_failed and isinstance(finding, Finding):
                rows.append({**where, **_finding_row(finding)})
    seconds = time.perf_counter() - started
    summary_rows = [
        {**where, **_summary_row(s.finish()), "seconds": seconds} for s in summaries.values()
    ]
    return {"summary": summary_rows, "findings": rows}


def _failed(
    task: Task, where: dict[str, Any], message: str, seconds: float = 0.0
) -> dict[str, list[dict[str, Any]]]:
    rows = []
    for spec in task.rules:
        summary = RuleSummary(spec.name)
        summary.add(_error(spec.name, message))
        rows.append(
            {**where, **_summary_row(summary.finish()), "details": message, "seconds": seconds}
        )
    return {"summary": rows, "findings": []}


def failed(task: Task, message: str, seconds: float = 0.0) -> dict[str, list[dict[str, Any]]]:
    """The rows of a task that gave no answer of its own (it crashed, exited, ran out of time):
    an Error row per rule, the reason in ``details``."""
    where = {"run": task.run, "trial": task.location, "start": task.start, "end": task.end}
    return _failed(task, where, message, seconds)


STARTED = "started"  # what a worker process says when it begins a task


def serve(conn: Any) -> None:
    """A worker process of the local engine: evaluate each task received on ``conn`` and send
    its rows back, until the connection closes. Anything escaping a task (it should not) is
    that task's Error rows; a crash or an exit ends the process, which the parent sees.

    The process is the root of its own tree (process group, subreaper): the parent ends the
    tree with it, and what a task leaves running (a rule's child process) ends with the task."""
    hold_own_tree()
    while True:
        try:
            task = conn.recv()
        except (EOFError, OSError):
            return
        conn.send(STARTED)  # the task's time limit counts from here
        started = time.perf_counter()
        try:
            answer = evaluate(task)
        except BaseException as exc:  # reported as the task's rows
            reason = f"the task failed: {type(exc).__name__}: {exc}"
            answer = failed(task, reason, time.perf_counter() - started)
        end_tree(os.getpid(), include_root=False, reap=reap_children)
        conn.send(answer)


#: Seconds a task's new process may take to start (the interpreter and its imports) on top of
#: its time limit, which counts from when it began the task.
STARTUP = 120.0


def evaluate_in_tree(
    task: Task, time_limit: float | None = None
) -> dict[str, list[dict[str, Any]]]:
    """Run the task in a child process under a keeper (:mod:`tensortap.core._process_tree`),
    one step removed from this process by a guard: what a rule starts stays in the keeper's
    tree, however it detaches, and the whole tree ends when the task ends, and also when this
    process is killed (a Ray task cancelled: Ray kills its worker process and the worker's
    direct children, the guard, not what the rule started; the keeper then sees its parent
    gone). The task and its rows travel as JSON files in a private temporary directory (never
    pickled).

    ``time_limit`` counts from when the child began the task (it says so by a file beside the
    task's), not from its start: a loaded machine's interpreter start and imports, several
    seconds, are no part of the task's time (they get :data:`STARTUP` more). A task past it is
    stopped with its whole tree and gives Error rows saying so."""
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="tensortap-task-") as tmp:
        given, rows = Path(tmp) / "task.json", Path(tmp) / "rows.json"
        given.write_text(json.dumps(task.to_dict()), encoding="utf-8")
        command = [sys.executable, "-m", "tensortap.scale._tasks", str(given), str(rows)]
        with tempfile.TemporaryFile() as errors:
            proc = subprocess.Popen(
                guarded_keeper_command(command),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=errors,
            )
            if not _finished(proc, given.with_name(_BEGAN), started, time_limit):
                proc.kill()  # the guard: its keeper sees it gone and ends the whole tree
                proc.wait()
                return failed(
                    task,
                    f"the task exceeded its time limit of {time_limit:g} s and was stopped "
                    "(its process tree killed); give run_rules a larger time_limit if it "
                    "needs longer",
                    time.monotonic() - started,
                )
            errors.seek(0)
            stderr = errors.read()
        if proc.returncode == 0 and rows.is_file():
            answer: dict[str, list[dict[str, Any]]] = json.loads(rows.read_text("utf-8"))
            return answer
    last = stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or [""]
    code = proc.returncode
    how = (
        f"was killed by {signal.Signals(-code).name if -code in signal.valid_signals() else -code}"
        if code < 0
        else f"exited with code {code}"
    )
    return failed(
        task,
        f"the task's process {how} while evaluating the rules (it crashed or exited: a rule "
        f"called os._exit, or it ran out of memory; {last[0][:300]}); the other tasks went on",
        time.monotonic() - started,
    )


_BEGAN = "began"  # the file a task's process writes beside the task's when it begins it


def _finished(
    proc: subprocess.Popen[bytes], began: Path, started: float, time_limit: float | None
) -> bool:
    """Wait for ``proc`` to end; False once it ran past ``time_limit`` seconds from when it
    wrote ``began`` (past ``time_limit`` + :data:`STARTUP` from ``started`` until then)."""
    if time_limit is None:
        proc.wait()
        return True
    deadline, counting = started + time_limit + STARTUP, False
    while True:
        if not counting and began.exists():
            deadline, counting = time.monotonic() + time_limit, True
        try:
            proc.wait(timeout=max(0.0, min(0.1, deadline - time.monotonic())))
            return True
        except subprocess.TimeoutExpired:
            if time.monotonic() >= deadline:
                return False


def main(argv: list[str]) -> int:
    """``python -m tensortap.scale._tasks TASK.json ROWS.json``: what
    :func:`evaluate_in_tree` runs under its keeper."""
    given, rows = Path(argv[0]), Path(argv[1])
    task = Task.from_dict(json.loads(given.read_text("utf-8")))
    given.with_name(_BEGAN).touch()  # the task's time limit counts from here
    started = time.perf_counter()
    try:
        answer = evaluate(task)
    except Exception as exc:  # reported as the task's rows
        answer = failed(
            task, f"the task failed: {type(exc).__name__}: {exc}", time.perf_counter() - started
        )
    partial = rows.with_name(rows.name + ".tmp")
    partial.write_text(json.dumps(answer, default=str), encoding="utf-8")
    partial.replace(rows)
    return 0


def _error(rule: str, message: str) -> Finding:
    return Finding(rule, -1, Outcome.ERROR, message, traceback=traceback.format_exc())


def _summary_row(summary: RuleSummary) -> dict[str, Any]:
    worst = summary.worst_severity
    return {
        "rule": summary.rule,
        "status": summary.status.value,
        "evaluated": summary.evaluated,
        "triggered": summary.triggered,
        "skipped": summary.skipped,
        "first_step": summary.first_step,
        "last_step": summary.last_step,
        "worst_severity": None if worst is None else worst.value,
        "details": summary.details,
    }


def _finding_row(finding: Finding) -> dict[str, Any]:
    return {
        "rule": finding.rule,
        "step": finding.step,
        "mode": None if finding.mode is None else finding.mode.name,
        "mode_step": finding.mode_step,
        "outcome": finding.outcome.value,
        "severity": None if finding.severity is None else finding.severity.value,
        "message": finding.message,
        "value": None if finding.value is None else float(finding.value),
        "tensors": list(finding.tensors),
    }


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
