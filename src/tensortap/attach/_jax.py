"""Zero code change for JAX: an Optax training loop is watched in a script that never imports
tensortap (plain JAX, Flax Linen's ``TrainState``, Flax NNX's ``nnx.Optimizer``).

:func:`enable` (called by ``python -m tensortap.attach``, and so by the job runner) waits for
the script to import JAX and Optax, then:

- every Optax ``GradientTransformation`` made from then on has its ``init`` and ``update``
  watched: each call of the outermost one (a chain's, not its parts') is one TRAIN step; the
  gradients it is given are saved as ``gradient/<name>`` (``gradients``), the parameters after
  it as ``<name>`` (``weights``; ``biases`` for a bias by shape and use:
  :func:`tensortap.jax._names.bias_names`), those ``init`` was given as ``initial/<name>``
  (``initial_weights``), and every step's vital signs (``vitals``);
- a function made by ``jax.value_and_grad`` (``nnx.value_and_grad`` calls it) keeps the value
  it computes, when it is a scalar (the loss), for the update that follows in the same trace.

A name is the leaf's path in the parameters' tree (``params/Dense_0/kernel``, ``l1/kernel``),
the same for a parameter and its gradient. Inside ``jit`` the values leave the step in the
optimizer state (:mod:`tensortap.attach._jax_state`: no host callback in the step), read on the
host at saving steps. A Flax NNX optimizer, an update not given ``params`` and a second model's
optimizer are watched by ordered host callbacks instead: one per step carries its vital signs
and says whether its gradients are due; arrays cross only on due steps, raw
(``optax.apply_updates`` sends the parameters). The hook is made at the first update from the
JSON configuration; the first step follows the optimizer's count (a restored checkpoint's). A
script that makes its own ``tensortap.jax.Hook`` keeps it, and nothing is added to its steps.
What cannot be watched (an update under ``vmap`` or ``pmap``) runs unwatched, and the attach
runner says what it saw.
"""

from __future__ import annotations

import functools
import inspect
import logging
import sys
import threading
import time
from collections.abc import Callable, Sequence
from types import FrameType, ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np

from tensortap.attach._import_hooks import Attachment, when_imported
from tensortap.core._collections import CollectionKeys
from tensortap.core._modes import ModeKeys
from tensortap.core._vitals import VITALS, vital_name
from tensortap.exceptions import TrainingStopped
from tensortap.hook._config import HookConfig
from tensortap.jax._config import notes as config_notes
from tensortap.jax._config import patch_optax as patch_config

if TYPE_CHECKING:
    from tensortap.jax._tap_host import JaxTapHost

logger = logging.getLogger(__name__)

GRADIENT_PREFIX = "gradient/"


_attachment = Attachment("optax", "JAX (Optax)", "tensortap.jax._hook:Hook")
#: A stop request met inside a host callback: JAX hands it to the script as a runtime error;
#: the attach runner turns that into the stop it was (see :func:`stop_in_callback`).
_stopped: TrainingStopped | None = None


def enable(config: HookConfig) -> None:
    """Watch Optax's optimizers and ``jax.value_and_grad`` once the script imports them."""
    _attachment.enable(config, _patch_optax)
    when_imported("jax", _patch_jax)
    when_imported("flax.serialization", _register_flax)


def _register_flax(serialization: ModuleType) -> None:
    from tensortap.attach._jax_state import register_flax

    register_flax(serialization)


def stop_in_callback() -> TrainingStopped | None:
    """The stop request that ended training from inside a compiled step, if one did."""
    return _stopped


