"""The step lifecycle, written once: which step and mode we are in, what is due, what to save.

Framework adapters translate their events into :meth:`StepRecorder.record`,
:meth:`StepRecorder.set_mode` and :meth:`StepRecorder.next_step`; the recorder decides,
reduces, copies and hands finished steps to a :class:`RecordSink`. No I/O happens here.

Step counting: the recorder starts at global step 0 in mode GLOBAL. ``next_step()`` closes the
current step and advances the global step and the current mode's step by one. ``set_mode(m)``
closes the current step first if anything was recorded in it (so a step never mixes modes);
otherwise the pending global step number simply moves to the new mode. A session that continues
a trial starts from its count (:meth:`StepRecorder.resume`), and a framework that counts steps
itself sets a mode's numbers (:meth:`StepRecorder.count_mode_from`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tensortap.core._collections import Collection, CollectionManager
from tensortap.core._dtypes import BFLOAT16, as_saveable_array, bfloat16_bits_to_float32, dtype_info
from tensortap.core._modes import ModeKeys, parse_mode
from tensortap.core._records import (
    Deferred,
    Record,
    RecordKind,
    RecordSink,
    ScalarSteps,
    StepBatch,
)
from tensortap.core._reduction_config import ReductionConfig
from tensortap.core._reductions import compute_reduction
from tensortap.core._save_config import SaveConfig, SaveConfigMode
from tensortap.core._vitals import VITALS
from tensortap.exceptions import InvalidConfigError


@dataclass(frozen=True, slots=True)
class SavePlan:
    """What to save of one tensor at the current step (merged over its due collections)."""

    raw: bool
    shape: bool
    reductions: tuple[tuple[str, bool], ...]


#: Saving a value as it is (no reductions): a number a hook saves outside its collection's
#: schedule, because a rule needs it at that step.
RAW_PLAN = SavePlan(raw=True, shape=False, reductions=())
#: Python and NumPy double-precision numbers, stored as float64 scalars (``<f8``).
_FLOATS = (float, np.float64)
_F8 = dtype_info(np.dtype(np.float64)).stored_name


def _merge(configs: Iterable[ReductionConfig]) -> SavePlan:
    raw = shape = False
    specs: list[tuple[str, bool]] = []
    for cfg in configs:
        raw = raw or cfg.saves_raw
        shape = shape or cfg.save_shape
        specs.extend(s for s in cfg.reduction_specs if s not in specs)
    plan = SavePlan(raw, shape, tuple(specs))
    return RAW_PLAN if plan == RAW_PLAN else plan  # one object: the fast path tests ``is``


def due_at(config: SaveConfigMode, steps: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """``config.should_save(step)`` for each of ``steps`` (int64), as a bool array."""
    due = np.isin(steps, config.save_steps) if config.save_steps else np.zeros(len(steps), bool)
    interval = config.save_interval
    if interval is not None:
        window = steps >= config.start_step
        if config.end_step is not None:
            window &= steps < config.end_step
        due |= window & (steps % interval == 0)
    return due


def _every_step(config: SaveConfig, mode: ModeKeys) -> bool:
    """Whether ``config`` saves every step of ``mode``."""
    cfg = config.get_save_config(mode)
    return cfg.save_interval == 1 and cfg.start_step <= 0 and cfg.end_step is None


class StepRecorder:
    """Tracks steps and modes, decides what is due, and turns values into records."""

    def __init__(
        self,
        collections: CollectionManager,
        sink: RecordSink,
        save_config: SaveConfig | None = None,
        reduction_config: ReductionConfig | None = None,
        include_collections: Iterable[str] = (),
    ) -> None:
        if save_config is not None and not isinstance(save_config, SaveConfig):
            raise InvalidConfigError(f"save_config must be a SaveConfig, got {save_config!r}")
        if reduction_config is not None and not isinstance(reduction_config, ReductionConfig):
            raise InvalidConfigError(
                f"reduction_config must be a ReductionConfig, got {reduction_config!r}"
            )
        self.collections = collections
        self.sink = sink
        self._save_config = save_config or SaveConfig()
        self.reduction_config = reduction_config or ReductionConfig()
        self.mode = ModeKeys.GLOBAL
        self.global_step = 0
        self.mode_step = 0
        self._mode_steps: dict[ModeKeys, int] = {}
        self._touched = False
        self._emitted = False  # the current step was handed on (at a flush) without advancing
        self._step_records: dict[str, list[Record]] = {}
        self._known_version = -1
        self._membership: dict[str, tuple[Collection, ...]] = {}
        self._due: dict[str, bool] = {}
        self._plans: dict[str, SavePlan | None] = {}
        self._merged: dict[tuple[str, ...], SavePlan] = {}
        # plans that hold at every step of the current mode (all the tensor's due collections
        # have their own every-step schedule, as the vital signs do): kept across steps
        self._steady: dict[str, SavePlan] = {}
        self._steady_keys: dict[tuple[str, ...], bool] = {}  # due collections -> every step?
        self._explicit: set[tuple[str, tuple[str, ...]]] = set()
        self._sent_version = -1
        self._members_dirty = True
        self._step_end_callbacks: list[Callable[[], None]] = []
        self.after_step: Callable[[], None] | None = None  # called once a step has advanced
        self._anything_due: tuple[int, bool] | None = None
        self.include_collections: set[str] = set()
        for name in include_collections:
            self.include_collection(name)

    # -- configuration --
    @property
    def save_config(self) -> SaveConfig:
        """The schedule of the collections without their own."""
        return self._save_config

    @save_config.setter
    def save_config(self, value: SaveConfig) -> None:
        self._save_config = value
        self._steady.clear()
        self._steady_keys.clear()
        self._reset_step_caches()

    def include_collection(self, name: str) -> None:
        """Save the tensors of this collection (created empty if it does not exist yet)."""
        self.collections.get(name)
        self.include_collections.add(name)
        self._anything_due = None
        self._plans.clear()
        self._merged.clear()
        self._steady.clear()
        self._steady_keys.clear()

    # -- step lifecycle --
    def set_mode(self, mode: ModeKeys | str | int, keep_step: bool = False) -> None:
        """Switch mode; a step that saved something is closed first unless ``keep_step``
        (adapters that learn the mode only after the step began move the step instead)."""
        new = parse_mode(mode)
        if new == self.mode:
            return
        if self._touched and not keep_step:
            self._close_step()
        self.mode = new
        self.mode_step = self._mode_steps.get(new, 0)
        self._steady.clear()
        self._steady_keys.clear()
        self._reset_step_caches()

    def resume(self, global_step: int, mode_steps: Mapping[ModeKeys, int]) -> None:
        """Continue an earlier session's count (before the first step): the current step is
        global step ``global_step``, and each mode's next step ``mode_steps[mode]`` (0 if
        absent)."""
        self.global_step = global_step
        self._mode_steps = dict(mode_steps)
        self.mode_step = self._mode_steps.get(self.mode, 0)
        self._reset_step_caches()

    def count_mode_from(self, mode: ModeKeys, mode_step: int) -> int:
        """Number ``mode``'s steps from ``mode_step`` on: the current step if it is of ``mode``
        (what it saved so far stays in it), else ``mode``'s next step. For an adapter whose
        framework counts the steps (a trainer's global step, an optimizer's count). Moving
        ahead moves the global step as far (the steps in between happened, unsaved); moving
        back leaves it (a global step is never numbered twice). Returns the number ``mode``'s
        step had before."""
        before = self.mode_step if mode == self.mode else self._mode_steps.get(mode, 0)
        if mode_step != before:
            if mode_step > before:
                self.global_step += mode_step - before
            self._mode_steps[mode] = mode_step
            if mode == self.mode:
                self.mode_step = mode_step
            self._reset_step_caches()
        return before

    def counts(self) -> dict[ModeKeys, int]:
        """Each mode's current (or next) step number, for the modes that have counted any."""
        counts = {**self._mode_steps, self.mode: self.mode_step}
        return {mode: step for mode, step in counts.items() if step > 0}

    def continue_after(self, other: StepRecorder) -> None:
        """Number the steps from here on after every step ``other`` (the recorder of a closed
        earlier session of the same worker) numbered or handed on, in every mode: a session
        writing on in the same trial never reuses a step of the one before it. Forward only."""
        used = 1 if other._emitted else 0  # its current step was handed on at its close
        self.global_step = max(self.global_step, other.global_step + used)
        for mode, count in {**other._mode_steps, other.mode: other.mode_step + used}.items():
            self._mode_steps[mode] = max(self._mode_steps.get(mode, 0), count)
        self.mode_step = self._mode_steps.get(self.mode, 0)
        self._reset_step_caches()

    def next_step(self) -> None:
        """Close the current step (handing its records to the sink) and advance."""
        self._close_step()

    def add_step_end_callback(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` before a touched step's records are handed on.

        Framework adapters use it to save end-of-step values (weights after the update) and to
        resolve values still on a device. The callback must contain its own errors.
        """
        self._step_end_callbacks.append(callback)

    def touch(self) -> None:
        """Mark the current step as active (``set_mode`` will close it; step-end callbacks run)."""
        self._touched = True

    def flush_step(self) -> None:
        """Hand the current step's records to the sink now without advancing (used at close)."""
        if self._touched:
            for callback in self._step_end_callbacks:
                callback()
        if self._step_records or self._collections_changed():
            self._emit()
            self._emitted = True
        self._step_records = {}

    def _close_step(self) -> None:
        self.flush_step()
        self.global_step += 1
        self.mode_step += 1
        self._mode_steps[self.mode] = self.mode_step
        self._touched = False
        self._emitted = False
        self._reset_step_caches()
        if self.after_step is not None:
            self.after_step()

    def _reset_step_caches(self) -> None:
        self._anything_due = None
        self._due.clear()
        self._plans.clear()

    def _collections_changed(self) -> bool:
        return self._members_dirty or self._sent_version != self.collections.version

    def _emit(self) -> None:
        records = [r for rs in self._step_records.values() for r in rs]
        snapshot = None
        if self._collections_changed():
            snapshot = self.collections.to_dict()
            self._sent_version = self.collections.version
            self._members_dirty = False
        self.sink.submit(
            StepBatch(self.global_step, self.mode, self.mode_step, time.time(), records, snapshot)
        )

    def due_beyond(
        self, name: str, mode_steps: Sequence[int] | np.ndarray[Any, Any]
    ) -> np.ndarray[Any, Any]:
        """For each of ``mode_steps`` of the current mode: whether an included collection
        other than ``name`` is due then (an adapter publishes the steps where none is, the
        vital signs' steps, with :meth:`publish_scalar_steps`)."""
        steps = np.asarray(mode_steps, dtype=np.int64).reshape(-1)
        due = np.zeros(len(steps), dtype=bool)
        seen: set[int] = set()
        for other in self.include_collections:
            if other == name:
                continue
            config = (self.collections.get(other).save_config or self._save_config).get_save_config(
                self.mode
            )
            if id(config) not in seen:
                seen.add(id(config))
                due |= due_at(config, steps)
        return due

    def publish_scalar_steps(
        self,
        mode_steps: Sequence[int] | np.ndarray[Any, Any],
        columns: Mapping[str, np.ndarray[Any, Any]],
        collections: tuple[str, ...] | None = None,
        *,
        kept: np.ndarray[Any, Any] | None = None,
        step_end: bool = True,
    ) -> int:
        """Save and close many whole steps of the current mode at once: for each ``i``, what
        advancing to mode step ``mode_steps[i]`` (:meth:`count_mode_from`), recording
        ``columns[name][i]`` for each name (in ``collections``) and :meth:`next_step` would
        do, in order, handed to the sink as one :class:`ScalarSteps` when it can be: the
        cost is per call, not per step. ``kept`` (bool, steps x names, in ``columns``'
        order) leaves values out; a step that keeps none saves nothing.

        Taken step by step instead (the same result, each step's cost) when a name's plan is
        not a raw number due at every step of the mode (the vital signs' is), when the steps
        do not go forward from the current one, or, with ``step_end`` (the default), when the
        adapter ends its steps with work of its own (:meth:`add_step_end_callback`);
        ``step_end=False`` says the steps were gathered by the framework and none of that
        work belongs to them. A current step that already saved something is closed first,
        step by step. Returns the number of steps handed on."""
        names = tuple(columns)
        steps = np.asarray(mode_steps, dtype=np.int64).reshape(-1)
        values = np.empty((len(steps), len(names)), dtype=np.float64)
        for j, name in enumerate(names):
            values[:, j] = columns[name]  # a column of another length raises here
        if kept is not None:
            kept = np.asarray(kept, dtype=bool).reshape(values.shape)
        if not len(steps):
            return 0
        for name in names:
            if not isinstance(name, str) or not name:
                raise InvalidConfigError(f"a tensor name must be a non-empty string, got {name!r}")
            if collections is not None:
                self.add_to_collections(name, collections)
        if step_end and self._step_end_callbacks:
            return self._publish_one_by_one(steps, names, values, kept, collections)
        if self._step_records or self._emitted:  # the current step first, as it is
            first = self._publish_one_by_one(
                steps[:1], names, values[:1], None if kept is None else kept[:1], collections
            )
            if len(steps) == 1:
                return first
            rest = None if kept is None else kept[1:]
            columns = dict(zip(names, values[1:].T, strict=True))
            return first + self.publish_scalar_steps(
                steps[1:], columns, collections, kept=rest, step_end=step_end
            )
        if int(steps[0]) < self.mode_step or (len(steps) > 1 and bool((np.diff(steps) <= 0).any())):
            return self._publish_one_by_one(steps, names, values, kept, collections)
        if any(
            self.plan_for(name) is not RAW_PLAN or self._steady.get(name) is not RAW_PLAN
            for name in names
        ):
            return self._publish_one_by_one(steps, names, values, kept, collections)
        saving = np.ones(len(steps), dtype=bool) if kept is None else kept.any(axis=1)
        global_steps = self.global_step + (steps - self.mode_step)
        last = int(steps[-1])
        if saving.any():
            snapshot = None
            if self._collections_changed():
                snapshot = self.collections.to_dict()
                self._sent_version = self.collections.version
                self._members_dirty = False
            every = bool(saving.all())
            self.sink.submit_steps(
                ScalarSteps(
                    global_steps if every else global_steps[saving],
                    self.mode,
                    steps if every else steps[saving],
                    time.time(),
                    names,
                    values if every else values[saving],
                    None if kept is None else (kept if every else kept[saving]),
                    snapshot,
                )
            )
        self.global_step = int(global_steps[-1]) + 1
        self.mode_step = last + 1
        self._mode_steps[self.mode] = self.mode_step
        self._touched = False
        self._emitted = False
        self._reset_step_caches()
        if self.after_step is not None:
            self.after_step()
        return int(saving.sum())

    def _publish_one_by_one(
        self,
        steps: np.ndarray[Any, Any],
        names: tuple[str, ...],
        values: np.ndarray[Any, Any],
        kept: np.ndarray[Any, Any] | None,
        collections: tuple[str, ...] | None,
    ) -> int:
        """:meth:`publish_scalar_steps` step by step: each step recorded and closed."""
        published = 0
        for i, step in enumerate(steps.tolist()):
            if step > self.mode_step:
                self.count_mode_from(self.mode, step)
            row = values[i].tolist()
            saved = False
            for j, name in enumerate(names):
                if kept is None or kept[i, j]:
                    saved = self.record(name, row[j], collections) or saved
            published += saved
            self.next_step()
        return published

    # -- deciding --
    def _collections_of(self, name: str) -> tuple[Collection, ...]:
        if self._known_version != self.collections.version:
            self._membership.clear()
            self._plans.clear()
            self._due.clear()
            self._merged.clear()
            self._steady.clear()
            self._steady_keys.clear()
            self._known_version = self.collections.version
        found = self._membership.get(name)
        if found is None:
            found = tuple(c for c in self.collections if c.matches(name))
            for coll in found:  # record regex membership so trials can list it
                if name not in coll._tensor_names:
                    coll._tensor_names.add(name)
                    self._members_dirty = True
            self._membership[name] = found
        return found

    def _is_due(self, coll: Collection) -> bool:
        due = self._due.get(coll.name)
        if due is None:
            cfg = coll.save_config or self._save_config
            due = self._due[coll.name] = cfg.should_save(self.mode, self.mode_step)
        return due

    def plan_for(self, name: str) -> SavePlan | None:
        """What to save of ``name`` at this step, or None when nothing is due."""
        colls = self._collections_of(name)
        steady = self._steady.get(name)
        if steady is not None:
            return steady
        plan = self._plans.get(name, False)
        if plan is not False:
            return plan  # type: ignore[return-value]
        included = [c for c in colls if c.name in self.include_collections]
        due = tuple(c for c in included if self._is_due(c))
        if due:
            key = tuple(c.name for c in due)
            plan = self._merged.get(key)
            if plan is None:
                configs = (c.reduction_config or self.reduction_config for c in due)
                plan = self._merged[key] = _merge(configs)
            if len(due) == len(included):
                every = self._steady_keys.get(key)
                if every is None:
                    every = self._steady_keys[key] = all(
                        _every_step(c.save_config or self._save_config, self.mode) for c in due
                    )
                if every:
                    self._steady[name] = plan
        else:
            plan = None
        self._plans[name] = plan
        return plan

    def is_collection_due(self, name: str) -> bool:
        """True when the collection ``name`` is included and due at this step."""
        return name in self.include_collections and self._is_due(self.collections.get(name))

    def is_anything_due(self) -> bool:
        """True when some included collection is due at this step (adapters skip work if not).

        Cached per step: framework adapters ask on every event of the training hot path.
        """
        version = self.collections.version
        if self._anything_due is None or self._anything_due[0] != version:
            if self._known_version != version:
                self._due.clear()
            due = any(
                self._is_due(self.collections.get(n))
                for n in self.include_collections
                if n != VITALS  # saved every step: never makes the adapters' work due
            )
            self._anything_due = (version, due)
        return self._anything_due[1]

    # -- recording --
    def add_to_collections(self, name: str, collections: Iterable[str]) -> None:
        key = (name, tuple(collections))
        if key not in self._explicit:
            self._explicit.add(key)
            for coll in key[1]:
                self.collections.get(coll).add_tensor_name(name)

    def begin(self, name: str, collections: Iterable[str] | str | None = None) -> SavePlan | None:
        """Note that ``name`` was seen this step (joining ``collections``); return what is due.

        Adapters that convert values themselves (on a device, say) call this, then :meth:`put`.
        """
        if not isinstance(name, str) or not name:
            raise InvalidConfigError(f"a tensor name must be a non-empty string, got {name!r}")
        self._touched = True
        if collections is not None:
            self.add_to_collections(
                name, [collections] if isinstance(collections, str) else collections
            )
        return self.plan_for(name)

    def has_saved(self, name: str) -> bool:
        """Whether ``name`` was saved in the current step so far (adapters that sample a value
        the script may save itself, as the outcome, leave the script's in place)."""
        return name in self._step_records

    def put(self, name: str, records: list[Record]) -> None:
        """Keep the records of ``name`` for this step (replacing any saved earlier in the step)."""
        self._step_records[name] = records

    def record(self, name: str, value: Any, collections: Iterable[str] | None = None) -> bool:
        """Record ``value`` under ``name`` if due at this step; True if anything was kept.

        Raises InvalidTensorError for values that are not numeric arrays. Saving the same name
        twice in one step keeps the last value.
        """
        if (  # a number under a steady raw plan (the vital signs): nothing to decide again
            type(value) in _FLOATS
            and self._steady.get(name) is RAW_PLAN
            and self._known_version == self.collections.version
            and (
                collections is None
                or (type(collections) is tuple and (name, collections) in self._explicit)
            )
        ):
            self._touched = True
            data = np.array(value, dtype=np.float64)
            self._step_records[name] = [Record(name, RecordKind.TENSOR, _F8, (), data)]
            return True
        plan = self.begin(name, collections)
        if plan is None:
            return False
        if plan is RAW_PLAN and type(value) in _FLOATS:  # a number saved as it is: the vital
            # signs of every step take this path, without the general conversion's checks
            data = np.array(value, dtype=np.float64)
            self._step_records[name] = [Record(name, RecordKind.TENSOR, _F8, (), data)]
            return True
        array = as_saveable_array(value, name)
        self._step_records[name] = records_from_array(name, array, plan)
        return True

    def record_arriving(
        self,
        name: str,
        number: np.ndarray[Any, Any],
        deferred: Deferred,
        collections: Iterable[str] | None = None,
    ) -> bool:
        """Record a float64 number still arriving (a 0-d array that ``deferred.resolve()``
        fills: a device's value copied without waiting). Saved as it is, the writer resolves it
        before writing; under any other plan it is waited for here and recorded as a number."""
        plan = self.begin(name, collections)
        if plan is None:
            return False
        if plan is RAW_PLAN:
            self._step_records[name] = [
                Record(name, RecordKind.TENSOR, _F8, (), number, deferred=deferred)
            ]
            return True
        deferred.resolve()
        return self.record(name, float(number), collections)


def records_from_array(name: str, array: np.ndarray[Any, Any], plan: SavePlan) -> list[Record]:
    """The records ``plan`` asks for, from a NumPy array (copied once if raw is saved)."""
    info = dtype_info(array.dtype)
    dtype = info.stored_name
    shape = array.shape
    out: list[Record] = []
    if plan.raw:
        # One copy, in the stored byte layout, so later in-place updates cannot change it.
        data = np.empty(shape, dtype=info.storage)
        np.copyto(data, array.view(info.storage) if dtype == BFLOAT16 else array)
        out.append(Record(name, RecordKind.TENSOR, dtype, shape, data))
    if plan.reductions:
        numeric = array
        if dtype == BFLOAT16:
            numeric = bfloat16_bits_to_float32(array.view(np.uint16))
        for reduction, on_abs in plan.reductions:
            value = compute_reduction(numeric, reduction, on_abs)
            out.append(
                Record(name, RecordKind.REDUCTION, dtype, shape, None, reduction, on_abs, value)
            )
    if plan.shape:
        out.append(Record(name, RecordKind.SHAPE, dtype, shape))
    return out
