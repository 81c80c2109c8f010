"""A tracker's runs imported once and then followed, as ``tensortap serve`` shows them while
the tracker goes on writing (a TensorBoard logdir during training).

**Checking** costs a ``stat`` walk of the source (every file's size and modification time; at
most :data:`~tensortap.trackers._scalars.MAX_RUNS` directories and :data:`MAX_FOLLOWED_FILES`
files, what the readers read), at most every ``interval`` seconds (:data:`FOLLOW_SECS`). An
unchanged walk reads nothing more. A changed one reads the source again, as the import at start
did, and writes again only the runs whose values changed (:meth:`ScalarRun.digest`); so that
following never takes more than about a fifth of a core, the next check waits at least
:data:`READ_SHARE` times as long as that re-import took.

**Swapping.** A run's new trial is written in full in a directory of its own under ``spare``
(outside every place served), and only then handed over (:class:`FollowChanges`): a reader sees
the old trial or the new one, never a half-written one. The old trial is removed at the next
check. A new run is written the same way and handed over as added.

**What went wrong** is said per run (``problems``): a run no longer in the source, a source
gone or unreadable, a run that could not be written again; such a run stays as last imported,
and the other runs are still followed.
"""

from __future__ import annotations

import logging
import os
import shutil
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from tensortap.exceptions import InvalidConfigError
from tensortap.trackers._scalars import MAX_RUNS, Roles, ScalarRun
from tensortap.trackers._write import write_run

if TYPE_CHECKING:
    from tensortap.trackers import ImportResult

log = logging.getLogger(__name__)

#: The least time between two checks of a followed source (seconds).
FOLLOW_SECS = 5.0
#: The next check waits at least this many times as long as the last re-import took.
READ_SHARE = 4.0
#: Files of a source looked at by one check, at most.
MAX_FOLLOWED_FILES = 100_000

Walk = dict[str, tuple[int, int]]


def stat_walk(source: str | os.PathLike[str]) -> Walk | None:
    """Size and modification time (ns) of every file at or under ``source``, by its path
    under it (None: ``source`` is gone); symlinks are followed, as the readers follow them.
    At most :data:`MAX_RUNS` directories and :data:`MAX_FOLLOWED_FILES` files are looked at
    (a source larger than that is refused by the readers anyway)."""
    root = os.fspath(source)
    try:
        top = os.stat(root)
    except FileNotFoundError:
        return None
    if not stat.S_ISDIR(top.st_mode):
        return {"": (top.st_size, top.st_mtime_ns)}
    seen: Walk = {}
    for count, (dirpath, dirnames, files) in enumerate(os.walk(root)):
        dirnames.sort()
        if count > MAX_RUNS:
            break
        for name in sorted(files):
            if len(seen) >= MAX_FOLLOWED_FILES:
                return seen
            path = os.path.join(dirpath, name)
            try:
                found = os.stat(path)
            except OSError:  # gone between the listing and the stat: seen at the next check
                continue
            seen[os.path.relpath(path, root)] = (found.st_size, found.st_mtime_ns)
    return seen


@dataclass
class FollowChanges:
    """What one check of a followed source changed, for whoever serves its trials:
    ``moved`` (a run's trial location -> where its new trial is, written in full),
    ``added`` (a new run's trial location -> its name and how a page names it) and
    ``problems`` (a run's trial location, after ``moved`` -> what following it found now;
    empty: nothing any more)."""

    moved: dict[str, str] = field(default_factory=dict)
    added: dict[str, tuple[str, str]] = field(default_factory=dict)
    problems: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.moved or self.added or self.problems)


@dataclass
class _Followed:
    """One run followed: where its trial is now, the digest of what it was written from, and
    what following it found last."""

    location: str
    digest: str | None
    problems: tuple[str, ...] = ()