class _Watch:
    """The host side: the hook, the step, the loss waiting for its step."""

    def __init__(self) -> None:
        self.hook: JaxTapHost | None = None
        self.loss: float | None = None
        self.started = False  # the first step began (on the host)
        self.steps_marked = False  # an update was watched (traced or run), so steps are marked
        self.last_step_end: float | None = None  # perf_counter at the last step's callback
        self.biases: set[str] = set()  # parameters that are biases by shape and use
        self.updated = False  # a watched update was traced or run
        self.initial_noted = False
        self.init_params: Any = None  # a tapped init's parameters, for the hook
        # (name, shape, dtype) of each parameter of the tapped optimizer (one per process)
        self.layout: list[tuple[str, tuple[int, ...], Any]] | None = (
            None  # the hook keeps the parameters of a tapped init
        )
        self.pending_loss = threading.local()  # value_and_grad's loss, for the next update
        self.lock = threading.Lock()
        self.in_update = threading.local()  # an outermost update is being traced or run

    def take_loss(self) -> Any:
        """The loss kept by ``value_and_grad`` for this update, if it belongs to the trace
        the update runs in (or is a value); None otherwise."""
        value = getattr(self.pending_loss, "value", None)
        self.pending_loss.value = None
        if value is None:
            return None
        try:
            from jax._src import core

            if isinstance(value, core.Tracer) and value._trace is not core.trace_ctx.trace:
                return None  # computed in another trace: not this step's
        except Exception:
            return None
        return value

    def watching(self) -> bool:
        """False when the script made its own JAX hook: it keeps its steps as it saves them."""
        existing = _attachment.existing()
        ours: object = self.hook  # the hook this attachment made (as a JaxTapHost), if any
        return existing is None or existing is ours

    def _hook(self) -> JaxTapHost:
        if self.hook is None:
            self.hook = _attachment.hook()
            config_notes.attach(self.hook)  # the run's configuration seen before it
            if self.init_params is not None:  # the weights before the first update
                self.hook.guard_event(self.hook.note_initial, self.init_params)
                self.initial_noted = self.hook.holds_initial
                self.init_params = None
        return self.hook

    # -- called from compiled steps (each is contained: a failure never reaches training) --
    def begin_step(self, vitals: np.ndarray, count: np.ndarray) -> np.ndarray:
        """A TRAIN step (an optimizer update) was computed: save its vital signs (``vitals``:
        loss, grad_norm, update_norm, lr; NaN where not seen) and say whether its gradients
        are due. ``count`` is the optimizer's step count before the update (-1 if its state
        keeps none): the first step follows it, so a script restored from its own checkpoint
        keeps its step numbers."""
        global _stopped
        due = 0
        try:
            hook = self._hook()
            now = time.perf_counter()
            with self.lock:
                if not self.started:
                    self.started = True
                    hook.set_mode(ModeKeys.TRAIN)
                    _follow_optimizer(hook, int(np.asarray(count)))
                else:
                    hook.next_step()
                since, self.last_step_end = self.last_step_end, now
                row = np.asarray(vitals).tolist()
                self._save_vitals(hook, row, np.nan if since is None else now - since)
                due = int(hook.is_collection_due(CollectionKeys.GRADIENTS))
        except TrainingStopped as stop:
            _stopped = stop
            raise
        except Exception:
            logger.exception("tensortap could not begin a JAX step; training continues")
        return np.asarray([due], np.int32)

    @staticmethod
    def _save_vitals(hook: JaxTapHost, row: Sequence[float], step_time: float) -> None:
        """Save one step's vital signs (``row``: :data:`~tensortap.attach._jax_state.ROW`'s
        values, NaN where not seen; then ``step_time``); the loss in ``losses`` too, when
        due."""
        loss = row[0]
        if loss == loss and hook.is_collection_due(CollectionKeys.LOSSES):  # not NaN
            hook.save_scalar("loss", loss, CollectionKeys.LOSSES)
        values = dict(zip(_VITAL_NAMES, (*row, step_time), strict=True))
        hook.save_vitals({name: v for name, v in values.items() if v == v})

    # -- called when the host reads an optimizer state back (attach._jax_state) --
    def steps(
        self,
        rows: Sequence[tuple[int, Sequence[float]]],
        step_time: float,
        saved_step: int,
        kept: np.ndarray | None,
    ) -> None:
        """TRAIN steps read back from the state, in order: each step's number and vital signs
        (``rows``), the time per step since the last read, and the arrays ``kept`` for step
        ``saved_step`` (None: no step read saves arrays). One pass under the hook's lock."""
        global _stopped
        hook = self._hook()
        try:
            with hook.lock:
                plain = self._plain_rows(hook, rows, saved_step if kept is not None else -1)
                start = 0
                for i, (step, row) in enumerate(rows):
                    if plain[i]:
                        continue
                    if hook.closed:
                        return
                    if i > start:
                        hook.guard(self._save_block, hook, rows[start:i], step_time)
                    start = i + 1
                    hook.guard(hook.advance_to, step)
                    self._save_vitals(hook, row, step_time)
                    if kept is not None and step == saved_step:
                        self.arrays(step, kept)
        except TrainingStopped as stop:
            _stopped = stop
            raise

    @staticmethod
    def _plain_rows(
        hook: JaxTapHost, rows: Sequence[tuple[int, Sequence[float]]], saved_step: int
    ) -> list[bool]:
        """Which rows save nothing but their vital signs (no other collection due, not the
        step whose arrays were kept), the last excepted: it stays the current step, open."""
        if len(rows) < 3:
            return [False] * len(rows)
        steps = np.fromiter((step for step, _ in rows), dtype=np.int64, count=len(rows))
        recorder = hook.recorder
        if recorder.mode != ModeKeys.TRAIN:
            return [False] * len(rows)
        plain = ~recorder.due_beyond(VITALS, steps) & (steps != saved_step)
        plain[-1] = False
        return plain.tolist()  # type: ignore[no-any-return]

    @staticmethod
    def _save_block(
        hook: JaxTapHost, rows: Sequence[tuple[int, Sequence[float]]], step_time: float
    ) -> None:
        """Save steps that keep only their vital signs as one block (one recorder pass and
        one writer submission): what :meth:`_save_vitals` of each, in turn, would save."""
        hook.advance_to(rows[0][0])  # closes the step left open before (the last read's)
        values = np.empty((len(rows), len(_VITAL_NAMES)), dtype=np.float64)
        values[:, :-1] = [row for _, row in rows]
        values[:, -1] = step_time
        hook.recorder.publish_scalar_steps(
            [step for step, _ in rows],
            dict(zip(_VITAL_NAMES, values.T, strict=True)),
            _VITALS,
            kept=values == values,  # NaN: not seen, not saved
        )

    def arrays(self, step: int, kept: np.ndarray) -> None:
        """The gradients and the parameters after the update of ``step`` (the current step),
        kept raveled in the state on a due step, in the parameters' layout."""
        if self.layout is None:
            return
        with self._hook().saving():  # the arrays' conversion is saving work too
            self._arrays(step, kept)

    def _arrays(self, step: int, kept: np.ndarray) -> None:
        assert self.layout is not None
        names = [name for name, _, _ in self.layout]
        arrays, offset = [], 0
        for _, shape, dtype in self.layout * 2:  # the gradients, then the parameters
            size = int(np.prod(shape))
            arrays.append(kept[offset : offset + size].reshape(shape).astype(dtype))
            offset += size
        self.save_gradients([GRADIENT_PREFIX + n for n in names], arrays[: len(names)])
        self.save_weights(names, arrays[len(names) :])

    def next_read(self, steps: int, most: int) -> tuple[int, bool]:
        """The step count at which to read the state back next: after the next step that
        saves gradients or parameters (then True: that read fetches them too), at most
        ``most`` steps on."""
        hook = self._hook()
        schedules = [
            hook.save_config_of(c).get_save_config(ModeKeys.TRAIN)
            for c in (CollectionKeys.GRADIENTS, CollectionKeys.WEIGHTS, CollectionKeys.BIASES)
            if hook.is_collection_included(c)
        ]
        for step in range(steps, steps + most):
            if any(s.should_save(step) for s in schedules):
                return step + 1, True
        return steps + most, False

    def weights_due(self) -> np.ndarray:
        """Whether the parameters after the update are due, and those before it (once)."""
        try:
            hook = self._hook()
            due = hook.is_collection_due(CollectionKeys.WEIGHTS) or hook.is_collection_due(
                CollectionKeys.BIASES
            )
            initial = due and not hook.initial_done
            return np.asarray([int(due), int(initial)], np.int32)
        except Exception:
            logger.exception("tensortap could not save JAX weights; training continues")
            return np.zeros(2, np.int32)

    def save_gradients(self, names: Sequence[str], arrays: Sequence[Any]) -> None:
        items = [(n, a, (CollectionKeys.GRADIENTS,)) for n, a in zip(names, arrays, strict=True)]
        hook = self._hook()
        with hook.saving():  # what the save budget measures
            hook.save_items(items)

    def save_weights(self, names: Sequence[str], arrays: Sequence[Any]) -> None:
        hook = self._hook()
        with hook.saving():
            hook.save_items(
                [(n, a, _parameter_collections(n)) for n, a in zip(names, arrays, strict=True)]
            )

    def save_initial(self, names: Sequence[str], arrays: Sequence[Any]) -> None:
        hook = self._hook()
        if self.initial_noted:  # kept at the optimizer's init: saved with the weights
            return
        weights = [
            (n, a)
            for n, a in zip(names, arrays, strict=True)
            if _parameter_collections(n) == (CollectionKeys.WEIGHTS,)
        ]
        with hook.lock:
            hook.guard(hook.save_initial, weights)


