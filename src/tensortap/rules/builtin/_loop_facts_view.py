"""What TrainingLoop reads: the training loop's facts as saved (each one's latest value, and
its first: a fact is saved when it changes), and the verdict each of its checks hands back."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class LoopVerdict:
    """A fault of the training loop, as one check found it."""

    cause: str
    message: str
    value: float
    threshold: float
    tensors: tuple[str, ...] = ()
    #: evidence, not a certain fault: a problem only where it explains the run's harm
    needs_harm: bool = False


class LoopFacts:
    """The facts of a trial's ``training_loop`` collection, by name without its prefix."""

    def __init__(self) -> None:
        self.latest: dict[str, np.ndarray] = {}  # the latest saved value of each fact
        self.first: dict[str, np.ndarray] = {}  # and the first

    def saw(self, name: str, value: np.ndarray) -> None:
        """``name`` was saved with ``value`` at the step read now."""
        self.latest[name] = value
        self.first.setdefault(name, value)

    def num(self, name: str, default: float = float("nan")) -> float:
        """The latest value of a fact that is one number (``default`` when none was saved)."""
        value = self.latest.get(name)
        return default if value is None or value.size != 1 else float(value.reshape(()))

    def count(self, name: str) -> int:
        """The latest value of a counting fact (0 when none was saved)."""
        return int(self.num(name, 0))

    def first_count(self, name: str) -> int:
        """The first saved value of a counting fact (0 when none was saved)."""
        value = self.first.get(name)
        return 0 if value is None or value.size != 1 else int(value.reshape(()))

    def keys(self, prefix: str) -> list[str]:
        """The rest of the names of facts starting with ``prefix`` (``<prefix><rest>``)."""
        return sorted(k[len(prefix) :] for k in self.latest if k.startswith(prefix))
