"""A replayer's budget: at most ``max_replays`` replays, none once ``max_seconds`` were spent
replaying (see :mod:`tensortap.pytorch._replay`). Safe from any thread."""

from __future__ import annotations

import logging
import threading

from tensortap.exceptions import ReplayError

log = logging.getLogger("tensortap.pytorch._replay")  # one logger for the replayer's messages

MAX_REPLAYS = 3  # the default budget of replays per replayer


class ReplayBudget:
    """Counts the replays run and the seconds spent; :meth:`check` refuses one over budget."""

    def __init__(self, max_replays: int, max_seconds: float | None) -> None:
        self.max_replays, self.max_seconds = max_replays, max_seconds
        self.runs = 0
        self.seconds = 0.0
        self.over_budget = 0  #: replays refused for the budget
        self._lock = threading.Lock()

    def check(self, step: int) -> None:
        """Raise :class:`~tensortap.exceptions.ReplayError` (counted) if a replay of ``step``
        would go over budget; the first refusal is logged."""
        with self._lock:
            spent = self.max_seconds is not None and self.seconds >= self.max_seconds
            if self.runs < self.max_replays and not spent:
                return
            self.over_budget += 1
            first = self.over_budget == 1
        why = (
            f"{self.max_seconds} s spent replaying (max_seconds)"
            if spent
            else f"{self.max_replays} replays made (max_replays)"
        )
        if first:
            log.warning("tensortap replay: %s; later replays are counted, not run", why)
        raise ReplayError(f"step {step} not replayed: {why}")

    def start(self) -> None:
        """A replay starts: one more run."""
        with self._lock:
            self.runs += 1

    def spend(self, seconds: float) -> None:
        """A replay took ``seconds``."""
        with self._lock:
            self.seconds += seconds


__all__ = ["MAX_REPLAYS", "ReplayBudget"]
