"""Walk a trial's steps with a rule, also while training still writes them.

:func:`iter_findings` yields a :class:`Finding` for every evaluation; :func:`invoke_rule` (the
smdebug entry point) runs it to the end and returns a :class:`RuleSummary`.
"""

from __future__ import annotations

import bisect
import enum
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tensortap.exceptions import InvalidConfigError, RuleError, RuleEvaluationConditionMet
from tensortap.rules._engine import QuietRuns, answered, judge_steps
from tensortap.rules._finding import Finding, Outcome, Severity, StepRun
from tensortap.rules._rule import Rule

if TYPE_CHECKING:
    from tensortap.trials._trial import Trial

logger = logging.getLogger(__name__)

_FIRST_PAUSE = 0.005
#: The findings of one rule kept as evidence beside its gravest (see RuleSummary.evidence).
MAX_EVIDENCE = 3


class RuleStatus(str, enum.Enum):
    """Where a rule stands: the names smdebug's rule jobs reported, and ``NoData`` for a rule
    that ended without judging anything (it never says NoIssuesFound about data it never saw).
    """

    IN_PROGRESS = "InProgress"
    NO_ISSUES_FOUND = "NoIssuesFound"
    ISSUES_FOUND = "IssuesFound"
    ERROR = "Error"
    NO_DATA = "NoData"


@dataclass
class RuleSummary:
    """What a rule found over the steps it walked. ``judged`` counts the evaluations that read
    saved data (or fired); a rule that ends with none ends ``NoData``, ``details`` saying why.
    """

    rule: str
    status: RuleStatus = RuleStatus.IN_PROGRESS
    evaluated: int = 0  # evaluations that gave an answer (ok or triggered)
    judged: int = 0  # of those, the ones that read saved data or fired
    triggered: int = 0
    severities: Counter[str] = field(default_factory=Counter)  # triggered, by severity
    details: str = ""
    skipped: int = 0
    errors: int = 0
    first_step: int | None = None
    last_step: int | None = None
    findings: list[Finding] = field(default_factory=list)  # triggered and error findings
    skip_reasons: Counter[str] = field(default_factory=Counter)
    max_kept: int = 1000

    def add(self, finding: Finding | StepRun) -> None:
        """Count one finding (a runner calls this for each one it gets), or each step of a
        :class:`StepRun` as its finding would count."""
        if isinstance(finding, StepRun):
            self._add_run(finding)
            return
        if finding.step >= 0:
            if self.first_step is None:
                self.first_step = finding.step
            self.last_step = max(finding.step, self.last_step or finding.step)
        if finding.outcome is Outcome.SKIPPED:
            self.skipped += 1
            self.skip_reasons[finding.message.split(";")[0][:200]] += 1
            return
        if finding.outcome is Outcome.ERROR:
            self.errors += 1
            self.status = RuleStatus.ERROR
        else:
            self.evaluated += 1
            self.judged += finding.judged
            if finding.triggered:
                self.triggered += 1
                self.severities[(finding.severity or Severity.PROBLEM).value] += 1
                if self.status is RuleStatus.IN_PROGRESS:
                    self.status = RuleStatus.ISSUES_FOUND
        if finding.outcome is not Outcome.OK and len(self.findings) < self.max_kept:
            self.findings.append(finding)

    def _add_run(self, run: StepRun) -> None:
        if not len(run):
            return
        if self.first_step is None:
            self.first_step = int(run.steps[0])
        self.last_step = max(int(run.steps[-1]), self.last_step or int(run.steps[-1]))
        if run.outcome is Outcome.SKIPPED:
            self.skipped += len(run)
            self.skip_reasons[run.message.split(";")[0][:200]] += len(run)
        else:
            self.evaluated += len(run)
            self.judged += len(run) if run.judged else 0

    @property
    def worst_severity(self) -> Severity | None:
        """The gravest severity among the triggered findings (None if none fired)."""
        found = [Severity(s) for s in self.severities]
        return min(found, key=lambda s: s.rank) if found else None

    @property
    def gravest(self) -> Finding | None:
        """The first triggered finding of the gravest severity: the one that speaks for the rule."""
        worst = self.worst_severity
        return next((f for f in self.findings if f.triggered and f.severity == worst), None)

    @property
    def evidence(self) -> list[Finding]:
        """The triggered findings that are evidence needing harm (``details["needs_harm"]``)
        other than the gravest, the first of each cause, at most ``MAX_EVIDENCE``: the
        diagnosis weighs them too, so a rule's earlier warning never hides them."""
        gravest = self.gravest
        seen: set[object] = set()
        found = []
        for f in self.findings:
            if not f.triggered or f is gravest or not (f.details or {}).get("needs_harm"):
                continue
            cause = (f.details or {}).get("cause")
            if cause in seen:
                continue
            seen.add(cause)
            found.append(f)
            if len(found) == MAX_EVIDENCE:
                break
        return found

    def finish(self, no_data_reason: str = "") -> RuleSummary:
        """End the walk: NoIssuesFound if the rule judged something and never fired, NoData
        if it judged nothing (``no_data_reason`` and the skip reasons say why)."""
        if self.status is RuleStatus.IN_PROGRESS:
            if self.judged:
                self.status = RuleStatus.NO_ISSUES_FOUND
            else:
                self.status = RuleStatus.NO_DATA
                why = [no_data_reason] if no_data_reason else []
                why += [f"skipped {n}x: {r}" for r, n in self.skip_reasons.most_common(3)]
                if not self.evaluated and not self.skipped:
                    why.append("training saved no step")
                self.details = "nothing was judged: " + "; ".join(why or ["no data"])
        return self

    def __str__(self) -> str:
        if self.judged or self.triggered:
            counts = (
                f"{self.evaluated} steps evaluated, {self.judged} judged data, "
                f"{self.triggered} triggered"
            )
        else:  # never a count of steps beside "nothing was judged"
            counts = f"no step judged; {self.evaluated} evaluations read no saved data"
        text = (
            f"{self.rule}: {self.status.value} ({counts}, {self.skipped} skipped, "
            f"{self.errors} errors)"
        )
        if self.details:
            text += f"; {self.details}"
        shown = self.gravest  # the first of the gravest findings, else the first error
        if shown is not None or self.findings:
            text += f"; first: {shown or self.findings[0]}"
        return text


