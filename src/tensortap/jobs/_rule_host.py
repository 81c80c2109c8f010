"""A process that evaluates rules of a job beside training, reading the trial live.

``python -m tensortap.jobs._rule_host JOB_DIR RULE [RULE ...]`` (started by the supervisor).
The built-in rules of a job share one host process (one trial, one read per step for all of
them); each custom rule gets its own, so that a custom rule that hangs or crashes the
interpreter affects no other rule. Hosts run at a lower CPU priority than training.

For each rule the host writes its status to ``rules/NAME.json`` and its log to
``logs/rules/NAME.log``, and appends to the job's events: the rule's status changes, the first
time it fires (and what its actions did), and errors with their traceback.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from datetime import datetime, timezone
from typing import Any

from tensortap.format._layout import WORKERS_PREFIX
from tensortap.jobs._actions import ActionContext
from tensortap.jobs._record import JobRecord, write_json
from tensortap.jobs._specs import JobRule
from tensortap.rules._finding import Finding, Outcome
from tensortap.rules._invoker import RuleStatus, RuleSummary, iter_findings_many
from tensortap.rules._rule import Rule
from tensortap.trials._trial import Trial, create_trial

STOPPED = "Stopped"
TRAINING_ENDED_FILE = "training_ended"


class HostedRule:
    """One rule of the job: its rule object, summary, log and actions."""

    def __init__(self, record: JobRecord, spec: JobRule, job_name: str) -> None:
        self.record, self.spec, self.job_name = record, spec, job_name
        self.summary = RuleSummary(spec.name)
        self.rule: Rule | None = None
        self.fired_once = False
        self.details = ""
        self.status_text: str = RuleStatus.IN_PROGRESS.value
        self._last_write = 0.0
        self.logger = logging.getLogger(f"tensortap.rules.{spec.name}")
        handler = logging.FileHandler(record.rule_log(spec.name), encoding="utf-8")
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
        self.logger.addHandler(handler)
        self.logger.setLevel(logging.INFO)
        self.logger.propagate = False

    def build(self, trial: Trial) -> bool:
        spec = self.spec
        try:
            rule = spec.create(trial)
        except (Exception, SystemExit) as exc:
            self._error(-1, f"the rule could not be created: {type(exc).__name__}: {exc}", exc)
            return False
        rule.logger = self.logger
        self.rule = rule
        self.logger.info("started %s (%s) with %s", spec.name, spec.class_name, spec.parameters)
        self.record.append_event("rule_started", rule=spec.name, pid=os.getpid())
        self.write_status(force=True)
        return True

    def handle(self, finding: Finding) -> None:
        self.summary.add(finding)
        if finding.outcome is Outcome.ERROR:
            self.logger.error(
                "error at step %s: %s\n%s", finding.step, finding.message, finding.traceback
            )
            self._error(finding.step, finding.message, None, finding.traceback)
            return
        if finding.triggered:
            self.logger.warning("%s", finding)
            first = not self.fired_once
            self.fired_once = True
            if first:
                self.details = (
                    f"RuleEvaluationConditionMet: Evaluation of the rule {self.spec.name} at "
                    f"step {finding.step} resulted in the condition being met: {finding.message}"
                )
                self.status_text = RuleStatus.ISSUES_FOUND.value
                self.record.append_event("rule_fired", **self._finding_fields(finding))
                self.write_status(force=True)
            self._act(finding, first)
        self.write_status()

    def _finding_fields(self, finding: Finding) -> dict[str, Any]:
        data = finding.to_dict()
        data.pop("traceback", None)
        return {**data, "rule": self.spec.name, "job": self.job_name}

    def _act(self, finding: Finding, first: bool) -> None:
        context = ActionContext(str(self.record.dir), str(self.record.stop_file))
        for action in self.spec.actions:
            if not (first or action.every_time):
                continue
            try:
                done = action.run(self._finding_fields(finding), context)
            except Exception as exc:
                text = f"{type(exc).__name__}: {exc}"
                self.logger.error("action %s failed: %s", action.kind, text)
                self.record.append_event(
                    "action_failed", rule=self.spec.name, action=action.kind, error=text
                )
                continue
            self.logger.info("action %s: %s", action.kind, done)
            self.record.append_event(
                "action", rule=self.spec.name, action=action.kind, result=done, step=finding.step
            )

    def _error(
        self, step: int, message: str, exc: BaseException | None, tb: str | None = None
    ) -> None:
        if exc is not None:
            self.logger.exception("%s", message)
        self.status_text = RuleStatus.ERROR.value
        self.details = message
        self.record.append_event(
            "rule_error", rule=self.spec.name, step=step, message=message, traceback=tb
        )
        self.write_status(force=True)

    def finish(self, stopped: bool, unwatched: str = "") -> None:
        """End the rule; ``unwatched`` is why training saved nothing, when it said."""
        if self.status_text == RuleStatus.IN_PROGRESS.value:
            reason = self.rule.no_data_reason() if self.rule is not None else ""
            if unwatched and not self.summary.evaluated:
                reason = unwatched
            self.summary.finish(reason)
            self.status_text = STOPPED if stopped else self.summary.status.value
            self.details = self.summary.details
        if self.summary.judged or self.summary.triggered:
            self.logger.info(
                "ended: %s (%d steps evaluated, %d triggered, %d skipped)",
                self.status_text,
                self.summary.evaluated,
                self.summary.triggered,
                self.summary.skipped,
            )
        else:  # never a count of steps beside "nothing was judged"
            self.logger.info(
                "ended: %s (no step judged; %d skipped)", self.status_text, self.summary.skipped
            )
        self.record.append_event("rule_ended", rule=self.spec.name, status=self.status_text)
        self.write_status(force=True)

    def write_status(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last_write < 0.5:
            return
        self._last_write = now
        s = self.summary
        worst, gravest = s.worst_severity, s.gravest
        first = next((f for f in s.findings if f.triggered), None)
        write_json(
            self.record.rule_status_file(self.spec.name),
            {
                "RuleConfigurationName": self.spec.name,
                "RuleEvaluationStatus": self.status_text,
                "StatusDetails": self.details,
                "LastModifiedTime": datetime.now(timezone.utc).isoformat(),
                "rule_class": self.spec.class_name,
                "first_fired_step": None if first is None else first.step,
                "message": None if first is None else first.message,
                "severity": None if worst is None else worst.value,
                "severities": dict(s.severities),
                "gravest_step": None if gravest is None else gravest.step,
                "gravest_message": None if gravest is None else gravest.message,
                "gravest": None
                if gravest is None
                else {**self._finding_fields(gravest), "rule_class": self.spec.class_name},
                "evidence": [
                    {**self._finding_fields(f), "rule_class": self.spec.class_name}
                    for f in s.evidence
                ],
                "evaluated": s.evaluated,
                "judged": s.judged,
                "triggered": s.triggered,
                "skipped": s.skipped,
                "errors": s.errors,
                "last_step": s.last_step,
                "log": str(self.record.rule_log(self.spec.name)),
                "pid": os.getpid(),
            },
        )


def _watch(record: JobRecord, trial: Trial, stop: threading.Event) -> None:
    """Stop when training ended and wrote nothing at all (there will be no steps to wait for)."""
    store = trial.store  # its own listing, not the rules' trial object (another thread)
    while not stop.wait(0.5):
        ended = (record.dir / TRAINING_ENDED_FILE).exists()
        if ended and not store.list_dir(WORKERS_PREFIX):
            stop.set()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) < 2:
        print("usage: python -m tensortap.jobs._rule_host JOB_DIR RULE [RULE ...]", file=sys.stderr)
        return 2
    record = JobRecord(args[0])
    job = record.job()
    wanted = set(args[1:])
    specs = [JobRule.from_dict(r) for r in job["rules"] if r["name"] in wanted]
    try:
        os.nice(10)  # training comes first
    except OSError:
        pass
    stop = threading.Event()
    stopped_by_signal = threading.Event()

    def on_term(signum: int, frame: Any) -> None:
        stopped_by_signal.set()
        stop.set()

    signal.signal(signal.SIGTERM, on_term)
    trial = create_trial(record.trial_location, waiting=True)  # before training writes
    hosted = [HostedRule(record, spec, job["name"]) for spec in specs]
    ready = [h for h in hosted if h.build(trial)]
    by_name = {h.spec.name: h for h in ready}
    threading.Thread(target=_watch, args=(record, trial, stop), daemon=True).start()
    rules = [h.rule for h in ready if h.rule is not None]
    for finding in iter_findings_many(rules, poll_interval=0.2, stop=stop):
        by_name[finding.rule].handle(finding)
    said = [e for e in record.iter_events() if e.get("event") == "training_unwatched"]
    unwatched = str(said[-1].get("message", "")) if said else ""
    for h in ready:
        h.finish(stopped=stopped_by_signal.is_set(), unwatched=unwatched)
    return 0


if __name__ == "__main__":
    sys.exit(main())
