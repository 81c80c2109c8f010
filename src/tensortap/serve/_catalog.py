"""The runs a dashboard shows: every job directory and trial found under the places it was
given (local directories, or prefixes of a store that lists trials: ``s3://``), found again as
new ones appear. A place of a scheme no storage backend registered (``gs://``) is refused.

A place may be a job directory, a trial, or a directory (prefix) holding them up to two levels
down (``runs/`` with ``runs/JOB/`` and ``runs/seed002/``). Nothing here writes anywhere.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from tensortap.core._memory_budget import BudgetCache, MemoryBudget
from tensortap.exceptions import InvalidConfigError
from tensortap.format._layout import TRIAL_MARKER
from tensortap.jobs._record import JobRecord
from tensortap.jobs._runs import RunRow
from tensortap.serve._series import CACHE_MB, close_reader
from tensortap.storage import Store, check_location, local_path, open_store
from tensortap.trials._locate import JOB_FILE
from tensortap.trials._series import SeriesKey, SeriesReader
from tensortap.trials._trial import Trial

#: The key of a bare trial's report page among a run's answers: (the trial's stamp, the page).
REPORT = "report"
RESCAN_SECS = 1.0  # how stale the list of runs may be
IDLE_SECS = 30.0  # a run's trial not read for this long is closed (its files released)
MAX_LISTED = 100_000  # prefixes looked at under one store prefix (s3://), at most
S3_RESCAN_SECS = 10.0  # a store prefix holding no trial yet is listed again this often


def default_budget() -> MemoryBudget:
    """A budget of :data:`~tensortap.serve._series.CACHE_MB` (a run made outside a catalog)."""
    return MemoryBudget(CACHE_MB << 20)


@dataclass
class RunCache:
    """What the dashboard keeps of a run between requests (filled by :mod:`serve.data`); what
    can grow with the run (answers, the reader's heads, report pages) counts against
    ``budget``, the server's (see :mod:`serve._series`)."""

    budget: MemoryBudget = field(default_factory=default_budget)
    trial: Trial | None = None
    series: SeriesReader | None = None  # the run's series reader (serve.series)
    series_refreshed: float = 0.0  # when the reader last looked for new series
    series_version: int = 0  # how many times its reader found something new
    # buckets answered, by what was asked; and a bare trial's report page
    answers: BudgetCache[Any] = field(init=False)
    refreshed: float = 0.0  # when the trial was last refreshed (monotonic seconds)
    used: float = 0.0  # when the trial was last asked for (monotonic seconds)
    keys: list[SeriesKey] = field(default_factory=list)  # the reader's, at charts_version
    charts: list[tuple[str, str]] = field(default_factory=list)  # (tensor, statistic), in order
    charts_version: int = -1  # the series_version they were listed at
    own: set[tuple[str, str]] = field(default_factory=set)  # the charts of tensortap's own series
    events: list[dict[str, Any]] = field(default_factory=list)
    events_offset: int = 0
    health: dict[int, tuple[list[Any], list[Any]]] = field(default_factory=dict)  # per step
    # the run's clock (serve._data.clock): (series_version, when read, what was sent)
    clock: tuple[int, float, dict[str, list[float]] | None] | None = None
    warmed: bool = False  # its curves were read ahead
    # published by the data reads for the runs list, which reads them without any lock
    last_step: int | None = None  # the last global step the data reads found
    problems: list[str] = field(default_factory=list)  # the damaged parts they found

    def __post_init__(self) -> None:
        self.answers = self.budget.cache()

    def close_trial(self) -> None:
        """Release the trial's and the series reader's open files and what the reader holds;
        the next request opens them again."""
        if self.trial is not None:
            self.trial.close()
            self.trial = None
            self.answers.pop(REPORT)
        if self.series is not None:
            close_reader(self.series)
            self.series = None
            self.answers.clear()
            self.keys, self.charts, self.charts_version = [], [], -1
            self.own = set()


@dataclass
class Run:
    """One job (with its trial) or one bare trial."""

    id: str
    name: str
    location: str  # the trial's location
    job: JobRecord | None = None
    refused: str | None = None  # why its trial is not served (a job pointing outside the places)
    shown: str = ""  # where the page says it is: its location, or an imported run's source
    #: what following its source found (an imported run: its source gone, not imported
    #: again); replaced whole, read without a lock
    source_problems: tuple[str, ...] = ()
    # held by every read of the run's series (the charts), and of its trial (layer health,
    # TensorPlot, embeddings); never by the runs list
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    trial_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    events_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    cache: RunCache = field(default_factory=RunCache, repr=False)
    meta_store: Store | None = field(default=None, repr=False)  # for the small documents
    meta: tuple[float, dict[str, Any]] | None = field(default=None, repr=False)  # (when, what)
    #: the runs table's row: (when read, the job documents' stamp, the row, whether its
    #: trial was read), see serve._rows
    row: tuple[float, tuple[int, ...], RunRow, bool] | None = field(default=None, repr=False)
    #: (when, the resumed sessions, the guard's trips), read from the session records
    sessions: tuple[float, list[dict[str, Any]], list[dict[str, Any]]] | None = field(
        default=None, repr=False
    )


class SourceChanges(Protocol):
    """What one check of a followed source changed (see :class:`FollowedSource`)."""

    @property
    def moved(self) -> Mapping[str, str]:
        """A run's trial location -> where its new trial is, written in full."""

    @property
    def added(self) -> Mapping[str, tuple[str, str]]:
        """A new run's trial location -> its name and how a page names it."""

    @property
    def problems(self) -> Mapping[str, Sequence[str]]:
        """A run's trial location (after ``moved``) -> what following it found now."""


class FollowedSource(Protocol):
    """Trials imported from elsewhere and kept current while served (another tracker's
    runs: :class:`tensortap.trackers.FollowedImport`): checked often, it answers at once
    when not due."""

    def check(self) -> SourceChanges:
        """What changed since the last check."""


def run_id(location: str) -> str:
    return hashlib.sha1(location.encode("utf-8")).hexdigest()[:12]


def _inside(location: str, places: list[str]) -> bool:
    """Whether the trial at ``location`` lies inside one of ``places`` (local paths compared
    after resolving symlinks; URLs of other stores by prefix)."""
    local = local_path(location)
    if local is None:
        text = location.rstrip("/") + "/"
        return any(
            local_path(p) is None
            and (text == p.rstrip("/") + "/" or text.startswith(p.rstrip("/") + "/"))
            for p in places
        )
    real = os.path.realpath(local)
    for place in places:
        place_dir = local_path(place)
        if place_dir is None:
            continue
        root = os.path.realpath(place_dir)
        if real == root or real.startswith(root.rstrip(os.sep) + os.sep):
            return True
    return False


def _local(place: Path, depth: int = 2) -> list[tuple[str, str, JobRecord | None]]:
    """(name, trial location, job) of every job and trial at or under ``place``."""
    if (place / JOB_FILE).is_file():
        record = JobRecord(place)
        try:
            return [(record.name, record.trial_location, record)]
        except (OSError, ValueError, InvalidConfigError):
            return []
    if (place / TRIAL_MARKER).is_file() or (place / "workers").is_dir():
        return [(place.name, str(place), None)]
    if depth == 0 or not place.is_dir():
        return []
    found = []
    try:
        children = sorted(p for p in place.iterdir() if p.is_dir() and not p.is_symlink())
    except OSError:
        return []
    for child in children:
        found += _local(child, depth - 1)
    return found


class StorePlace:
    """The trials under one prefix of a store that lists trials (``s3://bucket/prefix``),
    found with one store (one client) kept for the life of the dashboard, and listed a level at
    a time (a delimiter listing: the prefixes, never every key). A prefix found to hold a trial
    is not listed again; one that holds none yet (a run starting, or a directory of runs) is
    listed again at most every :attr:`rescan_secs` seconds."""

    rescan_secs = S3_RESCAN_SECS

    def __init__(self, place: str) -> None:
        self.place = place.rstrip("/")
        self.store = open_store(self.place)
        if not self.store.capabilities.lists_trials:
            self.store.close()
            raise InvalidConfigError(
                f"the dashboard finds trials by listing {place}, and {self.store!r} does not "
                "declare that it can (lists_trials is not among its capabilities): read its "
                "trials with create_trial instead"
            )
        self._trials: set[str] = set()  # prefixes (relative to the place) holding a trial
        self._pending: dict[str, float] = {}  # other prefixes -> when next to list them

    def _classify(self, sub: str, depth: int, now: float) -> None:
        """List the prefix ``sub`` when due: a trial, or (``depth`` levels left) its
        sub-prefixes to look at in turn."""
        if sub in self._trials or self._pending.get(sub, 0.0) > now:
            return
        names = self.store.list_dir(sub)
        if TRIAL_MARKER in names or "workers" in names:
            self._trials.add(sub)
            self._pending.pop(sub, None)
            return
        self._pending[sub] = now + self.rescan_secs
        if depth == 0:
            return
        for name in names[:MAX_LISTED]:
            self._classify(f"{sub}/{name}" if sub else name, depth - 1, now)

    def trials(self) -> list[tuple[str, str, JobRecord | None]]:
        self._classify("", 2, time.monotonic())
        found: list[tuple[str, str, JobRecord | None]] = []
        for sub in sorted(self._trials):
            location = f"{self.place}/{sub}" if sub else self.place
            found.append((location.rsplit("/", 1)[-1], location, None))
        return found

    def close(self) -> None:
        self.store.close()


S3Place = StorePlace  # its old name


class Catalog:
    """The runs under ``places``, rescanned at most every :data:`RESCAN_SECS` seconds; a run
    keeps its id (and its cached data) across rescans. ``shown`` maps a place or a trial's
    location to how the page names it: runs another tracker wrote, imported into a temporary
    directory, are named by their source (the temporary directory is gone when serve ends);
    a run under a place named so is named by the place."""

    def __init__(
        self,
        places: list[str],
        shown: Mapping[str, str] | None = None,
        cache_mb: int = CACHE_MB,
    ) -> None:
        if not places:
            raise InvalidConfigError(
                "serve needs at least one place: a runs directory, a job, "
                "a trial or an s3:// prefix"
            )
        for place in places:
            local = local_path(place)
            if local is None:
                check_location(place)  # a scheme no backend registered is refused here
            elif not Path(local).exists():
                raise InvalidConfigError(
                    f"{place} does not exist: give a runs directory (where `tensortap run` puts "
                    "jobs), a job directory, a trial directory, or an s3:// prefix"
                )
        if isinstance(cache_mb, bool) or not isinstance(cache_mb, int) or cache_mb < 1:
            raise InvalidConfigError(
                f"the dashboard's cache is a whole number of megabytes >= 1, got {cache_mb!r} "
                f"(default {CACHE_MB})"
            )
        self.places = places
        self.shown = dict(shown or {})
        #: what the runs' caches hold, all together (see :mod:`serve._series`)
        self.budget = MemoryBudget(cache_mb << 20)
        self._runs: dict[str, Run] = {}
        self._scanned = -RESCAN_SECS
        self._lock = threading.Lock()
        self.errors: dict[str, str] = {}  # place -> why it could not be listed
        self._stores: dict[str, StorePlace] = {}  # one store (one client) per store place

    def name_of(self, location: str) -> str:
        """How the page names ``location`` (a place or a trial's): see the class docstring."""
        found = self.shown.get(location)
        if found is not None:
            return found
        for place, name in self.shown.items():
            if location.startswith(place.rstrip("/") + "/"):
                return name
        return location

    def shown_places(self) -> list[str]:
        """The places as the page names them."""
        return [self.name_of(p) for p in self.places]

    def shown_errors(self) -> dict[str, str]:
        """Why a place could not be listed, keyed by the place as the page names it."""
        return {self.name_of(p): why for p, why in self.errors.items()}

    def runs(self) -> list[Run]:
        with self._lock:
            if time.monotonic() - self._scanned >= RESCAN_SECS:
                self._scan()
                self.close_idle()
            return list(self._runs.values())

    def _store_place(self, place: str) -> StorePlace:
        found = self._stores.get(place)
        if found is None:
            found = self._stores[place] = StorePlace(place)
        return found

    def close_idle(self, idle_secs: float = IDLE_SECS) -> int:
        """Close the trial of every run whose page stopped asking for it ``idle_secs`` ago
        (a run being read now is left alone); how many were closed."""
        now, closed = time.monotonic(), 0
        for run in self._runs.values():
            cache = run.cache
            if (cache.trial is None and cache.series is None) or now - cache.used < idle_secs:
                continue
            if run.lock.acquire(blocking=False):
                try:
                    if run.trial_lock.acquire(blocking=False):
                        try:
                            cache.close_trial()
                            closed += 1
                        finally:
                            run.trial_lock.release()
                finally:
                    run.lock.release()
        return closed

    def follow(self, changes: SourceChanges) -> None:
        """Show what a followed source changed: a moved run keeps its id, name and how the
        page names it, with a new cache over its new trial (one assignment: a request sees
        the old run or the new one, each whole); an added run is listed; problems are set.
        The old runs' files are released after, waiting for the reads in flight, without
        holding the runs list up."""
        if not (changes.moved or changes.added or changes.problems):
            return  # the usual answer: the runs list's lock is not taken for it
        retired: list[Run] = []
        with self._lock:
            for old, new in changes.moved.items():
                run = self._at(old)
                if run is None:  # moved before a scan found it: listed under its first place
                    ident, name, shown = run_id(old), Path(old).name, self.name_of(old)
                else:
                    ident, name, shown = run.id, run.name, run.shown
                    retired.append(run)
                cache = RunCache(self.budget)
                if run is not None:  # the runs list keeps its last step until the new is read
                    cache.last_step = run.cache.last_step
                self._runs[ident] = Run(ident, name, new, shown=shown, cache=cache)
            for location, (name, shown) in changes.added.items():
                ident = run_id(location)
                if ident not in self._runs:
                    cache = RunCache(self.budget)
                    self._runs[ident] = Run(ident, name, location, shown=shown, cache=cache)
            for location, problems in changes.problems.items():
                run = self._at(location)
                if run is not None:
                    run.source_problems = tuple(problems)
                    run.meta = None  # the runs list says it at once
                    run.row = None
        for run in retired:
            # in the order a request takes them (layer health: its trial, then its series)
            with run.trial_lock, run.lock:
                run.cache.close_trial()

    def _at(self, location: str) -> Run | None:
        return next((run for run in self._runs.values() if run.location == location), None)

    def get(self, ident: str) -> Run | None:
        found = self._runs.get(ident)
        if found is None:
            self.runs()
            found = self._runs.get(ident)
        return found

    def _scan(self) -> None:
        for place in self.places:
            try:
                local = local_path(place)
                found = (
                    _local(Path(local)) if local is not None else self._store_place(place).trials()
                )
                self.errors.pop(place, None)
            except Exception as exc:  # a place that cannot be listed now: said, and retried
                self.errors[place] = f"{type(exc).__name__}: {exc}"
                continue
            for name, location, job in found:
                ident = run_id(location)
                if ident not in self._runs:
                    refused = None
                    if job is not None and not _inside(location, self.places):
                        refused = (
                            f"the job at {job.dir} points at a trial at {location}, outside the "
                            f"places served ({', '.join(self.places)}); not read: serve that "
                            "place too if it is meant to be shown"
                        )
                    shown = self.name_of(location)
                    cache = RunCache(self.budget)
                    self._runs[ident] = Run(ident, name, location, job, refused, shown, cache=cache)
        self._scanned = time.monotonic()


__all__ = [
    "REPORT",
    "Catalog",
    "FollowedSource",
    "Run",
    "RunCache",
    "S3Place",
    "SourceChanges",
    "StorePlace",
    "run_id",
]
