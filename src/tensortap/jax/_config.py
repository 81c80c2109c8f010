"""What zero code change learns of a JAX run's configuration (``trial.config()``), where it is
visible on the host without touching a compiled step:

- the Optax optimizer the script makes first: ``optax.inject_hyperparams(optax.adam)(
  learning_rate=1e-3)`` or a plain ``optax.adam(1e-3)`` (the factories of Optax's ``alias``
  module), with the numbers, strings and flags it was given (a schedule by its name);
  ``learning_rate`` when it is a number;
- the batch size: the leading dimension of the first array after the parameters that a
  ``jax.value_and_grad`` function is first called with (known when it is traced: no cost).

Both are noted before the hook exists (it is made at the first step) and handed to it then
(:meth:`ConfigNotes.attach`); each costs one flag check after the first.
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Callable
from types import ModuleType
from typing import Any

logger = logging.getLogger(__name__)


def _plain(value: Any) -> Any:
    """A hyperparameter as configuration: numbers, strings and flags as they are, a schedule
    (a function) by its name; anything else (arrays, traced values) left out (None)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if callable(value):
        return f"schedule {getattr(value, '__name__', type(value).__name__)}"
    return None


class ConfigNotes:
    """The configuration seen so far, handed to the hook once it exists."""

    def __init__(self) -> None:
        self._found: dict[str, Any] = {}
        self._hook: Any = None
        self.optimizer_seen = False
        self.batch_seen = False

    def attach(self, hook: Any) -> None:
        """The hook was made: it gets what was noted, and what is noted later."""
        self._hook = hook
        if self._found:
            hook.gather_config(dict(self._found))

    def _note(self, found: dict[str, Any]) -> None:
        self._found.update(found)
        if self._hook is not None:
            self._hook.gather_config(found)

    def on_optimizer(self, name: str, hyperparams: dict[str, Any], injected: bool) -> None:
        """The first Optax optimizer made: its factory's name and hyperparameters."""
        self.optimizer_seen = True
        kept = {k: _plain(v) for k, v in hyperparams.items() if _plain(v) is not None}
        optimizer = {"class": f"optax.{name}", "hyperparams": kept, "injected": injected}
        found: dict[str, Any] = {"optimizer": optimizer}
        rate = kept.get("learning_rate")
        if isinstance(rate, (int, float)) and not isinstance(rate, bool):
            found["learning_rate"] = float(rate)
        self._note(found)

    def on_loss_call(self, args: tuple[Any, ...]) -> None:
        """A ``value_and_grad`` function's first call: the batch's leading dimension."""
        self.batch_seen = True
        import jax

        for leaf in jax.tree_util.tree_leaves(args[1:]):
            shape = getattr(leaf, "shape", None)
            if shape:  # a tracer's shape is known as it is traced
                self._note({"batch_size": int(shape[0])})
                return


notes = ConfigNotes()


def patch_optax(optax: ModuleType) -> None:
    """Note the first optimizer an Optax factory makes (``optax.adam``, ...,
    ``optax.inject_hyperparams``)."""
    from optax._src import alias

    for name in list(vars(alias)):
        factory = getattr(alias, name)
        if not inspect.isfunction(factory) or name.startswith("_"):
            continue
        exported = getattr(optax, name, None) is factory  # optax.adam, not a helper
        if exported and factory.__module__ == alias.__name__:
            setattr(optax, name, _noting(name, factory, injected=False))
    inject = getattr(optax, "inject_hyperparams", None)
    if callable(inject):
        setattr(optax, "inject_hyperparams", _noting_inject(inject))  # noqa: B010


def _noting(name: str, factory: Callable[..., Any], injected: bool) -> Callable[..., Any]:
    signature = inspect.signature(factory)

    @functools.wraps(factory)
    def made(*args: Any, **kwargs: Any) -> Any:
        if not notes.optimizer_seen:
            try:
                bound = signature.bind_partial(*args, **kwargs).arguments
                notes.on_optimizer(name, dict(bound), injected)
            except Exception:
                logger.debug("tensortap could not read the optimizer's settings", exc_info=True)
        return factory(*args, **kwargs)

    return made


def _noting_inject(inject: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(inject)
    def injected(inner_factory: Any, *args: Any, **kwargs: Any) -> Any:
        made = inject(inner_factory, *args, **kwargs)
        name = getattr(inner_factory, "__name__", "optimizer")
        try:
            signature = inspect.signature(inner_factory)
        except (TypeError, ValueError):
            return made

        @functools.wraps(made)
        def make(*a: Any, **k: Any) -> Any:
            if not notes.optimizer_seen:
                try:
                    notes.on_optimizer(name, dict(signature.bind_partial(*a, **k).arguments), True)
                except Exception:
                    logger.debug("tensortap could not read the injected hyperparameters")
            return made(*a, **k)

        return make

    return injected
