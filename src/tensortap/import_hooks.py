"""Run a function when a module is first imported: how zero-code-change support attaches to a
framework the script imports later (importing Keras or XGBoost ourselves would cost seconds for
scripts that never use them)."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import logging
import sys
from collections.abc import Callable, Sequence
from types import ModuleType

logger = logging.getLogger(__name__)


def when_imported(name: str, callback: Callable[[ModuleType], None]) -> None:
    """Call ``callback(module)`` once top-level module ``name`` is imported (now, if it is)."""
    if name in sys.modules:
        _run(name, callback, sys.modules[name])
        return
    sys.meta_path.insert(0, _Finder(name, callback))


def _run(name: str, callback: Callable[[ModuleType], None], module: ModuleType) -> None:
    try:
        callback(module)
    except Exception:
        logger.exception("tensortap could not attach to %s; training continues", name)


class _Finder(importlib.abc.MetaPathFinder):
    """Lets ``import <name>`` happen as usual, then calls back with the module."""

    def __init__(self, name: str, callback: Callable[[ModuleType], None]) -> None:
        self.name, self.callback = name, callback

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)  # once: the real finders locate the module
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return None
        loader = spec.loader
        original = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            original(module)
            _run(fullname, self.callback, module)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec
