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

from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

import jax
import numpy as np

from tensortap.core.dtypes import dtype_info
from tensortap.core.modes import ModeKeys
from tensortap.core.recorder import SavePlan, records_from_array
from tensortap.core.records import Record, RecordKind
from tensortap.hook import Hook as BaseHook
from tensortap.jax.names import collections_for, path_name
from tensortap.jax.stats import statistics

_statistics = jax.jit(statistics, static_argnums=1)


class Leaf(NamedTuple):
    """What the host needs of a leaf whose values come from inside a jitted step."""

    name: str
    dtype: Any
    shape: tuple[int, ...]


def _is_jax_array(value: Any) -> bool:
    return isinstance(value, jax.Array)


class Hook(BaseHook):
    """See the module docstring. Steps are marked by :meth:`next_step` (or, with
    :func:`tensortap.jax.record` in the optimizer, by the optimizer's step count)."""

    def save_tensor(
        self, name: str, value: Any, collections: str | Iterable[str] | None = None
    ) -> bool:
        """Save an array (a JAX array is waited for and copied to the host) if due."""
        if _is_jax_array(value):
            value = np.asarray(value)
        return super().save_tensor(name, value, collections)

    def save_pytree(
        self, tree: Any, prefix: str = "", collections: str | Iterable[str] | None = None
    ) -> int:
        """Save each leaf of ``tree`` that is due, named from its path under ``prefix``
        (``params/Dense_0/kernel``). Without ``collections``, a leaf joins the collection its
        name implies (``params/...``: weights or biases; ``gradient/...``: gradients;
        ``opt_state/...``: optimizer_variables; else default). Returns how many were saved."""
        leaves, _ = jax.tree_util.tree_flatten_with_path(tree)
        items = [(path_name(prefix, path), leaf) for path, leaf in leaves]
        colls = [collections] if isinstance(collections, str) else collections
        with self._lock:
            if self._closed:
                self._warn_closed()
                return 0
            saved = self._guard(self._save_leaves, items, None if colls is None else tuple(colls))
            return int(saved or 0)

    def _save_leaves(
        self, items: Sequence[tuple[str, Any]], collections: tuple[str, ...] | None
    ) -> int:
        recorder = self._recorder
        pending: list[tuple[str, SavePlan, Any, Any]] = []
        saved = 0
        for name, leaf in items:
            plan = recorder.begin(name, collections or collections_for(name))
            if plan is None:
                continue
            saved += 1
            if plan.raw or not _is_jax_array(leaf):
                recorder.put(name, records_from_array(name, np.asarray(leaf), plan))
            else:
                stats = _statistics(leaf, plan.reductions) if plan.reductions else None
                pending.append((name, plan, leaf, stats))
        values = jax.device_get([stats for *_, stats in pending])  # one transfer
        for (name, plan, leaf, _), vals in zip(pending, values, strict=True):
            recorder.put(name, _statistic_records(name, plan, leaf, vals))
        return saved

    def _deliver(
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
        self._advance_to(count)
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

    def _advance_to(self, count: int) -> None:
        """Make the current step TRAIN step ``count`` (closing the steps before it)."""
        recorder = self._recorder
        if recorder.mode != ModeKeys.TRAIN:
            recorder.set_mode(ModeKeys.TRAIN)
        while recorder.mode_step < count:
            recorder.next_step()


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
