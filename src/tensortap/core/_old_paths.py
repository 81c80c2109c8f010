"""The few old module paths kept for imports the documentation once showed.

Each is a small stub module (``tensortap/s3.py``, ...) that re-exports the names it was
documented with and, when imported, warns (``DeprecationWarning``) with the import to use
instead and the release it goes away in. There is no import-system finder: a path that was
never documented is simply gone (``ModuleNotFoundError``), type checkers see the stubs, and
``importlib.reload`` of any tensortap module reloads it.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping

#: The release in which the stub modules (the old paths) are removed.
REMOVED_IN = "0.3.0"


def warn_old_path(old: str, imports: Mapping[str, str]) -> None:
    """Warn that module ``old`` is an old path: ``imports`` maps each name it re-exports to
    the module to import it from. Called from the stub's body, so the warning points at the
    import statement that named the old path."""
    by_module: dict[str, list[str]] = {}
    for name, module in imports.items():
        by_module.setdefault(module, []).append(name)
    advice = "; ".join(f"from {m} import {', '.join(names)}" for m, names in by_module.items())
    warnings.warn(
        f"{old} is an old path of tensortap, removed in tensortap {REMOVED_IN}: use {advice}",
        DeprecationWarning,
        stacklevel=3,
    )


__all__ = ["REMOVED_IN", "warn_old_path"]
