"""The public face of every framework adapter, built from one list.

``tensortap.pytorch``, ``tensortap.keras`` (and smdebug's ``tensortap.tensorflow``),
``tensortap.mxnet`` and ``tensortap.xgboost`` export the names every adapter shares
(:mod:`tensortap._shared`) and their own (:data:`FACES`). Every name loads at first use
(PEP 562 ``__getattr__``): importing a face imports no framework, so zero-code-change support,
which every attached script imports, costs nothing to scripts that never use that framework.
``tensortap.jax``, ``tensortap.lightning`` and ``tensortap.huggingface`` export their own names
only (:data:`OWN_FACES`), loaded the same way. Each face's ``__init__`` is one line:
``__all__, __getattr__, __dir__ = face(__name__)``.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable, Collection, Mapping
from types import ModuleType
from typing import Any

#: Each face's own names, and where each is defined (``module`` or ``module:attribute``).
FACES: dict[str, dict[str, str]] = {
    "tensortap.pytorch": {
        "Hook": "tensortap.pytorch._hook",
        "get_hook": "tensortap.pytorch._hook",
        "Guard": "tensortap.pytorch._guard",
        "GuardEvent": "tensortap.pytorch._guard",
        "GuardRecord": "tensortap.pytorch._guard",
        "GuardStatus": "tensortap.pytorch._guard",
        "Attribution": "tensortap.pytorch._replay_attribution",
        "Replayer": "tensortap.pytorch._replay",
        "ReplayStatus": "tensortap.pytorch._replay",
        "RollbackTarget": "tensortap.core._rollback_target",
        "SkipBudget": "tensortap.healing._budget",
        "Rollback": "tensortap.healing._rollback",
        "RollbackEvent": "tensortap.healing._rollback",
        "Remedies": "tensortap.pytorch._remedies",
        "SkipBatches": "tensortap.healing._skip_batches",
        "FunctionCheckpoints": "tensortap.healing._checkpoints",
        "MemoryCheckpoints": "tensortap.healing._checkpoints",
        "DistributedCheckpoints": "tensortap.pytorch._checkpoints",
        "CheckpointGuard": "tensortap.pytorch._checkpoint_guard",
        "CheckpointEvent": "tensortap.pytorch._checkpoint_guard",
        "GuardedCheckpoints": "tensortap.pytorch._checkpoint_guard",
        "SpikeWatch": "tensortap.pytorch._spike_watch",
        "SpikeWarning": "tensortap.core._spike_forecast",
        "SpikeForecast": "tensortap.core._spike_forecast",
        "ForecastConfig": "tensortap.core._spike_forecast",
        "OPTIMIZER_VARIABLES": "tensortap.pytorch._naming",
        "RELU_ACTIVATIONS": "tensortap.pytorch._naming",
    },
    "tensortap.keras": {
        "Hook": "tensortap.keras._hook:KerasHook",  # the name the other faces use
        "KerasHook": "tensortap.keras._hook",
        "get_hook": "tensortap.keras._hook",
        "OPTIMIZER_VARIABLES": "tensortap.keras._hook",
        "Guard": "tensortap.keras._guard",
        "GuardEvent": "tensortap.healing._events",
        "SkipBudget": "tensortap.healing._budget",
        "RollbackCallback": "tensortap.keras._rollback",
        "Rollback": "tensortap.healing._rollback",
        "RollbackEvent": "tensortap.healing._rollback",
        "SkipBatches": "tensortap.healing._skip_batches",
        "FunctionCheckpoints": "tensortap.healing._checkpoints",
    },
    "tensortap.mxnet": {
        "Hook": "tensortap.mxnet._hook",
        "get_hook": "tensortap.mxnet._hook",
        "RELU_ACTIVATIONS": "tensortap.mxnet._hook",
    },
    "tensortap.xgboost": {
        "Hook": "tensortap.xgboost._hook",
        "get_hook": "tensortap.xgboost._hook",
        "tree_table": "tensortap.xgboost._booster",
    },
}
FACES["tensortap.tensorflow"] = FACES["tensortap.keras"]  # smdebug's spelling of the same
#: Faces that export their own names only (and, for Lightning, None for a package that is not
#: installed): the same lazy loading.
OWN_FACES: dict[str, dict[str, str]] = {
    "tensortap.jax": {
        "Hook": "tensortap.jax._hook",
        "ReductionConfig": "tensortap._shared",
        "SaveConfig": "tensortap._shared",
        "create_trial": "tensortap._shared",
        "get_hook": "tensortap.jax._hook",
        "Guard": "tensortap.jax._guard",
        "GuardState": "tensortap.jax._guard",
        "GuardEvent": "tensortap.healing._events",
        "SkipBudget": "tensortap.healing._budget",
        "Rollback": "tensortap.healing._rollback",
        "RollbackEvent": "tensortap.healing._rollback",
        "SkipBatches": "tensortap.healing._skip_batches",
        "FunctionCheckpoints": "tensortap.healing._checkpoints",
        "modes": "tensortap._shared",
        "path_name": "tensortap.jax._names",
        "record": "tensortap.jax._record",
    },
    "tensortap.lightning": {
        "CallbackMixin": "tensortap.lightning._callback",
        "PLTensortapCallback": "tensortap.lightning._pl_callback",
        "TensortapCallback": "tensortap.lightning._lightning_callback",
        "LightningCheckpoints": "tensortap.lightning._rollback",
        "RollbackCallback": "tensortap.lightning._lightning_callback",
        "PLRollbackCallback": "tensortap.lightning._pl_callback",
        "fit_with_rollback": "tensortap.lightning._rollback",
        "GuardedModelCheckpoint": "tensortap.lightning._checkpoint_guard",
        "last_good_checkpoint": "tensortap.lightning._checkpoint_guard",
        "verify_checkpoint": "tensortap.lightning._checkpoint_guard",
    },
    "tensortap.huggingface": {
        "TensortapCallback": "tensortap.huggingface._callback",
        "BatchStream": "tensortap.huggingface._rollback",
        "HuggingFaceCheckpoints": "tensortap.huggingface._rollback",
        "RollbackCallback": "tensortap.huggingface._rollback",
        "train_with_rollback": "tensortap.huggingface._rollback",
        "CheckpointGuardCallback": "tensortap.huggingface._checkpoint_guard",
        "last_good_checkpoint": "tensortap.huggingface._checkpoint_guard",
        "verify_checkpoint": "tensortap.huggingface._checkpoint_guard",
    },
}
_OPTIONAL = {
    "tensortap.lightning": frozenset(
        {
            "PLTensortapCallback",
            "TensortapCallback",
            "LightningCheckpoints",
            "RollbackCallback",
            "PLRollbackCallback",
            "fit_with_rollback",
            "GuardedModelCheckpoint",
            "last_good_checkpoint",
            "verify_checkpoint",
        }
    )
}

SHARED_MODULE = "tensortap._shared"


Face = tuple[list[str], Callable[[str], Any], Callable[[], list[str]]]


def lazy_names(
    module_name: str, names: Mapping[str, str], *, optional: Collection[str] = ()
) -> Face:
    """``__all__``, ``__getattr__`` and ``__dir__`` of the module ``module_name``, whose
    ``names`` load at first use from where ``names`` says (``module`` or ``module:attribute``).
    A name in ``optional`` is None when its module cannot be imported (its package is not
    installed)."""

    def __getattr__(name: str) -> Any:
        where = names.get(name)
        if where is None:
            return _submodule(module_name, name)
        source, _, attribute = where.partition(":")
        try:
            value = getattr(importlib.import_module(source), attribute or name)
        except ModuleNotFoundError:  # a package not installed (not an import that failed)
            if name not in optional:
                raise
            value = None
        setattr(sys.modules[module_name], name, value)  # later lookups are plain attributes
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[module_name]), *names})

    return sorted(names), __getattr__, __dir__


def _submodule(package: str, name: str) -> ModuleType:
    """``package.name`` when it is a module of the package (as an attribute, the way an eager
    package's imported submodules were: ``tensortap.pytorch._hook``)."""
    try:
        if importlib.util.find_spec(f"{package}.{name}") is not None:
            return importlib.import_module(f"{package}.{name}")
    except ImportError:
        pass
    raise AttributeError(f"module {package!r} has no attribute {name!r}")


def face(module_name: str) -> Face:
    """``__all__``, ``__getattr__`` and ``__dir__`` of the face ``module_name``: for a framework
    face the shared names and its own (:data:`FACES`), else its own (:data:`OWN_FACES`)."""
    if module_name not in FACES:
        return lazy_names(
            module_name, OWN_FACES[module_name], optional=_OPTIONAL.get(module_name, ())
        )
    shared = importlib.import_module(SHARED_MODULE)
    names = {name: SHARED_MODULE for name in shared.__all__}
    return lazy_names(module_name, {**names, **FACES[module_name]})
