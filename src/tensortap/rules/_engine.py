"""The engine that judges many steps of a rule at once: a finished trial without reading its
steps where the saved columns tell the rule's numbers, and exactly what the walk step by step
says.

A rule declares the numbers it reads (``Rule.reads``: :mod:`tensortap.rules._numbers`) and what
it says of the steps it does not judge (``Rule.not_judged``); its judgement is written once,
in ``invoke_at_step`` (or ``judge``, for a rule that reads its numbers first). For a batch of
published steps, :func:`judge_steps` gathers the numbers of all of them from the saved
columns, then at each step:

- a step the rule does not judge is said as ``not_judged`` says it;
- a step whose numbers the columns leave in doubt is evaluated live, as the walk step by step
  would (``Rule.evaluate``, reading the step's block);
- a step where a rule that reads its numbers first finds none saved is skipped;
- at the others the rule's judgement runs over the gathered numbers (once for each distinct
  set of numbers, for a rule whose answer depends on them alone: ``judges_numbers_alone``).

Quiet answers (OK, skipped) come out as :class:`~tensortap.rules._finding.StepRun` s of
consecutive steps that said the same; what fired or failed as its :class:`~tensortap.rules.
_finding.Finding`. The summaries are those of the walk step by step (tests compare them).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from tensortap.rules._finding import Finding, Outcome, Said, StepRun
from tensortap.rules._numbers import DOUBT, Numbers, Skipped

if TYPE_CHECKING:
    from tensortap.rules._rule import Rule


def judge_steps(rule: Rule, steps: Sequence[int]) -> Iterator[Finding | StepRun]:
    """What :meth:`Rule.evaluate` gives at each of ``steps`` (ascending global steps the trial
    holds, all published), in order, quiet steps in runs (see the module docstring)."""
    at = np.asarray(steps, dtype=np.int64)
    if not len(at):
        return
    numbers = rule.declared_numbers
    gathered = [_gather(rule, n, at) for n in numbers]
    gated, first = rule.has_gate, rule.reads_first
    memo: dict[tuple[Any, ...], _Key] | None = {} if rule.judges_numbers_alone else None
    runs = QuietRuns(rule)
    again: tuple[tuple[Any, ...], _Key] | None = None  # numbers whose quiet answer repeats
    found_at = zip(*gathered, strict=True) if gathered else itertools.repeat((), len(at))
    rows = zip(at.tolist(), found_at, strict=True)
    while True:
        try:
            step, found = next(rows)
        except StopIteration:
            break
        except Exception:  # the rule's own numbers failed: what came before it is said first
            yield from runs.flush()
            raise
        key: _Key | None = None
        finding: Finding | None = None  # a step said on its own (fired, failed, read live)
        try:
            said = rule.not_judged(step) if gated else None
        except Exception as exc:  # its own code failed: an ERROR at the step, as evaluate says
            yield from runs.flush()
            yield rule.failure(step, exc)
            return
        if said is not None:
            key = ("said", said)
        elif again is not None and _same(found, again[0]):
            key = again[1]  # the numbers of the step before, whose quiet answer repeats
        elif not numbers or _in_doubt(found):
            yield from runs.flush()  # (before the live read, as a failing read would be)
            finding = rule.evaluate(step)  # read live, from the step's block
        elif first and _any_skipped(found):
            key = _skipped(numbers, found)  # skipped before the judgement, as it reads first
            again = (found, key)
        elif memo is not None and found in memo:
            for each, f in zip(numbers, found, strict=True):
                each.note(f)
            key = memo[found]
            again = (found, key)
        else:
            judged = _judged_with(rule, step, numbers, found)
            if isinstance(judged, Finding):
                finding = judged
            else:
                key, again = judged, None
                if memo is not None and (judged[0] is Outcome.SKIPPED or judged[2]):
                    memo[found] = judged  # (an answer that said why it judged nothing is not kept)
                    again = (found, judged)
        if finding is not None:
            yield from runs.flush()
            yield finding
            if finding.outcome is Outcome.ERROR:
                return
            if memo is not None:
                memo.clear()
            again = None
            continue
        assert key is not None  # every other way above gave the step its quiet answer
        done = runs.add(step, key)
        if done is not None:
            yield done
    yield from runs.flush()


def _same(found: tuple[Any, ...], before: tuple[Any, ...]) -> bool:
    """Whether ``found`` are the very objects of ``before`` (gathered once for many steps)."""
    if len(found) == 1:
        return found[0] is before[0]
    return all(a is b for a, b in zip(found, before, strict=True))


def _in_doubt(found: tuple[Any, ...]) -> bool:
    if len(found) == 1:
        return found[0] is DOUBT
    return any(f is DOUBT for f in found)


def _any_skipped(found: tuple[Any, ...]) -> bool:
    if len(found) == 1:
        return isinstance(found[0], Skipped)
    return any(isinstance(f, Skipped) for f in found)


#: What a quiet step said: ("said", Said) from ``not_judged``, else (outcome, message, judged).
_Key = tuple[Any, ...]


def _skipped(numbers: Sequence[Numbers[Any]], found: tuple[Any, ...]) -> _Key:
    """The key of a step skipped at the first of its numbers that was not saved (what the
    numbers read before it count as read)."""
    for each, f in zip(numbers, found, strict=True):
        each.note(f)
        if isinstance(f, Skipped):
            return (Outcome.SKIPPED, f.reason, False)
    raise AssertionError("no numbers were skipped")


def _gather(rule: Rule, numbers: Numbers[Any], steps: np.ndarray) -> Iterator[Any]:
    """``numbers.gather(steps)``, the collections it asked for kept as what a live read asks
    (not counted as asked by the rule until its numbers are read)."""
    trial = rule.base_trial
    before = trial.collections_asked
    trial.collections_asked = set()
    try:
        with trial.no_refresh():
            found = numbers.gather(steps)
        numbers.asks = frozenset(trial.collections_asked) | numbers.asks
    finally:
        trial.collections_asked = before
    return iter(found)


def answered(rule: Rule, step: int, runs: QuietRuns) -> Iterator[Finding | StepRun]:
    """Evaluate ``rule`` at ``step`` (live) and say what came of it: a quiet answer joins
    ``runs`` (what it ends is said), anything else is said as its Finding, after the run."""
    rule.begin_step(step)
    said = rule.quiet_or_finding(step, rule.answer(step))
    if isinstance(said, Finding):
        yield from runs.flush()
        yield said
        return
    done = runs.add(step, said)
    if done is not None:
        yield done


def _judged_with(
    rule: Rule, step: int, numbers: Sequence[Numbers[Any]], found: tuple[Any, ...]
) -> Finding | _Key:
    """The rule's judgement at ``step`` over the gathered ``found``: its Finding where it fired
    or failed, else (outcome, message, judged) of its quiet answer."""
    rule.begin_step(step)
    if rule.reads_first and len(rule.trials) == 1 and not rule.requires_tensors:
        tried = rule.answer_over(step, found)  # judge(step, *found), as invoke_at_step calls it
        return rule.quiet_or_finding(step, tried)
    for each, f in zip(numbers, found, strict=True):
        each.give(step, f)
    try:  # (the walk holds the trial's no_refresh; not_judged was asked)
        tried = rule.answer(step, held=True, judged=True)
    finally:
        for each in numbers:
            each.give(None)
    return rule.quiet_or_finding(step, tried)


class QuietRuns:
    """A rule's consecutive quiet steps that said the same, said as one StepRun (the engine's,
    and the walk's for the rules it evaluates step by step in bulk)."""

    def __init__(self, rule: Rule) -> None:
        self.rule = rule
        self.steps: list[int] = []
        self.key: _Key | None = None
        self._judged = False  # (of a run of steps said by not_judged)

    def add(self, step: int, key: _Key) -> StepRun | None:
        """Add ``step``, quiet as ``key`` says; the run it ends, if any."""
        done = None
        if key != self.key:
            done = self.close()
            self.key = key
            if key[0] == "said" and key[1].outcome is Outcome.OK:
                # counted at its first step, in step order with what the rule says of others
                self._judged = self.rule.said_judged(key[1], 1)
        self.steps.append(step)
        return done

    def flush(self) -> Iterator[StepRun]:
        done = self.close()
        if done is not None:
            yield done

    def close(self) -> StepRun | None:
        if not self.steps or self.key is None:
            return None
        at, key = np.asarray(self.steps, dtype=np.int64), self.key
        self.steps, self.key = [], None
        name = self.rule.rule_name
        if key[0] != "said":
            outcome, message, judged = key
            return StepRun(name, at, outcome, message, judged)
        said: Said = key[1]
        if said.outcome is Outcome.SKIPPED:
            return StepRun(name, at, Outcome.SKIPPED, said.message, False)
        if len(at) > 1:
            self.rule.said_judged(said, len(at) - 1)
        return StepRun(name, at, Outcome.OK, said.message, self._judged)
