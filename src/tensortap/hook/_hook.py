"""The framework-free hook: for custom training loops and NumPy/JAX users.

Framework hooks of later modules translate their framework's events into the same calls, so
the step lifecycle lives once, in :class:`~tensortap.core._recorder.StepRecorder`.

A failure inside tensortap (a full disk, a bug) never stops training: it is logged, counted in
:attr:`Hook.status`, and written to the trial. Misuse that can be caught at the call (an
invalid config, a string passed as a tensor) raises at once.

Beside it: the options every hook takes (``_hook_options``), the registry of the hooks open in
this process (``_open_hooks``), where a hook inside a job writes (``_job_trial``), how a
session's steps are numbered after the earlier sessions (``_session_steps``) and which
framework's hook has a method this one lacks (``_adapter_methods``).
"""

from __future__ import annotations

import logging
import math
import numbers
import os
import threading
from collections.abc import Callable, Hashable, Iterable, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from functools import partial
from types import TracebackType
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from tensortap.core._collections import (
    BUILTIN_COLLECTIONS,
    Collection,
    CollectionKeys,
    CollectionManager,
    check_included,
)
from tensortap.core._dtypes import as_saveable_array
from tensortap.core._handles import HookHandle
from tensortap.core._modes import ModeKeys, parse_mode
from tensortap.core._recorder import StepRecorder, records_from_array
from tensortap.core._reduction_config import ReductionConfig
from tensortap.core._rollback_request import record_event as record_job_event
from tensortap.core._save_budget import (
    SAVE_BUDGET_EVENT,
    BudgetChange,
    BudgetPolicy,
    ScheduleBudget,
    parse_save_budget,
)
from tensortap.core._save_config import SaveConfig
from tensortap.core._stop import StopRequest
from tensortap.core._vitals import VITALS, vital_names
from tensortap.exceptions import (
    InvalidConfigError,
    InvalidTensorError,
    StorageError,
    TrainingStopped,
)
from tensortap.format._documents import (
    MAX_BRANCH_REASON,
    MAX_EVENT_DEPTH,
    MAX_SESSION_EVENTS,
    MAX_SESSION_ID,
    MAX_SESSION_TEXT,
)
from tensortap.format._layout import worker_name
from tensortap.hook._adapter_methods import ADAPTER_METHODS, missing_method
from tensortap.hook._config import CONFIG_ENV, JOB_ENV, read_config
from tensortap.hook._job_trial import in_job_trial, job_writer_options
from tensortap.hook._open import any_hook_made, current_hook, hook_closed, hook_opened
from tensortap.hook._options import DEFAULT_INCLUDE_COLLECTIONS, HookOptions, OutDir
from tensortap.hook._run_config import RunConfig, run_facts
from tensortap.hook._session_steps import SessionSteps
from tensortap.storage import Store, open_store
from tensortap.writer import TrialWriter, WriterOptions, WriterStatus

logger = logging.getLogger("tensortap.hook")  # the hook's one logger
_H = TypeVar("_H", bound="Hook")
_DEFAULT_ONLY = (CollectionKeys.DEFAULT,)
#: The longest the end of a framework's training call waits for the writer (Hook.flush_at_end).
END_WAIT_SECS = 10.0

# what the hook's parts define (re-exported: the adapters, attach/ and tests import them from here)
__all__ = [
    "ADAPTER_METHODS",
    "DEFAULT_INCLUDE_COLLECTIONS",
    "Hook",
    "HookOptions",
    "HookStatus",
    "OutDir",
    "any_hook_made",
]


@dataclass(frozen=True)
class HookStatus:
    """What went wrong inside tensortap so far (training was never interrupted by it)."""

    internal_errors: int
    last_internal_error: str | None
    writer: WriterStatus

    @property
    def healthy(self) -> bool:
        w = self.writer
        return not (self.internal_errors or w.errors or w.steps_dropped or w.steps_lost)


