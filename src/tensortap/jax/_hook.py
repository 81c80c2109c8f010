"""The JAX hook: the framework-free hook, plus pytrees and JAX arrays.

::

    import tensortap.jax as ttj

    hook = ttj.Hook("runs/jax1", save_config=ttj.SaveConfig(save_interval=10),
                    include_collections=["weights", "gradients", "losses"])
    hook.save_pytree(params, "params")          # params/Dense_0/kernel, ... (weights, biases)
    hook.save_scalar("loss", loss, "losses")
    hook.next_step()

Statistics (reductions, norms, numerics) of a leaf are computed by ``jax.numpy`` on the array's
device, and all of one call's statistics cross to the host in one transfer; raw values are copied
to the host only when due. For gradients inside a jitted step, see :func:`tensortap.jax.record`.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import jax
import numpy as np

from tensortap.core._collections import INITIAL_PREFIX, INITIAL_WEIGHTS, CollectionKeys
from tensortap.core._dtypes import dtype_info
from tensortap.core._modes import ModeKeys
from tensortap.core._recorder import SavePlan, records_from_array
from tensortap.core._records import Record, RecordKind
from tensortap.exceptions import InvalidConfigError, TensortapError
from tensortap.hook._hook import Hook as BaseHook
from tensortap.hook._hook import HookOptions, OutDir
from tensortap.jax._carried import carried_states
from tensortap.jax._names import (
    OPTIMIZER_VARIABLES,
    Leaf,
    bias_names,
    collections_for,
    path_name,
)
from tensortap.jax._stats import statistics
from tensortap.jax._tap_host import Carried

if TYPE_CHECKING:
    from typing_extensions import Unpack

_statistics = jax.jit(statistics, static_argnums=1)


def _is_jax_array(value: Any) -> bool:
    return isinstance(value, jax.Array)


class Hook(BaseHook):
    """See the module docstring. Steps are marked by :meth:`next_step` (or, with
    :func:`tensortap.jax.record` in the optimizer, by the optimizer's step count: a hook made
    again on the same ``out_dir`` with an optimizer state restored from a checkpoint numbers
    its TRAIN steps from the restored count)."""

    known_collections = (*BaseHook.known_collections, OPTIMIZER_VARIABLES, INITIAL_WEIGHTS)
    framework = "jax"

    def __init__(self, out_dir: OutDir, **options: Unpack[HookOptions]) -> None:
        super().__init__(out_dir, **options)
        self._carried: list[Carried] = []  # record(hook, via="state") in this hook's optimizers
        self._carried_tags: list[int] | None = None  # their tags, in optimizer-state order
        self._count_followed = False  # the optimizer's count numbers this session's steps
        # the weights before the first update (from the optimizer's init), by name, until the
        # first step that saves weights: WeightUpdateRatio judges the first update by them
        self._initial: dict[str, np.ndarray] | None = None
        self._initial_done = False
        # names (in the optimizer's tree) of the biases seen at its init: 1-D leaves of zeros
        self._initial_biases: set[str] = set()
        if CollectionKeys.WEIGHTS in self._recorder.include_collections:
            self._recorder.include_collection(INITIAL_WEIGHTS)

    def save_tensor(
        self, name: str, value: Any, collections: str | Iterable[str] | None = None
    ) -> bool:
        """Save an array (a JAX array is waited for and copied to the host) if due."""
        if _is_jax_array(value):
            value = np.asarray(value)
        return super().save_tensor(name, value, collections)

    def save_scalar(
        self, name: str, value: Any, collections: str | Iterable[str] | None = None
    ) -> bool:
        """Save a real number (``scalars``, plus any given); one saved in ``losses`` is this
        step's loss, also saved as the vital sign ``vitals/loss`` (every step)."""
        if _is_jax_array(value):
            value = np.asarray(value)  # waited for once, for both
        saved = super().save_scalar(name, value, collections)
        given = [collections] if isinstance(collections, str) else list(collections or [])
        if CollectionKeys.LOSSES in given:
            saved = bool(self.save_vitals({"loss": value})) or saved
        return saved

    def save_pytree(
        self, tree: Any, prefix: str = "", collections: str | Iterable[str] | None = None
    ) -> int:
        """Save each leaf of ``tree`` that is due, named from its path under ``prefix``
        (``params/Dense_0/kernel``). Without ``collections``, a leaf joins the collection its
        name implies (``params/...``: weights or biases; ``gradient/...``: gradients;
        ``opt_state/...``: optimizer_variables; else default); the array of a Flax NNX
        ``nnx.Param`` is a weight (a bias if its name ends in ``bias``) whatever its path
        (``nnx.state(model, nnx.Param)``: ``linear1/kernel``). Returns how many were saved."""
        colls = [collections] if isinstance(collections, str) else collections
        given = None if colls is None else tuple(colls)
        leaves = named_leaves(tree, prefix, self._initial_biases)
        return self.save_items([(name, leaf, given or implied) for name, leaf, implied in leaves])

    def save_items(self, items: Sequence[tuple[str, Any, tuple[str, ...]]]) -> int:
        """Save each ``(name, array, collections)`` that is due; how many were."""
        with self._lock:
            if self._closed:
                self._warn_closed()
                return 0
            saved = self._guard(self._save_leaves, items)
            return int(saved or 0)

    def _save_leaves(self, items: Sequence[tuple[str, Any, tuple[str, ...]]]) -> int:
        recorder = self._recorder
        pending: list[tuple[str, SavePlan, Any, Any]] = []
        saved = 0
        weights = []
        for name, leaf, collections in items:
            plan = recorder.begin(name, collections)
            if plan is None:
                continue
            saved += 1
            if CollectionKeys.WEIGHTS in collections:
                weights.append(name)
            if plan.raw or not _is_jax_array(leaf):
                recorder.put(name, records_from_array(name, np.asarray(leaf), plan))
            else:
                stats = _statistics(leaf, plan.reductions) if plan.reductions else None
                pending.append((name, plan, leaf, stats))
        values = jax.device_get([stats for *_, stats in pending])  # one transfer
        for (name, plan, leaf, _), vals in zip(pending, values, strict=True):
            recorder.put(name, _statistic_records(name, plan, leaf, vals))
        if weights and not self._initial_done:
            snapshot, self._initial = self._initial or {}, None
            if recorder.global_step == 0:  # the snapshot is of the weights before this step
                found = [(n, _snapshot_of(n, snapshot)) for n in weights]
                self.save_initial([(n, value) for n, value in found if value is not None])
            self._initial_done = True
        return saved

    def note_initial(self, params: Any) -> None:
        """Keep the weights an optimizer was initialised with (``record``'s init) until the
        first step that saves weights, which saves them as ``initial/<name>``."""
        leaves = named_leaves(params, "")
        if any(isinstance(leaf, jax.core.Tracer) for _, leaf, _ in leaves):
            return  # init traced inside jit: no values to keep
        self._initial_biases |= bias_names([(n, leaf) for n, leaf, _ in leaves], initial=True)
        if self._initial_done or not self.is_collection_included(INITIAL_WEIGHTS):
            return
        # kept on the host: the training step may donate the parameters' buffers
        arrays = jax.device_get([leaf for _, leaf, _ in leaves])
        self._initial = {
            name: np.asarray(a) for (name, _, _), a in zip(leaves, arrays, strict=True)
        }

    def save_initial(self, items: Sequence[tuple[str, Any]]) -> None:
        """Save the weights before the first update as ``initial/<name>`` (initial_weights),
        once; the current step must be the one whose update follows them. Weights only, as
        the PyTorch hook: biases start at zero in most models."""
        self._initial_done = True
        recorder = self._recorder
        for name, value in items:
            initial = INITIAL_PREFIX + name
            plan = recorder.begin(initial, (INITIAL_WEIGHTS,))
            if plan is not None:
                recorder.put(initial, records_from_array(initial, np.asarray(value), plan))

    @property
    def initial_done(self) -> bool:
        """Whether the weights before the first update were saved (or never will be)."""
        return self._initial_done

    @property
    def holds_initial(self) -> bool:
        """Whether weights from an optimizer's init are kept, waiting to be saved."""
        return self._initial is not None

    @property
    def resumes_trial(self) -> bool:
        """Whether this session writes on after earlier sessions' steps in the trial."""
        return self._writer.session_start.resumed

    def end_step(self, opt_state: Any) -> None:
        """End the current TRAIN step of a loop whose Optax chain holds
        ``record(hook, via="state")``: save the statistics the step left in ``opt_state`` (read
        from the device only on steps the collection's schedule makes due) and go on to the
        next step. Call it once per optimizer step, after saving the step's loss, instead of
        :meth:`next_step`."""
        with self._lock:
            if self._closed:
                self._warn_closed()
                return
            self._guard(self._end_step, opt_state)

    def carry(self, carried: Carried) -> int:
        """Register a carried recording (at the optimizer's ``init``); its tag."""
        for i, known in enumerate(self._carried):
            if known is carried:
                return i
        self._carried.append(carried)
        self._carried_tags = None
        return len(self._carried) - 1

    def _end_step(self, opt_state: Any) -> None:
        nodes = carried_states(opt_state)
        if not nodes:
            raise InvalidConfigError(
                "hook.end_step(opt_state) expects the state of an Optax chain that holds "
                f"record(hook, via='state'), got a {type(opt_state).__name__} without one; pass "
                "the optimizer state the step returned, or call hook.next_step() instead"
            )
        recorder = self._recorder
        if recorder.mode == ModeKeys.GLOBAL:  # nothing set a mode: this step was a TRAIN step
            recorder.set_mode(ModeKeys.TRAIN, keep_step=True)
        tags = self._carried_tags
        if tags is None or len(tags) != len(nodes):  # first step: follow the optimizer's count
            fetched = jax.device_get([(n.steps, n.tag) for n in nodes])
            tags = self._carried_tags = [int(tag) for _, tag in fetched]
            self.follow_count(int(fetched[0][0]) - 1)
        if recorder.mode != ModeKeys.TRAIN:
            recorder.set_mode(ModeKeys.TRAIN)
        count = recorder.mode_step
        due = [
            (node, self._carried[tag])
            for node, tag in zip(nodes, tags, strict=True)
            if self._carried[tag].specs
            and self.save_config_of(self._carried[tag].collection)
            .get_save_config(ModeKeys.TRAIN)
            .should_save(count)
        ]
        fetched = jax.device_get([(node.steps, node.stats) for node, _ in due])  # one transfer
        for (steps, stats), (_, carried) in zip(fetched, due, strict=True):
            if int(steps) - 1 == count:
                self._save_delivered(count, carried.leaves, carried.specs, stats, None)
            else:  # counted and surfaced like any failure inside tensortap; training goes on
                mismatch = StepMismatchError(
                    f"hook.end_step: the hook is at TRAIN step {count} but the optimizer state "
                    f"is that of step {int(steps) - 1}; call end_step once per optimizer step "
                    "(not next_step as well) with the state that step returned"
                )
                self._contain(mismatch, "Hook.end_step")
        self._recorder.next_step()

    def deliver(
        self,
        count: int,
        meta: Sequence[Leaf],
        specs: tuple[tuple[str, bool], ...],
        stats: Any = None,
        leaves: Any = None,
    ) -> None:
        """Values computed inside a jitted step for optimizer step ``count`` (see ``record``):
        for each leaf of ``meta``, its statistics ``specs`` (one row of ``stats``) or its raw
        value (in ``leaves``). The current step becomes TRAIN step ``count``."""
        with self._lock:
            if not self._closed:
                self._guard(self._save_delivered, int(count), meta, specs, stats, leaves)

    def _save_delivered(
        self,
        count: int,
        meta: Sequence[Leaf],
        specs: tuple[tuple[str, bool], ...],
        stats: Any,
        leaves: Any,
    ) -> None:
        self.advance_to(count)
        recorder = self._recorder
        rows = None if stats is None else np.asarray(stats).tolist()
        for i, leaf in enumerate(meta):
            plan = recorder.begin(leaf.name, collections_for(leaf.name))
            if plan is None:
                continue
            if leaves is not None:
                array = np.asarray(leaves[i])
                recorder.put(leaf.name, records_from_array(leaf.name, array, plan))
            elif rows is not None:
                given = dict(zip(specs, rows[i], strict=True))
                reductions = tuple(s for s in plan.reductions if s in given)
                wanted = SavePlan(False, plan.shape, reductions)
                values = [given[s] for s in reductions]
                recorder.put(leaf.name, _statistic_records(leaf.name, wanted, leaf, values))

    def follow_count(self, count: int) -> None:
        """The first optimizer step of this session is TRAIN step ``count``: a resumed
        optimizer numbers the session's steps (see :meth:`continue_at`)."""
        if not self._count_followed:
            self._count_followed = True
            self._continue_at(count, ModeKeys.TRAIN, "the optimizer's count")

    def advance_to(self, count: int) -> None:
        """Make the current step TRAIN step ``count`` (closing the steps before it)."""
        recorder = self._recorder
        if recorder.mode != ModeKeys.TRAIN:
            recorder.set_mode(ModeKeys.TRAIN)
        self.follow_count(count)
        while recorder.mode_step < count:
            recorder.next_step()


