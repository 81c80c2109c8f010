"""What one evaluation of a rule at one step found, as data a runner or a report can use."""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tensortap.core._modes import ModeKeys


class Severity(str, enum.Enum):
    """How much a triggered finding matters; summaries, the live view and the report lead
    with problems."""

    PROBLEM = "problem"  # training is broken or wasting its time: act on it
    WARNING = "warning"  # often a problem, sometimes by design: look at it
    ADVICE = "advice"  # nothing is wrong, something could be better (e.g. stop earlier)

    @property
    def rank(self) -> int:
        """0 for the gravest (PROBLEM)."""
        return _RANKS[self]


_RANKS = {Severity.PROBLEM: 0, Severity.WARNING: 1, Severity.ADVICE: 2}


class Outcome(str, enum.Enum):
    """How one evaluation ended."""

    OK = "ok"  # evaluated; the condition was not met
    TRIGGERED = "triggered"  # evaluated; the condition was met
    SKIPPED = "skipped"  # the data it needs at this step was not saved
    ERROR = "error"  # the rule's own code raised


@dataclass(frozen=True)
class Finding:
    """One evaluation of ``rule`` at global ``step``.

    ``tensors`` are the tensors the verdict rests on, ``value`` what was measured and
    ``threshold`` what it was compared with; ``message`` is one line for a person.
    ``severity`` says how grave a triggered finding is (None on other outcomes). ``judged``
    is False when the rule read no saved value to answer (nothing was judged at the step).
    """

    rule: str
    step: int
    outcome: Outcome
    message: str
    mode: ModeKeys | None = None
    mode_step: int | None = None
    tensors: tuple[str, ...] = ()
    value: float | None = None
    threshold: Any = None
    details: dict[str, Any] = field(default_factory=dict)
    traceback: str | None = None
    severity: Severity | None = None
    judged: bool = True

    @property
    def triggered(self) -> bool:
        return self.outcome is Outcome.TRIGGERED

    def __str__(self) -> str:
        where = f"step {self.step}"
        if self.mode is not None and self.mode_step is not None:
            where += f" ({self.mode.name} step {self.mode_step})"
        what = self.outcome.value
        if self.severity is not None:
            what += f" ({self.severity.value})"
        return f"{self.rule} {what} at {where}: {self.message}"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (non-finite measured values become strings)."""
        return {
            "rule": self.rule,
            "step": self.step,
            "outcome": self.outcome.value,
            "message": self.message,
            "mode": None if self.mode is None else self.mode.name,
            "mode_step": self.mode_step,
            "tensors": list(self.tensors),
            "value": _json_number(self.value),
            "threshold": _json_value(self.threshold),
            "details": {k: _json_value(v) for k, v in self.details.items()},
            "traceback": self.traceback,
            "severity": None if self.severity is None else self.severity.value,
            "judged": self.judged,
        }


@dataclass(frozen=True)
class StepRun:
    """Steps of one rule that ended alike with nothing more to say: OK or SKIPPED, with one
    ``message`` (the skip reason; for OK steps that judged nothing, why). What the engine that
    judges many steps at once (:mod:`tensortap.rules._engine`) gives instead of one
    :class:`Finding` per quiet step; a summary counts each step as that Finding would count."""

    rule: str
    steps: np.ndarray  # global steps, ascending (int64)
    outcome: Outcome  # OK or SKIPPED
    message: str = ""
    judged: bool = True

    def __len__(self) -> int:
        return len(self.steps)


@dataclass(frozen=True)
class Said:
    """What a rule says of a step it does not judge (:meth:`~tensortap.rules._rule.Rule.
    not_judged`), from the step's mode or number or the rule's own state, without reading a
    value: OK with ``message`` (``judged`` as :meth:`~tensortap.rules._rule.Rule.explain`
    takes it: False, a step that judged nothing and says why), or SKIPPED with ``message`` as
    the reason."""

    message: str
    outcome: Outcome = Outcome.OK
    judged: bool | None = None

    @classmethod
    def skip(cls, reason: str) -> Said:
        """A step skipped (as ``raise rule.skip(reason)`` there)."""
        return cls(reason, Outcome.SKIPPED)


def _json_number(value: float | None) -> float | str | None:
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else str(value)


def _json_value(value: Any) -> Any:
    if isinstance(value, float):
        return _json_number(value)
    if isinstance(value, (list, tuple)):
        return [_json_value(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _json_value(v) for k, v in value.items()}
    if isinstance(value, ModeKeys):
        return value.name
    if value is None or isinstance(value, (str, int, bool)):
        return value
    if hasattr(value, "item"):  # NumPy scalars
        return _json_value(value.item())
    return str(value)