def _check_rule(rule: object) -> None:
    if not isinstance(rule, Rule):
        raise InvalidConfigError(
            f"invoke_rule needs a Rule instance (a subclass of tensortap.rules.Rule), got {rule!r}"
        )


def iter_findings(
    rule: Rule,
    start_step: int | None = 0,
    end_step: int | None = None,
    *,
    poll_interval: float = 0.1,
    timeout: float | None = None,
    stop: threading.Event | None = None,
) -> Iterator[Finding]:
    """Evaluate ``rule`` at every saved global step in ``[start_step, end_step)``, in order.

    While training runs, waits for new steps (polling at most every ``poll_interval``
    seconds, sooner just after a step arrived); ends when training has ended and every step is
    evaluated, when ``stop`` is set, or when ``timeout`` seconds pass with no new step. A
    finding whose outcome is ERROR ends the walk (the rule's state is not to be trusted).
    """
    _check_rule(rule)
    yield from iter_findings_many(
        [rule], start_step, end_step, poll_interval=poll_interval, timeout=timeout, stop=stop
    )


def iter_findings_many(
    rules: Sequence[Rule],
    start_step: int | None = 0,
    end_step: int | None = None,
    *,
    poll_interval: float = 0.1,
    timeout: float | None = None,
    stop: threading.Event | None = None,
) -> Iterator[Finding]:
    """:func:`iter_findings` for several rules on one base trial, walked together: at each
    step every rule is evaluated in turn, and they share what the trial read for the step
    (its :class:`~tensortap.trials._step_block.StepBlock` is built once, however many rules
    read it and whatever other steps they look at: see ``Trial.holding_step``). A rule
    whose finding is an ERROR is retired; the others go on. The job's rule host, the report
    and ``judge_trial`` all walk this way."""
    for found in walk(
        rules,
        start_step,
        end_step,
        poll_interval=poll_interval,
        timeout=timeout,
        stop=stop,
        bulk=False,
    ):
        assert isinstance(found, Finding)
        yield found


