"""The save-cost budget: the job's default tensor saves never take more than a share of training.

A job that chose the schedule itself (``tensortap run`` with no ``save_interval`` of the user's:
every 10th TRAIN step) saves weights, gradients, activations... on each saving step, and on a
small fast step that costs 1.3-3.5x the step (docs/benchmarks.md, "Vital signs every step").
The budget keeps the share of training time spent on those saves under a limit:

- :class:`BudgetPolicy` (no clock, no framework) is told the cost of each saving step (the
  training thread's time in the hook's saving work) and the time; over the saving steps since
  its last change, when the cost's share of the elapsed time exceeds the budget it widens the
  interval (x2, so saved steps stay on multiples of the configured interval), and when the share
  falls under a quarter of the budget it narrows it back (/2, never below the configured
  interval). Never wider than :data:`MAX_FACTOR` times the configured interval. The first
  :data:`KEEP_FIRST` saving steps keep the configured schedule whatever they cost (the initial
  weights and the first updates: rules judge them). Only work on the steps the governed
  schedule saves counts (:meth:`ScheduleBudget.timing`): work widening cannot reduce stayed as
  a floor under the share, and a Keras job on a 0.6 ms batch went to every 320th or 640th
  step; it now stays at every 160th, where its saves' share crosses the budget.
- :class:`ScheduleBudget` applies it to a :class:`~tensortap.core._recorder.StepRecorder`: the
  recorder's own schedule (the collections without one of their own) is widened in TRAIN (and
  GLOBAL) steps only. EVAL passes stay whole, the vital signs (their own every-step schedule) are
  not governed, and a collection with a schedule of its own (a user's) keeps it. The outcome
  sample (``labels``, ``predictions``) follows the budget's factor up to
  :data:`OUTCOME_MAX_FACTOR` only: the rules count training labels over the run, and on Keras a
  batch that samples it reads the step's values back as a saving step does (the job's largest
  cost on a fast Keras step while it stayed at every 10th).

A hook applies it only when told to (``Hook(save_budget=...)``): a job passes the budget when
the schedule is its own default, never for a schedule the user wrote.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tensortap.core._modes import ModeKeys
from tensortap.core._outcome import OUTCOME_NAMES
from tensortap.core._save_config import SaveConfig, SaveConfigMode
from tensortap.exceptions import InvalidConfigError

if TYPE_CHECKING:
    from tensortap.core._collections import Collection
    from tensortap.core._recorder import StepRecorder

#: The environment variable a job reads for its default budget (``0.05``, or ``off``).
SAVE_BUDGET_ENV = "TENSORTAP_SAVE_BUDGET"
#: The default share of training time the job's default tensor saves may take. 5%: the issue's
#: target for a zero-code attachment is 1.10x, and the vital signs every step and the
#: attachment's own per-step work take about half of that on a fast step.
DEFAULT_SAVE_BUDGET = 0.05
#: Saving steps kept at the configured schedule before the budget may act.
KEEP_FIRST = 5
#: The widest interval, as a multiple of the configured one (every 640th step for a job's 10):
#: a long run still gets tensors for trends.
MAX_FACTOR = 64
#: Saving steps measured after a change before the next decision.
SETTLE = 2
#: Narrow back when the share falls under this fraction of the budget (halving the interval at
#: most doubles the share: it stays under half the budget, so it never flips back at once).
NARROW_BELOW = 0.25
#: The modes whose steps the budget governs: EVAL passes are compared whole.
GOVERNED_MODES = (ModeKeys.TRAIN, ModeKeys.GLOBAL)
#: The widest interval of the outcome sample, as a multiple of the configured one (every 80th
#: TRAIN step of a job's 10): a 1,000-step run still samples its outcome 15 times or more.
OUTCOME_MAX_FACTOR = 8
#: The kind of the session event and of the job event that record a change.
SAVE_BUDGET_EVENT = "save_budget"
_OFF = ("off", "none", "false", "no", "0", "")


def parse_save_budget(value: Any, where: str = "save_budget") -> float | None:
    """A budget as given (``0.05``, ``"0.05"``, ``"5%"``, ``"off"``) to a share in (0, 1), or
    None for off."""
    if value is None:
        return None
    number = value
    if isinstance(value, str):
        text = value.strip().lower()
        if text in _OFF:
            return None
        try:
            number = float(text[:-1]) / 100 if text.endswith("%") else float(text)
        except ValueError:
            number = None
    if isinstance(number, bool) or not isinstance(number, int | float) or number is None:
        raise InvalidConfigError(
            f"{where} must be a share of training time such as 0.05 (or 5%), or 'off'; "
            f"got {value!r}"
        )
    if number == 0:
        return None
    if not math.isfinite(number) or not 0 < number < 1:
        raise InvalidConfigError(
            f"{where} must be a share of training time between 0 and 1 (0.05: 5%), or 'off'; "
            f"got {value!r}"
        )
    return float(number)


@dataclass(frozen=True)
class BudgetChange:
    """One change of the saving interval's factor, and the measure behind it."""

    old_factor: int
    new_factor: int
    #: the saving steps' share of the elapsed time over the window measured
    share: float
    budget: float
    #: saving steps in the window measured
    saving_steps: int

    @property
    def widened(self) -> bool:
        return self.new_factor > self.old_factor


