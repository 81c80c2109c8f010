"""Judging many steps at once: what the built-in rules' ``judge_steps`` share.

A rule's bulk path sorts the steps it is given into those it can answer from saved numbers
without reading a step (quiet OK steps, skipped steps) and the others, where it calls
``evaluate`` as the step-by-step walk would. It must be exact: a quiet step is one where
``evaluate`` would answer OK (or skip) with the same words and leave the rule's state as it
leaves it; any doubt (a raw value not in the series, a step saved twice, several workers)
sends the step to ``evaluate``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from tensortap.core._modes import ModeKeys
from tensortap.core._records import RecordKind
from tensortap.rules._finding import Finding, StepRun
from tensortap.trials._records import any_at as any_at
from tensortap.trials._records import chunks as chunks
from tensortap.trials._records import one_numbers as one_numbers
from tensortap.trials._records import per_step as per_step
from tensortap.trials._records import saved_records

if TYPE_CHECKING:
    from tensortap.rules._rule import Rule
    from tensortap.trials._trial import Trial

#: Where a step goes: ``EVALUATE`` (step by step); any other code indexes the rule's answers.
EVALUATE = -1


def steps_array(steps: Sequence[int]) -> np.ndarray:
    return np.asarray(steps, dtype=np.int64)


def emit(
    rule: Rule,
    steps: np.ndarray,
    codes: np.ndarray,
    answers: Sequence[Callable[[np.ndarray], StepRun]]
    | Mapping[int, Callable[[np.ndarray], StepRun]],
) -> Iterator[Finding | StepRun]:
    """Yield, in step order, ``answers[code](run of steps)`` for each run of steps with the same
    code, and ``rule.evaluate(step)`` where the code is :data:`EVALUATE` (a stateless rule's
    quiet steps leave its state as evaluating them would)."""
    if not len(steps):
        return
    cuts = np.flatnonzero(codes[1:] != codes[:-1]) + 1
    for lo, hi in zip([0, *cuts.tolist()], [*cuts.tolist(), len(steps)], strict=True):
        code = int(codes[lo])
        if code != EVALUATE:
            yield answers[code](steps[lo:hi])
            continue
        for step in steps[lo:hi].tolist():
            yield rule.evaluate(step)


def judge_finite(
    rule: Rule, names: Sequence[str], steps: np.ndarray, nothing_saved: str
) -> Iterator[Finding | StepRun] | None:
    """What a rule of non-finite values says of ``steps``: where none of ``names`` was saved,
    skipped (``nothing_saved``); where all of them are finite in the saved numbers, OK; the
    other steps evaluated (a saved number that is not finite, a raw value the series do not
    hold, a record saved twice). None for a trial of several workers (judged step by step)."""
    saved = saved_records(rule.base_trial, names)
    if saved.workers > 1:
        return None
    unknown = (saved.kind == RecordKind.TENSOR) & ~saved.known
    with np.errstate(invalid="ignore"):
        doubt = unknown | (saved.known & ~np.isfinite(saved.value)) | saved.repeated()
    at_all, in_doubt = any_at(steps, saved.step), any_at(steps, saved.step, doubt)
    codes = np.where(~at_all, 0, np.where(in_doubt, EVALUATE, 1))
    return emit(rule, steps, codes, [lambda s: rule.skipped(s, nothing_saved), rule.quiet])


def modes_of(trial: Trial, steps: np.ndarray) -> list[ModeKeys]:
    """The mode of each of ``steps``."""
    with trial.no_refresh():
        return [trial.mode(step) for step in steps.tolist()]