def walk(
    rules: Sequence[Rule],
    start_step: int | None = 0,
    end_step: int | None = None,
    *,
    poll_interval: float = 0.1,
    timeout: float | None = None,
    stop: threading.Event | None = None,
    bulk: bool = True,
) -> Iterator[Finding | StepRun]:
    """:func:`iter_findings_many`, where (with ``bulk``) the engine judges each batch of
    published steps whole for the rules that declared what they read
    (:func:`~tensortap.rules._engine.judge_steps`), and every rule's quiet steps come out as
    :class:`StepRun` s: what a caller that only counts (a summary, the report) walks. What a
    rule says comes in step order (a run where its first step is); a run of quiet steps may
    come after what another rule said of a later step."""
    for rule in rules:
        _check_rule(rule)
    if not rules:
        return
    trial = rules[0].base_trial
    if any(r.base_trial is not trial for r in rules):
        raise InvalidConfigError("rules walked together must share one base trial object")
    active = list(rules)
    next_step = 0 if start_step is None else start_step
    pause = _FIRST_PAUSE
    last_new = time.monotonic()
    reported_wait: set[Rule] = set()
    last_step: int | None = None
    while active:
        with trial.no_refresh():
            steps = trial.steps()
            seen = trial.index_version
        i = bisect.bisect_left(steps, next_step)
        pending = [s for s in steps[i:] if end_step is None or s < end_step]
        stopped = yield from _judge_batch(trial, active, pending, bulk, stop)
        if stopped:
            return
        if not active:
            return
        if pending:
            next_step = pending[-1] + 1
            last_step = pending[-1]
            pause, last_new = _FIRST_PAUSE, time.monotonic()
            reported_wait.clear()
        if end_step is not None and next_step >= end_step:
            return
        # a rule's reads may have refreshed the trial while it judged: what they loaded (the
        # end of training with it) is new to the walk, though the walk's own look finds nothing
        if trial.refresh() or trial.index_version != seen:
            continue
        with trial.no_refresh():
            if trial.loaded_all_steps:  # nothing new since the steps above, and never will be
                yield from _at_end(active, last_step)
                return
        for rule in [r for r in active if r not in reported_wait]:
            waiting = rule.waiting_finding(last_step)  # once per rule per wait for a step
            if waiting is not None:
                reported_wait.add(rule)
                yield waiting
                if waiting.outcome is Outcome.ERROR:
                    active.remove(rule)
        if timeout is not None and time.monotonic() - last_new >= timeout:
            names = ", ".join(r.rule_name for r in active)
            logger.info("rules %s: no new step for %.1f s; stopping", names, timeout)
            return
        if stop is not None:
            if stop.wait(pause):
                return
        else:
            time.sleep(pause)
        pause = min(pause * 2, poll_interval)


def _at_end(active: list[Rule], last_step: int | None) -> Iterator[Finding]:
    """What the rules left unjudged when training ended (see :meth:`Rule.invoke_at_end`)."""
    for rule in list(active):
        found = rule.ending_finding(last_step)
        if found is not None:
            yield found


def _judge_batch(
    trial: Trial,
    active: list[Rule],
    pending: list[int],
    bulk: bool,
    stop: threading.Event | None,
) -> Generator[Finding | StepRun, None, bool]:
    """Judge ``pending`` (published steps, ascending) with the ``active`` rules, step by step
    (each step held once for all rules: see ``Trial.holding_step``). A rule judging in bulk
    hands its answers over as the walk reaches their steps, so what it evaluates one by one is
    read from the same held block as the others. A rule whose finding is an ERROR leaves
    ``active``. True when ``stop`` was set."""
    feeds = {rule: judge_steps(rule, pending) for rule in active if bulk and rule.judges_in_bulk}
    stepwise = [rule for rule in active if rule not in feeds]
    due = dict.fromkeys(feeds, pending[0] if pending else 0)  # the first step not answered
    # in bulk, the quiet steps of the rules evaluated step by step are said in runs too
    quiet = {rule: QuietRuns(rule) for rule in stepwise} if bulk else {}
    stopped = yield from _walk_batch(trial, active, pending, stop, feeds, stepwise, due, quiet)
    for runs in quiet.values():
        yield from runs.flush()
    return stopped