#: The full names of a row's vital signs (``_jax_state.ROW``), then the step time's.
_VITAL_NAMES = tuple(vital_name(k) for k in ("loss", "grad_norm", "update_norm", "lr", "step_time"))
_VITALS = (VITALS,)
_watch = _Watch()


def _follow_optimizer(hook: JaxTapHost, count: int) -> None:
    """Number the first watched step by the optimizer's count (restored from a checkpoint,
    it is that checkpoint's step), as ``record(hook)`` does; say so where the state keeps no
    count and the trial already holds earlier sessions' steps."""
    if count >= 0:
        hook.follow_count(count)
    elif hook.resumes_trial:
        logger.warning(
            "tensortap: the script's Optax state keeps no step count (optax.sgd without "
            "momentum keeps none), so a run restored from its own checkpoint cannot be "
            "numbered from it: this session's TRAIN steps continue after the trial's last "
            "step. Use an optimizer with a count (optax.adam, a schedule, "
            "optax.inject_hyperparams) or a hook in the script (hook.continue_at(step))"
        )


def _parameter_collections(name: str) -> tuple[str, ...]:
    """A parameter's collection: the biases for a bias by shape and use (seen in the
    optimizer's init and in its updates' shapes), else the weights."""
    if name in _watch.biases or name.endswith("bias"):
        return (CollectionKeys.BIASES,)
    return (CollectionKeys.WEIGHTS,)


