"""The on-disk record of a training job, which any process can follow while the job runs.

A job directory holds::

    job.json          what was asked: the command, the rules, the hook configuration
    hook.json         the hook configuration the training process reads ($TENSORTAP_CONFIG)
    trial/            the debugger artifacts (the trial the rules read)
    events.jsonl      one JSON object per line, appended as things happen
    rules/NAME.json   each rule's latest status (rewritten atomically by its process)
    summary.json      the job's summary (rewritten atomically by the supervisor)
    logs/training.log, logs/rules/NAME.log
    stop              present once something asked training to stop

Every event line is written with a single ``write`` on a file opened with ``O_APPEND``, so lines
from the supervisor and the rule processes never interleave; files that are rewritten are
written to a temporary name and renamed, so a reader never sees half of one.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from tensortap.exceptions import InvalidConfigError, StorageError
from tensortap.jobs._documents import (
    JobDocumentError,
    SummaryDocument,
    decode_event,
    decode_job,
    decode_rule_status,
    decode_rule_status_listed,
    decode_summary,
    parse_json,
)
from tensortap.storage._descriptors import read_regular
from tensortap.trials._locate import JOB_FILE, TRIAL_DIR, job_trial_location

HOOK_FILE = "hook.json"
EVENTS_FILE = "events.jsonl"
SUMMARY_FILE = "summary.json"
STOP_FILE = "stop"


def write_json(path: Path, data: Any) -> None:
    """Replace ``path`` with ``data`` as JSON, atomically; readable by its owner only (0600:
    a job's files name its command, paths and environment)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(json.dumps(data, indent=1, default=str))
    os.replace(tmp, path)


#: The most read of one job file: a JSON file, the events read in one call, a log's tail.
MAX_JSON_BYTES = 32 * 1024 * 1024
MAX_EVENTS_BYTES = 16 * 1024 * 1024


def read_bytes(path: Path, inside: Path | None = None) -> bytes:
    """``path``'s bytes, read as a job's files are read (see :meth:`JobRecord.read`): a
    regular file inside ``inside`` (its own directory unless given), with one link (a hard
    link to a file elsewhere is not the job's own), at most :data:`MAX_JSON_BYTES`."""
    data = read_regular(
        path, path.parent if inside is None else inside, MAX_JSON_BYTES + 1, single_link=True
    )
    if len(data) > MAX_JSON_BYTES:
        raise StorageError(
            f"{path} holds more than {MAX_JSON_BYTES} bytes; a job's JSON files are smaller: "
            "it is not one tensortap wrote"
        )
    return data


def read_json(path: Path, inside: Path | None = None) -> Any:
    """``path``'s JSON (see :func:`read_bytes`), checked as a job document is
    (:func:`tensortap.jobs._documents.parse_json`: a JobDocumentError when it is not JSON)."""
    return parse_json(read_bytes(path, inside), str(path))


class JobRecord:
    """The files of one job (see the module docstring)."""

    def __init__(self, job_dir: str | os.PathLike[str]) -> None:
        self.dir = Path(job_dir).resolve()
        self._trial_location: str | None = None
        #: Lines of ``events.jsonl`` skipped so far: not an event tensortap writes.
        self.skipped_events = 0

    def __repr__(self) -> str:
        return f"JobRecord({str(self.dir)!r})"

    # -- paths --
    @property
    def name(self) -> str:
        return self.dir.name

    @property
    def job_file(self) -> Path:
        return self.dir / JOB_FILE

    @property
    def hook_file(self) -> Path:
        return self.dir / HOOK_FILE

    @property
    def trial_dir(self) -> Path:
        return self.dir / TRIAL_DIR

    @property
    def trial_location(self) -> str:
        """Where the trial is written: the job's ``trial/`` directory, or the location given
        as ``DebuggerHookConfig(s3_output_path=...)``."""
        if self._trial_location is None:
            self._trial_location = job_trial_location(self.dir)
        return self._trial_location

    @property
    def stop_file(self) -> Path:
        return self.dir / STOP_FILE

    @property
    def summary_file(self) -> Path:
        return self.dir / SUMMARY_FILE

    @property
    def events_file(self) -> Path:
        return self.dir / EVENTS_FILE

    @property
    def training_log(self) -> Path:
        return self.dir / "logs" / "training.log"

    def read(self, path: Path, limit: int, offset: int = 0, tail: bool = False) -> bytes:
        """At most ``limit`` bytes of one of the job's files, opened as a trial's files are:
        a regular file inside the job directory only (a symlink is not followed, a FIFO or
        device is refused without blocking, nor a file with another hard link: it may be one
        from elsewhere, not the job's own; see
        :func:`tensortap.storage._descriptors.read_regular`)."""
        return read_regular(path, self.dir, limit, offset=offset, tail=tail, single_link=True)

    def log_tail(self, limit: int = 64 * 1024) -> bytes:
        """The last ``limit`` bytes of the training log (b"" before it exists)."""
        try:
            return self.read(self.training_log, limit, tail=True)
        except FileNotFoundError:
            return b""

    def rule_log(self, rule: str) -> Path:
        return self.dir / "logs" / "rules" / f"{rule}.log"

    def rule_status_file(self, rule: str) -> Path:
        return self.dir / "rules" / f"{rule}.json"

    # -- creating and reading --
    def create(self, job: Mapping[str, Any]) -> None:
        """Lay out a new job directory with its ``job.json``."""
        if self.job_file.exists():
            raise InvalidConfigError(f"{self.dir} already holds a job; pick another output path")
        for sub in ("logs/rules", "rules"):
            (self.dir / sub).mkdir(parents=True, exist_ok=True)
        write_json(self.job_file, dict(job))

    def exists(self) -> bool:
        return self.job_file.is_file()

    def job(self) -> dict[str, Any]:
        """The job's ``job.json``, decoded (:func:`~tensortap.jobs._documents.decode_job`):
        an InvalidConfigError when there is none, a JobDocumentError (a FormatError) or a
        StorageError when it cannot be read."""
        if not self.exists():
            raise InvalidConfigError(
                f"{self.dir} is not a tensortap job directory (no {JOB_FILE}); jobs are the "
                "directories that `tensortap jobs` lists"
            )
        return decode_job(read_bytes(self.job_file, self.dir), JOB_FILE)

    def read_summary(self) -> SummaryDocument | None:
        """The job's ``summary.json``, decoded (what is shown, what was left out and why);
        None before the supervisor wrote one. A JobDocumentError or StorageError when it
        cannot be read at all."""
        try:
            raw = read_bytes(self.summary_file, self.dir)
        except FileNotFoundError:
            return None
        return decode_summary(raw, SUMMARY_FILE)

    def summary(self) -> dict[str, Any] | None:
        """What can be shown of the job's summary (see :meth:`read_summary`); None before
        the supervisor wrote one, and when it cannot be read (the views that show a job ask
        :meth:`read_summary`, to say why)."""
        try:
            found = self.read_summary()
        except (JobDocumentError, StorageError):
            return None
        return None if found is None else found.summary

    def rule_status(self, rule: str) -> dict[str, Any] | None:
        """A rule's latest status, decoded; None before it wrote one or when it cannot be
        read."""
        path = self.rule_status_file(rule)
        try:
            return decode_rule_status(read_bytes(path, self.dir), f"rules/{path.name}")
        except (OSError, JobDocumentError):
            return None

    def read_rule_status(self, rule: str) -> tuple[dict[str, Any] | None, list[str]]:
        """A rule's latest status, decoded, and what was left out of it and why: ``(None,
        [])`` before the rule wrote one, ``(None, [why])`` when it cannot be read at all (not
        a rule's status, another rule's, not a regular file of the job's own)."""
        path = self.rule_status_file(rule)
        what = f"rules/{path.name}"
        try:
            raw = read_bytes(path, self.dir)
        except FileNotFoundError:
            return None, []
        except (OSError, StorageError) as exc:
            return None, [f"{what} cannot be read: {exc}"]
        try:
            return decode_rule_status_listed(raw, what, rule)
        except JobDocumentError as exc:
            return None, [f"{exc}; the rule's status is not shown"]

    # -- events --
    def append_event(self, kind: str, **fields: Any) -> dict[str, Any]:
        """Append one event (``{"time": ..., "event": kind, ...}``) to the events log."""
        event = {"time": time.time(), "event": kind, **fields}
        line = (json.dumps(event, default=str) + "\n").encode()
        fd = os.open(self.events_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)
        return event

    def events(self, offset: int = 0) -> tuple[list[dict[str, Any]], int]:
        """Events from byte ``offset`` on (at most :data:`MAX_EVENTS_BYTES` a call), and the
        offset to read from next time (a line still being written is left for then)."""
        try:
            data = self.read(self.events_file, MAX_EVENTS_BYTES, offset=offset)
        except FileNotFoundError:
            return [], offset
        end = data.rfind(b"\n") + 1
        if end == 0 and len(data) == MAX_EVENTS_BYTES:  # one line longer than that: never ours
            return [], offset + len(data)
        out = []
        for line in data[:end].splitlines():
            if line.strip():
                try:
                    out.append(decode_event(line, EVENTS_FILE))
                except JobDocumentError:
                    self.skipped_events += 1  # never ours; skip rather than stop following
        return out, offset + end

    def iter_events(self) -> Iterator[dict[str, Any]]:
        yield from self.events()[0]
