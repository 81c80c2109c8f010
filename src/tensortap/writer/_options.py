"""Settings of the background writer."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any, Literal

from tensortap.exceptions import InvalidConfigError

QueuePolicy = Literal["block", "drop"]


@dataclass(frozen=True)
class WriterOptions:
    """How the background writer buffers and publishes.

    - ``flush_secs``: a step is published at most this long after it ends (live readers see it).
    - ``idle_flush_secs``: when no step has come for this long (a slow or paused loop), the
      steps waiting in the open segment are published at once instead of at ``flush_secs``,
      so a live rule sees them promptly; to keep long runs in few segments, such an early
      publication comes no sooner than ``flush_secs`` after the previous one (a loop saving
      every 10 ms, or every 150 ms, still gets one segment per ``flush_secs``). ``None``
      turns it off.
    - ``max_queue_bytes``: steps waiting for the writer may hold this many bytes; a single
      larger step is still accepted when the queue is empty.
    - ``when_full``: ``"block"`` makes training wait for the writer (nothing is lost);
      ``"drop"`` drops the step, counts it, and records the drop in the trial.
    - ``segment_bytes``: a segment is published once its data reaches this size.
    - ``retry_secs``: how long the writer keeps retrying a transient storage failure (a lost
      network, a server answering 503) before giving up on the segment; meanwhile the queue
      fills and ``when_full`` applies, and when storage comes back the writer catches up.
    - ``check_secs``: how often the writer renews its claim on the worker and checks that the
      trial is still there (re-creating its marker and worker info if ``out_dir`` was deleted).
    - ``close_timeout_secs``: how long ``close()`` waits for the writer before giving up (and
      logging what was not written) so a broken disk never hangs the end of training.
    - ``compact``: ``True`` (the default) makes the writer merge its small published
      segments into large ones (64 at a time, and what is left at close), on its own thread,
      so a run written at a slow pace is opened and read like one written flat out
      (docs/format.md, "Compaction"). ``False`` keeps every segment and writes rollups of
      their series.
    """

    flush_secs: float = 1.0
    idle_flush_secs: float | None = 0.1
    max_queue_bytes: int = 256 * 1024 * 1024
    when_full: QueuePolicy = "block"
    segment_bytes: int = 64 * 1024 * 1024
    close_timeout_secs: float = 120.0
    retry_secs: float = 600.0
    check_secs: float = 20.0
    compact: bool = True

    def __post_init__(self) -> None:
        checks: list[tuple[str, Any]] = [
            ("flush_secs", self.flush_secs),
            ("close_timeout_secs", self.close_timeout_secs),
            ("retry_secs", self.retry_secs),
            ("check_secs", self.check_secs),
        ]
        if self.idle_flush_secs is not None:
            checks.append(("idle_flush_secs", self.idle_flush_secs))
        for name, value in checks:
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise InvalidConfigError(
                    f"{name} must be a number > 0, got {value!r}"
                    + (" (None turns idle publishing off)" if name == "idle_flush_secs" else "")
                )
        for name, value in (
            ("max_queue_bytes", self.max_queue_bytes),
            ("segment_bytes", self.segment_bytes),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidConfigError(f"{name} must be an int >= 1, got {value!r}")
        if not isinstance(self.compact, bool):
            raise InvalidConfigError(f"compact must be true or false, got {self.compact!r}")
        if self.when_full not in ("block", "drop"):
            raise InvalidConfigError(f"when_full must be 'block' or 'drop', got {self.when_full!r}")

    def to_dict(self) -> dict[str, Any]:
        """The options as JSON values (a job's hook configuration holds them)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> WriterOptions:
        """Options from JSON or a job's settings: numbers may be given as strings ("5",
        "0.5"), and ``idle_flush_secs`` as null or "none" to turn idle publishing off."""
        names = [f.name for f in fields(cls)]
        if not isinstance(data, Mapping):
            raise InvalidConfigError(
                f'writer options must be an object such as {{"flush_secs": 5}}, got {data!r}'
            )
        unknown = sorted(set(data) - set(names))
        if unknown:
            raise InvalidConfigError(
                f"unknown writer options {unknown}; accepted: {', '.join(names)}"
            )
        return cls(**{name: _from_text(name, value) for name, value in data.items()})


def _from_text(name: str, value: Any) -> Any:
    """A value as a job or a command line writes it ("5", "none") turned into its type; other
    values are left to the checks in ``__post_init__``."""
    if not isinstance(value, str) or name == "when_full":
        return value
    text = value.strip()
    if name == "compact":
        if text.lower() in ("true", "false", "1", "0", "yes", "no", "on", "off"):
            return text.lower() in ("true", "1", "yes", "on")
        raise InvalidConfigError(f"compact must be true or false, got {value!r}")
    if name == "idle_flush_secs" and text.lower() in ("none", "null", "off"):
        return None
    try:
        return int(text) if name.endswith("_bytes") else float(text)
    except ValueError:
        kind = "an int" if name.endswith("_bytes") else "a number"
        raise InvalidConfigError(f"{name} must be {kind}, got {value!r}") from None