def _note_biases(tree: Any, *, initial: bool) -> None:
    """Add the biases of a parameter (or gradient) tree, by shape and use, to those known."""
    from tensortap.jax._names import bias_names

    names, arrays = _names(tree)
    _watch.biases |= bias_names(zip(names, arrays, strict=True), initial=initial)


def _names(tree: Any) -> tuple[list[str], list[Any]]:
    """The leaves of a tree of parameters (or gradients) and their names (their paths)."""
    import jax

    from tensortap.jax._names import path_name

    leaves, _ = jax.tree_util.tree_flatten_with_path(tree)
    return [path_name("", path) or "params" for path, _ in leaves], [x for _, x in leaves]


def _send_when(flag: Any, save: Callable[[Sequence[str], Sequence[Any]], None], tree: Any) -> None:
    """In the graph: hand the leaves of ``tree`` to ``save`` on the host when ``flag`` is set."""
    import jax

    names, arrays = _names(tree)
    if not arrays:
        return

    def send(xs: list[Any]) -> None:
        _call(functools.partial(_contained, save, names), xs)

    jax.lax.cond(flag > 0, send, lambda xs: None, arrays)


def _contained(save: Callable[[Sequence[str], Sequence[Any]], None], names: Any, xs: Any) -> None:
    try:
        save(names, xs)
    except Exception:
        logger.exception("tensortap could not save JAX values; training continues")


def _flags(host: Callable[..., np.ndarray], size: int, *args: Any) -> Any:
    """In the graph: ``host(*args)``'s int32 flags (one ordered host callback)."""
    import jax
    import jax.numpy as jnp
    from jax.experimental import io_callback

    shape = jax.ShapeDtypeStruct((size,), jnp.int32)  # type: ignore[no-untyped-call]
    return io_callback(host, shape, *args, ordered=True)


