"""What the PyTorch hook learns of the run's configuration without code (``trial.config()``):
the models' class and size, the optimizers' classes and parameter groups, the learning-rate
schedulers, the first training batch's size and torch's seed.

:class:`ConfigWatch` is told of the hook's events (a model registered, a forward, an optimizer's
step, a scheduler's step) and hands what it finds once to ``gather`` (the base hook's
``gather_config``); after that each event costs one lookup."""

from __future__ import annotations

import weakref
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn

#: Param-group entries left out of the configuration (the tensors themselves).
_SKIPPED_GROUP_KEYS = frozenset({"params", "param_names"})
#: Modules that only reshape what they are given: the input's first layer is the one after them.
_RESHAPES = (nn.Flatten, nn.Unflatten, nn.Identity)


def class_name(obj: object) -> str:
    cls = type(obj)
    return f"{cls.__module__}.{cls.__qualname__}"


def model_config(module: nn.Module) -> dict[str, Any]:
    """``{"class", "parameters", "trainable_parameters"}`` of a model."""
    params = list(module.parameters())
    found: dict[str, Any] = {
        "class": class_name(module),
        "parameters": sum(p.numel() for p in params),
        "trainable_parameters": sum(p.numel() for p in params if p.requires_grad),
    }
    # the first leaf module in registration order that changes values: what the input meets
    # first in a Sequential (a BatchNorm there normalises it; the rules judge after it), past
    # layers that only reshape it (Flatten)
    first = next(
        (
            m
            for m in module.modules()
            if not any(True for _ in m.children()) and not isinstance(m, _RESHAPES)
        ),
        None,
    )
    if first is not None and first is not module:
        found["first_layer"] = class_name(first)
    return found


def optimizer_config(optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """``{"class", "param_groups": [...]}``: each group's hyperparameters (lr, weight_decay,
    betas, momentum, ...) and how many numbers it updates."""
    groups = []
    for group in optimizer.param_groups:
        entry = {k: v for k, v in group.items() if k not in _SKIPPED_GROUP_KEYS}
        entry["parameters"] = sum(p.numel() for p in group.get("params", []))
        groups.append(entry)
    return {"class": class_name(optimizer), "param_groups": groups}


def base_learning_rate(optimizer: torch.optim.Optimizer) -> float | None:
    """The first parameter group's configured learning rate: a scheduler's ``initial_lr``
    where one set it (the rate before warm-up or decay), else ``lr``."""
    groups = optimizer.param_groups
    if not groups:
        return None
    value: Any = groups[0].get("initial_lr", groups[0].get("lr"))
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def scheduler_config(scheduler: Any) -> dict[str, Any]:
    """A learning-rate scheduler's class and settings (its public attributes that are numbers,
    strings or short lists: ``step_size``, ``gamma``, ``T_max``, ``base_lrs``, ...)."""
    found: dict[str, Any] = {"class": class_name(scheduler)}
    for key, value in vars(scheduler).items():
        if key.startswith("_") or key in ("optimizer", "last_epoch", "_last_lr"):
            continue
        if isinstance(value, (bool, int, float, str)) or (
            isinstance(value, (list, tuple))
            and len(value) <= 64
            and all(isinstance(v, (bool, int, float, str)) for v in value)
        ):
            found[key] = value
    return found


def first_batch_size(args: Any) -> int | None:
    """The size of the first dimension of the first tensor a model was called with (looking
    into tuples, lists and dicts: a Hugging Face model's ``input_ids``)."""
    stack: list[Any] = [args]
    while stack:
        item = stack.pop(0)
        if isinstance(item, torch.Tensor):
            return int(item.shape[0]) if item.dim() > 0 else None
        if isinstance(item, (list, tuple)):
            stack.extend(item)
        elif isinstance(item, Mapping):
            stack.extend(item.values())
    return None


def _nothing() -> None:
    return None


class ConfigWatch:
    """Hands the configuration it sees to ``gather``, each part once."""

    def __init__(self, gather: Callable[[Mapping[str, Any]], None]) -> None:
        self._gather = gather
        self._models: list[dict[str, Any]] = []
        self._optimizers: weakref.WeakKeyDictionary[torch.optim.Optimizer, int] = (
            weakref.WeakKeyDictionary()
        )
        self._optimizer_configs: list[dict[str, Any]] = []
        self._schedulers: weakref.WeakKeyDictionary[Any, bool] = weakref.WeakKeyDictionary()
        self._scheduler_configs: list[dict[str, Any]] = []
        self.batch_seen = False
        # the optimizer and scheduler that stepped last (weakly: nothing kept alive), seen
        # already: the per-step check
        self._last_optimizer: Callable[[], Any] = _nothing
        self._last_scheduler: Callable[[], Any] = _nothing

    def on_model(self, module: nn.Module) -> None:
        """A model was registered: its class and size (the first is ``model``; ``models``
        lists them all when there are several), and torch's seed."""
        self._models.append(model_config(module))
        found: dict[str, Any] = {"model": self._models[0], "seeds": {"torch": torch.initial_seed()}}
        if len(self._models) > 1:
            found["models"] = self._models
        self._gather(found)

    def on_train_forward(self, args: Any) -> None:
        """A training forward of a model: the first one's batch size."""
        self.batch_seen = True
        size = first_batch_size(args)
        if size is not None:
            self._gather({"batch_size": size})

    def seen_last(self, optimizer: Any = None, scheduler: Any = None) -> bool:
        """Whether this is the optimizer (or scheduler) that stepped last: nothing to do."""
        if optimizer is not None:
            return self._last_optimizer() is optimizer
        return self._last_scheduler() is scheduler

    def on_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        """A watched optimizer stepped: its parameter groups as of its first step (after a
        scheduler's warm-up set the first rate)."""
        self._last_optimizer = weakref.ref(optimizer)
        if optimizer in self._optimizers:
            return
        self._optimizers[optimizer] = len(self._optimizer_configs)
        self._optimizer_configs.append(optimizer_config(optimizer))
        found: dict[str, Any] = {"optimizer": self._optimizer_configs[0]}
        if len(self._optimizer_configs) > 1:
            found["optimizers"] = self._optimizer_configs
        else:
            found["learning_rate"] = base_learning_rate(optimizer)
        self._gather(found)

    def on_scheduler_step(self, scheduler: Any) -> None:
        """A learning-rate scheduler stepped: its settings, the first time."""
        self._last_scheduler = weakref.ref(scheduler)
        if scheduler in self._schedulers:
            return
        self._schedulers[scheduler] = True
        self._scheduler_configs.append(scheduler_config(scheduler))
        self._gather({"schedulers": self._scheduler_configs})
