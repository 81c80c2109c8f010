"""The validation loss over whole evaluation passes, judged apart from the rule that walks them
(:class:`~tensortap.rules.builtin.overfit.Overfit`): each pass against the best before it,
against the run's own pass-to-pass noise (:func:`trend_of`), with the accuracy the passes saved
(:func:`accuracy_held`), and against how far the training loss came down on a small training
set (:func:`small_set`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from tensortap.rules.builtin._samples import DistinctSamples
from tensortap.rules.builtin._series import critical, line_noise

#: The validation loss must rise at least this far (relative) above its best to be overfitting:
#: 2 of 500 healthy development runs of the generated benchmark ended 12% and 15% above their
#: best, sustained and beyond the noise (an easy binary task at 0.044 -> 0.05, a wine MLP).
RISEN = 0.2
#: ... on this many consecutive whole evaluation passes, each above the best.
SUSTAINED = 3
#: A model trained on a small set overfits it when, over the last ``SUSTAINED`` passes, its
#: validation loss came down less than this share of what its training loss came down from
#: the first training loss (healthy development runs on the smallest sets, 110-134 samples,
#: kept at least 0.74 of it; the lowest of all healthy runs, 0.29, is a 427-sample set).
GENERALISED = 0.75
#: An evaluation pass of at least this many times the training set's distinct samples beside a
#: small training set: the splits swapped, or a debugging subset left in (a validation set is
#: 10-40% of the training set in practice; no healthy development run comes near 1).
EVALUATED_TIMES = 3
#: ... where its validation loss came down less than this share of what its training loss came
#: down (a small set the model generalises from, validated on many samples, is no fault: a
#: separable task learned from 60 samples keeps about all of it).
GENERALISED_BESIDE = 0.9


@dataclass(frozen=True)
class Pass:
    """A completed evaluation pass: its mean validation loss, the mean training loss of the
    training phase before it, and its last global step."""

    validation: float
    training: float
    step: int
    #: the pass's predictions that named the label, of how many (0: no outcome saved)
    correct: int = 0
    total: int = 0

    @property
    def accuracy(self) -> float:
        return self.correct / self.total if self.total else math.nan


@dataclass(frozen=True)
class Trend:
    """The validation loss over whole passes: its ``best`` pass, the mean of the ``recent``
    passes, how they compare with the pass-to-pass ``noise``, and whether that is overfitting."""

    best: Pass
    recent: tuple[Pass, ...]
    noise: float
    overfitting: bool
    #: the degrees of freedom of the noise's estimate
    degrees_of_freedom: int
    #: the rise is sustained and beyond the noise (overfitting, unless the accuracy held)
    risen: bool = False

    @property
    def critical(self) -> float:
        return critical(self.degrees_of_freedom)

    @property
    def rise(self) -> float:
        return self.mean - self.best.validation

    @property
    def mean(self) -> float:
        return float(np.mean([p.validation for p in self.recent]))

    @property
    def standard_error(self) -> float:
        # the best pass and the mean of the recent ones each carry the pass-to-pass noise
        return self.noise * math.sqrt(1 + 1 / len(self.recent))


def accuracy_held(best: Pass, recent: Sequence[Pass]) -> bool | None:
    """Whether the ``recent`` passes' accuracy held the ``best`` pass's: not below it by more
    than 2 standard errors of the difference (None where a pass saved no outcome)."""
    if not best.total or not all(p.total for p in recent):
        return None
    total = sum(p.total for p in recent)
    then, now = best.accuracy, sum(p.correct for p in recent) / total
    error = math.sqrt(then * (1 - then) / best.total + now * (1 - now) / total)
    return now >= then - 2 * max(error, 1 / total)


def trend_of(passes: Sequence[Pass], val: float, complete: bool) -> Trend | None:
    """The validation loss over whole ``passes`` (None before the best pass is followed by
    ``SUSTAINED`` more); ``val``: the pass under way so far, ``complete`` where it has ended
    (a pass under way must agree with a rise)."""
    if len(passes) < SUSTAINED + 1:
        return None
    earlier, recent = passes[:-SUSTAINED], tuple(passes[-SUSTAINED:])
    first = min(range(len(earlier)), key=lambda i: earlier[i].validation)
    best = earlier[first]
    # the noise: the spread of the passes since the best about a steady rise (or fall)
    noise, freedom = line_noise([p.validation for p in passes[first:]])
    found = Trend(best, recent, noise, False, freedom)
    risen = (
        all(p.validation > best.validation for p in recent)
        and found.rise > RISEN * abs(best.validation)
        and found.rise > found.critical * found.standard_error
        and recent[-1].training < best.training
        and (complete or val > best.validation)  # this pass so far agrees
    )
    # a rise while the accuracy held is confidence in wrong answers, not worse answers
    held = bool(risen) and accuracy_held(best, recent) is True
    return replace(found, overfitting=risen and not held, risen=risen)


def small_set(
    samples: DistinctSamples,
    limit: int,
    start: float | None,
    passes: Sequence[Pass],
    final: bool = False,
) -> tuple[str, dict[str, Any]] | None:
    """What says the model overfits a small training set (a message and details), or None
    where the set (``samples``, the distinct rows counted) is larger than ``limit`` or the
    model generalises what it learned since the first training loss ``start``. Judged on the
    last ``SUSTAINED`` passes; at the run's end (``final``), on every pass where there were
    fewer (a script that evaluates once, after training)."""
    size = samples.estimate()
    if size is None or size > limit or start is None:
        return None
    if len(passes) < (1 if final else SUSTAINED):
        return None
    recent = passes[-SUSTAINED:]
    if any(p.training >= start or p.validation <= p.training for p in recent):
        return None
    shares = [(start - p.validation) / (start - p.training) for p in recent]
    if max(shares) >= GENERALISED_BESIDE:
        return None
    if max(shares) >= GENERALISED:
        return _evaluated_on_more(samples, size, recent[-1], shares)
    last = recent[-1]
    said = (
        f"; {_trained_on(samples, size)}, at most {limit}, and "
        + (
            f"over the last {len(recent)} evaluation passes"
            if len(recent) > 1
            else "on its only evaluation pass"
        )
        + " its validation loss came down "
        f"{', '.join(f'{x:.0%}' for x in shares)} of what its training loss came down "
        f"from {start:.4g} (the last: validation "
        f"{last.validation:.4g}, training {last.training:.4g}; under "
        f"{GENERALISED:.0%}): overfitting a small training set"
    )
    return said, {
        "cause": "small_training_set",
        "training_samples": size,
        "generalised": shares[-1],
    }


def _evaluated_on_more(
    samples: DistinctSamples, size: float, last: Pass, shares: list[float]
) -> tuple[str, dict[str, Any]] | None:
    """A small training set beside an evaluation pass ``EVALUATED_TIMES`` times its size or
    more (the pass's outcome counted: labels saved), where the validation loss kept under
    ``GENERALISED_BESIDE`` of what the training loss came down (``shares``, of the last
    passes): the model learns from a sliver of the data it is judged on, and it shows. None
    where the pass is not that large."""
    if last.total < EVALUATED_TIMES * size:
        return None
    times = last.total / size
    said = (
        f"; {_trained_on(samples, size)} and its last evaluation pass held {last.total} "
        f"samples, {times:.3g} times as many (at least {EVALUATED_TIMES}), and its validation "
        "loss came down "
        f"{', '.join(f'{x:.0%}' for x in shares)} of what its training loss came down (under "
        f"{GENERALISED_BESIDE:.0%}): a training set this small beside its evaluation set (the "
        "training and validation splits swapped, or a debugging subset left in?)"
    )
    return said, {
        "cause": "small_training_set",
        "training_samples": size,
        "generalised": shares[-1],
        "evaluated_times": times,
    }


def _trained_on(samples: DistinctSamples, size: float) -> str:
    return (
        f"the model trained on about {size:.0f} distinct samples ({samples.seen} saved training "
        f"rows, each seen {samples.seen / samples.distinct:.3g} times)"
    )
