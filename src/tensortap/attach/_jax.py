"""Zero code change for JAX: an Optax training loop is watched in a script that never imports
tensortap (plain JAX, Flax Linen's ``TrainState``, Flax NNX's ``nnx.Optimizer``).

:func:`enable` (called by ``python -m tensortap.attach``, and so by the job runner) waits for
the script to import JAX and Optax, then:

- every Optax ``GradientTransformation`` made from then on has its ``update`` watched: each
  call of the outermost one (a chain's, not its parts') is one TRAIN step, and the gradients
  it is given are saved as ``gradient/<name>`` (``gradients``);
- ``optax.apply_updates(params, updates)`` saves the parameters after the update as ``<name>``
  (``weights``; ``biases`` for a name ending in ``bias``) and, at the first step that saves
  them, the parameters before it as ``initial/<name>`` (``initial_weights``);
- a function made by ``jax.value_and_grad`` (``nnx.value_and_grad`` calls it) sends the value
  it computes, when it is a scalar (the loss), to be saved as ``loss`` (``losses``) in the step
  of the update that follows.

A name is the leaf's path in the parameters' tree (``params/Dense_0/kernel``, ``l1/kernel``),
the same for a parameter and its gradient. Inside ``jit`` the values reach the host through
ordered host callbacks: one per step marks it and says which collections are due; arrays cross
only on due steps, raw, and the collections' statistics are computed on the host. The hook is
made at the first step from the JSON configuration. A script that makes its own
``tensortap.jax.Hook`` keeps it, and nothing is added to its steps. What cannot be watched (an
update under ``vmap`` or ``pmap``) runs unwatched, and the attach runner says what it saw.
"""

from __future__ import annotations

import functools
import inspect
import logging
import sys
import threading
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

import numpy as np

from tensortap._hook_config import HookConfig
from tensortap._import_hooks import Attachment, when_imported
from tensortap.core._collections import CollectionKeys
from tensortap.core._modes import ModeKeys
from tensortap.exceptions import TrainingStopped
from tensortap.jax._config import notes as config_notes
from tensortap.jax._config import patch_optax as patch_config

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


def stop_in_callback() -> TrainingStopped | None:
    """The stop request that ended training from inside a compiled step, if one did."""
    return _stopped


class _Watch:
    """The host side: the hook, the step, the loss waiting for its step."""

    def __init__(self) -> None:
        self.hook: Any = None
        self.loss: float | None = None
        self.started = False  # the first step began (on the host)
        self.steps_marked = False  # an update was watched (traced or run), so steps are marked
        self.lock = threading.Lock()
        self.in_update = threading.local()  # an outermost update is being traced or run

    def watching(self) -> bool:
        """False when the script made its own JAX hook: it keeps its steps as it saves them."""
        existing = _attachment.existing()
        return existing is None or existing is self.hook

    def _hook(self) -> Any:
        if self.hook is None:
            self.hook = _attachment.hook()
            config_notes.attach(self.hook)  # the run's configuration seen before it
        return self.hook

    # -- called from compiled steps (each is contained: a failure never reaches training) --
    def on_loss(self, value: Any) -> None:
        self.loss = float(np.asarray(value))

    def begin_step(self) -> np.ndarray:
        """A new TRAIN step (an optimizer update); whether its gradients are due."""
        global _stopped
        due = 0
        try:
            hook = self._hook()
            with self.lock:
                if not self.started:
                    self.started = True
                    hook.set_mode(ModeKeys.TRAIN)
                else:
                    hook.next_step()
                if self.loss is not None:
                    hook.save_scalar("loss", self.loss, CollectionKeys.LOSSES)
                    self.loss = None
                due = int(hook.is_collection_due(CollectionKeys.GRADIENTS))
        except TrainingStopped as stop:
            _stopped = stop
            raise
        except Exception:
            logger.exception("tensortap could not begin a JAX step; training continues")
        return np.asarray([due], np.int32)

    def weights_due(self) -> np.ndarray:
        """Whether the parameters after the update are due, and those before it (once)."""
        try:
            hook = self._hook()
            due = hook.is_collection_due(CollectionKeys.WEIGHTS) or hook.is_collection_due(
                CollectionKeys.BIASES
            )
            initial = due and not hook._initial_done
            return np.asarray([int(due), int(initial)], np.int32)
        except Exception:
            logger.exception("tensortap could not save JAX weights; training continues")
            return np.zeros(2, np.int32)

    def save_gradients(self, names: Sequence[str], arrays: Sequence[Any]) -> None:
        items = [(n, a, (CollectionKeys.GRADIENTS,)) for n, a in zip(names, arrays, strict=True)]
        self._hook()._save_items(items)

    def save_weights(self, names: Sequence[str], arrays: Sequence[Any]) -> None:
        self._hook()._save_items(
            [(n, a, _parameter_collections(n)) for n, a in zip(names, arrays, strict=True)]
        )

    def save_initial(self, names: Sequence[str], arrays: Sequence[Any]) -> None:
        hook = self._hook()
        weights = [
            (n, a)
            for n, a in zip(names, arrays, strict=True)
            if _parameter_collections(n) == (CollectionKeys.WEIGHTS,)
        ]
        with hook._lock:
            hook._guard(hook._save_initial, weights)


