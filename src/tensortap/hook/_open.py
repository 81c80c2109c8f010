"""The hooks open in this process: "the current hook" of each framework (the one made last, until
it is closed), which every framework's ``get_hook()`` reads
(:meth:`tensortap.hook._hook.Hook.current`), and the hooks closed at exit when the script did not
close them."""

from __future__ import annotations

import atexit
import threading
import weakref
from typing import Protocol


class OpenHook(Protocol):
    """What this registry, and a job's choice of where a hook writes, read of a hook."""

    worker: str
    out_dir: str

    @property
    def closed(self) -> bool: ...

    def close(self) -> object: ...


_open: weakref.WeakSet[OpenHook] = weakref.WeakSet()
_lock = threading.Lock()
#: "The current hook" of each framework (None: the framework-free hook's): the one made last in
#: this process, until it is closed. ``get_hook()`` of every framework reads it (Hook.current).
_current: dict[str | None, OpenHook] = {}
_hooks_made = 0


def any_hook_made() -> bool:
    """Whether a hook was made in this process (``python -m tensortap.attach`` says so when
    none was: nothing of the training was saved)."""
    return _hooks_made > 0


def hook_opened(hook: OpenHook, framework: str | None) -> None:
    """``hook`` was made: it is ``framework``'s current hook, closed at exit if still open."""
    global _hooks_made
    with _lock:
        _open.add(hook)
        _current[framework] = hook
        _hooks_made += 1


def hook_closed(hook: OpenHook, framework: str | None) -> None:
    """``hook`` was closed: it is no longer open, nor ``framework``'s current hook."""
    with _lock:
        _open.discard(hook)
        if _current.get(framework) is hook:
            del _current[framework]


def current_hook(framework: str | None) -> OpenHook | None:
    """``framework``'s current hook (None: there is none open)."""
    with _lock:
        return _current.get(framework)


def open_hooks() -> list[OpenHook]:
    """The hooks open now."""
    with _lock:
        return list(_open)


@atexit.register
def _close_open_hooks() -> None:
    for hook in open_hooks():
        hook.close()
