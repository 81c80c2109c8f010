"""What a person watching a job sees: notable events as lines, and (in a terminal) a compact
table of training progress and rule statuses updated in place; the summary at the end.

Not a terminal (a log file, CI, a notebook): the events and status changes as plain lines.
The view only reads the job's record and trial; nothing it meets stops the job.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, TextIO

from tensortap.jobs._hints import next_steps
from tensortap.jobs._record import JobRecord
from tensortap.rules._verdict import Diagnosis, job_diagnosis

_NOTABLE = {
    "training_started": "training started (pid {pid})",
    "rules_chosen": "{message}",
    "training_unwatched": "{message}",
    "rule_fired": "{rule} fired at step {step}: {message}",
    "rule_error": "{rule} failed at step {step}: {message}",
    "action": "{rule}: {action}: {result}",
    "action_failed": "{rule}: action {action} failed: {error}",
    "stop_requested": "stop requested ({reason}); training stops at its next step",
    "rollback": "{message}",
    "rollback_refused": "{message}",
    "rollback_decision": "rollback: {message}",
    "suspect_rank": "{message}",
    "checkpoint_refused": "{message}",
    "checkpoint_fallback": "{message}",
    "checkpoint_resumed": "{message}",
    "save_budget": "{message}",
    "training_terminated": "training did not stop within {after_secs:g} s; terminating it",
    "training_ended": "training ended: {status} (exit code {exit_code})",
}


class LiveView:
    """``training_output``: the training script's own output (its log) is shown as it comes,
    between the events, as SageMaker's ``fit`` streams the training log."""

    def __init__(self, record: JobRecord, out: TextIO, training_output: bool = True) -> None:
        self.record, self.out, self.training_output = record, out, training_output
        self._log_offset = 0
        self._partial = b""
        self.tty = bool(getattr(out, "isatty", lambda: False)())
        self._offset = 0
        self._drawn = 0
        self._shown: list[str] = []
        self._statuses: dict[str, str] = {}
        self._trial: Any = None
        self._progress = ""
        self._last_progress = 0.0

    # -- pieces --
    def _log_lines(self, final: bool = False) -> list[str]:
        """New whole lines of the training log (the rest of a line waits for its end, unless
        ``final``)."""
        if not self.training_output:
            return []
        try:  # read as a job's files are: never a symlink out of it, a FIFO or a device
            data = self.record.read(self.record.training_log, 1 << 20, offset=self._log_offset)
        except OSError:
            return []
        self._log_offset += len(data)
        data = self._partial + data
        cut = len(data) if final else data.rfind(b"\n") + 1
        self._partial = data[cut:]
        text = data[:cut].decode("utf-8", errors="replace")
        return text.splitlines()

    def _events(self) -> list[str]:
        events, self._offset = self.record.events(self._offset)
        lines = []
        for event in events:
            template = _NOTABLE.get(event.get("event", ""))
            if template is None:
                continue
            try:
                lines.append(template.format(**event))
            except (KeyError, ValueError):
                lines.append(str(event))
            if event.get("event") == "training_ended" and event.get("failure"):
                lines[-1] += f": {event['failure']}"  # how it failed (jobs._failure)
            if (
                event.get("event") == "training_ended"
                and event.get("log_tail")
                and not self.training_output  # else its lines were shown as they came
            ):
                lines.append("last lines of the training log:\n" + event["log_tail"])
        return lines

    def _training_progress(self) -> str:
        now = time.monotonic()
        if now - self._last_progress < 1.0:
            return self._progress
        self._last_progress = now
        try:
            if self._trial is None:
                from tensortap.trials._trial import create_trial

                # not before training wrote it (a warning would break the view); then it fills in
                self._trial = create_trial(self.record.trial_location, must_exist=True)
            trial = self._trial
            steps = trial.steps(show_incomplete_steps=True)
            text = f"step {steps[-1]}" if steps else "no step saved yet"
            losses = trial.tensor_names(collection="losses")
            if losses:
                tensor = trial.tensor(losses[0])
                saved = tensor.steps()
                if saved:
                    loss = float(tensor.value(saved[-1]).mean())
                    text += f", {losses[0]} {loss:.4g} (step {saved[-1]})"
            self._progress = text
        except Exception:  # a view never breaks the job; try again next time
            pass
        return self._progress

    def _table(self, summary: dict[str, Any]) -> list[str]:
        training = summary.get("training", {}).get("status") or "starting"
        progress = self._training_progress()
        lines = [
            f"job {self.record.name}: training {training.lower()}"
            + (f"; {progress}" if progress else "")
        ]
        for rule in by_gravity(summary.get("rules", [])):
            name = rule.get("RuleConfigurationName")
            fired = rule.get("gravest_step", rule.get("first_fired_step"))
            more = f" (first at step {fired})" if fired is not None else ""
            lines.append(f"  {name:<28} {status_text(rule)}{more}  [{steps_judged(rule)}]")
        return lines

    # -- drawing --
    def update(self, summary: dict[str, Any], final: bool = False) -> None:
        output = self._log_lines(final)
        lines = self._events()
        if self.tty:
            table = self._table(summary)
            if not lines and not output and table == self._shown:
                return  # nothing new: leave the screen alone
            self._clear()
            for line in output:
                self.out.write(line + "\n")
            for line in lines:
                self.out.write(f"[tensortap] {line}\n")
            self.out.write("\n".join(table) + "\n")
            self._drawn, self._shown = len(table), table
        else:
            for line in output:
                self.out.write(line + "\n")
            for line in lines:
                self.out.write(f"[tensortap] {line}\n")
            for rule in summary.get("rules", []):
                name, status = rule.get("RuleConfigurationName"), rule.get("RuleEvaluationStatus")
                if self._statuses.get(name) != status:
                    self._statuses[name] = status
                    self.out.write(f"[tensortap] rule {name}: {status}\n")
        self.out.flush()

    def _clear(self) -> None:
        if self._drawn:
            self.out.write(f"\x1b[{self._drawn}F\x1b[J")
            self._drawn = 0

    def finish(self, summary: dict[str, Any]) -> None:
        self.update(summary, final=True)
        if self.tty:
            self._clear()
        self.out.write(render_summary(self.record, summary) + "\n")
        self.out.flush()


