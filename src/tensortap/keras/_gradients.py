"""The gradients of each Keras training step, captured where the optimizer applies them.

The hook wraps the model optimizer's ``apply``: the wrapper records the gradients, then applies
them unchanged.

- In a ``tf.function`` (TensorFlow's default), each gradient is copied into a non-trainable
  variable of the same shape, read after the batch when ``gradients`` is due. The copy is made
  inside a ``tf.cond`` on a flag the hook sets before each TRAIN batch (only when it changes),
  so batches that save no gradients copy nothing. Under
  ``tf.distribute`` each replica writes its own copy (an ``ON_READ`` variable) and reading sums
  them: the replicas' gradients (of the loss Keras already divided by the replica count) add up
  to the gradient the optimizer applies.
- Eagerly (``run_eagerly=True``, the torch backend), the gradient tensors are kept as they are.
- The JAX backend applies gradients inside a jitted stateless function that the wrapper never
  sees: no gradients there.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import keras

from tensortap.core._collections import CollectionKeys
from tensortap.keras._lean import is_tracing_lean

if TYPE_CHECKING:
    from tensortap.keras._tap_host import KerasTapHost


class GradientCapture:
    """Wraps a model's optimizer to capture the gradients it applies (see the module docstring)."""

    def __init__(self, hook: KerasTapHost) -> None:
        self.hook = hook
        self._recorder = hook.recorder  # read every batch: held, as the PyTorch taps hold theirs
        self._wrapped: Any = None  # the optimizer whose apply() is wrapped
        self._copies: dict[str, Any] = {}  # graph mode: variable name -> gradient copy
        self._eager: dict[str, Any] = {}  # eager: variable name -> the gradient of the step
        self.flag: Any = None  # graph mode: whether this batch copies its gradients
        self._due: bool | None = None  # what the flag holds

    def wanted(self) -> bool:
        included = self._recorder.include_collections
        return CollectionKeys.GRADIENTS in included or CollectionKeys.ALL in included

    def install(self, model: Any) -> bool:
        """Prepare ``model`` for capture; True if its optimizer was newly wrapped."""
        optimizer = getattr(model, "optimizer", None)
        if optimizer is None or not self.wanted():
            return False
        if keras.backend.backend() == "tensorflow" and not model.run_eagerly:
            self._make_copies(model)
        if self._wrapped is optimizer:
            return False
        self._wrap(optimizer)
        return True

    def _make_copies(self, model: Any) -> None:
        import tensorflow as tf

        if self.flag is None:
            self.flag = tf.Variable(True, trainable=False)
            self._due = True
        strategy = getattr(model, "distribute_strategy", None) or tf.distribute.get_strategy()
        with strategy.scope():
            for variable in model.trainable_weights:
                name = self.hook.variable_name(variable)
                if name not in self._copies:
                    self._copies[name] = tf.Variable(
                        tf.zeros(variable.shape, dtype=variable.dtype),
                        trainable=False,
                        synchronization=tf.VariableSynchronization.ON_READ,
                        aggregation=tf.VariableAggregation.SUM,
                    )

    def _wrap(self, optimizer: Any) -> None:
        original = optimizer.apply

        def apply(grads: Any, trainable_variables: Any = None) -> Any:
            variables = trainable_variables
            if variables is None:
                variables = getattr(optimizer, "_trainable_variables", None) or []
            try:
                self._capture(list(grads), list(variables))
            except Exception as exc:
                self.hook.contain(exc, "capturing gradients")
            return original(grads, trainable_variables)

        self.hook.replace(optimizer, "apply", apply)
        self._wrapped = optimizer

    def _capture(self, grads: list[Any], variables: list[Any]) -> None:
        graph = False
        if keras.backend.backend() == "tensorflow":  # other backends need no TensorFlow
            import tensorflow as tf

            graph = not tf.executing_eagerly()
            if graph and is_tracing_lean():
                return  # the trace for batches that capture nothing (keras._lean)
        pairs = []
        for grad, variable in zip(grads, variables, strict=False):
            if grad is None:
                continue
            name = self.hook.variable_name(variable)
            if not graph:
                self._eager[name] = grad
                continue
            copy = self._copies.get(name)
            if copy is None:
                self.hook.warn_once(name, f"no gradient copy for {name}: it is not saved")
                continue
            pairs.append((copy, grad))
        if not pairs:
            return

        def write() -> Any:
            for copy, grad in pairs:
                copy.assign(tf.convert_to_tensor(grad))
            return tf.constant(True)

        flag = self.flag if self.flag is not None else tf.constant(True)
        tf.cond(flag, write, lambda: tf.constant(False))

    def set_due(self) -> None:
        """Before a TRAIN batch: copy its gradients in the step only if they are due."""
        if self.flag is None:
            return
        recorder = self._recorder
        due = recorder.is_anything_due() and (  # the first test, cached a step, is enough
            recorder.is_collection_due(CollectionKeys.GRADIENTS)
            or recorder.is_collection_due(CollectionKeys.ALL)
        )
        if due != self._due:
            self.flag.assign(due, read_value=False)
            self._due = due

    @property
    def copying(self) -> bool:
        """Whether the batch under way copies its gradients in the step (graph mode)."""
        return self.flag is not None and bool(self._due)

    def due(self, model: Any) -> list[tuple[str, Any, Any]]:
        """(name, plan, source) of the gradients due at this step; forgets eager gradients."""
        found = []
        for variable in model.trainable_weights:
            name = self.hook.variable_name(variable)
            source = self._copies.get(name)
            if source is None:
                source = self._eager.get(name)
            if source is None:
                continue
            plan = self._recorder.begin(f"gradients/{name}", [CollectionKeys.GRADIENTS])
            if plan is not None:
                found.append((f"gradients/{name}", plan, source))
        self._eager.clear()
        return found
