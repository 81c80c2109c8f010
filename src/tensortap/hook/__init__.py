"""The framework-free hook and what every framework's hook is built on: for custom training
loops and NumPy/JAX users (``tensortap.Hook``), its JSON configuration (``HookConfig``, what
zero code change and jobs write), the options every hook takes, the run's configuration it
records, which hooks are open in this process, and the numbering of a session's steps.

Each framework's hook (``tensortap.pytorch``, ``.keras``, ``.xgboost``, ``.mxnet``, ``.jax``)
extends :class:`Hook`; its modules are private, and this face is what the package promises.
"""

from tensortap.hook._config import CONFIG_ENV, JOB_ENV, HookConfig, read_config
from tensortap.hook._hook import Hook, HookStatus
from tensortap.hook._options import DEFAULT_INCLUDE_COLLECTIONS, HookOptions, OutDir

__all__ = [
    "CONFIG_ENV",
    "DEFAULT_INCLUDE_COLLECTIONS",
    "JOB_ENV",
    "Hook",
    "HookConfig",
    "HookOptions",
    "HookStatus",
    "OutDir",
    "read_config",
]
