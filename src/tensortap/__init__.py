"""tensortap: debug machine-learning training while it runs.

Attach a hook to training, read what it saved with a trial (also while training runs).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tensortap import exceptions, modes
from tensortap.core._collections import Collection, CollectionKeys, CollectionManager
from tensortap.core._reduction_config import ReductionConfig
from tensortap.core._save_config import SaveConfig, SaveConfigMode
from tensortap.hook._config import HookConfig
from tensortap.hook._hook import Hook, HookStatus
from tensortap.trials import StepState, Tensor, Trial, create_trial
from tensortap.writer import WriterOptions

if TYPE_CHECKING:
    from tensortap import diagnosis

__version__ = "0.1.0"


def diagnose(target: object, rules: object = None) -> diagnosis.Diagnosis:
    """One verdict on a run (a trial, its location, a job or a job directory): ``healthy``,
    ``unknown``, ``failed`` (a job whose training did not finish), or its most likely root
    cause first (see :mod:`tensortap.diagnosis`)."""
    from tensortap.diagnosis import diagnose as _diagnose

    return _diagnose(target, rules)  # type: ignore[arg-type]


__all__ = [
    "Collection",
    "CollectionKeys",
    "CollectionManager",
    "Hook",
    "HookConfig",
    "HookStatus",
    "ReductionConfig",
    "SaveConfig",
    "SaveConfigMode",
    "StepState",
    "Tensor",
    "Trial",
    "WriterOptions",
    "__version__",
    "create_trial",
    "diagnose",
    "exceptions",
    "modes",
]
