"""The numbers a rule judges at each step, declared once and filled by the engine.

A rule declares what it reads (``self.losses = self.reads(Scalars(...))``) and judges what it
reads once: its judgement asks ``numbers.at(step)``. Walking live, :meth:`Numbers.read` reads
them from the step (its block, the series path); judging many steps at once, the engine
(:mod:`tensortap.rules._engine`) fills them for all the steps first from the saved columns
(:meth:`Numbers.gather`: the index's reductions, the series' one-element values) and
``at(step)`` answers with them. Where the columns leave a doubt (a raw value they do not hold,
a record saved twice, several workers, a value that is not finite), ``gather`` says
:data:`DOUBT` and the engine has the step judged live, read from its block.

The kinds every rule may declare: :class:`Scalars` (the one-element value of named series: the
losses, a vital sign, a metric), :class:`GlobalNorm` (the l2 norms of a collection's tensors
combined into one norm, or a vital sign saved as that norm) and :class:`Finiteness` (which
tensors hold NaN or infinite values). A rule may declare a kind of its own by subclassing
:class:`Numbers` (VanishingGradient's abs means; names only, for WeightsNotUpdating).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, NamedTuple, TypeVar, cast

import numpy as np

from tensortap.core._records import RecordKind
from tensortap.exceptions import TensorUnavailableForStep
from tensortap.rules._rule import StepSkipped
from tensortap.trials._records import (
    any_at,
    chunks,
    name_sets,
    one_numbers,
    per_step,
    saved_records,
)

if TYPE_CHECKING:
    from tensortap.rules._rule import Rule
    from tensortap.trials._tensor import Tensor
    from tensortap.trials._trial import Trial

T = TypeVar("T")


class _Doubt:
    __slots__ = ()

    def __repr__(self) -> str:
        return "DOUBT"


#: What :meth:`Numbers.gather` says of a step whose numbers the saved columns cannot tell for
#: certain: the engine judges it live.
DOUBT: Any = _Doubt()


@dataclass(frozen=True)
class Skipped:
    """What :meth:`Numbers.gather` says of a step where :meth:`Numbers.read` would skip
    (nothing saved): ``reason``, and the collections that read would have asked for (None:
    the ones the gathering asked for)."""

    reason: str
    asked: frozenset[str] | None = None


class Numbers(Generic[T]):
    """Numbers a rule reads at each step (declared with ``Rule.reads``).

    Subclasses implement :meth:`read` (live: the numbers at a step, raising
    ``StepSkipped`` where nothing was saved) and may implement :meth:`gather` (in bulk: the
    numbers of many steps from the saved columns, :data:`DOUBT` where those leave a doubt).
    ``gather`` reads the names it needs before it returns its iterator: the collections asked
    for then are counted as asked by the rule at each step whose gathered numbers it reads,
    as reading them live would count them.
    """

    def __init__(self) -> None:
        self._rule: Rule | None = None
        self._given: tuple[int, Any] | None = None  # (step, gathered numbers) being judged
        #: the collections a live read asks for (noted when gathered numbers are read)
        self.asks: frozenset[str] = frozenset()
        self._noted: set[frozenset[str]] = set()  # those counted as asked by the rule already

    def bind(self, rule: Rule) -> None:
        """Make these the numbers of ``rule`` (``Rule.reads`` calls it)."""
        if self._rule is not None and self._rule is not rule:
            raise ValueError(f"{type(self).__name__} is declared by another rule already")
        self._rule = rule

    @property
    def rule(self) -> Rule:
        if self._rule is None:
            raise ValueError(f"{type(self).__name__} was never declared with Rule.reads")
        return self._rule

    @property
    def trial(self) -> Trial:
        return self.rule.base_trial

    # -- what subclasses implement --
    def read(self, step: int) -> T:
        """The numbers at global ``step``, read live (``raise StepSkipped(reason)`` where
        nothing was saved)."""
        raise NotImplementedError(f"{type(self).__name__} does not implement read")

    def gather(self, steps: np.ndarray) -> Iterator[T | Skipped | Any]:
        """For each of ``steps`` (ascending global steps), in order: the numbers :meth:`read`
        would give, a :class:`Skipped` where it would skip, or :data:`DOUBT`. Default: every
        step read live."""
        return itertools.repeat(DOUBT, len(steps))

    def count(self, numbers: T) -> int:
        """How many saved values reading ``numbers`` live reads (counted in the trial's
        ``values_read``, as a live read counts them)."""
        return 1

    # -- what the rule and the engine call --
    def at(self, step: int) -> T:
        """The numbers at global ``step``: gathered by the engine, else read live."""
        given = self._given
        if given is None or given[0] != step:
            return self.read(step)
        found = given[1]
        if isinstance(found, Skipped):
            self.note(found)
            raise StepSkipped(found.reason)
        self.counted(found)
        return cast(T, found)

    def counted(self, found: T) -> None:
        """Count ``found`` (gathered numbers) as read live: the values, the collections."""
        if self.asks not in self._noted:
            self.note(found)
        self.rule.base_trial.values_read += self.count(found)

    def give(self, step: int | None, found: Any = None) -> None:
        """Answer ``at(step)`` with ``found`` (the engine, judging a step in bulk); None: read
        live again."""
        self._given = None if step is None else (step, found)

    def note(self, found: Any) -> None:
        """Count the collections reading ``found`` live would ask for as asked by the rule."""
        asked = found.asked if isinstance(found, Skipped) else None
        asked = self.asks if asked is None else asked
        if asked not in self._noted:  # (what a rule asked for only grows)
            self._noted.add(asked)
            self.rule.note_asked(*asked)


# -- one-element values of named series --


def saved_at(tensor: Tensor, step: int) -> bool:
    """True if the tensor was saved (raw or reduced) at global ``step``."""
    return bool(tensor._entries(step, None))


def scalar(tensor: Tensor, step: int, mode: Any = None) -> float:
    """A scalar's value at a step (its mean if it has more elements), from raw or reductions;
    a one-element value at a global step from the series path (read in bulk, not per step)."""
    if mode is None:
        trial = cast("Trial", tensor.trial)  # a Tensor types its trial by what it uses of it
        found = trial.numbers.at(tensor.name, step)
        if found is not None:
            trial.values_read += 1  # a value was read, as Tensor.value counts it
            return found
    try:
        return float(np.mean(tensor.value(step, mode=mode)))
    except TensorUnavailableForStep:
        return float(tensor.reduction_value(step, "mean", mode=mode))


Values = list[tuple[str, float]]


class Scalars(Numbers[Iterable[tuple[str, float]]]):
    """The value of each of the series ``names(step)`` names at a step: (name, value) pairs
    in that order, each read as :func:`scalar` reads it (live, one by one as the judgement
    asks: it may stop at the first). ``none_saved``: the skip reason of a step where none was
    saved (else it gives none). In bulk, the one-element values the series hold, for the
    names ``names(None)`` gives (those of any step), narrowed per step by ``pick``; a step
    where one was saved otherwise (only reductions, several elements, not finite, twice) is
    read live, and so is one where none was saved unless ``none_saved``."""

    def __init__(
        self,
        names: Callable[[int | None], list[str]],
        *,
        none_saved: str | None = None,
        pick: Callable[[list[Values | None]], list[Values | None] | None] | None = None,
    ) -> None:
        super().__init__()
        self.names, self.none_saved, self._pick = names, none_saved, pick

    def read(self, step: int) -> Iterable[tuple[str, float]]:
        names = self.names(step)
        if not names and self.none_saved is not None:
            raise StepSkipped(self.none_saved)
        return self._values(names, step)

    def _values(self, names: list[str], step: int) -> Iterator[tuple[str, float]]:
        trial = self.trial
        for name in names:
            yield name, scalar(trial.tensor(name), step)

    def count(self, numbers: Iterable[tuple[str, float]]) -> int:
        return len(cast("Values", numbers))

    def gather(self, steps: np.ndarray) -> Iterator[Values | Skipped | Any]:
        names = self.names(None)
        found: list[Values | None] | None = (
            one_numbers(self.trial, names, steps) if names or self.none_saved else None
        )
        if found is not None and self._pick is not None:
            found = self._pick(found)
        if found is None:
            return itertools.repeat(DOUBT, len(steps))
        empty = DOUBT if self.none_saved is None else Skipped(self.none_saved)
        return (DOUBT if values is None else values or empty for values in found)


# -- a collection's global norm --


class Norm(NamedTuple):
    """A global norm at a step: ``value``, the tensors it combines, and those of them that
    were not finite (``value`` is then meaningless)."""

    value: float
    tensors: tuple[str, ...]
    nonfinite: tuple[str, ...] = ()


class GlobalNorm(Numbers[Norm]):
    """The l2 norm of all the tensors ``names(step)`` names at a step, as one vector: the
    square root of the sum of their squared ``l2`` norms (a saved ``l2`` reduction, or from
    the raw value). Where the vital sign ``vital`` (a one-element series of that norm, such as
    ``vitals/grad_norm``) was saved at the step, it is that norm and no tensor is read.
    ``none_saved``: the skip reason of a step that saved none of the tensors. In bulk, the
    vital signs the series hold (a trial with the vital sign), else the steps where every one
    of the tensors saved a finite ``l2`` reduction."""

    def __init__(
        self, names: Callable[[int | None], list[str]], none_saved: str, vital: str | None = None
    ) -> None:
        super().__init__()
        self.names, self.none_saved, self.vital = names, none_saved, vital

    def read(self, step: int) -> Norm:
        trial, vital = self.trial, self.vital
        if vital is not None and trial.has_tensor(vital) and saved_at(trial.tensor(vital), step):
            norm = scalar(trial.tensor(vital), step)
            return Norm(norm, (vital,), () if math.isfinite(norm) else (vital,))
        names = self.names(step)
        if not names:
            raise StepSkipped(self.none_saved)
        norms = trial.step_block(step).reduce(names, "l2")
        if not np.isfinite(norms).all():
            bad = [n for n, v in zip(names, norms.tolist(), strict=True) if not math.isfinite(v)]
            return Norm(math.nan, tuple(names), tuple(bad))
        return Norm(math.sqrt(float(np.sum(norms**2))), tuple(names))

    def count(self, numbers: Norm) -> int:
        return len(numbers.tensors)

    def gather(self, steps: np.ndarray) -> Iterator[Norm | Skipped | Any]:
        trial, vital = self.trial, self.vital
        if vital is not None and trial.has_tensor(vital):
            found = one_numbers(trial, [vital], steps)
            if found is None:
                return itertools.repeat(DOUBT, len(steps))
            return (Norm(values[0][1], (vital,)) if values else DOUBT for values in found)
        names = self.names(None)
        saved = saved_records(trial, names)
        if saved.workers > 1:
            return itertools.repeat(DOUBT, len(steps))
        return self._norms(steps, names, saved)

    def _norms(
        self, steps: np.ndarray, names: list[str], saved: Any
    ) -> Iterator[Norm | Skipped | Any]:
        l2 = saved.reduction_rows("l2")
        doubt = saved.repeated() | (l2 & ~np.isfinite(saved.value))
        skipped, every = Skipped(self.none_saved), tuple(names)
        for part in chunks(steps, len(names)):
            present = per_step(part, saved.step, saved.name, len(names), saved.value)[1] > 0
            norms, found = per_step(
                part, saved.step[l2], saved.name[l2], len(names), saved.value[l2]
            )
            whole = present.all(axis=1) & (found == 1).all(axis=1)
            whole &= ~any_at(part, saved.step, doubt)
            total = np.sqrt(np.sum(norms**2, axis=1)).tolist()
            nothing = np.logical_not(present.any(axis=1)).tolist()
            for i, is_whole in enumerate(whole.tolist()):
                if nothing[i]:
                    yield skipped
                elif is_whole:
                    yield Norm(total[i], every)
                else:
                    yield DOUBT


# -- non-finite values --


class Nonfinite(NamedTuple):
    """Which of the tensors saved at a step (``names``, in the order asked for) hold values
    that are not finite: ``nan`` (NaN in the raw value, or a NaN reduction), ``infinite``
    (+/-inf in the raw value or in a saved min or max) and ``other`` (another reduction that
    is infinite: a mean, a norm)."""

    names: tuple[str, ...]
    nan: frozenset[str] = frozenset()
    infinite: frozenset[str] = frozenset()
    other: frozenset[str] = frozenset()

    @property
    def any(self) -> frozenset[str]:
        """Every one of ``names`` that holds a value that is not finite."""
        return self.nan | self.infinite | self.other


class Finiteness(Numbers[Nonfinite]):
    """Which of the tensors ``names(step)`` names at a step hold NaN or infinite values (see
    :class:`Nonfinite`), from their raw values or, where only reductions were saved, their
    reductions. ``none_saved``: the skip reason of a step that saved none of them. In bulk,
    the steps where every saved number of them (the reductions, the one-element values) is
    finite and no raw value the series do not hold was saved."""

    def __init__(self, names: Callable[[int | None], list[str]], none_saved: str) -> None:
        super().__init__()
        self.names, self.none_saved = names, none_saved

    def read(self, step: int) -> Nonfinite:
        names = self.names(step)
        if not names:
            raise StepSkipped(self.none_saved)
        block = self.trial.step_block(step)
        raw, reduced = block.split_raw(names)
        nan: set[str] = set()
        infinite: set[str] = set()
        other: set[str] = set()
        if raw:
            nans, infs = block.nonfinite(raw)
            for i in np.flatnonzero(nans + infs).tolist():
                (nan if nans[i] else infinite).add(raw[i])
        for name in reduced:
            reductions = block.saved_reductions(name)
            if any(math.isnan(v) for v in reductions.values()):
                nan.add(name)
            elif any(math.isinf(v) for (r, _), v in reductions.items() if r in ("min", "max")):
                infinite.add(name)
            elif any(math.isinf(v) for v in reductions.values()):
                other.add(name)
        return Nonfinite(tuple(names), frozenset(nan), frozenset(infinite), frozenset(other))

    def count(self, numbers: Nonfinite) -> int:
        return len(numbers.names)

    def gather(self, steps: np.ndarray) -> Iterator[Nonfinite | Skipped | Any]:
        names = self.names(None)
        saved = saved_records(self.trial, names)
        if saved.workers > 1:
            return itertools.repeat(DOUBT, len(steps))
        return self._finite(steps, names, saved)

    def _finite(
        self, steps: np.ndarray, names: Sequence[str], saved: Any
    ) -> Iterator[Nonfinite | Skipped | Any]:
        unknown = (saved.kind == RecordKind.TENSOR) & ~saved.known
        with np.errstate(invalid="ignore"):
            doubt = unknown | (saved.known & ~np.isfinite(saved.value)) | saved.repeated()
        skipped = Skipped(self.none_saved)
        kept: dict[tuple[str, ...], Nonfinite] = {}
        for part in chunks(steps, len(names)):
            present = per_step(part, saved.step, saved.name, len(names), saved.value)[1] > 0
            in_doubt = any_at(part, saved.step, doubt).tolist()
            sets = name_sets(names, present)
            saved_here = np.asarray(present.any(axis=1), dtype=bool).tolist()
            for i, at_all in enumerate(saved_here):
                if not at_all:
                    yield skipped
                elif in_doubt[i]:
                    yield DOUBT
                else:
                    found = kept.get(sets[i])
                    if found is None:
                        found = kept[sets[i]] = Nonfinite(sets[i])
                    yield found
