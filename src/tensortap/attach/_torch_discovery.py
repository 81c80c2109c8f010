"""Zero code change for PyTorch, once the script imported torch (see :mod:`._pytorch`): find
the models, losses, optimizers and scalers of a script that never imports tensortap.

:func:`attach` installs a global module forward pre-hook. The first time a module that no hook
knows is called from outside any known module:

- a loss module (``nn.modules.loss._Loss``) is registered with ``register_loss``;
- a module with parameters is registered as a model (its submodules become known);
- anything else is ignored from then on.

The hook itself is created then, from the JSON configuration, so that ``torch.distributed`` is
already initialised and each rank writes as its own worker. Optimizers are recorded when created
and registered with the model whose parameters they update; ``GradScaler.scale`` registers its
scaler. The loss on which ``.backward()`` is called is saved as ``loss`` when no loss module is
used (see :mod:`tensortap.pytorch._events`, whose wrappers are installed before the script
runs). The functional classification losses hand their inputs on so that the outcome they
compare is sampled (:mod:`tensortap.pytorch._outcome`). A failure here is logged and training
goes on.
"""

from __future__ import annotations

import functools
import logging
import weakref
from typing import Any

import torch
from torch import nn

from tensortap.hook._config import HookConfig
from tensortap.pytorch import _events as events
from tensortap.pytorch._hook import Hook, get_hook
from tensortap.pytorch._naming import is_loss_module

logger = logging.getLogger(__name__)

_state: _Discovery | None = None


class _Discovery:
    def __init__(self, config: HookConfig) -> None:
        self.config = config
        self.known: weakref.WeakSet[nn.Module] = weakref.WeakSet()
        self.optimizers: weakref.WeakSet[torch.optim.Optimizer] = weakref.WeakSet()
        self.failed = False

    def hook(self) -> Hook:
        hook = get_hook()
        if hook is None:
            hook = self.config.create_hook(Hook)
            logger.info("tensortap attached: writing to %s as %s", hook.out_dir, hook.worker)
        return hook

    def on_forward(self, module: nn.Module, args: Any) -> None:
        if torch.compiler.is_compiling():
            return  # inside a compiled model: its wrapper was met (and registered) outside
        if module in self.known or self.failed:
            return
        try:
            self._discover(module, args)
        except Exception:
            self.failed = True
            logger.exception("tensortap could not attach to %s; training continues", module)

    def _discover(self, module: nn.Module, args: Any) -> None:
        if is_loss_module(module):
            self.known.add(module)
            self.hook().register_loss(module)
            return
        if next(module.parameters(), None) is None:
            self.known.add(module)
            return
        for sub in module.modules():
            self.known.add(sub)
        hook = self.hook()
        if hook.watches(module):
            return  # registered already (a trainer callback did, say), with its own pre-hook
        hook.register_module(module)
        params = {id(p) for p in module.parameters()}
        for optimizer in list(self.optimizers):
            if any(id(p) in params for g in optimizer.param_groups for p in g["params"]):
                hook.register_optimizer(optimizer)
        hook.before_model_forward(module, args)  # its own pre-hook starts with the next call

    def on_optimizer_created(self, optimizer: torch.optim.Optimizer) -> None:
        self.optimizers.add(optimizer)

    def on_scale(self, scaler: Any) -> None:
        hook = get_hook()
        if hook is not None and hook.grad_scaler is not scaler:
            hook.register_grad_scaler(scaler)


def attach(config: HookConfig) -> None:
    """Attach to every model the process runs (once per process)."""
    global _state
    if _state is not None:
        return
    state = _state = _Discovery(config)
    nn.modules.module.register_module_forward_pre_hook(state.on_forward)

    original_init = torch.optim.Optimizer.__init__

    @functools.wraps(original_init)
    def init(self: torch.optim.Optimizer, *args: Any, **kwargs: Any) -> None:
        original_init(self, *args, **kwargs)
        state.on_optimizer_created(self)

    torch.optim.Optimizer.__init__ = init  # type: ignore[method-assign]

    scaler_cls = torch.amp.GradScaler
    original_scale = scaler_cls.scale

    @functools.wraps(original_scale)
    def scale(self: Any, outputs: Any) -> Any:
        state.on_scale(self)
        return original_scale(self, outputs)

    scaler_cls.scale = scale  # type: ignore[method-assign]
    events.install(classification_outcome=True)
