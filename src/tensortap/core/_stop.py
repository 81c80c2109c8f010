"""A request, from outside the training process, to stop training at the next step boundary.

The job runner writes the request file (a rule's stop-training action) and the hook looks for it
when a step ends, at most every ``interval`` seconds, so the check costs nothing measurable. The
file holds the reason as text.
"""

from __future__ import annotations

import os
import time


class StopRequest:
    """Watches for the file at ``path``; :meth:`requested` returns its reason once it exists."""

    def __init__(self, path: str | os.PathLike[str], interval: float = 0.1) -> None:
        self.path = os.fspath(path)
        self.interval = interval
        self._next_look = 0.0

    def requested(self) -> str | None:
        now = time.monotonic()
        if now < self._next_look:
            return None
        self._next_look = now + self.interval
        try:
            with open(self.path, encoding="utf-8", errors="replace") as f:
                return f.read(1000).strip() or "stop requested"
        except OSError:  # not there (yet), or unreadable: keep training
            return None


def request_stop(path: str | os.PathLike[str], reason: str) -> None:
    """Ask the training that watches ``path`` to stop (atomically: written, then renamed)."""
    tmp = f"{os.fspath(path)}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(reason)
    os.replace(tmp, path)
