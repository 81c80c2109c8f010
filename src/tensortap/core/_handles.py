"""What a registration with a hook installed, as one handle that takes it away again.

A framework hook's ``register_*`` methods install callbacks on the user's objects (torch's
forward hooks on a model, Gluon's on a block, a wrapped ``GradScaler.update``). Each returns a
:class:`HookHandle`; ``handle.remove()`` undoes that registration, and the hook's ``close()``
removes every handle it returned, so a closed hook leaves nothing registered on the model and
keeps nothing of it alive (as torch's and Ignite's removable handles do).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable


class HookHandle:
    """Removes what one registration installed; safe to call :meth:`remove` twice.

    Also a context manager: ``with hook.register_module(model): ...`` watches ``model`` for
    the block only."""

    def __init__(self, undo: Iterable[Callable[[], object]]) -> None:
        self._undo = list(undo)
        self._removed = False

    @property
    def removed(self) -> bool:
        """Whether :meth:`remove` ran (the registration is gone)."""
        return self._removed

    def remove(self) -> None:
        """Undo the registration: every callback it installed is removed, in reverse order."""
        undo, self._undo, self._removed = self._undo, [], True
        for step in reversed(undo):
            step()

    def __enter__(self) -> HookHandle:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.remove()
