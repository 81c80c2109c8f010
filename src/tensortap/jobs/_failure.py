"""How a job's training ended when it did not finish: "training failed at step 11:
RuntimeError: ..." or "training was killed after step 20, the last one saved (signal 9,
SIGKILL)", the verdict of a run that did not finish (whatever its rules said of the steps
before).

The exception is the one the script raised, as ``python -m tensortap.attach`` told the job
(event ``training_raised``, with the step its hooks were at), else the last line of the last
traceback at the end of the training log (a bounded read). The step is the one the script's
hooks were at when it raised ("at step 12"); when nothing said so (killed, or a command that is
not a Python script run by the job) it is the last step the trial holds ("after step 20, the
last one saved").
"""

from __future__ import annotations

import re
import signal
from typing import Any

from tensortap.exceptions import TensortapError
from tensortap.jobs._record import JobRecord

#: The end of the training log read for a traceback: its exception line is the last one.
LOG_BYTES = 65536
_EXCEPTION = re.compile(r"^[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Warning)\b.*$")


def last_exception(log: str) -> str | None:
    """The exception line of the last traceback in ``log`` (``RuntimeError: boom``), or None."""
    lines = log.splitlines()
    start = max((i for i, line in enumerate(lines) if line.startswith("Traceback (")), default=-1)
    if start < 0:
        return None
    found = [line for line in lines[start + 1 :] if _EXCEPTION.match(line)]
    return found[-1].strip()[:500] if found else None


def _log_end(record: JobRecord) -> str:
    try:  # the log's end, read as the job's files are (a regular file of its own)
        return record.log_tail(LOG_BYTES).decode("utf-8", errors="replace")
    except OSError:
        return ""


def _last_trial_step(record: JobRecord) -> int | None:
    from tensortap.trials._trial import Trial

    try:
        with Trial(record.trial_location, must_exist=True) as trial:
            steps = trial.steps(show_incomplete_steps=True)
    except (TensortapError, OSError):
        return None
    return steps[-1] if steps else None


def _raised(record: JobRecord) -> dict[str, Any] | None:
    said = [e for e in record.iter_events() if e.get("event") == "training_raised"]
    return said[-1] if said else None


def describe_failure(record: JobRecord, exit_code: int | None, error: str = "") -> dict[str, Any]:
    """How the job's training failed: ``step`` (None: before any), ``error`` (the exception,
    or the supervisor's own ``error``), ``signal`` (when killed) and ``text``, one line."""
    raised = _raised(record)
    step = raised.get("step") if raised is not None else None
    where = f"at step {step}"
    if not isinstance(step, int):  # where the hook was is unknown: the last step saved
        step = _last_trial_step(record)
        where = f"after step {step}, the last one saved"
    if step is None:
        where = "before any step was saved"
    said = raised.get("error") if raised is not None else None
    exception = (
        error or (said if isinstance(said, str) else None) or last_exception(_log_end(record))
    )
    killed = -exit_code if exit_code is not None and exit_code < 0 else None
    if killed is not None:
        try:
            name = signal.Signals(killed).name
        except ValueError:
            name = "a signal"
        text = f"training was killed {where} (signal {killed}, {name})"
    elif exception:
        text = f"training failed {where}: {exception}"
    else:
        text = f"training failed {where} (exit code {exit_code})"
    return {"step": step, "error": exception, "signal": killed, "text": text}
