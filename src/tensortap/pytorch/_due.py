"""Which kinds of the PyTorch hook's tensors can be saved at this step.

On a step where only losses are due (the default: a few numbers every step), walking every
parameter, gradient and optimizer state to ask "is this one due?" costs more than the saving.
A kind is walked only when an included collection that is due can hold it: its own collection,
one whose regexes match such a tensor (``all``, ``include_regex``), or one that names one. Which
collections can hold a kind is worked out once per change of the collections (or of the
parameters); whether one of them is due, once per step.
"""

from __future__ import annotations

from enum import Enum

from tensortap.core._collections import Collection, CollectionKeys
from tensortap.core._recorder import StepRecorder
from tensortap.pytorch._naming import GRADIENT_PREFIX, OPTIMIZER_VARIABLES, may_hold_module_io
from tensortap.pytorch._registry import Registry


class Kind(Enum):
    MODULE_IO = "module inputs and outputs"
    GRADIENTS = "gradients"
    PARAMETERS = "weights and biases"
    OPTIMIZER = "optimizer variables"


_OWN = {
    Kind.GRADIENTS: {CollectionKeys.GRADIENTS},
    Kind.PARAMETERS: {CollectionKeys.WEIGHTS, CollectionKeys.BIASES},
    Kind.OPTIMIZER: {OPTIMIZER_VARIABLES},
}


class DueKinds:
    """``due(kind)``: whether a tensor of ``kind`` can be saved at the current step."""

    def __init__(self, recorder: StepRecorder, registry: Registry) -> None:
        self._recorder = recorder
        self._registry = registry
        self._key: object = None
        self._due: dict[Kind, bool] = {}
        self._version: object = None
        self._holders: dict[Kind, tuple[str, ...]] = {}  # included collections that may hold it

    def __call__(self, kind: Kind) -> bool:
        rec = self._recorder
        version = (
            rec.collections.version,
            len(rec.include_collections),
            len(self._registry.param_names),
        )
        key = (rec.global_step, rec.mode, version)
        if key != self._key:
            self._key, self._due = key, {}
            if version != self._version:
                self._version, self._holders = version, {}
        due = self._due.get(kind)
        if due is None:
            holders = self._holders.get(kind)
            if holders is None:
                holders = self._holders[kind] = tuple(
                    n
                    for n in sorted(rec.include_collections)
                    if self._may_hold(rec.collections.get(n), kind)
                )
            due = self._due[kind] = rec.is_anything_due() and any(
                rec.is_collection_due(n) for n in holders
            )
        return due

    def _may_hold(self, collection: Collection, kind: Kind) -> bool:
        if kind is Kind.MODULE_IO:
            return may_hold_module_io(collection)
        if collection.name in _OWN[kind]:
            return True
        if kind is Kind.OPTIMIZER:  # their names are known only by walking: regexes may match
            names = collection.tensor_names
            if any(n.startswith("optimizer") for n in names):
                return True
            # ``all`` leaves optimizer state out, as smdebug's did (see naming.ALL_EXCLUDES)
            return bool(collection.include_regex) and collection.name != CollectionKeys.ALL
        params = self._registry.param_names.values()
        prefix = GRADIENT_PREFIX if kind is Kind.GRADIENTS else ""
        return any(collection.matches(prefix + p) for p in params)