def _global_norm(tree: Any) -> Any:
    """In the graph: the L2 norm of all the floating leaves of ``tree`` (float32)."""
    import jax
    import jax.numpy as jnp

    leaves = [x for x in jax.tree_util.tree_leaves(tree) if jnp.issubdtype(x.dtype, jnp.inexact)]
    if not leaves:
        return jnp.float32(jnp.nan)
    squares = [jnp.sum(jnp.square(jnp.abs(x).astype(jnp.float32))) for x in leaves]
    return jnp.sqrt(sum(squares[1:], squares[0]))


def _vital_values(loss: Any, grads: Any, updates: Any, state: Any) -> Any:
    """In the graph: float32 ``[loss, grad_norm, update_norm, lr]`` of one update; NaN where
    the step does not show it (the loss is ``value_and_grad``'s in the same trace; the
    learning rate is seen in ``optax.inject_hyperparams``'s state, the first
    ``hyperparams["learning_rate"]`` of the new state)."""
    import jax.numpy as jnp

    lr = _leaf_at(
        state, lambda keys: len(keys) >= 2 and keys[-2:] == ["hyperparams", "learning_rate"]
    )
    values = [
        jnp.float32(jnp.nan) if loss is None else loss,
        _global_norm(grads),
        _global_norm(updates),
        jnp.float32(jnp.nan) if lr is None else jnp.asarray(lr, jnp.float32).reshape(()),
    ]
    return jnp.stack([jnp.asarray(v, jnp.float32) for v in values])


def _optimizer_count(state: Any) -> Any:
    """In the graph: the optimizer's step count before this update (the first integer scalar
    named ``count`` in its state: Adam's, a schedule's, inject_hyperparams'), -1 if none."""
    import jax.numpy as jnp

    count = _leaf_at(state, lambda keys: bool(keys) and keys[-1] == "count", integer=True)
    return jnp.int32(-1) if count is None else jnp.asarray(count, jnp.int32).reshape(())


def _leaf_at(tree: Any, wanted: Callable[[list[str]], bool], integer: bool = False) -> Any:
    """The first scalar leaf of ``tree`` whose path (as text) is ``wanted``; None if none."""
    import jax
    import jax.numpy as jnp

    from tensortap.jax._names import key_text

    for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
        dtype = getattr(leaf, "dtype", None)
        if getattr(leaf, "shape", None) != () or dtype is None:
            continue
        kind = jnp.integer if integer else jnp.floating
        if jnp.issubdtype(dtype, kind) and wanted([key_text(k) for k in path]):
            return leaf
    return None


def _call(host: Callable[..., None], *args: Any) -> None:
    """In the graph: ``host(*args)`` on the host. Every callback here is an ordered
    ``io_callback``: one ordered effect, so they run in the order of the program (the loss
    before the step it belongs to); ``jax.debug.callback`` is another, not ordered with it."""
    from jax.experimental import io_callback

    io_callback(host, None, *args, ordered=True)


# -- Optax --
def _patch_optax(optax: ModuleType) -> None:
    from optax._src import base

    cls = base.GradientTransformation
    original_new = cls.__new__

    def new(kind: type, init: Any, update: Any) -> Any:
        return original_new(kind, _watched_init(init), _watched_update(update))

    cls.__new__ = new
    patch_config(optax)
    original_apply = optax.apply_updates
    watched_apply = _watched_apply(original_apply)
    for module in (optax, sys.modules.get("optax._src.update")):  # where it is looked up
        if getattr(module, "apply_updates", None) is original_apply:
            setattr(module, "apply_updates", watched_apply)  # noqa: B010 - modules bind it


def _watched_init(init: Any) -> Any:
    """``init(params)``: the optimizer's state, with tensortap's beside it (a
    :class:`~tensortap.attach._jax_state.Tapped` state; the optimizer of a Flax NNX
    ``nnx.Optimizer`` keeps its own, watched by host callbacks), noting the parameters that are
    biases and keeping those it starts from, once per outermost call."""
    if not callable(init) or getattr(init, "_tensortap_watched", False):
        return init

    @functools.wraps(init)
    def watched(*args: Any, **kwargs: Any) -> Any:
        if getattr(_watch.in_update, "active", False) or not _watch.watching():
            return init(*args, **kwargs)
        _watch.in_update.active = True
        try:
            state = init(*args, **kwargs)
        finally:
            _watch.in_update.active = False
        try:
            params = args[0] if args else kwargs.get("params")
            _note_biases(params, initial=True)
            if not _called_from("flax.nnx"):
                return _tapped(state, params)
        except Exception:
            _cannot_watch("this Optax init")
        return state

    watched._tensortap_watched = True  # type: ignore[attr-defined]
    return watched


