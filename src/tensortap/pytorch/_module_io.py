"""Per-module forward hooks that save module inputs and outputs, present only during steps
where a collection that can hold them is due (on other steps a forward pass pays nothing per
module), and never inside a model registered as ``torch.compile``'s wrapper."""

from __future__ import annotations

import logging
from collections.abc import Callable, Set
from functools import partial
from typing import Any

from torch import nn
from torch.utils.hooks import RemovableHandle

from tensortap.pytorch._due import DueKinds, Kind
from tensortap.pytorch._naming import ModuleNames
from tensortap.pytorch._registry import Registry

logger = logging.getLogger(__name__)
OnForward = Callable[[ModuleNames, nn.Module, Any, Any], None]


class ModuleIOHooks:
    """Installs and removes the per-module forward hooks as steps begin."""

    def __init__(
        self,
        due: DueKinds,
        registry: Registry,
        on_forward: OnForward,
        in_graph: Set[int] = frozenset(),
    ) -> None:
        self._due = due
        self._in_graph = in_graph  # ids of compiled modules whose statistics a graph computes
        self._registry = registry
        self._on_forward = on_forward
        self._handles: list[RemovableHandle] = []
        self._warned = False

    def update(self) -> None:
        """At a forward pass's start: hooks present exactly when module I/O can be saved."""
        if self._due(Kind.MODULE_IO):
            if not self._handles:
                self._install()
        elif self._handles:
            self.remove()

    def _install(self) -> None:
        compiled = self._registry.compiled
        skipped = False
        for module, names in list(self._registry.names.items()):
            if names.loss or id(module) in compiled:
                skipped = skipped or not (names.loss or id(module) in self._in_graph)
                continue
            self._handles.append(module.register_forward_hook(partial(self._on_forward, names)))
        if skipped and not self._warned:
            self._warned = True
            logger.warning(
                "tensortap: module inputs and outputs of a torch.compile'd model are not saved "
                "(hooks on its layers would break its graphs); weights, gradients and losses are"
            )

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []
