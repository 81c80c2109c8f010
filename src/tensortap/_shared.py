"""The names every framework face exports (``tensortap.pytorch``, ``.keras``, ``.mxnet``,
``.xgboost``, ``.tensorflow``: see :mod:`tensortap._faces`), as smdebug's faces did."""

from tensortap import exceptions, modes
from tensortap.core._collections import Collection, CollectionKeys
from tensortap.core._reduction_config import ReductionConfig
from tensortap.core._save_config import SaveConfig, SaveConfigMode
from tensortap.hook._config import HookConfig
from tensortap.trials import Trial, create_trial
from tensortap.writer import WriterOptions

__all__ = [
    "Collection",
    "CollectionKeys",
    "HookConfig",
    "ReductionConfig",
    "SaveConfig",
    "SaveConfigMode",
    "Trial",
    "WriterOptions",
    "create_trial",
    "exceptions",
    "modes",
]