def _called_from(package: str, depth: int = 6) -> bool:
    """Whether a caller of the caller (a few frames up) is in ``package``."""
    frame: FrameType | None = sys._getframe(2)
    for _ in range(depth):
        if frame is None:
            return False
        if str(frame.f_globals.get("__name__", "")).startswith(package):
            return True
        frame = frame.f_back
    return False


def _tapped(state: Any, params: Any) -> Any:
    """The optimizer's ``state`` with a fresh tap for ``params`` beside it, keeping the
    parameters it starts from for the hook (made at the first update, not here: a script that
    makes an optimizer and never updates with it has no hook)."""
    import atexit

    import jax

    from tensortap.attach import _jax_state

    names, arrays = _names(params)
    layout = [(n, tuple(a.shape), np.dtype(a.dtype)) for n, a in zip(names, arrays, strict=True)]
    if _watch.layout is not None and _watch.layout != layout:
        return state  # a second model's optimizer: watched by host callbacks
    _watch.layout = layout
    tap = _jax_state.init_tap(params)
    leaves = jax.tree_util.tree_leaves(params)
    if _watch.init_params is None and not any(isinstance(x, jax.core.Tracer) for x in leaves):
        _watch.init_params = jax.device_get(params)  # kept on the host: buffers may be donated
    if _jax_state.reader.sink is None:
        _jax_state.reader.sink = _watch
        atexit.register(_jax_state.reader.flush)  # before the hook closes (registered earlier)
    return _jax_state.Tapped(state, tap)


def _watched_update(update: Any) -> Any:
    if not callable(update) or getattr(update, "_tensortap_watched", False):
        return update

    @functools.wraps(update)
    def watched(*args: Any, **kwargs: Any) -> Any:
        if getattr(_watch.in_update, "active", False) or not _watch.watching():
            return update(*args, **kwargs)  # a part of a watched chain, or the script's hook
        from tensortap.attach import _jax_state
        from tensortap.attach._jax_state import Tapped

        state = args[1] if len(args) > 1 else kwargs.get("state")
        tap = None
        if isinstance(state, Tapped):
            tap, state = state.tap, state.inner
            if len(args) > 1:
                args = (args[0], state, *args[2:])
            else:
                kwargs = {**kwargs, "state": state}
        _watch.in_update.active = True
        try:
            out = update(*args, **kwargs)
        finally:
            _watch.in_update.active = False
        _watch.updated = True
        grads = args[0] if args else kwargs.get("updates")
        params = args[2] if len(args) > 2 else kwargs.get("params")
        loss = _watch.take_loss()
        try:
            updates, new_state = out
            _note_biases(grads, initial=False)
            vitals = _vital_values(loss, grads, updates, new_state)
            count = _optimizer_count(state)
            if tap is not None and params is not None:
                new_tap = _tap_step(tap, count, vitals, grads, updates, params)
                if _jax_state.concrete(new_tap.ring):  # run, not traced: no jit hands it back
                    _jax_state.reader.seen(new_tap)
                return updates, Tapped(new_state, new_tap)
            # watched by host callbacks: a Flax NNX optimizer, or parameters not given
            flags = _flags(_watch.begin_step, 1, vitals, count)
            _send_when(flags[0], _prefixed(_watch.save_gradients), grads)
            _watch.steps_marked = True
        except Exception:
            _cannot_watch("this Optax update")
        return out if tap is None else (out[0], Tapped(out[1], tap))

    watched._tensortap_watched = True  # type: ignore[attr-defined]
    return watched