#: The open JAX hook made last in this process (see :meth:`tensortap.hook._hook.Hook.current`).
get_hook = Hook.current


def _snapshot_of(name: str, snapshot: dict[str, np.ndarray]) -> np.ndarray | None:
    """The weight ``name`` in a snapshot named from the optimizer's tree, which may lack the
    prefix the weights are saved under (``params/hidden/kernel``, ``hidden/kernel``)."""
    if name in snapshot:
        return snapshot[name]
    found = [value for key, value in snapshot.items() if name.endswith("/" + key)]
    return found[0] if len(found) == 1 else None


def named_leaves(
    tree: Any, prefix: str, initial_biases: Iterable[str] = ()
) -> list[tuple[str, Any, tuple[str, ...]]]:
    """``(name, leaf, collections)`` of each leaf of ``tree``: its name from its path under
    ``prefix``, the collections the name implies, or, for the array of a Flax NNX ``Param``
    (however its path reads), the weights. A parameter that is a bias by shape and use (see
    :func:`tensortap.jax._names.bias_names`; ``initial_biases``: those seen as zeros when the
    optimizer started, named in its tree, with or without ``prefix``) is in the biases."""
    leaves, _ = jax.tree_util.tree_flatten_with_path(tree)
    params: set[tuple[Any, ...]] = set()
    nnx = sys.modules.get("flax.nnx")  # only when the script uses Flax NNX
    param_type = getattr(nnx, "Param", None)
    variable_type = getattr(nnx, "Variable", None)
    if isinstance(param_type, type) and isinstance(variable_type, type):
        nodes, _ = jax.tree_util.tree_flatten_with_path(
            tree, is_leaf=lambda x: isinstance(x, variable_type)
        )
        params = {tuple(path) for path, node in nodes if isinstance(node, param_type)}
    named = [(path_name(prefix, path), path, leaf) for path, leaf in leaves]
    biases = bias_names((name, leaf) for name, _, leaf in named)
    known = tuple(initial_biases)
    out = []
    for name, path, leaf in named:
        is_param = bool(params) and any(tuple(path[:i]) in params for i in range(len(path)))
        implied = collections_for(name)
        if is_param or implied in ((CollectionKeys.WEIGHTS,), (CollectionKeys.BIASES,)):
            bias = name in biases or any(name == b or name.endswith("/" + b) for b in known)
            implied = (CollectionKeys.BIASES,) if bias else (CollectionKeys.WEIGHTS,)
        out.append((name, leaf, implied))
    return out


class StepMismatchError(TensortapError):
    """The optimizer state given to ``end_step`` is not that of the hook's current step."""


def _statistic_records(name: str, plan: SavePlan, leaf: Any, values: Any) -> list[Record]:
    dtype = dtype_info(np.dtype(leaf.dtype)).stored_name
    shape = tuple(leaf.shape)
    out = [
        Record(name, RecordKind.REDUCTION, dtype, shape, None, red, on_abs, float(value))
        for (red, on_abs), value in zip(plan.reductions, np.asarray(values).tolist(), strict=True)
    ]
    if plan.shape:
        out.append(Record(name, RecordKind.SHAPE, dtype, shape))
    return out
