"""What a Keras model computes, captured in its own forward pass on due steps: the inputs and
outputs of activations, the outputs of layers, the model's input and output, and the labels and
predictions its loss sees.

Every layer with an activation (``Dense(..., activation="relu")``, ``Activation("tanh")``) and
every ``ReLU`` layer gets its activation wrapped. The wrapper records the activation's input
and output as ``<layer>/<kind>_input_0`` and ``<layer>/<kind>_output_0`` (``dense/relu_output_0``),
the names the built-in rules look for (DeadRelu reads ``.*relu_output``, SaturatedActivation
``.*tanh_input`` / ``.*sigmoid_input``). They join the ``layers`` and ``relu_activations``
collections. Every layer's output is ``<layer>_output_0`` (``layers``); the model's input and
output ``<model>_input_0`` / ``<model>_output_0`` (``inputs`` / ``outputs``); what the loss
compares, ``labels`` and ``predictions`` (collections of the same names, which ClassImbalance,
Confusion and AccuracyAtChance read), saved as classes and bounded
(:mod:`tensortap.keras._outcome`). Values that are several tensors (a dict of inputs) are not
captured.

There is no second forward pass:

- In a ``tf.function`` (TensorFlow's default), each captured tensor is copied into a
  non-trainable variable inside a ``tf.cond`` on its group's bit of a mask that the hook sets
  before a batch (a group: the taps of one set of collections; ``labels`` and ``predictions``
  one group, the outcome). The branch of a group that is not due is skipped, so a batch due
  only for the outcome sample copies the labels and predictions alone. On due steps the hook
  reads the due groups' copies back (with a flag each: did this step write it?) in its one
  compiled read of the step's variables, which also clears the mask: one host write of the
  mask per due batch, not two.
- Eagerly (the torch backend, ``run_eagerly=True``), the tensors are kept on due steps only.

XLA-compiled steps (``jit_compile=True``) cannot hold variables whose shape changes, so no
activations are captured there; this is logged once.
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import keras
import numpy as np

from tensortap.core._collections import CollectionKeys
from tensortap.keras import _convert
from tensortap.keras._lean import is_tracing_lean
from tensortap.keras._outcome import save_outcome

if TYPE_CHECKING:
    from tensortap.keras._tap_host import KerasTapHost


logger = logging.getLogger(__name__)

RELU_ACTIVATIONS = "relu_activations"
LAYERS = "layers"
LABELS = "labels"
PREDICTIONS = "predictions"
ACTIVATION_COLLECTIONS = (LAYERS, RELU_ACTIVATIONS)
TAPPED_COLLECTIONS = (
    LAYERS,
    RELU_ACTIVATIONS,
    CollectionKeys.INPUTS,
    CollectionKeys.OUTPUTS,
    LABELS,
    PREDICTIONS,
)
_KINDS = frozenset(
    {
        "relu",
        "relu6",
        "leaky_relu",
        "elu",
        "selu",
        "gelu",
        "silu",
        "swish",
        "mish",
        "softplus",
        "softsign",
        "tanh",
        "sigmoid",
        "hard_sigmoid",
        "hard_silu",
    }
)


#: The taps of these collections share one bit of the mask: the outcome is saved whole or not.
_OUTCOME_GROUP = (LABELS, PREDICTIONS)


class _Tap:
    """One captured tensor: a variable in graph mode, or the last value in eager mode."""

    def __init__(self, name: str, collections: tuple[str, ...], bit: int) -> None:
        self.name, self.collections, self.bit = name, collections, bit
        self.variable: Any = None
        self.fresh: Any = None  # graph mode: True once written this step
        self.value: Any = None


class ActivationTaps:
    """Wraps a model's layers and loss to capture what they compute (see the module docstring)."""

    def __init__(self, hook: KerasTapHost) -> None:
        self.hook = hook
        self._recorder = hook.recorder  # read every batch: held, as the PyTorch taps hold theirs
        self.taps: list[_Tap] = []
        # the groups of taps (their collections) and each one's bit of the mask
        self._bits: dict[tuple[str, ...], int] = {}
        self.flag: Any = None  # graph mode: an int32 variable, the mask of the groups due
        self.mask = 0  # the groups due at this step
        self._held = 0  # what ``flag`` holds (set before a due batch, cleared by its read)
        self._wrapped: set[int] = set()
        self._graph = keras.backend.backend() == "tensorflow"

    def _included(self, collection: str) -> bool:
        included = self._recorder.include_collections
        return collection in included or CollectionKeys.ALL in included

    def wanted(self) -> bool:
        return any(self._included(c) for c in TAPPED_COLLECTIONS)

    def install(self, model: Any) -> None:
        """Wrap the activations of ``model``'s layers (once per layer)."""
        if not self.wanted():
            return
        if self._graph and getattr(model, "jit_compile", False):
            self.hook.warn_once(
                "xla-activations",
                "activations are not captured in an XLA-compiled step (jit_compile=True)",
            )
            return
        if self._graph and self.flag is None:
            import tensorflow as tf

            self.flag = tf.Variable(0, dtype=tf.int32, trainable=False)
        if id(model) not in self._wrapped:
            self._wrapped.add(id(model))
            self._wrap_model(model)
        activations = any(self._included(c) for c in ACTIVATION_COLLECTIONS)
        outputs = self._included(LAYERS)
        for layer in model._flatten_layers(include_self=False):
            if id(layer) in self._wrapped or isinstance(layer, keras.layers.InputLayer):
                continue
            self._wrapped.add(id(layer))
            base = self.hook.layer_name(layer)
            if outputs:
                tap = self._tap(f"{base}_output_0", (LAYERS,))
                self.hook.replace(layer, "call", self._wrap(layer.call, None, tap))
            activation = getattr(layer, "activation", None)
            kind = getattr(activation, "__name__", None)
            if isinstance(layer, keras.layers.ReLU):
                kind, activation = "relu", None
            if not activations or kind not in _KINDS:
                continue
            tap_in = self._tap(f"{base}/{kind}_input_0", ACTIVATION_COLLECTIONS)
            tap_out = self._tap(f"{base}/{kind}_output_0", ACTIVATION_COLLECTIONS)
            if activation is not None:
                self.hook.replace(layer, "activation", self._wrap(activation, tap_in, tap_out))
            else:
                self.hook.replace(layer, "call", self._wrap(layer.call, tap_in, tap_out))

    def _wrap_model(self, model: Any) -> None:
        """The model's input and output, and the labels and predictions its loss sees."""
        if self._included(CollectionKeys.INPUTS) or self._included(CollectionKeys.OUTPUTS):
            tap_in = self._tap(f"{model.name}_input_0", (CollectionKeys.INPUTS,))
            tap_out = self._tap(f"{model.name}_output_0", (CollectionKeys.OUTPUTS,))
            self.hook.replace(model, "call", self._wrap(model.call, tap_in, tap_out))
        if self._included(LABELS) or self._included(PREDICTIONS):
            labels = self._tap("labels", (LABELS,))
            predictions = self._tap("predictions", (PREDICTIONS,))
            original = model.compute_loss
            signature = inspect.signature(original)

            @functools.wraps(original)
            def compute_loss(*args: Any, **kwargs: Any) -> Any:
                try:
                    given = signature.bind_partial(*args, **kwargs).arguments
                    self._capture(labels, given.get("y"))
                    self._capture(predictions, given.get("y_pred"))
                except Exception as exc:
                    self.hook.contain(exc, "capturing labels and predictions")
                return original(*args, **kwargs)

            self.hook.replace(model, "compute_loss", compute_loss)

    def _tap(self, name: str, collections: tuple[str, ...]) -> _Tap:
        group = _OUTCOME_GROUP if collections in ((LABELS,), (PREDICTIONS,)) else collections
        bit = self._bits.get(group)
        if bit is None:
            bit = self._bits[group] = 1 << len(self._bits)  # a handful of groups: fits int32
        tap = _Tap(name, collections, bit)
        if self._graph:
            import tensorflow as tf

            tap.variable = tf.Variable(
                tf.zeros([0]), shape=tf.TensorShape(None), validate_shape=False, trainable=False
            )
            tap.fresh = tf.Variable(False, trainable=False)
        self.taps.append(tap)
        return tap

    def _wrap(self, function: Any, tap_in: _Tap | None, tap_out: _Tap) -> Any:
        @functools.wraps(function)
        def wrapped(x: Any, *args: Any, **kwargs: Any) -> Any:
            y = function(x, *args, **kwargs)
            try:
                if tap_in is not None:
                    self._capture(tap_in, x)
                self._capture(tap_out, y)
            except Exception as exc:
                self.hook.contain(exc, "capturing activations")
            return y

        return wrapped

    def _capture(self, tap: _Tap, value: Any) -> None:
        if value is None or isinstance(value, (keras.KerasTensor, list, tuple, dict)):
            return  # Keras building the model symbolically, or several tensors (not captured)
        if self._graph:
            import tensorflow as tf

            if not tf.executing_eagerly():
                if is_tracing_lean():
                    return  # the trace for batches that capture nothing (keras._lean)

                def write() -> Any:
                    tap.variable.assign(tf.cast(value, tf.float32))
                    tap.fresh.assign(True)
                    return tf.constant(True)

                due = tf.not_equal(tf.bitwise.bitwise_and(self.flag, tap.bit), 0)
                tf.cond(due, write, lambda: tf.constant(False))
                return
        if self.mask & tap.bit:
            tap.value = _convert.to_numpy(value)

    @property
    def due(self) -> bool:
        """Whether any group of taps captures at this step."""
        return self.mask != 0

    def set_due(self) -> None:
        """Before a batch: capture, on this step, the groups whose collections are due (the
        mask is written to the graph's variable only when it changes)."""
        recorder = self._recorder
        mask = 0
        if recorder.is_anything_due():  # the first test, cached a step, is enough
            every = recorder.is_collection_due(CollectionKeys.ALL)
            for group, bit in self._bits.items():
                if every or any(recorder.is_collection_due(c) for c in group):
                    mask |= bit
        self.mask = mask
        if mask != self._held and self.flag is not None:
            self.flag.assign(mask, read_value=False)
            self._held = mask

    def pending(self) -> list[_Tap]:
        """At a due step, the taps of the due groups whose graph variables to read: the hook
        reads them, with their ``fresh`` flags, in its one compiled read of the step, which
        resets the flags and clears the mask (:meth:`cleared`)."""
        mask = self.mask
        if not mask:
            return []
        return [t for t in self.taps if t.bit & mask and t.value is None and t.variable is not None]

    def clears(self) -> bool:
        """Whether the hook's read at this step should clear the mask: no tapped collection is
        due at the next step of this mode (clearing a mask the next batch sets again would
        cost a write, as every EVAL batch of a job would)."""
        recorder = self._recorder
        step = recorder.mode_step + 1
        for name in (*TAPPED_COLLECTIONS, CollectionKeys.ALL):
            if name in recorder.include_collections:
                config = recorder.collections.get(name).save_config or recorder.save_config
                if config.should_save(recorder.mode, step):
                    return False
        return True

    def cleared(self) -> None:
        """The hook's read set the mask's variable to 0 (it is read only inside a step)."""
        self._held = 0

    def save(self, read: Mapping[str, Any]) -> None:
        """After a batch: save what was captured in it (``read``: the NumPy values of the
        :meth:`pending` taps written in this step, by name)."""
        mask = self.mask
        if not mask:
            return
        outcome: dict[str, Any] = {}
        for tap in self.taps:
            if not tap.bit & mask:
                continue  # its group is not due at this step
            if tap.value is not None:  # kept eagerly
                source, tap.value = _convert.to_numpy(tap.value), None
            elif tap.name in read:  # written in the graph, read by the hook
                source = read[tap.name]
            else:
                continue  # this layer did not run in this step
            if tap.collections in ((LABELS,), (PREDICTIONS,)):
                outcome[tap.name] = source  # saved together, as classes, bounded
                continue
            self.hook.save_lazy(tap.name, tap.collections, lambda s=source: s)
        if LABELS in outcome and PREDICTIONS in outcome:
            save_outcome(self.hook, outcome[LABELS], outcome[PREDICTIONS], np.asarray)
