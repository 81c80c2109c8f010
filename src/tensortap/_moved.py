"""Old module paths keep working.

Implementation modules are private by name (``tensortap/trials/_trial.py``); each package's
``__init__`` is its API. Code written against an old path (``from tensortap.trials.trial import
Trial``), and job records that name a rule's module, still import: the old name is bound to the
very module that lives at the new path (one module object, so ``isinstance`` and patches agree),
with a ``DeprecationWarning`` that names the package to import from instead.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from types import ModuleType

from tensortap._moved_table import MOVED


class _Alias(importlib.abc.Loader):
    def __init__(self, new: str) -> None:
        self.new = new
        self.spec: importlib.machinery.ModuleSpec | None = None  # the module's own

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        package = spec.name.rpartition(".")[0]
        warnings.warn(
            f"{spec.name} is an old path of {self.new}, a private module; import from "
            f"{package} (its API) instead",
            DeprecationWarning,
            stacklevel=2,
        )
        module = importlib.import_module(self.new)
        self.spec = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run: the module ran under its own name. The import system has just set
        its ``__spec__`` to the old name's (with this loader): give it back its own, or
        ``importlib.reload`` would find this alias again and silently run nothing."""
        if self.spec is not None:
            module.__spec__ = self.spec


class _MovedFinder(importlib.abc.MetaPathFinder):
    def find_spec(
        self, fullname: str, path: object = None, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        new = MOVED.get(fullname)
        if new is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, _Alias(new))


def install() -> None:
    """Put the finder on ``sys.meta_path`` once (after the path finder: a real module of an old
    name, if one is ever added again, wins)."""
    if not any(isinstance(f, _MovedFinder) for f in sys.meta_path):
        sys.meta_path.append(_MovedFinder())
