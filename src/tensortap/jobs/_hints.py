"""The "next:" lines printed after a job: commands that work as printed, pasted into a new
shell (the ``tensortap`` of this environment by its path when it is not on ``PATH``)."""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from pathlib import Path

from tensortap.jobs._record import JobRecord


def _shown(path: Path) -> str:
    """``path`` relative to the working directory when it lies inside it (``.venv/bin/x``)."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def shell_command(name: str = "tensortap") -> str:
    """How to call this environment's ``name`` (``tensortap`` or ``python``) from a new shell:
    its bare name when ``PATH`` finds this very one, else its path."""
    here = Path(sys.executable).parent / name
    if name == "python" or not here.exists():
        here = Path(sys.executable)
    found = shutil.which(name)
    if found and os.path.realpath(found) == os.path.realpath(here):
        return name
    return shlex.quote(_shown(here.absolute()) if here.is_absolute() else str(here))


def _has_activations(location: str) -> bool:
    """Whether TensorPlot has something to draw (its default: the ReLU outputs)."""
    from tensortap.trials._trial import create_trial

    try:
        trial = create_trial(location, must_exist=True)  # none written: no hint, no warning
        return bool(trial.tensor_names(regex=r".*relu_output"))
    except Exception:  # no trial yet, or a damaged one: no hint that could fail
        return False


def next_steps(record: JobRecord) -> list[str]:
    """What to run next for a job: the dashboard, the report, TensorPlot (when ReLU outputs
    were saved), the tensor names, its summary, and the trial in Python."""
    tt, job = shell_command(), shlex.quote(_shown(record.dir))
    trial = record.trial_location
    report = shlex.quote(_shown(record.dir / "report.html"))
    script = f"import tensortap as tt; t = tt.create_trial({trial!r}); print(t.tensor_names())"
    plot = shlex.quote(_shown(record.dir / "tensorplot.html"))
    return [
        f"{tt} serve {job}   # the live dashboard, http://127.0.0.1:8765",
        f"{tt} report {job} -o {report}",
        *([f"{tt} tensorplot {job} -o {plot}"] if _has_activations(trial) else []),
        f"{tt} names {job}",
        f"{tt} summary {job}",
        f"{shell_command('python')} -c {shlex.quote(script)}",
    ]


__all__ = ["next_steps", "shell_command"]
