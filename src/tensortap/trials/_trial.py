"""A trial: the saved tensors of one training job, readable while the job still runs."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import time
from collections.abc import Iterable, Iterator
from typing import Any, NoReturn

import numpy as np

from tensortap.core._collections import Collection, CollectionKeys
from tensortap.core._modes import ModeKeys, parse_mode
from tensortap.exceptions import (
    InvalidConfigError,
    InvalidWorker,
    MissingCollectionFiles,
    NoMoreData,
    NotATrialError,
    StepNotYetAvailable,
    StepUnavailable,
    StorageError,
    TensorUnavailable,
    TensorUnavailableForStep,
)
from tensortap.storage import Store, open_store
from tensortap.trials._config import first_config, worker_config
from tensortap.trials._index import TrialIndex, natural_key
from tensortap.trials._locate import trial_location
from tensortap.trials._one_numbers import OneNumbers
from tensortap.trials._parts import TrialParts
from tensortap.trials._problems import worker_problems
from tensortap.trials._read_ahead import read_ahead
from tensortap.trials._reader import MAX_GAP, RawRef, ValueReader
from tensortap.trials._saved_steps import SavedSteps
from tensortap.trials._series import SeriesColumns, SeriesKey, SeriesReader
from tensortap.trials._series_names import loss_names, resolve_names
from tensortap.trials._sessions import Session, worker_sessions
from tensortap.trials._step_block import StepBlock
from tensortap.trials._tensor import Tensor
from tensortap.trials._waiting import StepState, mode_text, step_state, wait_for_steps

logger = logging.getLogger(__name__)


class Trial:
    """Read the tensors a hook saved, also while training runs.

    Queries about what exists (``steps``, ``tensor_names``, a value at an unknown step) first
    pick up anything published since the last look, at most every ``refresh_interval``
    seconds: by default the store's ``refresh_interval``, 0 on local disk (a listing per query
    is cheap there) and 1 s on object storage (where it is a few round trips). Reading a known
    value never touches the index again, and a trial whose workers all ended is never
    re-listed; :meth:`refresh` picks up new data at once.

    A location that holds nothing yet opens as an empty trial that fills in when training
    writes it (as smdebug waits for a trial to appear), with a warning saying what is there
    (for a path or URL; a Store object handed over is not warned about, nor is a location
    opened with ``waiting=True``, by a reader that starts before training on purpose, as a
    job's rules do); ``must_exist=True`` raises :class:`NotATrialError` instead.

    A damaged trial stays readable: an index, end marker or collections file that is corrupt,
    of the wrong type, copied from another worker or not a regular file is skipped and listed
    in :meth:`problems`; ``strict=True`` raises its FormatError (or StorageError) instead.

    :meth:`close` (or leaving a ``with create_trial(...) as trial:`` block) releases what the
    trial holds: its store's open files or client and the bytes it cached.

    ``records=False`` opens an outline of the trial: what was saved (steps and modes, tensor
    names, collections, sessions, problems) and every :meth:`series`, but not the rows of the
    index that locate each saved value (64 bytes a value, most of what reading a long trial
    costs): :meth:`tensor`, :meth:`step_block` and the names saved at one step then raise
    InvalidConfigError. ``tensortap report`` reads a trial so when it draws only series.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | Store,
        name: str | None = None,
        refresh_interval: float | None = None,
        strict: bool = False,
        must_exist: bool = False,
        waiting: bool = False,
        records: bool = True,
    ) -> None:
        try:
            store = open_store(path)
        except StorageError as exc:
            raise NotATrialError(f"cannot open a trial at {path!r}: {exc}") from exc
        self.store = store
        self.path = store.location
        self.name = name or os.path.basename(self.path.rstrip("/")) or self.path
        self.refresh_interval = (
            store.refresh_interval if refresh_interval is None else float(refresh_interval)
        )
        # read when first needed (reading series never needs it: see _series_reader)
        self._loaded_index = TrialIndex(store, strict=bool(strict), records=bool(records))
        self._index_read = False
        # a path may be mistyped; a Store handed over is the caller's own (an empty one on
        # purpose, as the rule-parameter checks use)
        warn = not (waiting or isinstance(path, Store))
        self._loaded_index.check_marker(self.path, must_exist, warn=warn)
        self._tensors: dict[str, Tensor] = {}
        self._last_refresh = 0.0
        self._saved = SavedSteps(self._loaded_index)
        self._hold_refresh = 0
        self._names_cache: dict[tuple[Any, ...], list[str]] = {}
        self._names_cache_version = -1
        self._reader = ValueReader(store, self._loaded_index)
        #: How many values (raw or reduced) were read, and which collections were asked for
        #: by name: rules use them to know what an evaluation judged, or looked for in vain.
        self.values_read = 0
        self._parts = _Parts(self)
        self.collections_asked: set[str] = set()
        self._block: tuple[tuple[int, int], StepBlock] | None = None
        self._held: int | None = None  # the step a walk holds (see holding_step)
        self._held_block: tuple[tuple[int, int], StepBlock] | None = None
        self._held_names: tuple[tuple[int, int], set[str]] | None = None
        self._sessions: dict[str | None, tuple[int, list[Session]]] = {}
        self._framework: tuple[int, str | None] | None = None  # (index version, framework)
        self._series: tuple[int, SeriesReader] | None = None
        self._series_refreshed = 0.0  # when the series reader listed, while the index is unread
        #: one-element values read as series (what rules reading a loss per step use)
        self.numbers = OneNumbers(self._series_reader)
        if self._loaded_index.strict:  # what cannot be read raises now, as it always did
            self.refresh()

    @property
    def records(self) -> bool:
        """False for an outline of the trial (opened with ``records=False``)."""
        return self._loaded_index.records

    def __repr__(self) -> str:
        return f"Trial({self.path!r}, workers={self.workers()}, steps={len(self.steps())})"

    def close(self) -> None:
        """Release what the trial holds: its store's open files or client (also a Store handed
        over), the bytes it cached and its series reader. Like its store, the trial stays
        usable: a later read opens again what it needs."""
        if self._reader.cache is not None:
            self._reader.cache.clear()
        self._block = None
        self._series = None
        self._series_refreshed = 0.0
        self.store.close()

    def __enter__(self) -> Trial:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- keeping current --
    def refresh(self) -> bool:
        """Read whatever was published since the last refresh; True if anything was new."""
        self._index_read = True
        self._last_refresh = time.monotonic()
        return self._loaded_index.refresh()

    @property
    def _index(self) -> TrialIndex:
        """The trial's index, read when first needed: opening a trial to read its series
        (:meth:`series`) never reads the index objects, 64 bytes a saved value."""
        if not self._index_read:
            self.refresh()
        return self._loaded_index

    def no_refresh(self) -> contextlib.AbstractContextManager[Trial]:
        """Within this block, queries answer from what is loaded and never re-list storage
        (a rule evaluating one step sees one consistent view, at no listing cost)."""
        return _NoRefresh(self)

    @property
    def parts(self) -> TrialParts:
        """What the helpers in ``trials/`` (and the table's export) read of the trial, not
        for users: its index, its value reader, ... (:class:`TrialParts`)."""
        return self._parts

    def _refresh_if_stale(self) -> bool:
        """:meth:`refresh` unless a look was taken less than ``refresh_interval`` ago, the
        workers all ended, or a :meth:`no_refresh` block holds; True if anything was new."""
        if not self._index_read:
            return self.refresh()
        if self._hold_refresh:
            return False
        if self._index.all_ended() and self._last_refresh:
            return False
        if time.monotonic() - self._last_refresh < self.refresh_interval:
            return False
        return self.refresh()

    @property
    def index_version(self) -> int:
        """A number that changes whenever the index took in something new: what a caller
        derived from the index (the steps of a tensor, say) holds while it stays the same.
        Reading it refreshes nothing."""
        return int(self._index.version)

    @property
    def loaded_all_steps(self) -> bool:
        """True once every worker has marked the end of training and all of it is loaded."""
        self._refresh_if_stale()
        return self._index.all_ended()

    def prefetch(self, refs: Iterable[RawRef], max_gap: int = MAX_GAP) -> int:
        """Read many saved values in as few ranged reads as possible and keep them until the
        next ``prefetch`` (values read later come from memory). Returns how many reads it made.
        """
        return self._reader.prefetch(refs, max_gap)

    def iter_step_blocks(
        self, steps: Iterable[int] | None = None, batch_bytes: int = 32 << 20
    ) -> Iterator[StepBlock]:
        """A :class:`StepBlock` per global step (every step loaded so far, or ``steps``), in
        order, with their raw values already read: consecutive steps are fetched together
        in batches of about ``batch_bytes`` (one ranged read per run of adjacent bytes, in
        parallel on object storage), the next batch while the caller works on this one.
        The fast way to read a whole trial, or to catch up on a long one."""
        if batch_bytes < 1:
            raise InvalidConfigError(f"batch_bytes must be >= 1, got {batch_bytes!r}")
        wanted = self.steps() if steps is None else [int(s) for s in steps]
        self._require_steps(wanted)
        return read_ahead(self._parts, wanted, batch_bytes)

    def _require_steps(self, steps: Iterable[int]) -> None:
        """Raise the usual step errors unless every global step of ``steps`` was saved."""
        saved = self._saved.global_to_mode()
        for step in steps:
            if step not in saved:
                self._raise_step_missing(step, None)

    @contextlib.contextmanager
    def holding_step(self, step: int) -> Iterator[None]:
        """Within this block, :meth:`step_block` builds ``step``'s block at most once and
        answers with it, whatever other steps are asked for meanwhile (and the names saved at
        the step are listed once): the rules' walk holds the step it evaluates, so that every
        rule judging it reads one block."""
        before = self._held, self._held_block, self._held_names
        self._held, self._held_block, self._held_names = step, None, None
        try:
            yield
        finally:
            self._held, self._held_block, self._held_names = before

    def step_block(self, step: int) -> StepBlock:
        """Everything saved at global ``step``, to read many tensors at once (see
        :class:`~tensortap.trials._step_block.StepBlock`); the last one asked for is kept,
        and the step held by :meth:`holding_step`."""
        self._refresh_if_stale()
        self._index.require_records(f"trial.step_block({step!r})")
        key = (step, self._index.version)
        if self._held == step:
            held = self._held_block
            if held is None or held[0] != key:
                self._require_steps([step])
                held = self._held_block = (key, StepBlock(self._parts, step))
            return held[1]
        cached = self._block
        if cached is not None and cached[0] == (step, self._index.version):
            return cached[1]
        self._require_steps([step])
        block = StepBlock(self._parts, step)
        self._block = ((step, self._index.version), block)
        return block

    # -- steps and modes --
    def steps(self, mode: Any = None, show_incomplete_steps: bool = False) -> list[int]:
        """Saved steps: global step numbers, or the step numbers within ``mode``.

        With several workers, only steps every worker has completed are listed unless
        ``show_incomplete_steps`` is true.
        """
        self._refresh_if_stale()
        m = _mode_key(mode)
        key = None if m in (None, ModeKeys.GLOBAL) else m
        return list(self._saved.sets()[(key, not show_incomplete_steps)])

    def modes(self) -> list[ModeKeys]:
        """The modes that have saved steps."""
        self._refresh_if_stale()
        return sorted({m for m, _ in self._saved.global_to_mode().values()})

    def global_step(self, mode: Any, mode_step: int) -> int:
        """The global step of step ``mode_step`` of ``mode``."""
        m = parse_mode(mode)
        if m == ModeKeys.GLOBAL:
            return mode_step
        self._refresh_if_stale()
        for w in self._index.workers.values():
            g = w.mode_to_global.get((m, mode_step))
            if g is not None:
                return g
        self._raise_step_missing(mode_step, m)

    def mode_step(self, global_step: int) -> int:
        """The step number within its mode of a global step."""
        return self._mode_of(global_step)[1]

    def mode(self, global_step: int) -> ModeKeys:
        """The mode a global step was saved in."""
        return self._mode_of(global_step)[0]

    def _mode_of(self, global_step: int) -> tuple[ModeKeys, int]:
        self._refresh_if_stale()
        found = self._saved.global_to_mode().get(global_step)
        if found is None:
            self._raise_step_missing(global_step, None)
        return found

    def has_passed_step(self, step: int, mode: Any = None) -> StepState:
        """AVAILABLE, UNAVAILABLE (passed without saving) or NOT_YET_AVAILABLE."""
        self._refresh_if_stale()
        return step_state(self._parts, step, _mode_key(mode))

    def wait_for_steps(
        self, required_steps: Iterable[int], mode: Any = None, timeout: float | None = None
    ) -> None:
        """Block until every step is saved or passed; NoMoreData if training ended first.

        Raises StepNotYetAvailable when ``timeout`` seconds pass first.
        """
        wait_for_steps(self._parts, required_steps, mode, timeout)

    def _last_saved_step(self, mode: Any) -> int | None:
        """The last step saved in ``mode`` (by any worker); None before the first."""
        steps = self.steps(mode, show_incomplete_steps=True)
        return steps[-1] if steps else None

    def _raise_step_missing(self, step: int, mode: ModeKeys | None) -> NoReturn:
        state = self.has_passed_step(step, mode)
        if state == StepState.UNAVAILABLE:
            raise StepUnavailable(step, mode)
        if self._index.all_ended():
            raise NoMoreData(
                f"training has ended and step {step}{mode_text(mode)} was never saved "
                f"(the last saved step is {self._last_saved_step(mode)})"
            )
        raise StepNotYetAvailable(step, mode, self._last_saved_step(mode))

    def _raise_missing(self, name: str, step: int, mode: ModeKeys | None) -> NoReturn:
        """Raise the error that says why tensor ``name`` has no value at ``step``: the step
        holds other tensors, was passed without saving, or is not (yet) saved."""
        if step in set(self.steps(mode, show_incomplete_steps=True)):
            raise TensorUnavailableForStep(name, step, mode, self.tensor(name).steps(mode))
        self._raise_step_missing(step, mode)

    # -- tensors --
    def tensor_names(
        self,
        step: int | None = None,
        mode: Any = None,
        regex: str | Iterable[str] | None = None,
        collection: str | Collection | None = None,
    ) -> list[str]:
        """Names of saved tensors, optionally only those at a step, matching a regex, or in a
        collection."""
        self._refresh_if_stale()
        if isinstance(collection, str):
            self.collections_asked.add(collection)
        if step is not None:
            at = self._names_at(step, _mode_key(mode))
            if regex is None and collection is None:
                return sorted(at)
            # filter by name first (an answer kept until the index grows), then by step
            return [n for n in self.tensor_names(regex=regex, collection=collection) if n in at]
        # Rules ask the same question at every step: answers are kept until the index grows.
        if (collection is None or isinstance(collection, str)) and (
            regex is None or isinstance(regex, str)
        ):
            key = (collection, regex)
            if self._names_cache_version != self._index.version:
                self._names_cache, self._names_cache_version = {}, self._index.version
            cached = self._names_cache.get(key)
            if cached is None:
                cached = self._names_cache[key] = self._tensor_names(regex, collection)
            return list(cached)
        return self._tensor_names(regex, collection)

    def _names_at(self, step: int, mode: ModeKeys | None) -> set[str]:
        """Names saved at a global step, or at step ``step`` of ``mode``."""
        index = self._index
        if mode is None or mode == ModeKeys.GLOBAL:
            if step != self._held:
                return index.names_at(step)
            key = (step, index.version)  # the step a walk holds: listed once for every rule
            if self._held_names is None or self._held_names[0] != key:
                self._held_names = (key, index.names_at(step))
            return self._held_names[1]
        found: set[str] = set()
        for worker in index.workers.values():
            g = worker.mode_to_global.get((mode, step))
            if g is not None:
                found |= index.names_at(g, worker.name)
        return found

    def _tensor_names(
        self,
        regex: str | Iterable[str] | None,
        collection: str | Collection | None,
    ) -> list[str]:
        names: Iterable[str] = self._index.names()
        if regex is not None:
            patterns = [regex] if isinstance(regex, str) else list(regex)
            try:
                compiled = [re.compile(p) for p in patterns]
            except re.error as exc:
                raise InvalidConfigError(f"invalid regex {patterns!r}: {exc}") from exc
            names = [n for n in names if any(p.search(n) for p in compiled)]
        if collection is not None:
            coll = collection if isinstance(collection, Collection) else self.collection(collection)
            names = [n for n in names if coll.matches(n)]
        return sorted(names)

    def saved_order(self, global_step: int) -> list[str]:
        """Names saved at a global step in the order the hook saved them (forward order for
        activations), the first worker's order first."""
        return self.step_block(global_step).saved_order()

    def tensors(self, *args: Any, **kwargs: Any) -> list[str]:
        """Alias of :meth:`tensor_names` (older smdebug spelling)."""
        return self.tensor_names(*args, **kwargs)

    def has_tensor(self, name: str) -> bool:
        self._refresh_if_stale()
        return name in self._index.names()

    def tensor(self, name: str) -> Tensor:
        """The :class:`Tensor` of this name; TensorUnavailable if it was never saved."""
        found = self._tensors.get(name)
        if found is not None:
            return found
        self._index.require_records(f"trial.tensor({name!r})")
        if name not in self._index.name_rows:
            self._refresh_if_stale()
            if name not in self._index.name_rows:
                raise TensorUnavailable(name, sorted(self._index.name_rows))
        found = self._tensors[name] = Tensor(name, self._parts)
        return found

    def tensors_in_collection(self, collection: str | Collection) -> list[Tensor]:
        return [self.tensor(n) for n in self.tensor_names(collection=collection)]

    # -- collections and workers --
    def collections(self) -> dict[str, Collection]:
        """Every collection recorded by the hooks (merged across workers)."""
        self._refresh_if_stale()
        return self._index.collections()

    def collection(self, name: str) -> Collection:
        found = self.collections()
        if not found:
            raise MissingCollectionFiles(
                f"the trial at {self.path} has no collections recorded yet; they are written "
                "with the first published step"
            )
        if name not in found:
            raise MissingCollectionFiles(
                f"no collection {name!r} in the trial; collections are {sorted(found)}"
            )
        return found[name]

    def workers(self) -> list[str]:
        """Workers that wrote to this trial (worker_0, worker_1, ...)."""
        self._refresh_if_stale()
        return sorted(self._index.workers, key=natural_key)

    def sessions(self, worker: str | None = None) -> list[Session]:
        """The writing sessions of every worker (or of one), in order: each run of a script or
        trainer on this trial, with where it resumed (see :class:`Session`). The dashboard
        and ``tensortap report`` mark where each resumed session starts."""
        self._refresh_if_stale()
        index = self._index
        cached = self._sessions.get(worker)
        if cached is not None and cached[0] == index.version:  # read again when the trial grew
            return list(cached[1])
        names = self.workers() if worker is None else [worker]
        out: list[Session] = []
        for name in names:
            state = index.workers.get(name)
            if state is None:
                raise InvalidWorker(name, self.workers())
            out.extend(worker_sessions(state, index.sessions(state)))
        self._sessions[worker] = (index.version, out)
        return list(out)

    def config(self, worker: str | None = None) -> dict[str, Any]:
        """The run's configuration: what the hooks gathered without code (the optimizer and
        its parameter groups, the batch size, the model, the trainer's arguments, the command
        line, git, package versions, seeds) and what the script gave to ``hook.log_config``;
        a dict of groups, documented in docs/format.md (``{}`` when none was recorded). Each
        session of a worker recorded its own; they are merged in order (a resumed run's
        values replace the first run's). ``worker`` None: the first worker that recorded one
        (``worker_0`` in a distributed run). A damaged document is listed in
        :meth:`problems` and left out."""
        self._refresh_if_stale()
        if worker is not None:
            if worker not in self._index.workers:
                raise InvalidWorker(worker, self.workers())
            return worker_config(self._index.store, worker, self._index.problem)
        return first_config(self._index.store, self.workers(), self._index.problem)

    def framework(self) -> str | None:
        """The framework whose hook wrote this trial (``"pytorch"``, ``"keras"``,
        ``"xgboost"``, ``"jax"``, ...): what the first worker that says one says; None when
        the framework-free hook (or an older tensortap, or smdebug) wrote it."""
        self._refresh_if_stale()
        version = self._index.version  # (rules ask at every step: kept until the index grows)
        if self._framework is not None and self._framework[0] == version:
            return self._framework[1]
        found = None
        for name in sorted(self._index.workers, key=natural_key):
            found = self._index.workers[name].framework
            if found:
                break
        self._framework = (version, found or None)
        return found or None

    def worker_status(self, worker: str) -> dict[str, Any] | None:
        """A worker's end-of-training record (its writer counters), None while it runs."""
        state = self._index.workers.get(worker)
        return None if state is None else state.end

    def problems(self) -> list[str]:
        """What went wrong while saving (dropped or lost steps, writer errors), per worker, and
        the parts of the trial that could not be read (skipped unless ``strict=True``), those
        met reading series included (a damaged series object, and its index or data object
        read instead)."""
        self._refresh_if_stale()
        texts = list(self._index.problems)
        if self._series is not None:
            texts += [t for t in self._series[1].problems if t not in self._index.problems]
            texts += self._unpublished(self._series[1])
        unreadable = [f"unreadable {text}" for text in texts]
        return unreadable + worker_problems(self._index, self.workers())

    def _unpublished(self, reader: SeriesReader) -> list[str]:
        """Series objects without their index, of a worker with no end marker while another
        worker has ended (it was killed while publishing, or its index and end marker were
        deleted): their steps are not read. Said afresh each time (a live worker's segment is
        unpublished for a moment), and not while every worker may still be writing."""
        workers = self._index.workers
        if not any(state.complete for state in workers.values()):
            return []
        out = []
        for name in sorted(workers, key=natural_key):
            if not workers[name].complete:
                out += [
                    f"{key}: a segment's series without its index, and {name} has not ended "
                    "while others have: the segment is not published (its writer was killed "
                    "while publishing it, or its index and end marker were deleted); its "
                    "steps are not read"
                    for key in reader.objects.unpublished(name)[:8]
                ]
        return out

    # -- series: every saved number as columns (see tensortap.trials._series) --
    def series(self, names: str | Iterable[str] | None = None, **filters: Any) -> SeriesColumns:
        """The saved numbers asked for as columns; see :meth:`SeriesReader.series`.

        ``"loss"``, when no tensor is called that, is the run's loss (``vitals/loss``, else the
        ``losses`` collection's tensors); a name the trial never saved raises
        SeriesUnavailable, listing the series there are (``regex=`` matches nothing quietly)."""
        reader = self._series_reader()
        return reader.series(None if names is None else self._series_names(names), **filters)

    def series_buckets(
        self, names: str | Iterable[str] | None = None, **filters: Any
    ) -> SeriesColumns:
        """Bucketed min/max/last of each series; see :meth:`SeriesReader.buckets` (names as
        :meth:`series` takes them)."""
        reader = self._series_reader()
        return reader.buckets(None if names is None else self._series_names(names), **filters)

    def series_windows(
        self, names: str | Iterable[str] | None = None, **filters: Any
    ) -> Iterator[SeriesColumns]:
        """The rows :meth:`series` answers, a window of steps at a time; see
        :meth:`SeriesReader.series_windows` (names as :meth:`series` takes them)."""
        reader = self._series_reader()
        return reader.series_windows(
            None if names is None else self._series_names(names), **filters
        )

    def _series_names(self, names: str | Iterable[str]) -> list[str]:
        asked = [names] if isinstance(names, str) else list(names)
        known = {key.tensor for key in self.series_keys()}
        if all(name in known for name in asked):
            return asked  # saved as series: the index is not read
        known.update(self.tensor_names())
        if all(name in known for name in asked):
            return asked
        try:
            losses = self.tensor_names(collection=CollectionKeys.LOSSES)
        except MissingCollectionFiles:
            losses = []
        return resolve_names(asked, known, loss_names(known, losses))

    def series_keys(self, worker: str | None = None) -> list[SeriesKey]:
        """Every series saved so far: (tensor, statistic, mode, worker)."""
        return self._series_reader().keys(worker)

    def _series_reader(self) -> SeriesReader:
        """One reader, listing storage again when the trial itself saw something new; while
        nothing has needed the trial's index, the reader lists for itself, as often as the
        trial would (``refresh_interval``, never inside :meth:`no_refresh`)."""
        if not self._index_read:
            now = time.monotonic()
            if self._series is None:
                self._series = (-1, SeriesReader(self.store))
                self._series_refreshed = now
            elif not self._hold_refresh and now - self._series_refreshed >= self.refresh_interval:
                self._series[1].refresh()
                self._series_refreshed = now
            return self._series[1]
        self._refresh_if_stale()
        if self._series is None:
            self._series = (self._index.version, SeriesReader(self.store))
        elif self._series[0] != self._index.version:
            self._series[1].refresh()
            self._series = (self._index.version, self._series[1])
        return self._series[1]

    def wall_time(self, global_step: int, worker: str | None = None) -> float | None:
        """When a step was handed to the writer (seconds since the epoch)."""
        for name in [worker] if worker else self.workers():
            state = self._index.workers.get(name)
            if state and global_step in state.wall_time:
                return state.wall_time[global_step]
        return None