class BudgetPolicy:
    """Decides the factor of the saving interval from the saving steps' costs (no clock of its
    own: times are given, in seconds, from any monotonic clock)."""

    def __init__(
        self,
        budget: float,
        *,
        keep_first: int = KEEP_FIRST,
        max_factor: int = MAX_FACTOR,
        settle: int = SETTLE,
    ) -> None:
        checked = parse_save_budget(budget)
        if checked is None:
            raise InvalidConfigError(f"a BudgetPolicy needs a budget in (0, 1), got {budget!r}")
        if max_factor < 1 or max_factor & (max_factor - 1):
            raise InvalidConfigError(f"max_factor must be a power of 2, got {max_factor!r}")
        self.budget = checked
        self.keep_first = keep_first
        self.max_factor = max_factor
        self.settle = max(1, settle)
        self.factor = 1
        self.saving_steps = 0
        self._window_start: float | None = None
        self._window_cost = 0.0
        self._window_steps = 0

    def start(self, now: float) -> None:
        """Training's clock starts (the first step seen); later calls do nothing."""
        if self._window_start is None:
            self._window_start = now

    def observe(self, cost: float, now: float) -> BudgetChange | None:
        """A saving step ended at ``now``, its saving work having cost ``cost`` seconds: the
        change of factor this calls for, if any (already applied to :attr:`factor`)."""
        self.start(now)
        assert self._window_start is not None
        self.saving_steps += 1
        self._window_cost += max(0.0, cost)
        self._window_steps += 1
        if self.saving_steps <= self.keep_first or self._window_steps < self.settle:
            return None
        elapsed = now - self._window_start
        share = self._window_cost / elapsed if elapsed > 0 else math.inf
        new = self.factor
        if share > self.budget and self.factor < self.max_factor:
            new = self.factor * 2
        elif share < self.budget * NARROW_BELOW and self.factor > 1:
            new = self.factor // 2
        if new == self.factor:
            return None
        change = BudgetChange(self.factor, new, share, self.budget, self._window_steps)
        self.factor = new
        self._window_start, self._window_cost, self._window_steps = now, 0.0, 0
        return change


def widened(base: SaveConfig, factor: int) -> SaveConfig:
    """``base`` with its governed modes' intervals ``factor`` times wider (explicit
    ``save_steps`` kept); ``base`` itself at factor 1."""
    if factor == 1:
        return base
    modes: dict[ModeKeys, SaveConfigMode] = dict(base.mode_save_configs)
    for mode in GOVERNED_MODES:
        cfg = modes[mode]
        if cfg.save_interval is not None:
            modes[mode] = SaveConfigMode(
                cfg.save_interval * factor, cfg.start_step, cfg.end_step, cfg.save_steps
            )
    return SaveConfig(mode_save_configs=modes)


