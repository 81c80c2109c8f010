"""What a tap needs from its hook: :class:`TapHost`.

A tap is the code beside a framework hook that captures tensors for it where the framework
computes them: the Keras hook's activation taps, gradient capture and vital signs
(``keras/_activations.py``, ``_gradients.py``, ``_vitals.py``, ``_outcome.py``), the Optax
transformations of the JAX hook (``jax/_record.py``, ``_carried.py``) and the zero-code JAX
attachment (``attach/_jax.py``). A tap holds its hook as a ``TapHost`` (or a framework's
extension of it) and asks it for these members only, never for its private names, and never
imports the hook's module: the hook imports its taps, so imports point one way.

:class:`tensortap.hook._hook.Hook` implements it, so every framework hook does. The members are
public by name so that the taps may use them; they are internal, not for users.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Iterable
from contextlib import AbstractContextManager
from typing import Any, Protocol

from tensortap.core._handles import HookHandle
from tensortap.core._recorder import StepRecorder


class TapHost(Protocol):
    """The part of a hook its taps use (see the module docstring)."""

    @property
    def recorder(self) -> StepRecorder:
        """The hook's step recorder: its schedule (what is due), steps and collections."""
        ...

    @property
    def lock(self) -> threading.RLock:
        """The lock that every change to the hook's steps holds."""
        ...

    @property
    def closed(self) -> bool:
        """Whether the hook was closed (a tap then saves nothing)."""
        ...

    def save_lazy(self, name: str, collections: Iterable[str], value: Callable[..., Any]) -> None:
        """Save ``value()`` under ``name`` if one of ``collections`` is due at this step; on
        other steps ``value`` is never called (nothing is converted)."""
        ...

    def saving(self) -> AbstractContextManager[None]:
        """A block of saving work, measured by the save budget (a no-op without one)."""
        ...

    def contain(self, exc: BaseException, where: str) -> None:
        """Count a failure inside tensortap (``where``: what it was doing); log each distinct
        one once. Training goes on."""
        ...

    def guard(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)``, its failures contained (None then), except a user's bad tensor or
        configuration, which is raised."""
        ...

    def guard_event(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` for work a framework event triggered: every failure contained (None
        then), none raised."""
        ...

    def warn_once(self, key: str, message: str) -> None:
        """Log ``message`` as a warning, the first time ``key`` is given."""
        ...

    def replace(self, obj: Any, attribute: str, value: Any) -> HookHandle:
        """Set ``obj.<attribute>`` to ``value`` (a wrapped method of the user's object); the
        hook's ``close`` puts back what was there, unless something replaced it since."""
        ...

    def registered(self, key: Hashable, *undo: Callable[[], object]) -> HookHandle:
        """The handle of one registration (``key``: ``id()`` of the object registered), which
        ``undo`` takes away; the hook's ``close`` removes it."""
        ...