class Hook:
    """Saves tensors of a training job into a trial at ``out_dir``.

    Typical use::

        with tensortap.Hook("runs/job1", save_config=SaveConfig(save_interval=10)) as hook:
            hook.set_mode(modes.TRAIN)
            for batch in data:
                loss = train_step(batch)
                hook.save_scalar("loss", loss)
                hook.save_tensor("layer1/weights", w, collections="weights")
                hook.next_step()
    """

    #: The collections this kind of hook fills: ``include_collections`` naming one of them
    #: nearly (``"gradient"``) gets a warning (a new collection of one's own, or a typo).
    known_collections: ClassVar[tuple[str, ...]] = (*BUILTIN_COLLECTIONS, VITALS)
    #: The framework this kind of hook watches, recorded in the trial (``Trial.framework()``):
    #: a job picks the rules that suit it. None for the framework-free hook.
    framework: ClassVar[str | None] = None

    #: What this kind of hook saves when ``include_collections`` is not given.
    default_include_collections: ClassVar[tuple[str, ...]] = DEFAULT_INCLUDE_COLLECTIONS
    #: Its schedule when ``save_config`` is not given (None: ``SaveConfig()``'s).
    default_save_config: ClassVar[SaveConfig | None] = None

    def __init__(
        self,
        out_dir: OutDir,
        *,
        save_config: SaveConfig | None = None,
        reduction_config: ReductionConfig | None = None,
        include_collections: Iterable[str] | None = None,
        include_regex: str | Iterable[str] | None = None,
        worker: str | int | None = None,
        num_workers: int | None = None,
        writer_options: WriterOptions | None = None,
        stop_file: str | os.PathLike[str] | None = None,
        export_tensorboard: bool = False,
        tensorboard_dir: str | os.PathLike[str] | None = None,
        save_budget: float | str | None = None,
    ) -> None:
        """``out_dir`` may be given by position; every option after it by keyword only
        (:class:`HookOptions` lists them). ``num_workers`` None is 1, or the world size the
        framework's distributed runtime reports (PyTorch). ``save_budget`` (a share of
        training time such as 0.05; None or ``"off"``: none) widens the hook's own TRAIN
        schedule while its saving steps cost more than that share (``core._save_budget``): a
        job passes it for the schedule it chose, never for one a user wrote."""
        if num_workers is None:
            num_workers = 1
        if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 1:
            raise InvalidConfigError(f"num_workers must be an int >= 1, got {num_workers!r}")
        if writer_options is not None and not isinstance(writer_options, WriterOptions):
            raise InvalidConfigError(
                f"writer_options must be WriterOptions, got {writer_options!r}"
            )
        if isinstance(include_collections, str):
            include_collections = [include_collections]
        self.worker = worker_name(worker)
        out_dir = in_job_trial(out_dir, self.worker)
        writer_options = writer_options or job_writer_options(out_dir)
        self.collection_manager = CollectionManager()
        if include_regex is not None:
            self.collection_manager.get(CollectionKeys.DEFAULT).include(include_regex)
        defaults = type(self).default_include_collections
        names = list(defaults if include_collections is None else include_collections)
        check_included(names, self.known_collections, f"this {type(self).__module__} hook")
        if include_regex is not None:  # tensors the hook's regex names are always saved
            names = [*names, CollectionKeys.DEFAULT]
        if CollectionKeys.LOSSES in names and VITALS not in names:
            names.append(VITALS)  # a hook that saves the loss saves it every step (core._vitals)
        self._lock = threading.RLock()
        self._internal_errors = 0
        self._last_internal_error: str | None = None
        self._logged_errors: set[tuple[str, str]] = set()
        self._closed = False
        self._explicit_mode = False  # set_mode was called: the mode no longer follows
        self._events: list[dict[str, Any]] = []  # record_event's, in the session record
        self._events_over_budget = 0
        # what register_* installed, by id of the object registered: close() removes it all
        self._registrations: dict[Hashable, HookHandle] = {}
        self._warned_once: set[str] = set()  # the keys of warn_once
        store = open_store(out_dir)
        try:
            self._writer = TrialWriter(
                store, self.worker, writer_options, num_workers, type(self).framework
            )
        except StorageError as exc:
            raise StorageError(
                f"cannot write a trial at {store.location}: {exc}. Pass a writable directory "
                "(or URL) as out_dir"
            ) from exc
        self.out_dir = store.location
        # the run's configuration (trial.config()): what the hooks find, and log_config's
        self._run_config = RunConfig(partial(self._guard_event, self._writer.note_config))
        self._run_config.gather(run_facts())
        self._tensorboard = self._tensorboard_exporter(
            store, export_tensorboard, tensorboard_dir, num_workers
        )
        if save_config is None:
            save_config = type(self).default_save_config
        self._recorder = StepRecorder(
            self.collection_manager, self._writer, save_config, reduction_config, names
        )
        note_session = partial(self._guard_event, self._writer.note_session)
        self._session_steps = SessionSteps(self._recorder, self.worker, self.out_dir, note_session)
        self._session_steps.resume(self._writer.session_start)
        self._stop = StopRequest(stop_file) if stop_file is not None else None
        self._save_budget = self._budget_for(parse_save_budget(save_budget))
        if self._stop is not None or self._save_budget is not None:
            self._recorder.after_step = self._after_step
        hook_opened(self, type(self).framework)

    if not TYPE_CHECKING:  # (for mypy, a misspelt attribute stays an error)

        def __getattr__(self, name: str) -> Any:
            # Only for attributes that do not exist: a framework method says which hook has it.
            raise missing_method(type(self), type(self).framework, name)

    def _tensorboard_exporter(
        self,
        store: Store,
        export: bool,
        directory: str | os.PathLike[str] | None,
        num_workers: int,
    ) -> Any:
        """The TensorBoard exporter fed by the writer thread, when asked for (the first
        worker's only, as one run per mode is what a person wants to look at)."""
        if not isinstance(export, bool):
            raise InvalidConfigError(f"export_tensorboard must be True or False, got {export!r}")
        if not export and directory is None:
            return None
        if directory is None:
            if not store.capabilities.local_path:
                raise InvalidConfigError(
                    f"export_tensorboard needs tensorboard_dir (a local directory) when out_dir "
                    f"is not one, got out_dir={store.location!r}"
                )
            directory = os.path.join(store.local_directory(), "tensorboard")
        if num_workers > 1 and self.worker != worker_name(0):
            return None
        from tensortap.tensorboard import TensorBoardExporter

        exporter = TensorBoardExporter(directory)
        self._writer.add_listener("writing TensorBoard events", exporter.add_batch)
        return exporter

    @classmethod
    def create_from_json_file(
        cls: type[_H], json_file_path: str | os.PathLike[str] | None = None, **overrides: Any
    ) -> _H:
        """A hook from a JSON configuration (by default the file ``$TENSORTAP_CONFIG`` names);
        keyword arguments override what the file says."""
        config = read_config(json_file_path)
        return config.create_hook(cls, **overrides)

    @classmethod
    def current(
        cls: type[_H],
        json_config_path: str | os.PathLike[str] | None = None,
        create_if_not_exists: bool = False,
    ) -> _H | None:
        """The hook of this class's framework made last in this process, while it is open
        (None once it is closed); each framework's ``get_hook`` is this, with smdebug's
        arguments. With ``create_if_not_exists``, when there is none, one made from the JSON
        configuration (``json_config_path``, else the file ``$TENSORTAP_CONFIG`` names; None
        when neither is given)."""
        hook = current_hook(cls.framework)
        if isinstance(hook, cls):
            return hook
        if not create_if_not_exists:
            return None
        if json_config_path is None and not os.environ.get(CONFIG_ENV):
            return None
        return cls.create_from_json_file(json_config_path)

    # -- step and mode --
    @property
    def mode(self) -> ModeKeys:
        return self._recorder.mode

    @property
    def step(self) -> int:
        """The current global step."""
        return self._recorder.global_step

    @property
    def mode_step(self) -> int:
        """The current step within the current mode."""
        return self._recorder.mode_step

    def step_count(self, mode: ModeKeys | str | int) -> int:
        """The step number of ``mode``: :attr:`mode_step` when it is the current mode, else
        the number its next step takes (0 before any, unless :meth:`continue_at` set one)."""
        return self._recorder.counts().get(parse_mode(mode), 0)

    def continue_at(
        self,
        step: int,
        mode: ModeKeys | str | int = ModeKeys.TRAIN,
        source: str = "the training loop",
    ) -> None:
        """Number the steps of ``mode`` from ``step`` on, as the training counts them: for a
        loop restored from its own checkpoint (the trainer callbacks and the JAX hook call it
        with the trainer's global step or the optimizer's count). Call it before the first
        step of ``mode``, or during it (what the step saved so far stays in it).

        By default a session continues the trial's count (after the last step the earlier
        sessions published). Ahead of that, the global step moves as far. Behind it (a
        checkpoint older than the last saved step), the steps of ``mode`` from ``step`` on are
        counted again, with a warning: global steps never repeat, so the earlier ones stay
        readable by global step, and this session's record lists them
        (:attr:`tensortap.trials.Session.rolled_back`); by step of ``mode`` those numbers then
        give this session's values. ``source`` names what counts, in messages and the record.
        """
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise InvalidConfigError(f"continue_at: step must be an int >= 0, got {step!r}")
        wanted = parse_mode(mode)
        if wanted == ModeKeys.GLOBAL:
            raise InvalidConfigError(
                "continue_at numbers the steps of a mode (TRAIN, EVAL or PREDICT); global steps "
                "follow them and never repeat"
            )
        with self._lock:
            if not self._closed:
                self._continue_at(step, wanted, source)

    def _continue_at(self, step: int, mode: ModeKeys, source: str) -> None:
        """:meth:`continue_at`, checked (for adapters that count steps themselves: JAX)."""
        self._session_steps.continue_at(step, mode, source)

    @property
    def session_id(self) -> str:
        """The id of this hook's writing session (:attr:`tensortap.trials.Session.id`)."""
        return self._writer.session

    def branch_from(
        self,
        parent: str,
        step: int,
        *,
        global_step: int | None = None,
        reason: str = "",
        mode: ModeKeys | str | int = ModeKeys.TRAIN,
    ) -> None:
        """Record this session as a branch of session ``parent``: training was restored to
        step ``step`` of ``mode`` (the parent's ``global_step`` there, when known) and goes on
        from it, as after a rollback to a checkpoint. The steps of ``mode`` are numbered from
        ``step`` (see :meth:`continue_at`), and the session record names the parent, the step
        and ``reason`` (:attr:`tensortap.trials.Session.branch_of`)."""
        if not isinstance(parent, str) or not parent:
            raise InvalidConfigError(
                f"branch_from: parent must be a session id (a non-empty str), got {parent!r}"
            )
        if global_step is not None and (
            isinstance(global_step, bool) or not isinstance(global_step, int) or global_step < 0
        ):
            raise InvalidConfigError(
                f"branch_from: global_step must be an int >= 0 or None, got {global_step!r}"
            )
        if len(parent) > MAX_SESSION_ID:
            raise InvalidConfigError(
                f"branch_from: parent must be a session id of at most {MAX_SESSION_ID} chars "
                f"(Hook.session_id), got one of {len(parent)}"
            )
        reason = str(reason)
        if len(reason) > MAX_BRANCH_REASON:  # the record keeps its start (readers refuse more)
            reason = reason[: MAX_BRANCH_REASON - 3] + "..."
        self.continue_at(step, mode, source=reason or f"a branch of session {parent}")
        updates = {
            "branch_of": parent,
            "branch_step": step,
            "branch_mode": parse_mode(mode).name,
            "branch_global_step": global_step,
            "branch_reason": reason or None,
        }
        with self._lock:
            if not self._closed:
                self._guard_event(self._writer.note_session, updates)

    def set_mode(self, mode: ModeKeys | str | int) -> None:
        """Switch to TRAIN, EVAL, PREDICT or GLOBAL (closing the current step if it saved).
        From then on the mode is the one set here: an adapter whose mode follows the framework
        (``model.training``, autograd) stops following it."""
        with self._lock:
            self._explicit_mode = True
            before = (self._recorder.global_step, self._recorder.mode)
            self._guard(self._recorder.set_mode, mode)
            if (self._recorder.global_step, self._recorder.mode) != before:
                self._mode_changed()

    def _mode_changed(self) -> None:
        """What an adapter forgets when :meth:`set_mode` moves to another step or mode."""

    def next_step(self) -> None:
        """Close the current step (it is published within ``flush_secs``) and advance."""
        with self._lock:
            if not self._closed:
                self._guard(self._recorder.next_step)

    # -- saving --
    def save_tensor(
        self, name: str, value: Any, collections: str | Iterable[str] | None = None
    ) -> bool:
        """Save ``value`` under ``name`` if a collection it belongs to is due at this step.

        ``collections`` adds the tensor to those collections (created if missing); tensors in
        no included collection are not saved. Returns True if anything was saved.
        """
        with self._lock:
            if self._closed:
                self._warn_closed()
                return False
            if collections is None:
                collections = _DEFAULT_ONLY
            return bool(self._guard(self._recorder.record, name, value, collections))

    def _save_lazy(self, name: str, collections: Iterable[str], value: Any) -> None:
        """For framework adapters: save ``value()`` (a function of no argument) under ``name``
        if one of ``collections`` is due at this step; on other steps ``value`` is never called
        (nothing is converted)."""
        plan = self._recorder.begin(name, list(collections))
        if plan is None:
            return
        array = as_saveable_array(value(), name)
        self._recorder.put(name, records_from_array(name, array, plan))

    def save_scalar(
        self, name: str, value: Any, collections: str | Iterable[str] | None = None
    ) -> bool:
        """Save a real number (in the ``scalars`` collection, plus any given)."""
        number = _as_real(name, value)
        extra = [collections] if isinstance(collections, str) else list(collections or [])
        return self.save_tensor(name, number, [CollectionKeys.SCALARS, *extra])

    def save_vitals(self, values: Mapping[str, Any]) -> int:
        """Save this step's vital signs (:mod:`tensortap.core._vitals`): ``{"loss": 2.3,
        "grad_norm": 0.8, "lr": 1e-3}`` (short or full names; None values are left out) in the
        ``vitals`` collection, which is due at every step. Returns how many were saved."""
        with self._lock:
            if self._closed:
                self._warn_closed()
                return 0
            named = vital_names(values)  # a name that is no vital sign is the caller's error
            saved = 0
            for name, value in named.items():
                if self._guard(self._save_vital, name, value):
                    saved += 1
            return saved

    def _save_vital(self, name: str, value: Any) -> bool:
        if type(value) is float:
            return self._recorder.record(name, value, _VITALS)
        return self._recorder.record(name, _as_real(name, value), _VITALS)

    def record_event(self, kind: str, fields: Mapping[str, Any]) -> bool:
        """Keep one event of this session in the trial (an attribution by replay, say): the
        session record lists it, and ``trial.sessions()[i].events`` reads it back as a dict
        with ``kind``, ``global_step`` (this hook's step when it was recorded) and ``fields``.
        Values are JSON ones (non-finite numbers are kept as ``"nan"``, ``"inf"``,
        ``"-inf"``). At most :data:`MAX_SESSION_EVENTS` per session: later ones are counted
        (``events_over_budget`` in the record) and False is returned."""
        if not isinstance(kind, str) or not 0 < len(kind) <= MAX_SESSION_TEXT:
            raise InvalidConfigError(
                f"record_event needs a kind (a non-empty str of at most {MAX_SESSION_TEXT} "
                f"chars), got {kind[:80] if isinstance(kind, str) else kind!r}"
            )
        if not isinstance(fields, Mapping):
            raise InvalidConfigError(
                f"record_event needs its fields as a mapping of names to values, got {fields!r}"
            )
        event = {"kind": kind, "global_step": None, "fields": _json_value(fields, kind)}
        with self._lock:
            if self._closed:
                self._warn_closed()
                return False
            event["global_step"] = self._recorder.global_step
            updates: dict[str, Any]
            if len(self._events) >= MAX_SESSION_EVENTS:
                self._events_over_budget += 1
                updates = {"events_over_budget": self._events_over_budget}
                kept = False
            else:
                self._events.append(event)
                updates, kept = {"events": list(self._events)}, True
            self._guard_event(self._writer.note_session, updates)
            return kept

    def log_config(self, values: Mapping[str, Any]) -> None:
        """Record settings of this run in the trial, beside what the hooks gathered without
        code (``trial.config()`` reads them all back): ``hook.log_config({"lr": 3e-4,
        "dataset": "cifar10", "model": {"depth": 20}})``. Calls merge (objects key by key,
        a later value replaces an earlier one); a value under a key that names a secret
        (``token``, ``password``, ``api_key``) is kept as ``"<redacted>"``. Values must be
        JSON ones (None, bool, int, finite float, str, lists, dicts with str keys) and the
        whole configuration at most 256 KiB: anything else raises InvalidConfigError."""
        with self._lock:
            if self._closed:
                self._warn_closed()
                return
            self._run_config.log(values)

    def gather_config(self, values: Mapping[str, Any] | Callable[[], Mapping[str, Any]]) -> None:
        """Merge what a framework adapter found about the run (its optimizer, batch size,
        trainer's arguments) into the run's configuration: converted leniently (tuples,
        NumPy scalars, enums; anything else as text), never raising. ``values`` may be a
        function that finds them: its failure is contained, as the hook's own are."""
        with self._lock:
            if self._closed:
                return
            found = self._guard_event(values) if callable(values) else values
            if isinstance(found, Mapping):
                self._run_config.gather(found)

    def run_config(self) -> dict[str, Any]:
        """What this session recorded of the run's configuration (a copy)."""
        return self._run_config.snapshot()

    def is_anything_due(self) -> bool:
        """True if some included collection is due at this step."""
        return bool(self._guard(self._recorder.is_anything_due))

    def is_collection_due(self, name: str) -> bool:
        """True if the collection ``name`` is included and due at this step."""
        return bool(self._guard(self._recorder.is_collection_due, name))

    def is_collection_included(self, name: str) -> bool:
        """True if the collection ``name`` is saved at all (on its schedule)."""
        return name in self._recorder.include_collections

    def save_config_of(self, name: str) -> SaveConfig:
        """The schedule collection ``name`` follows: its own, or the hook's default."""
        return self.get_collection(name).save_config or self._recorder.save_config

    def reduction_config_of(self, name: str) -> ReductionConfig:
        """What collection ``name`` saves of a tensor: its own config, or the hook's default."""
        return self.get_collection(name).reduction_config or self._recorder.reduction_config

    # -- collections --
    def get_collection(self, name: str, create: bool = True) -> Collection:
        """The hook's collection of this name (created empty if missing)."""
        return self.collection_manager.get(name, create=create)

    def get_collections(self) -> dict[str, Collection]:
        return {c.name: c for c in self.collection_manager}

    def add_collection(self, collection: Collection, include: bool = True) -> Collection:
        """Add (or replace) a collection; it is saved unless ``include`` is false."""
        added = self.collection_manager.add(collection)
        if include:
            self._recorder.include_collection(collection.name)
        return added

    def include_collection(self, name: str) -> None:
        self._recorder.include_collection(name)

    # -- lifecycle --
    def _registered(self, key: Hashable, *undo: Callable[[], object]) -> HookHandle:
        """For framework adapters: the handle of one registration (``key``: ``id()`` of the
        object registered), which ``undo`` takes away (removing its framework hooks, forgetting
        the object); :meth:`close` removes it. ``self._registrations[key]`` is it meanwhile."""
        handle = HookHandle((*undo, partial(self._registrations.pop, key, None)))
        self._registrations[key] = handle
        return handle

    def _remove_handles(self) -> None:
        """Remove every registration, the last first (a method wrapped twice is put back in
        turn): nothing of this hook stays on the user's objects."""
        for handle in reversed(list(self._registrations.values())):
            self._guard_event(handle.remove)

    @property
    def status(self) -> HookStatus:
        return HookStatus(self._internal_errors, self._last_internal_error, self._writer.status)

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called (nothing more is saved)."""
        return self._closed

    def flush(self, timeout: float | None = None) -> bool:
        """Hand the current step to the writer and wait until everything is published; True
        only if every step so far is (False after a timeout, or once a step was lost or
        dropped: ``hook.status`` says which and why)."""
        with self._lock:
            self._guard(self._recorder.flush_step)
        return self._writer.flush(timeout)

    def flush_at_end(self) -> None:
        """At the end of a framework's training or evaluation call (Keras ``fit``,
        ``evaluate``, ``predict``; ``xgb.train``): wait, at most :data:`END_WAIT_SECS`, until
        every step so far is published, so that a trial the script opens next holds them all
        (smdebug's hooks closed their writers there); warn once if the writer takes longer."""
        if self._closed:
            return
        if self.flush(timeout=END_WAIT_SECS):
            return
        writer = self.status.writer
        if not (writer.steps_dropped or writer.steps_lost or self._closed):  # said already
            self.warn_once(
                "end-wait",
                f"the trial's writer did not publish every step within {END_WAIT_SECS:g} s "
                "of the end of training: a trial opened now may miss the last steps (they "
                "are published in the background; hook.close() waits for them)",
            )

    def close(self) -> HookStatus:
        """Publish everything and mark the end of training. Safe to call twice."""
        with self._lock:
            if self._closed:
                return self.status
            self._closed = True
            recorder = self._recorder
            self._guard(recorder.flush_step)
            self._remove_handles()  # after the last step saved what the models held
            end = {
                "last_global_step": recorder.global_step,
                "last_mode": recorder.mode.name,
                "last_mode_steps": {m.name: n for m, n in recorder.counts().items()},
                "internal_errors": self._internal_errors,
                "last_internal_error": self._last_internal_error,
            }
            self._writer.close(end)
            if self._tensorboard is not None:
                self._guard(self._tensorboard.close)
        hook_closed(self, type(self).framework)
        status = self.status
        if not status.healthy:
            logger.warning("tensortap closed with problems: %s", status)
        return status

    def __enter__(self: _H) -> _H:  # the adapter's own Hook, its methods included
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _after_step(self) -> None:
        """At a step boundary: the save budget's measure, then a stop the job asked for."""
        if self._save_budget is not None:
            self._guard_event(self._save_budget.step_closed)
        if self._stop is not None:
            self._check_stop()

    def _check_stop(self) -> None:
        """At a step boundary: stop training if the job asked (see :class:`StopRequest`)."""
        assert self._stop is not None
        reason = self._stop.requested()
        if reason is not None:
            logger.warning("tensortap: stopping training at step %d: %s", self.step, reason)
            self._recorder.after_step = None
            raise TrainingStopped(reason)

    # -- the save budget (core._save_budget) --
    def _budget_for(self, budget: float | None) -> ScheduleBudget | None:
        if budget is None:
            return None
        writer = self._writer
        governor = ScheduleBudget(
            self._recorder,
            BudgetPolicy(budget),
            self._budget_changed,
            background=lambda: writer.busy_s,  # the writer thread's CPU time counts too
        )
        return governor if governor.governs else None

    def _saving(self) -> AbstractContextManager[None]:
        """Adapters wrap their saving work in it: what the save budget measures."""
        budget = self._save_budget
        return nullcontext() if budget is None else budget.timing()

    def _budget_changed(self, change: BudgetChange, old: int, new: int) -> None:
        """The schedule changed: said in the session's events and the job's."""
        verb = "widened" if change.widened else "narrowed"
        message = (
            f"save budget: the job's default tensor saves took {change.share:.1%} of training "
            f"time (budget {change.budget * 100:g}%); their TRAIN interval {verb} from every {old} "
            f"to every {new} steps (vital signs and the outcome keep their schedule)"
        )
        fields = {
            "old_interval": old,
            "new_interval": new,
            "share": round(change.share, 6),
            "budget": change.budget,
            "saving_steps": change.saving_steps,
            "message": message,
        }
        logger.info("tensortap: %s", message)
        self.record_event(SAVE_BUDGET_EVENT, fields)
        job_dir = os.environ.get(JOB_ENV)
        if job_dir and os.path.isdir(job_dir):
            record_job_event(job_dir, SAVE_BUDGET_EVENT, step=self.step, **fields)

    # -- containment --
    def _guard(self, fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except (InvalidTensorError, InvalidConfigError):
            raise
        except Exception as exc:
            self._contain(exc, getattr(fn, "__qualname__", repr(fn)))
            return None

    def _guard_event(self, fn: Any, *args: Any) -> Any:
        """Run work triggered by a framework event: every failure is contained, none raised."""
        try:
            return fn(*args)
        except Exception as exc:
            self._contain(exc, getattr(fn, "__qualname__", repr(fn)))
            return None

    def _contain(self, exc: BaseException, where: str) -> None:
        """Count an internal failure; log each distinct one once, with its traceback."""
        self._internal_errors += 1
        self._last_internal_error = f"{type(exc).__name__} in {where}: {exc}"
        key = (type(exc).__name__, where)
        if key not in self._logged_errors:
            self._logged_errors.add(key)
            logger.error(
                "tensortap internal error in %s (training continues; repeats of this error are "
                "counted in hook.status and the trial, not logged): %s",
                where,
                self._last_internal_error,
                exc_info=exc,
            )
        elif self._internal_errors % 1000 == 0:
            logger.error("tensortap: %d internal errors so far", self._internal_errors)
        writer = getattr(self, "_writer", None)
        if writer is not None:
            writer.note_hook_errors(self._internal_errors, self._last_internal_error)

    def _warn_closed(self) -> None:
        if not getattr(self, "_warned_closed", False):
            self._warned_closed = True
            logger.warning("tensortap: save after hook.close() ignored (worker %s)", self.worker)

    # -- what the adapters' taps use: core._tap_host.TapHost (internal, public by name) --
    @property
    def recorder(self) -> StepRecorder:
        """The step recorder (see :class:`~tensortap.core._tap_host.TapHost`)."""
        return self._recorder

    @property
    def lock(self) -> threading.RLock:
        """The lock every change to the steps holds (see ``TapHost``)."""
        return self._lock

    # the implementations keep their private names, which the hooks call on themselves
    save_lazy = _save_lazy
    saving = _saving
    contain = _contain
    guard = _guard
    guard_event = _guard_event
    registered = _registered

    def warn_once(self, key: str, message: str) -> None:
        """Log ``message`` as a warning, the first time ``key`` is given."""
        if key not in self._warned_once:
            self._warned_once.add(key)
            logger.warning("tensortap: %s", message)

    def replace(self, obj: Any, attribute: str, value: Any) -> HookHandle:
        """Set ``obj.<attribute>`` to ``value`` (a wrapped method of a layer, the model or its
        optimizer); :meth:`close` puts back what was there, unless something replaced it since."""
        before = vars(obj).get(attribute, _ABSENT)
        setattr(obj, attribute, value)

        def restore() -> None:
            if vars(obj).get(attribute) is value:
                if before is _ABSENT:
                    delattr(obj, attribute)
                else:
                    setattr(obj, attribute, before)

        return self._registered((id(obj), attribute, id(value)), restore)


_VITALS = (VITALS,)
_ABSENT = object()


def _as_real(name: str, value: Any) -> float:
    item = getattr(value, "item", None)
    if callable(item) and getattr(value, "size", 1) == 1:
        value = item()
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InvalidTensorError(
            f"scalar {name!r} must be a real number (or a one-element array), got {value!r}; "
            "use save_tensor for arrays"
        )
    return float(value)


def _json_value(value: Any, kind: str, depth: int = 1) -> Any:
    """``value`` as JSON can hold it (an event's fields, at most :data:`MAX_EVENT_DEPTH`
    deep: what a reader takes); raises InvalidConfigError."""
    if depth > MAX_EVENT_DEPTH:
        raise InvalidConfigError(
            f"record_event({kind[:80]!r}): fields are nested more than {MAX_EVENT_DEPTH} deep; "
            "a session record's readers refuse deeper ones: flatten them"
        )
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        number = float(value)
        return number if math.isfinite(number) else str(number)
    if isinstance(value, Mapping):
        return {str(k): _json_value(v, kind, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_value(v, kind, depth + 1) for v in value]
    raise InvalidConfigError(
        f"record_event({kind!r}): fields must hold JSON values (None, bool, numbers, str, "
        f"lists, mappings), got {type(value).__name__} {value!r}; convert it (str(value))"
    )
