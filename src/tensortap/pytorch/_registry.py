"""What the PyTorch hook watches: registered models and losses, their names, their parameters.

Parameters are looked up again when a wrapper replaced them after registration:
``fully_shard`` (FSDP2) swaps each parameter for a new ``nn.Parameter`` holding a DTensor, so a
model registered before it was sharded would otherwise keep pointing at the old tensors. FSDP2
also swaps a sharded parameter for an unsharded one between its unshard and reshard (during
forward and backward); those transient tensors are never taken for the sharded ones.
"""

from __future__ import annotations

import weakref

from torch import nn

from tensortap.exceptions import InvalidConfigError
from tensortap.pytorch._naming import (
    ModuleNames,
    module_names,
    parameter_collections,
    parameter_names,
)
from tensortap.pytorch._sharded import dtensor_kind

Param = tuple[str, nn.Parameter, tuple[str, ...]]


def _unsharded(now: nn.Parameter | None, before: nn.Parameter | None) -> bool:
    """True when FSDP2 has swapped a sharded parameter for its transient unsharded form."""
    return bool(dtensor_kind(before)) if before is not None and now is not None else False


class Registry:
    """Names of watched modules and the ``(name, parameter, collections)`` of their parameters."""

    def __init__(self) -> None:
        self.names: weakref.WeakKeyDictionary[nn.Module, ModuleNames] = weakref.WeakKeyDictionary()
        self.params: list[Param] = []
        self.param_names: dict[int, str] = {}  # id(parameter) -> name
        self._prefixes: set[str] = set()
        self.compiled: set[int] = set()  # ids of the modules of models registered compiled
        self._models: list[tuple[nn.Module, str]] = []  # (unwrapped model, prefix)
        self._firsts: list[nn.Parameter | None] = []
        #: name -> collections, told when the parameter is first seen (zeros are a bias's
        #: start, not its later values) and kept when a wrapper replaces the parameter
        self._roles: dict[str, tuple[str, ...]] = {}

    @property
    def models(self) -> list[nn.Module]:
        """The registered models (unwrapped)."""
        return [core for core, _ in self._models]

    def add_model(self, core: nn.Module, name: str | None, compiled: bool = False) -> None:
        """Name ``core`` (an unwrapped model) and its submodules and parameters; ``compiled``
        when it was registered as ``torch.compile``'s wrapper (no per-module hooks inside)."""
        if core in self.names and not self.names[core].loss:
            raise InvalidConfigError(
                f"{type(core).__name__} is already watched as part of a registered model; "
                "register each top-level model once"
            )
        prefix = self._prefix_for(core, name)
        self.names.update(module_names(core, prefix))
        if compiled:
            self.compiled.update(id(m) for m in core.modules())
        self._models.append((core, prefix))
        self._firsts.append(None)
        self.refresh(force=True)

    def add_loss(self, module: nn.Module) -> bool:
        """Name a loss module; False when it is already known."""
        if module in self.names:
            return False
        path = self._unused(type(module).__name__)
        self._prefixes.add(path)
        self.names[module] = ModuleNames(path, None, True)
        # a loss made anew in each forward pass (Hugging Face models build their
        # CrossEntropyLoss per call) takes the name of the one it replaces once that one is
        # gone: one series, not CrossEntropyLoss_1 ... _800
        weakref.finalize(module, _free, weakref.ref(self), path)
        return True

    def remove_model(self, core: nn.Module) -> None:
        """Forget a model :meth:`add_model` named: its modules and parameters."""
        kept = [(m, p) for m, p in self._models if m is not core]
        if len(kept) == len(self._models):
            return
        prefix = next(p for m, p in self._models if m is core)
        self._prefixes.discard(prefix)
        for pname, _ in parameter_names(core, prefix):
            self._roles.pop(pname, None)
        self._models, self._firsts = kept, [None] * len(kept)
        for module in core.modules():
            names = self.names.get(module)
            if names is not None and not names.loss:
                del self.names[module]
            self.compiled.discard(id(module))
        self.refresh(force=True)

    def remove_loss(self, module: nn.Module) -> None:
        """Forget a loss module :meth:`add_loss` named."""
        names = self.names.get(module)
        if names is not None and names.loss:
            del self.names[module]
            self._prefixes.discard(names.path)

    def clear(self) -> None:
        """Forget every model and loss (a closed hook keeps none of them alive)."""
        for core in [m for m, _ in self._models]:
            self.remove_model(core)
        for module in [m for m, n in self.names.items() if n.loss]:
            self.remove_loss(module)

    def refresh(self, force: bool = False) -> bool:
        """Look the parameters up again if a model's parameters were replaced; True if so."""
        firsts = [next(iter(core.parameters()), None) for core, _ in self._models]
        if not force:
            if all(a is b for a, b in zip(firsts, self._firsts, strict=True)):
                return False
            if any(_unsharded(a, b) for a, b in zip(firsts, self._firsts, strict=True)):
                return False  # FSDP2 is between unshard and reshard: keep the sharded ones
        self._firsts = firsts
        self.params, self.param_names = [], {}
        for core, prefix in self._models:
            named = parameter_names(core, prefix)
            if any(n not in self._roles for n, _ in named):
                # told once, from the values registered (beside the module's other parameters)
                told = parameter_collections(named)
                self._roles.update((n, c) for n, c in told.items() if n not in self._roles)
            for pname, param in named:
                if id(param) not in self.param_names:
                    self.param_names[id(param)] = pname
                    self.params.append((pname, param, self._roles[pname]))
        return True

    def _prefix_for(self, core: nn.Module, name: str | None) -> str:
        if name is not None:
            if not isinstance(name, str) or not name or name in self._prefixes:
                raise InvalidConfigError(
                    f"name must be a new non-empty string, got {name!r} (used: {self._prefixes})"
                )
            prefix = name
        elif not self._models:
            prefix = ""
        else:
            prefix = self._unused(type(core).__name__)
        self._prefixes.add(prefix)
        return prefix

    def _unused(self, base: str) -> str:
        """``base``, or ``base_1``, ``base_2``, ... if taken by another model or loss."""
        name, n = base, 1
        while name in self._prefixes:
            name, n = f"{base}_{n}", n + 1
        return name


def _free(registry: weakref.ref[Registry], path: str) -> None:
    """A named loss was collected: its name is free unless a live module holds it."""
    owner = registry()
    if owner is None:
        return
    try:
        held = any(names.path == path for names in list(owner.names.values()))
    except RuntimeError:  # the dictionary changed under a collection: keep the name
        return
    if not held:
        owner._prefixes.discard(path)