_watch = _Watch()


def _parameter_collections(name: str) -> tuple[str, ...]:
    return (CollectionKeys.BIASES,) if name.endswith("bias") else (CollectionKeys.WEIGHTS,)


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


def _flags(host: Callable[[], np.ndarray], size: int) -> Any:
    """In the graph: ``host()``'s int32 flags (one ordered host callback)."""
    import jax
    import jax.numpy as jnp
    from jax.experimental import io_callback

    shape = jax.ShapeDtypeStruct((size,), jnp.int32)  # type: ignore[no-untyped-call]
    return io_callback(host, shape, ordered=True)


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
        return original_new(kind, init, _watched_update(update))

    cls.__new__ = new
    patch_config(optax)
    original_apply = optax.apply_updates
    watched_apply = _watched_apply(original_apply)
    for module in (optax, sys.modules.get("optax._src.update")):  # where it is looked up
        if getattr(module, "apply_updates", None) is original_apply:
            setattr(module, "apply_updates", watched_apply)  # noqa: B010 - modules bind it


def _watched_update(update: Any) -> Any:
    if not callable(update) or getattr(update, "_tensortap_watched", False):
        return update

    @functools.wraps(update)
    def watched(*args: Any, **kwargs: Any) -> Any:
        if getattr(_watch.in_update, "active", False) or not _watch.watching():
            return update(*args, **kwargs)  # a part of a watched chain, or the script's hook
        _watch.in_update.active = True
        try:
            try:
                grads = args[0] if args else kwargs.get("updates")
                flags = _flags(_watch.begin_step, 1)
                _send_when(flags[0], _prefixed(_watch.save_gradients), grads)
                _watch.steps_marked = True
            except Exception:
                _cannot_watch("this Optax update")
            return update(*args, **kwargs)
        finally:
            _watch.in_update.active = False

    watched._tensortap_watched = True  # type: ignore[attr-defined]
    return watched


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
    import jax.numpy as jnp

    if has_aux or isinstance(value, tuple | list):
        while isinstance(value, tuple | list) and value:
            value = value[0]
    if getattr(value, "shape", None) != () or not jnp.issubdtype(value.dtype, jnp.floating):
        return  # not a loss
    _call(_watch.on_loss, value)


_said: set[str] = set()


def _cannot_watch(what: str) -> None:
    if what not in _said:
        _said.add(what)
        logger.warning(
            "tensortap cannot watch %s (under vmap or pmap?); it runs unwatched",
            what,
            exc_info=True,
        )