def _tap_step(tap: Any, count: Any, vitals: Any, grads: Any, updates: Any, params: Any) -> Any:
    """In the step: the tap after this update (see :mod:`tensortap.attach._jax_state`)."""
    import jax.numpy as jnp
    import optax

    from tensortap.attach._jax_state import tap_steps, tap_update
    from tensortap.jax._schedule import due_in_graph

    layout = _watch.layout
    shapes = [(n, tuple(a.shape)) for n, a in zip(*_names(grads), strict=True)]
    if layout is None or shapes != [(n, shape) for n, shape, _ in layout]:
        raise ValueError("the gradients are not shaped as the parameters the state was made for")
    hook = _watch._hook()
    step = tap_steps(tap, count)
    due = jnp.bool_(False)
    for collection in (CollectionKeys.GRADIENTS, CollectionKeys.WEIGHTS, CollectionKeys.BIASES):
        if hook.is_collection_included(collection):
            schedule = hook.save_config_of(collection).get_save_config(ModeKeys.TRAIN)
            due = due | due_in_graph(schedule, step)
    weights = optax.apply_updates(params, updates)
    return tap_update(tap, step, vitals, grads, weights, due)


def _prefixed(
    save: Callable[[Sequence[str], Sequence[Any]], None],
) -> Callable[[Sequence[str], Sequence[Any]], None]:
    def with_prefix(names: Sequence[str], arrays: Sequence[Any]) -> None:
        save([GRADIENT_PREFIX + n for n in names], arrays)

    return with_prefix


def _watched_apply(apply_updates: Any) -> Any:
    @functools.wraps(apply_updates)
    def watched(params: Any, updates: Any) -> Any:
        new = apply_updates(params, updates)
        if _watch.steps_marked and _watch.watching():  # the update before it marks the step
            try:
                flags = _flags(_watch.weights_due, 2)
                _send_when(flags[0], _watch.save_weights, new)
                _send_when(flags[1], _watch.save_initial, params)
            except Exception:
                _cannot_watch("this optax.apply_updates")
        return new

    return watched


# -- JAX --
def _not_a_stop(record: logging.LogRecord) -> bool:
    """JAX logs a callback's exception with its traceback: not a stop request's (it is one
    line of the attach runner's)."""
    return not (record.exc_info and isinstance(record.exc_info[1], TrainingStopped))


def _patch_jax(jax: ModuleType) -> None:
    original = jax.value_and_grad
    if getattr(original, "_tensortap_watched", False):
        return
    logging.getLogger("jax._src.callback").addFilter(_not_a_stop)
    signature = inspect.signature(original)

    @functools.wraps(original)
    def value_and_grad(*args: Any, **kwargs: Any) -> Any:
        made = original(*args, **kwargs)
        try:
            has_aux = bool(signature.bind(*args, **kwargs).arguments.get("has_aux", False))
        except TypeError:
            return made

        @functools.wraps(made)
        def watched(*a: Any, **k: Any) -> Any:
            out = made(*a, **k)
            if not config_notes.batch_seen:
                try:
                    config_notes.on_loss_call(a)
                except Exception:
                    logger.debug("tensortap could not read the batch size", exc_info=True)
            if _watch.watching():
                try:
                    _send_loss(out[0], has_aux)
                except Exception:
                    _cannot_watch("this jax.value_and_grad")
            return out

        return watched

    value_and_grad._tensortap_watched = True  # type: ignore[attr-defined]
    jax.value_and_grad = value_and_grad  # type: ignore[attr-defined]


def _send_loss(value: Any, has_aux: bool) -> None:
    """Keep the loss a ``value_and_grad`` function computed for the update that follows in the
    same trace (it becomes part of that step's state or callback: no callback of its own)."""
    import jax.numpy as jnp

    if has_aux or isinstance(value, tuple | list):
        while isinstance(value, tuple | list) and value:
            value = value[0]
    if getattr(value, "shape", None) != () or not jnp.issubdtype(value.dtype, jnp.floating):
        return  # not a loss
    _watch.pending_loss.value = value


_said: set[str] = set()


def _cannot_watch(what: str) -> None:
    if what not in _said:
        _said.add(what)
        logger.warning(
            "tensortap cannot watch %s (under vmap or pmap?); it runs unwatched",
            what,
            exc_info=True,
        )