def _walk_batch(
    trial: Trial,
    active: list[Rule],
    pending: list[int],
    stop: threading.Event | None,
    feeds: dict[Rule, Iterator[Finding | StepRun]],
    stepwise: list[Rule],
    due: dict[Rule, int],
    quiet: dict[Rule, QuietRuns],
) -> Generator[Finding | StepRun, None, bool]:
    i = 0
    while i < len(pending) and (stepwise or feeds):
        step = pending[i]
        with trial.holding_step(step):  # one block of the step, for every rule
            for rule in [r for r in feeds if due[r] <= step]:
                while rule in feeds and due[rule] <= step:
                    try:
                        with trial.no_refresh():
                            found = next(feeds[rule], None)
                    except Exception as exc:  # its own code failed: an ERROR, as evaluate says
                        found = rule.failure(step, exc)
                    if found is None:  # it said everything
                        del feeds[rule]
                        break
                    if stop is not None and stop.is_set():
                        return True
                    yield found
                    if isinstance(found, StepRun):
                        due[rule] = int(found.steps[-1]) + 1 if len(found) else due[rule]
                        continue
                    due[rule] = found.step + 1
                    if found.outcome is Outcome.ERROR:
                        del feeds[rule]
                        active.remove(rule)
            for rule in list(stepwise):
                if stop is not None and stop.is_set():
                    return True
                said = answered(rule, step, quiet[rule]) if quiet else iter([rule.evaluate(step)])
                for found in said:
                    yield found
                    if isinstance(found, Finding) and found.outcome is Outcome.ERROR:
                        stepwise.remove(rule)
                        active.remove(rule)
        if stepwise or not feeds:
            i += 1
        else:  # only rules judging in bulk: on to the next step one of them answers
            i = bisect.bisect_left(pending, min(due.get(r, step + 1) for r in feeds), i + 1)
    return False


def invoke_rule(
    rule: Rule,
    start_step: int | None = 0,
    end_step: int | None = None,
    raise_eval_cond: bool = False,
    *,
    poll_interval: float = 0.1,
    timeout: float | None = None,
    stop: threading.Event | None = None,
    on_finding: Callable[[Finding], None] | None = None,
) -> RuleSummary:
    """Run ``rule`` over the trial's steps until training ends (see :func:`iter_findings`).

    With ``raise_eval_cond``, the first time the condition holds raises
    RuleEvaluationConditionMet(rule_name, step). An exception in the rule's own code is logged
    with its traceback and step and raised as RuleError. Steps missing the data the rule needs
    are skipped and counted in the summary.
    """
    _check_rule(rule)
    summary = RuleSummary(rule.rule_name)
    logger.info("started rule %s at step %s", rule.rule_name, start_step)
    for finding in iter_findings(
        rule, start_step, end_step, poll_interval=poll_interval, timeout=timeout, stop=stop
    ):
        summary.add(finding)
        if on_finding is not None:
            on_finding(finding)
        if finding.outcome is Outcome.ERROR:
            logger.error(
                "rule %s failed at step %s: %s\n%s",
                rule.rule_name,
                finding.step,
                finding.message,
                finding.traceback or "",
            )
            raise RuleError(rule.rule_name, finding.step, finding.message, finding.traceback or "")
        if finding.triggered:
            log = logger.warning if summary.triggered == 1 else logger.debug
            log("%s", finding)
            if raise_eval_cond:
                raise RuleEvaluationConditionMet(
                    rule.rule_name, finding.step, message=finding.message
                )
    summary.finish(rule.no_data_reason())
    logger.info("%s", summary)
    return summary
