"""A request, from outside the training process, to roll training back (a rule's rollback
action): the sibling of :mod:`tensortap.core._stop`, through the same job directory.

The rule's process writes the request file (JSON: the step the rule fired at, its mode, the rule
and its message) atomically; the training process's :class:`tensortap.pytorch.Rollback` looks for
it at step boundaries, at most every ``interval`` seconds, and claims it by renaming it, so one
request is acted on once and a later one can follow. What it did goes back into the job's events
(:func:`record_event`), which the live view shows.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

#: The request file's name in a job's directory.
REQUEST_FILE = "rollback"
#: The job's events log (:data:`tensortap.jobs._record.EVENTS_FILE`; core cannot import jobs).
EVENTS_FILE = "events.jsonl"


def record_event(job_dir: str | os.PathLike[str], kind: str, **fields: Any) -> None:
    """Append one event to the job's events log, as the job's own processes do (one ``write``
    on a file opened with ``O_APPEND``: lines never interleave)."""
    event = {"time": time.time(), "event": kind, **fields}
    line = (json.dumps(event, default=str) + "\n").encode()
    fd = os.open(os.path.join(job_dir, EVENTS_FILE), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def request_rollback(path: str | os.PathLike[str], request: dict[str, Any]) -> None:
    """Ask the training that watches ``path`` to roll back (written, then renamed)."""
    tmp = f"{os.fspath(path)}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(request, f, default=str)
    os.replace(tmp, path)


class RollbackRequests:
    """Watches for the request file at ``path``; :meth:`take` returns a request once."""

    def __init__(self, path: str | os.PathLike[str], interval: float = 0.1) -> None:
        self.path = os.fspath(path)
        self.interval = interval
        self._next_look = 0.0
        self._taken = 0

    def take(self) -> dict[str, Any] | None:
        """The request, claimed (renamed away) so that it is acted on once; None when there is
        none (or it is not yet time to look again)."""
        now = time.monotonic()
        if now < self._next_look:
            return None
        self._next_look = now + self.interval
        claimed = f"{self.path}.taken-{os.getpid()}-{self._taken}"
        try:
            os.replace(self.path, claimed)  # atomic: one process claims it
        except OSError:  # none yet (or another process claimed it)
            return None
        self._taken += 1
        try:
            with open(claimed, encoding="utf-8", errors="replace") as f:
                body = json.loads(f.read(100_000) or "{}")
        except (OSError, ValueError):
            body = {}
        return body if isinstance(body, dict) else {}
