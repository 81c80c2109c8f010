"""What ``serve``, ``report`` and ``diagnose`` are pointed at: tensortap's own trials, jobs and
runs directories, or another tracker's runs (a TensorBoard logdir, mlruns/, W&B, Neptune's
Parquet), imported first into a temporary directory the command owns and removes when it
ends; ``serve`` goes on following it (:func:`follow_source`). The source is only read:
nothing is ever written there."""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tensortap.exceptions import InvalidConfigError

#: How the message names each format.
FORMAT_NAMES = {
    "tensorboard": "TensorBoard",
    "mlflow": "MLflow",
    "wandb": "W&B",
    "neptune": "Neptune",
}
#: What a source of each format is, as a page names it ("runs/exp1 (TensorBoard logdir,
#: imported)").
SOURCE_KINDS = {
    "tensorboard": "TensorBoard logdir",
    "mlflow": "MLflow file store",
    "wandb": "W&B run",
    "neptune": "Neptune export",
}


def imported_name(source: str, format: str) -> str:
    """How a page and the CLI name a run imported into a temporary directory: the source the
    user named, never the temporary directory (gone when the command ends)."""
    return f"{source} ({SOURCE_KINDS.get(format, format)}, imported)"


def shown_locations(given: str, into: Path, result: Any) -> dict[str, str]:
    """Each imported trial's location under ``into`` (and ``into`` itself), mapped to the
    name of what it was imported from (see :func:`imported_name`)."""
    shown = {str(into): imported_name(given, result.format)}
    for run in result.runs:
        if run.error is None:
            source = (run.lineage or {}).get("source")
            where = source if isinstance(source, str) and source else given
            shown[run.trial] = imported_name(where, result.format)
    return shown


def is_tensortap(given: str) -> bool:
    """Whether ``given`` is tensortap's own: a URL, a trial, a job, a runs directory holding
    them (two levels down, as the dashboard looks), an empty directory (training will fill
    it), or nothing yet (the commands say what they need)."""
    from tensortap.format._layout import TRIAL_MARKER
    from tensortap.trials._locate import JOB_FILE

    if "://" in given:
        return True
    path = Path(given)
    if not path.is_dir():
        return not path.exists()

    def holds(place: Path, depth: int) -> bool:
        marked = (place / JOB_FILE).is_file() or (place / TRIAL_MARKER).is_file()
        if marked or (place / "workers").is_dir():
            return True
        if depth == 0:
            return False
        try:
            children = [p for p in place.iterdir() if p.is_dir() and not p.is_symlink()]
        except OSError:
            return False
        return any(holds(child, depth - 1) for child in children)

    try:
        empty = not any(path.iterdir())
    except OSError:
        return True  # unreadable: the command's own reading says so
    return empty or holds(path, 2)


def source_format(given: str, format: str | None) -> str:
    """The format of a source that is not tensortap's own (``format`` when named), or the
    error that says what the commands take."""
    from tensortap.trackers import detect_format

    if format is not None:
        return format
    try:
        return detect_format(given)
    except InvalidConfigError:
        raise InvalidConfigError(
            f"{given} is neither a tensortap trial, job or runs directory nor a source "
            "tensortap imports (a TensorBoard logdir, mlruns/, a W&B run or CSV, Neptune's "
            "Parquet); point at one of those, or name the format with --format"
        ) from None


@contextmanager
def import_directory(prefix: str) -> Iterator[Path]:
    """A temporary directory for imported trials, removed when the block ends."""
    with tempfile.TemporaryDirectory(prefix=prefix) as place:
        yield Path(place)


def check_outside(source: str, place: Path) -> None:
    """Refuse to import ``source`` into ``place`` when ``place`` is inside it: the source is
    never written into."""
    root = Path(source).resolve()
    if place.resolve().is_relative_to(root):
        raise InvalidConfigError(
            f"the temporary directory {place} is inside {source}, which tensortap never "
            f"writes into; set TMPDIR to a directory outside {source}"
        )


def import_source(
    given: str, into: Path, format: str | None, loss: str | None, validation_loss: str | None
) -> Any:
    """Import the runs of ``given`` under ``into`` (see :func:`tensortap.trackers.import_runs`)
    and say on stderr what was imported, and what was not."""
    from tensortap.trackers import import_runs

    chosen = source_format(given, format)
    check_outside(given, into)
    result = import_runs(given, into, chosen, loss, validation_loss)
    _say(given, result)
    return result


def follow_source(
    given: str,
    into: Path,
    spare: Path,
    format: str | None,
    loss: str | None,
    validation_loss: str | None,
) -> tuple[Any, Any]:
    """Import the runs of ``given`` under ``into`` as :func:`import_source` does, to be
    followed while served (see :class:`tensortap.trackers.FollowedImport`: its new trials
    go under ``spare``): the follower, its import done, and what the import did."""
    from tensortap.trackers import FollowedImport, Roles

    chosen = source_format(given, format)
    check_outside(given, into)
    check_outside(given, spare)
    follower = FollowedImport(
        given,
        into,
        spare,
        chosen,
        Roles(loss, validation_loss),
        describe=lambda where: imported_name(where, chosen),
    )
    result = follower.start()
    _say(given, result)
    return follower, result


def _say(given: str, result: Any) -> None:
    """Say on stderr what was imported, and what was not."""
    imported = len(result.runs) - len(result.failed)
    name = FORMAT_NAMES.get(result.format, result.format)
    print(
        f"imported {imported} {name} run{'' if imported == 1 else 's'} of {given} "
        "(read-only; nothing written there)",
        file=sys.stderr,
    )
    for run in result.runs:
        if run.error is not None:
            print(f"  {run.name}: not imported: {run.error}", file=sys.stderr)
            continue
        left_out = (run.lineage or {}).get("histograms_not_imported")
        if isinstance(left_out, dict):
            print(f"  {run.name}: {left_out.get('said')}", file=sys.stderr)


__all__ = [
    "FORMAT_NAMES",
    "SOURCE_KINDS",
    "check_outside",
    "follow_source",
    "import_directory",
    "import_source",
    "imported_name",
    "is_tensortap",
    "shown_locations",
]