def create_trial(
    path: str | os.PathLike[str] | Store | None = None,
    name: str | None = None,
    *,
    out_dir: str | os.PathLike[str] | Store | None = None,
    **kwargs: Any,
) -> Trial:
    """Open the trial at ``path`` (a directory, a URL, a Store, or a job directory: its
    trial); smdebug's ``create_trial(out_dir=...)`` spelling works too. A trial written by
    smdebug is read through a tensortap copy (see :mod:`tensortap.smdebug._opening`).

    On a location that holds nothing yet it warns and returns a trial that fills in as
    training writes; ``must_exist=True`` raises NotATrialError instead. Other keyword
    arguments are :class:`Trial`'s."""
    if (path is None) == (out_dir is None):
        raise InvalidConfigError(
            "create_trial needs the trial's location once: create_trial('runs/job1') or "
            f"create_trial(out_dir='runs/job1'); got path={path!r}, out_dir={out_dir!r}"
        )
    location = trial_location(path if path is not None else out_dir)  # type: ignore[arg-type]
    from tensortap.smdebug._opening import tensortap_copy_if_smdebug

    copy = tensortap_copy_if_smdebug(location, strict=bool(kwargs.get("strict")))
    return Trial(copy, name=name, **kwargs)


def _mode_key(mode: Any) -> ModeKeys | None:
    """A mode as the user gave it (a ModeKeys, its name, any case), parsed; None stays."""
    return None if mode is None else parse_mode(mode)


