"""The guard's reader thread (``tensortap-guard-reader``): each step's decision, copied to the
host without blocking, is read there, off the training thread (see
:mod:`tensortap.pytorch._guard`).

:class:`DecisionReader` starts the thread at the first decision, hands decisions over in
order (at most ``MAX_LAG`` unread: then the training thread waits), and counts what was
handed over and read, so that a reader of the guard can wait for what has *arrived* on the
host (:meth:`DecisionReader.settle`: never for the device) or for everything
(:meth:`DecisionReader.wait_all`).
"""

from __future__ import annotations

import logging
import queue
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from tensortap.pytorch._guard_flight import MAX_LAG

log = logging.getLogger("tensortap.pytorch._guard")  # one logger for the guard's messages

THREAD_NAME = "tensortap-guard-reader"


@dataclass
class Decision:
    """A step decided on the device, on its way to the reader."""

    step: int
    row: torch.Tensor  # the step's statistics on the host (arrived once ``event`` has)
    event: Any  # a CUDA event, or None where the row is already there
    batch: Any
    observed: bool
    rng_state: dict[str, Any] | None
    #: The PyTorch hook open when the step ran and its global step then (None: no hook): a
    #: trip is kept as an event of that hook's session, at the step it happened.
    hook: Any = None
    global_step: int | None = None

    def arrived(self) -> bool:
        return self.event is None or bool(self.event.query())


class DecisionReader:
    """Calls ``take(decision)`` on the reader thread for each decision :meth:`submit` hands
    over, in order; an exception there is logged, and the decision still counts as read."""

    def __init__(self, take: Callable[[Decision], None]) -> None:
        self._take = take
        self._read_cv = threading.Condition()
        self._in_flight: deque[Decision] = deque()
        self.submitted = 0  #: decisions handed over
        self.read = 0  #: decisions read
        self._queue: queue.Queue[Decision | None] = queue.Queue(maxsize=MAX_LAG)
        self._thread: threading.Thread | None = None

    def submit(self, decision: Decision) -> None:
        """Hand ``decision`` to the reader (started at the first); waits only while
        ``MAX_LAG`` decisions are unread."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name=THREAD_NAME, daemon=True)
            self._thread.start()
        with self._read_cv:
            self._in_flight.append(decision)
            self.submitted += 1
        self._queue.put(decision)

    def counts(self) -> tuple[int, int]:
        """(decisions read, decisions handed over and not read yet)."""
        with self._read_cv:
            return self.read, self.submitted - self.read

    def on_reader_thread(self) -> bool:
        return threading.current_thread() is self._thread

    def settle(self, timeout: float = 60.0) -> None:
        """Wait until every decision that has arrived on the host is read (a no-op on the
        reader thread itself: what is read is all there is)."""
        if self.on_reader_thread():
            return
        with self._read_cv:
            arrived = 0
            for decision in self._in_flight:
                if not decision.arrived():
                    break
                arrived += 1
            target = self.read + arrived
            self._read_cv.wait_for(lambda: self.read >= target, timeout)

    def wait_all(self, timeout: float | None) -> bool:
        """Wait up to ``timeout`` seconds (None: for ever) for every decision handed over to be
        read; whether all were."""
        with self._read_cv:
            return self._read_cv.wait_for(lambda: self.read >= self.submitted, timeout)

    def close(self, timeout: float = 10.0) -> None:
        """Let the reader thread end once it has read what it was handed, and wait up to
        ``timeout`` seconds for it to end (a process leaves nothing of the guard running)."""
        thread = self._thread
        if thread is not None:
            self._queue.put(None)
            self._thread = None
            if thread is not threading.current_thread():
                thread.join(timeout)

    def _loop(self) -> None:
        while (decision := self._queue.get()) is not None:
            try:
                if decision.event is not None:
                    decision.event.synchronize()
                self._take(decision)
            except Exception:
                log.exception("tensortap guard: could not read step %d", decision.step)
            finally:
                with self._read_cv:
                    self._in_flight.popleft()
                    self.read += 1
                    self._read_cv.notify_all()


__all__ = ["THREAD_NAME", "Decision", "DecisionReader"]
