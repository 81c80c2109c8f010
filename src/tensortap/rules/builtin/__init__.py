"""The built-in rules, one per module, by name.

A new built-in rule is its module: every public module of this package is imported here, and
each Rule subclass defined in one registers itself (:mod:`tensortap.rules._registry`).
``BUILTIN_RULES``, the names ``tensortap.rules`` exports and the ``rule_configs`` helpers are
read from the registry. (Modules whose name starts with ``_`` hold what rules share.)
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any

from tensortap.rules._registry import REGISTRY, is_builtin_module

for _module in sorted(m.name for m in pkgutil.iter_modules(__path__)):
    if is_builtin_module(f"{__name__}.{_module}"):
        importlib.import_module(f"{__name__}.{_module}")
del _module

#: Every registered rule by class name: the built-in rules, and those registered with
#: ``tensortap.rules.register_rule``. The registry itself, so always current.
BUILTIN_RULES = REGISTRY

globals().update(BUILTIN_RULES)

__all__ = ["BUILTIN_RULES", *sorted(BUILTIN_RULES)]


def __getattr__(name: str) -> Any:
    """A rule registered after this package was imported (and, to type checkers, the built-in
    rules, which are set here when the package is imported)."""
    cls = REGISTRY.get(name)
    if cls is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return cls