def judged_count(rule: Mapping[str, Any]) -> int:
    """The steps whose saved data a rule read (``judged``; an older record has only
    ``evaluated``), 0 for a rule that ended NoData: never a count of the steps it only walked
    (Keras's WeightUpdateRatio ended NoData "(49 steps judged)"). A count that is no whole
    number (a summary.json shared by someone else may hold anything) counts as none: the runs
    list, a run's page and the report still draw, the value is not shown as a count."""
    if rule.get("RuleEvaluationStatus") == "NoData":
        return 0
    value = rule.get("judged", rule.get("evaluated"))
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return 0
    try:
        return max(int(value), 0)
    except (ValueError, OverflowError):  # "<script>...", "inf", NaN
        return 0


def steps_judged(rule: Mapping[str, Any]) -> str:
    """``12 steps judged``, or ``no step judged``."""
    count = judged_count(rule)
    if count == 0:
        return "no step judged"
    return f"{count} step{'' if count == 1 else 's'} judged"


_GRAVITY = {"problem": 0, "Error": 1, "NoData": 2, "warning": 3, "advice": 4}


def by_gravity(rules: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rule statuses, the gravest first: problems, errors, rules that judged nothing,
    warnings, advice, then the rest (in their order)."""
    return sorted(
        rules,
        key=lambda r: _GRAVITY.get(r.get("severity") or r.get("RuleEvaluationStatus") or "", 9),
    )


def status_text(rule: dict[str, Any], demoted: str | None = None) -> str:
    """``IssuesFound (problem)``: the status, with the gravest severity of what fired, and
    why the diagnosis takes a problem as a warning when it does (``demoted``)."""
    status = str(rule.get("RuleEvaluationStatus"))
    if not rule.get("severity"):
        return status
    if demoted and rule["severity"] == "problem":
        return f"{status} (problem, a warning here: {demoted})"
    return f"{status} ({rule['severity']})"


def diagnosis_lines(summary: dict[str, Any], diagnosis: Diagnosis | None = None) -> list[str]:
    """The job's verdict: its root cause first with the fix to try, other causes after it."""
    found = (diagnosis or job_diagnosis(summary)).to_dict()
    lines = [f"  diagnosis: {found.get('headline')}"]
    for i, problem in enumerate(found.get("problems", [])):
        if i:
            lines.append(f"  also: {problem.get('headline')}")
        lines.append(f"    try: {problem.get('fix')}")
    return lines


def checkpoint_lines(record: JobRecord) -> list[str]:
    """What the checkpoint guard did in the training (its ``checkpoint_*`` events): the saves
    refused, the checkpoint kept, the resumes sent elsewhere."""
    events = [e for e in record.iter_events() if str(e.get("event", "")).startswith("checkpoint_")]
    refused = [e for e in events if e["event"] == "checkpoint_refused"]
    lines = []
    if refused:
        # a step of several refused saves (the trainer's, the script's); under DDP every rank
        # records the one save they refused together: a step counts its most on one rank
        by_rank: dict[tuple[str, str], int] = {}
        for e in refused:
            key = (str(e.get("step")), str(e.get("rank", 0)))
            by_rank[key] = by_rank.get(key, 0) + 1
        at: dict[str, int] = {}
        for (step, _), n in by_rank.items():
            at[step] = max(at.get(step, 0), n)
        shown = list(at.items())
        steps = ", ".join(f"{s} x{n}" if n > 1 else s for s, n in shown[:8])
        more = f" and {len(shown) - 8} more steps" if len(shown) > 8 else ""
        line = (
            f"  checkpoints: {sum(at.values())} save(s) refused (step {steps}{more}): "
            f"{refused[0].get('reason')}"
        )
        pinned = [e for e in events if e["event"] == "checkpoint_pinned"]
        if pinned:
            line += f"; kept: the checkpoint of step {pinned[-1].get('step')}"
            line += f" ({pinned[-1].get('checkpoint')})"
        lines.append(line)
    for event in events:
        if event["event"] in ("checkpoint_fallback", "checkpoint_resumed"):
            lines.append(f"  checkpoints: {event.get('message')}")
    return lines


def save_budget_lines(record: JobRecord) -> list[str]:
    """What the save budget did to the job's default schedule (its ``save_budget`` events),
    when it did anything: a trial with fewer tensor steps than every 10th says why."""
    events = [e for e in record.iter_events() if e.get("event") == "save_budget"]
    if not events:
        return []
    last = events[-1]
    widest = max(int(e.get("new_interval") or 0) for e in events)
    percent = float(last.get("budget") or 0) * 100
    return [
        f"  save budget ({percent:g}% of training time for the default tensor saves): their "
        f"TRAIN interval changed {len(events)} time(s), widest every {widest} steps, last at "
        f"step {last.get('step')} to every {last.get('new_interval')} (vital signs: every "
        "step; --save-budget off keeps the job's interval)"
    ]


def render_summary(record: JobRecord, summary: dict[str, Any]) -> str:
    """The job's summary as text: training's outcome, each rule's, and where to look next."""
    training = summary.get("training", {})
    lines = [
        f"job {summary.get('job', record.name)}: {summary.get('status')}",
        f"  training: {training.get('status')} (exit code {training.get('exit_code')}); "
        f"log: {training.get('log')}",
    ]
    if training.get("log_tail"):
        lines.append("  last lines of the training log:")
        lines += [f"    | {line}" for line in training["log_tail"].splitlines()]
    diagnosis = job_diagnosis(summary)
    demoted = diagnosis.demoted()
    lines += diagnosis_lines(summary, diagnosis)
    lines += checkpoint_lines(record)
    lines += save_budget_lines(record)
    lines.append("  rules (problems first):")
    for rule in by_gravity(summary.get("rules", [])):
        status = rule.get("RuleEvaluationStatus")
        name = rule.get("RuleConfigurationName")
        line = f"    {name:<28} {status_text(rule, demoted.get(str(name)))}"
        step = rule.get("gravest_step", rule.get("first_fired_step"))
        if step is not None:
            line += f" at step {step}: {rule.get('gravest_message') or rule.get('message')}"
        elif status in ("Error", "Stopped", "NoData") and rule.get("StatusDetails"):
            line += f": {str(rule['StatusDetails']).splitlines()[0][:300]}"
        line += f"  ({steps_judged(rule)})"
        lines.append(line)
    lines += [
        f"  trial (debugger artifacts): {summary.get('trial', record.trial_location)}",
        f"  rule logs: {record.dir / 'logs' / 'rules'}",
        "next:",
        *(f"  {line}" for line in next_steps(record)),
    ]
    return "\n".join(lines)