class ScheduleBudget:
    """A :class:`BudgetPolicy` applied to a recorder's own schedule.

    The hook times its saving work with :meth:`timing` and calls :meth:`step_closed` after each
    step; ``on_change`` is told each change (the hook records it as an event). ``background``
    gives the seconds another thread has spent on the saves so far (the trial writer's CPU
    time): what it adds between two saving steps counts in the second's cost, so a step whose
    values the training thread hands off cheaply but the writer encodes at length (a core
    taken from training on a small machine) is not taken for a cheap one."""

    def __init__(
        self,
        recorder: StepRecorder,
        policy: BudgetPolicy,
        on_change: Callable[[BudgetChange, int, int], None],
        clock: Callable[[], float] = time.perf_counter,
        background: Callable[[], float] | None = None,
    ) -> None:
        self.recorder = recorder
        self.policy = policy
        self.on_change = on_change
        self.clock = clock
        self.background = background
        self._background_seen = 0.0 if background is None else background()
        self.base = recorder.save_config
        self.changes: list[BudgetChange] = []
        self._cost = 0.0
        self._depth = 0
        # the outcome sample's collections that take the recorder's schedule: widened apart
        self._outcome: list[Collection] = []
        for name in OUTCOME_NAMES:  # governed, never wider than OUTCOME_MAX_FACTOR
            if name in recorder.collections:
                coll = recorder.collections.get(name)
                if coll.save_config is None:
                    coll.save_config = self.base
                    self._outcome.append(coll)

    @property
    def governs(self) -> bool:
        """Whether the recorder's schedule has an interval to widen in a governed mode."""
        return any(
            self.base.get_save_config(mode).save_interval is not None for mode in GOVERNED_MODES
        )

    def interval(self, factor: int | None = None) -> int | None:
        """The TRAIN interval at ``factor`` (the current one by default)."""
        given = self.base.get_save_config(ModeKeys.TRAIN).save_interval
        return None if given is None else given * (self.policy.factor if factor is None else factor)

    @contextmanager
    def timing(self) -> Iterator[None]:
        """Count the time inside as saving work when it ends on a step the governed schedule
        saves (nested uses count once; EVAL's is not governed and not counted). Work on other
        steps is not counted: widening cannot reduce it (the outcome sample's steps past its
        own limit, a Keras ring read every half ring), and counted, it stayed as a floor under
        the share (about 3% of a fast Keras job's time) that noise lifted over the budget."""
        if self._depth or self.recorder.mode not in GOVERNED_MODES:
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
            return
        self._depth = 1
        began = self.clock()
        self.policy.start(began)  # a first saving step's work counts in the time it took
        try:
            yield
        finally:
            self._depth = 0
            recorder = self.recorder
            if recorder.save_config.should_save(recorder.mode, recorder.mode_step):
                self._cost += self.clock() - began

    def step_closed(self) -> None:
        """After a step closed: a governed saving step tells the policy its cost (the saving
        work timed since the last one) and the schedule follows its decision."""
        recorder = self.recorder
        if recorder.mode not in GOVERNED_MODES:
            return
        now = self.clock()
        self.policy.start(now)
        closed = recorder.mode_step - 1
        if closed < 0 or not recorder.save_config.should_save(recorder.mode, closed):
            return
        cost, self._cost = self._cost, 0.0
        if self.background is not None:
            seen = self.background()
            cost += max(0.0, seen - self._background_seen)
            self._background_seen = seen
        change = self.policy.observe(cost, now)
        if change is None:
            return
        recorder.save_config = widened(self.base, change.new_factor)
        outcome = widened(self.base, min(change.new_factor, OUTCOME_MAX_FACTOR))
        for coll in self._outcome:
            coll.save_config = outcome
        self.changes.append(change)
        self.on_change(change, self.interval(change.old_factor) or 0, self.interval() or 0)
