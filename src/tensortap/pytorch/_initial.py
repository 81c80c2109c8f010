"""The weights before the first update: a snapshot the update-ratio rules judge the first
update by.

Weights are saved after each step's update, so the first saved step already holds updated
weights and nothing shows how far that first update moved them (smdebug saved parameters
before the update, in a forward pre-hook). At the first step whose ``weights`` are due, the
hook also saves every trained weight as it is *before* that step's update, as
``initial/<name>`` in the ``initial_weights`` collection, once; at a new stage of training
(a trainer's fit of another model: ``core._stages``), the weights not snapshotted before.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch
from torch import nn

from tensortap.core._collections import INITIAL_PREFIX, INITIAL_WEIGHTS, CollectionKeys
from tensortap.core._recorder import StepRecorder


class InitialWeights:
    """Saves the snapshot once, and at a new stage of training the weights of models not
    snapshotted yet (see the module docstring)."""

    def __init__(self, recorder: StepRecorder) -> None:
        self.recorder = recorder
        self.due = CollectionKeys.WEIGHTS in recorder.include_collections
        self._names: set[str] = set()  # the weights snapshotted
        if self.due:
            recorder.include_collection(INITIAL_WEIGHTS)

    def again(self) -> None:
        """A new stage of training (a fit of another model) begins: the weights not
        snapshotted yet (the new model's) are, at its first step that saves weights."""
        self.due = CollectionKeys.WEIGHTS in self.recorder.include_collections

    def before_update(
        self,
        params: Iterable[tuple[str, nn.Parameter, tuple[str, ...]]],
        save: Callable[[str, torch.Tensor, tuple[str, ...]], None],
    ) -> None:
        """Called as a training step's forward begins: save the snapshot if it is due."""
        if not self.due or not self.recorder.is_collection_due(CollectionKeys.WEIGHTS):
            return
        self.due = False
        for name, param, collections in params:
            if name in self._names or not param.requires_grad:
                continue
            if CollectionKeys.WEIGHTS in collections:
                self._names.add(name)
                save(INITIAL_PREFIX + name, param, (INITIAL_WEIGHTS,))
