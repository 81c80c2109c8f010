"""Run a function when a module is first imported: how zero-code-change support attaches to a
framework the script imports later (importing Keras or XGBoost ourselves would cost seconds for
scripts that never use them); and :class:`Attachment`, what each framework's attachment holds."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import logging
import sys
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tensortap.hook._hook import Hook

logger = logging.getLogger(__name__)


def when_imported(name: str, callback: Callable[[ModuleType], None]) -> None:
    """Call ``callback(module)`` once top-level module ``name`` is imported (now, if it is)."""
    if name in sys.modules:
        _run(name, callback, sys.modules[name])
        return
    sys.meta_path.insert(0, _Finder(name, callback))


_registered: set[tuple[str, Callable[[ModuleType], None]]] = set()


def when_imported_once(name: str, callback: Callable[[ModuleType], None]) -> None:
    """:func:`when_imported`, for the first call with this ``name`` and ``callback`` only (an
    attachment enabled twice patches once)."""
    if (name, callback) not in _registered:
        _registered.add((name, callback))
        when_imported(name, callback)


def _run(name: str, callback: Callable[[ModuleType], None], module: ModuleType) -> None:
    try:
        callback(module)
    except Exception:
        logger.exception("tensortap could not attach to %s; training continues", name)


class _Finder(importlib.abc.MetaPathFinder):
    """Lets ``import <name>`` happen as usual, then calls back with the module.

    It stays on ``sys.meta_path`` until the module has run: TensorFlow probes for Keras with
    ``importlib.util.find_spec("keras")`` a dozen times while it imports, and each probe gets a
    spec that is never loaded; only the import that runs the module calls back."""

    def __init__(self, name: str, callback: Callable[[ModuleType], None]) -> None:
        self.name, self.callback = name, callback
        self._finding = False  # inside our own find_spec: let the real finders answer

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != self.name or self._finding:
            return None
        self._finding = True
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            self._finding = False
        if spec is None or spec.loader is None:
            return None
        loader = spec.loader
        original = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            original(module)
            if self in sys.meta_path:  # once: later imports find the module in sys.modules
                sys.meta_path.remove(self)
                _run(fullname, self.callback, module)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


class Attachment:
    """One framework's zero-code-change attachment: the configuration it was enabled with, the
    hook made from it at first use (unless the script made its own: the framework's current
    hook, :meth:`tensortap.hook._hook.Hook.current`), and the patch applied once when the framework
    is imported. ``hook_class`` is ``"module:Class"``, imported at first use."""

    def __init__(self, module: str, framework: str, hook_class: str) -> None:
        self.module, self.framework = module, framework
        self._hook_class = hook_class
        self.config: Any = None
        self._patched = False

    def enable(self, config: Any, patch: Callable[[ModuleType], None]) -> None:
        self.config = config

        def once(module: ModuleType) -> None:
            if not self._patched:
                self._patched = True
                patch(module)

        when_imported(self.module, once)

    def hook_class(self) -> type[Hook]:
        module, _, name = self._hook_class.partition(":")
        cls: type[Hook] = getattr(importlib.import_module(module), name)
        return cls

    def existing(self) -> Hook | None:
        """The open hook of this framework the script (or an earlier call) made, if any."""
        return self.hook_class().current()

    def hook(self) -> Any:
        hook = self.existing()
        if hook is None:
            assert self.config is not None, "enable() first"
            hook = self.config.create_hook(self.hook_class())
            logger.info("tensortap attached to %s: writing to %s", self.framework, hook.out_dir)
        return hook
