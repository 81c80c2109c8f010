"""What a writer counts, and how it retries a transient failure."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from tensortap.exceptions import StorageError

T = TypeVar("T")
logger = logging.getLogger("tensortap.writer._trial_writer")


@dataclass
class WriterStatus:
    """Counters of one writer; also written to the worker's end marker."""

    steps_submitted: int = 0
    steps_written: int = 0
    steps_dropped: int = 0
    steps_lost: int = 0
    records_written: int = 0
    bytes_written: int = 0
    segments_published: int = 0
    segments_merged: int = 0  # published segments merged into larger ones (compaction)
    errors: int = 0
    retries: int = 0
    last_error: str | None = None
    dropped: list[list[int]] = field(default_factory=list)


def record_failure(
    status: WriterStatus, worker: str, exc: BaseException, doing: str, consequence: str
) -> None:
    """Count a writer failure in ``status`` and log it (the first 10, then every 100th)."""
    status.errors += 1
    status.last_error = f"{doing}: {type(exc).__name__}: {exc}"
    if status.errors <= 10 or status.errors % 100 == 0:
        logger.error(
            "tensortap failed %s for %s (error %d; training continues, %s)",
            doing,
            worker,
            status.errors,
            consequence,
            exc_info=exc if status.errors <= 3 else None,
        )


def retrying(
    doing: str,
    action: Callable[[], T],
    worker: str,
    retry_secs: float,
    status: WriterStatus,
    close_deadline: Callable[[], float],
) -> T:
    """``action()``, retried with backoff while it fails transiently (``StorageError.transient``)
    for up to ``retry_secs``, and no later than the writer's close deadline."""
    started, delay, failures = time.monotonic(), 0.1, 0
    while True:
        try:
            result = action()
        except StorageError as exc:
            now = time.monotonic()
            if not exc.transient or now - started > retry_secs or now > close_deadline():
                raise
            failures += 1
            status.retries += 1
            if failures == 1 or failures % 20 == 0:
                logger.warning(
                    "tensortap: %s for %s failed (%s); retrying while training goes on "
                    "(%d tries so far; giving up after %.0f s)",
                    doing,
                    worker,
                    exc,
                    failures,
                    retry_secs,
                )
            time.sleep(delay)
            delay = min(delay * 2, 5.0)
            continue
        if failures:
            logger.warning(
                "tensortap: %s for %s succeeded after %d retries", doing, worker, failures
            )
        return result
