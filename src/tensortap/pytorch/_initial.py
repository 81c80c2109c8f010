"""The weights before the first update: a snapshot the update-ratio rules judge the first
update by.

Weights are saved after each step's update, so the first saved step already holds updated
weights and nothing shows how far that first update moved them (smdebug saved parameters
before the update, in a forward pre-hook). At the first step whose ``weights`` are due, the
hook also saves every trained weight as it is *before* that step's update, as
``initial/<name>`` in the ``initial_weights`` collection, once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch
from torch import nn

from tensortap.core._collections import INITIAL_PREFIX, INITIAL_WEIGHTS, CollectionKeys
from tensortap.core._recorder import StepRecorder


class InitialWeights:
    """Saves the snapshot once (see the module docstring)."""

    def __init__(self, recorder: StepRecorder) -> None:
        self.recorder = recorder
        self.saved = False
        if CollectionKeys.WEIGHTS in recorder.include_collections:
            recorder.include_collection(INITIAL_WEIGHTS)

    def before_update(
        self,
        params: Iterable[tuple[str, nn.Parameter, tuple[str, ...]]],
        save: Callable[[str, torch.Tensor, tuple[str, ...]], None],
    ) -> None:
        """Called as a training step's forward begins: save the snapshot if it is due."""
        if self.saved or not self.recorder.is_collection_due(CollectionKeys.WEIGHTS):
            return
        self.saved = True
        for name, param, collections in params:
            if param.requires_grad and CollectionKeys.WEIGHTS in collections:
                save(INITIAL_PREFIX + name, param, (INITIAL_WEIGHTS,))
