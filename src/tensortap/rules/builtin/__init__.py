"""The built-in rules, one per module, by name.

A new built-in rule is its module: every public module of this package is imported here, and
each Rule subclass defined in one registers itself (:mod:`tensortap.rules._registry`).
``BUILTIN_RULES`` holds these only (a rule registered elsewhere, or installed, is in the
registry, ``tensortap.rules.known_rules()``, not here). (Modules whose name starts with ``_``
hold what rules share.)
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any

from tensortap.rules._registry import BUILTIN, is_builtin_module

for _module in sorted(m.name for m in pkgutil.iter_modules(__path__)):
    if is_builtin_module(f"{__name__}.{_module}"):
        importlib.import_module(f"{__name__}.{_module}")
del _module

#: tensortap's own rules by class name (the registry's table of them, so always current).
BUILTIN_RULES = BUILTIN

globals().update(BUILTIN_RULES)

__all__ = ["BUILTIN_RULES", *sorted(BUILTIN_RULES)]


def __getattr__(name: str) -> Any:
    """A built-in rule (set here when the package is imported; to type checkers, found here)."""
    cls = BUILTIN.get(name)
    if cls is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return cls
