"""Zero code change for PyTorch: :func:`enable` (called by ``python -m tensortap.attach``) does
not import torch, which takes seconds and hundreds of megabytes that a JAX, Keras or XGBoost
script would pay for nothing: it waits for the script to import torch, then attaches
(:mod:`._torch_discovery`: models, losses, optimizers and scalers are found as they run)."""

from __future__ import annotations

from types import ModuleType

from tensortap.attach._import_hooks import when_imported_once
from tensortap.hook._config import HookConfig

_config: HookConfig | None = None


def enable(config: HookConfig) -> None:
    """Attach to every model the process runs, once the script imported torch (now, if it
    did); once per process."""
    global _config
    if _config is None:
        _config = config
    when_imported_once("torch", _attach)


def _attach(torch: ModuleType) -> None:
    from tensortap.attach._torch_discovery import attach

    assert _config is not None, "enable() first"
    attach(_config)