class _Parts:
    """A :class:`Trial` as its helpers in ``trials/`` see it (:class:`TrialParts`): the one
    object that reads the trial's insides for them, so that the user's ``Trial`` carries no
    member that is there for its helpers only (``trial.parts``)."""

    __slots__ = ("trial",)

    def __init__(self, trial: Trial) -> None:
        self.trial = trial

    @property
    def store(self) -> Store:
        return self.trial.store

    @property
    def values_read(self) -> int:
        return self.trial.values_read

    @values_read.setter
    def values_read(self, count: int) -> None:
        self.trial.values_read = count

    @property
    def saved_index(self) -> TrialIndex:
        """What the trial has loaded of its index files: workers, segments, steps, names."""
        self.trial._index.require_records("reading a trial's saved rows")
        return self.trial._index

    @property
    def value_reader(self) -> ValueReader:
        """The reader of saved raw values (its cache, ranged reads)."""
        trial = self.trial
        if not trial._index_read:  # it finds values through the index
            trial.refresh()
        trial._loaded_index.require_records("reading saved values")
        return trial._reader

    @staticmethod
    def mode_key(mode: Any) -> ModeKeys | None:
        return _mode_key(mode)

    def read_raw(self, raw: RawRef) -> np.ndarray:
        """One saved raw value, counted in the trial's ``values_read``."""
        self.trial.values_read += 1
        return self.trial._reader.read(raw)

    def refresh(self) -> bool:
        return self.trial.refresh()

    def refresh_if_stale(self) -> bool:
        return self.trial._refresh_if_stale()

    def steps(self, mode: Any = None, show_incomplete_steps: bool = False) -> list[int]:
        return self.trial.steps(mode, show_incomplete_steps)

    def last_saved_step(self, mode: Any) -> int | None:
        return self.trial._last_saved_step(mode)

    def workers(self) -> list[str]:
        return self.trial.workers()

    def tensor_names(
        self,
        step: int | None = None,
        mode: Any = None,
        regex: str | Iterable[str] | None = None,
        collection: str | Collection | None = None,
    ) -> list[str]:
        return self.trial.tensor_names(step, mode, regex, collection)

    def raise_missing(self, name: str, step: int, mode: ModeKeys | None) -> NoReturn:
        self.trial._raise_missing(name, step, mode)


class _NoRefresh:
    """:meth:`Trial.no_refresh` (a plain object: rules enter it several times per step)."""

    __slots__ = ("trial",)

    def __init__(self, trial: Trial) -> None:
        self.trial = trial

    def __enter__(self) -> Trial:
        self.trial._hold_refresh += 1
        return self.trial

    def __exit__(self, *exc: object) -> None:
        self.trial._hold_refresh -= 1