class FollowedImport:
    """The runs of ``source`` imported into ``into`` (:meth:`start`), then followed
    (:meth:`check`, see the module docstring): new trials are written under ``spare``, a
    directory outside every place served. ``describe`` names a run for a page from the path
    it was read from (default: the path itself). ``checks``, ``reads`` and ``writes`` count
    the checks made, the times the source was read (the import at start is one) and the
    trials written."""

    def __init__(
        self,
        source: str | os.PathLike[str],
        into: str | os.PathLike[str],
        spare: str | os.PathLike[str],
        format: str | None = None,
        roles: Roles | None = None,
        interval: float = FOLLOW_SECS,
        describe: Callable[[str], str] | None = None,
    ) -> None:
        if isinstance(interval, bool) or not isinstance(interval, (int, float)) or interval < 0.05:
            raise InvalidConfigError(
                f"a followed source is checked every `interval` seconds, at least 0.05; got "
                f"{interval!r}: give a number of seconds (default {FOLLOW_SECS})"
            )
        self.source = os.fspath(source)
        self.into = Path(into)
        self.spare = Path(spare)
        if self.spare.resolve().is_relative_to(self.into.resolve()):
            raise InvalidConfigError(
                f"the spare directory {spare} is inside {into}, where the trials served are "
                "found: give a directory outside it"
            )
        self.format = format
        self.roles = roles or Roles()
        self.interval = float(interval)
        self.describe = describe or (lambda where: where)
        self.checks = self.reads = self.writes = 0
        self._runs: dict[str, _Followed] = {}
        self._seen: Walk | None = None
        self._next = float("inf")  # not followed before start()
        self._started = False
        self._taken: set[str] = set()
        self._serial = 0
        self._retired: list[str] = []

    def __repr__(self) -> str:
        return f"FollowedImport({self.source!r}, {str(self.into)!r})"

    def start(self) -> ImportResult:
        """Import every run of the source into ``into`` (see :func:`import_runs`)."""
        from tensortap.trackers import import_runs

        seen = stat_walk(self.source)  # before the read: a change during it is seen next
        result = import_runs(
            self.source, self.into, self.format, self.roles.loss, self.roles.validation_loss
        )
        self.format = result.format
        self.reads += 1
        self._taken = {p.name for p in self.into.iterdir()}
        for run in result.runs:
            if run.error is None:  # one that failed is tried again when the source changes
                self._runs[run.name] = _Followed(run.trial, run.digest)
                self.writes += 1
        self._seen = seen
        self._next = time.monotonic() + self.interval
        self._started = True
        return result

    def check(self, force: bool = False) -> FollowChanges:
        """Look at the source when due (``force``: now, whatever the interval), import again
        what changed; what it changed."""
        changes = FollowChanges()
        now = time.monotonic()
        if now < self._next and not (force and self._started):
            return changes
        self._retire()
        self.checks += 1
        seen = stat_walk(self.source)
        if seen == self._seen:
            self._next = now + self.interval
            return changes
        runs: list[ScalarRun] = []
        error: str | None = None
        if seen is None:
            error = f"{self.source} no longer exists"
        else:
            from tensortap.trackers import read_runs

            try:
                runs = read_runs(self.source, self.format)
            except Exception as exc:  # any failure of the read: said on every run, retried
                error = f"{self.source} could not be read again ({type(exc).__name__}: {exc})"
            self.reads += 1
        if error is not None:
            for followed in self._runs.values():
                self._note(changes, followed, f"{error}; shown as last imported")
        else:
            self._update(runs, changes)
        self._seen = seen
        self._next = time.monotonic() + max(self.interval, READ_SHARE * (time.monotonic() - now))
        return changes

    def _update(self, runs: list[ScalarRun], changes: FollowChanges) -> None:
        from tensortap.trackers import judge, trial_dir_name

        names = {run.name for run in runs}
        for name, gone in self._runs.items():
            if name not in names:
                self._note(
                    changes, gone, f"{name}: no longer in {self.source}; shown as last imported"
                )
        for run in runs:
            followed = self._runs.get(run.name)
            digest = run.digest()
            if followed is not None and followed.digest == digest:
                self._note(changes, followed)
                continue
            self._serial += 1
            name = (
                Path(followed.location).name
                if followed is not None
                else trial_dir_name(run.name, self._taken)
            )
            target = self.spare / str(self._serial) / name
            try:
                write_run(run, target, self.roles, judge(run, self.roles))
            except Exception as exc:  # any failure of one run: said on it, the others go on
                shutil.rmtree(target.parent, ignore_errors=True)
                why = f"{run.name}: not imported again ({type(exc).__name__}: {exc})"
                if followed is None:
                    log.warning("%s; tried again when %s changes", why, self.source)
                else:
                    self._note(changes, followed, f"{why}; shown as last imported")
                continue
            self.writes += 1
            if followed is None:
                self._runs[run.name] = _Followed(str(target), digest)
                changes.added[str(target)] = (name, self.describe(run.source))
                continue
            changes.moved[followed.location] = str(target)
            self._retired.append(followed.location)
            followed.location, followed.digest = str(target), digest
            self._note(changes, followed)

    def _note(self, changes: FollowChanges, followed: _Followed, *problems: str) -> None:
        """Say what following a run found now, when it differs from what was said last."""
        if problems != followed.problems:
            followed.problems = problems
            changes.problems[followed.location] = problems

    def _retire(self) -> None:
        """Remove the trials swapped out at the last check (whoever serves them has let go)."""
        for location in self._retired:
            place = Path(location)
            shutil.rmtree(
                place.parent if place.parent.parent == self.spare else place, ignore_errors=True
            )
        self._retired = []


__all__ = ["FOLLOW_SECS", "READ_SHARE", "FollowChanges", "FollowedImport", "stat_walk"]
