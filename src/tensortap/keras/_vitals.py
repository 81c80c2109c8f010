"""Vital signs of every Keras batch (:mod:`tensortap.core._vitals`): the batch's own loss, the
learning rate it trained at, its time and throughput.

Keras 3 logs the *running mean* of the loss over the epoch, not the batch's loss, and the
learning rate is a variable (or a schedule of the iteration count) whose eager read costs tens
of microseconds. Both are taken inside the step Keras compiles:

- the model's ``train_step`` / ``test_step`` is wrapped (on the instance; the functions are
  traced again once). The wrapper reads the learning rate before the update, and keeps what
  the step hands Keras's loss tracker (``model._loss_tracker.update_state(loss,
  sample_weight=batch size)``): exactly the loss the running mean is made of, and the batch's
  size. It returns them with the step's logs as one float32 vector under a key of its own;
- TRAIN batches on TensorFlow (one replica) write that vector as a row of a ring kept in
  the step's own variables (:data:`RING` rows and a count of the rows written; each row also
  holds its own number, so that the host reads the ring alone) instead: no host read per
  batch. The hook reads the ring back (:meth:`BatchVitals.read_ring`, one small read) at
  batches that save anything else (within the hook's one compiled read of what they save),
  every half ring, and before validation, at an epoch's end and at the end of ``fit``, and
  publishes the steps since the last read then, each under its own step number. Their
  ``step_time`` is the time between two reads divided by the steps read
  (``samples_per_second`` follows from it). A run killed between two reads loses the vital
  signs of the steps not read yet (at most half the ring);
- EVAL batches (and the other backends) hand the vector out with the logs: the
  ``train_function`` / ``test_function`` Keras calls per batch is wrapped in Python: it
  takes that key out of the logs before any callback (the progress bar, ``History``) sees
  them, and keeps it for the hook's batch end, which reads the vector.

On backends whose step is not ``train_step(data) -> logs`` (JAX: a stateless function), or
under a custom ``train_step`` that never updates the loss tracker, ``vitals/loss`` is not
saved; the times are.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from typing import TYPE_CHECKING, Any

import keras
import numpy as np

from tensortap.core._vitals import VITALS, Vital

if TYPE_CHECKING:
    from tensortap.keras._tap_host import KerasTapHost

logger = logging.getLogger(__name__)

#: The step's output key: one float32 vector [loss, samples (-1: unknown), learning rate (NaN:
#: none), gradient norm (when seen)], one tensor to hand out and convert rather than four.
_KEY = "tensortap_vitals"
#: Rows of vital signs the ring keeps; the hook reads it back at least every half of it.
RING = 256
#: The width of a ring row: loss, samples, learning rate, gradient norm (NaN: not seen), and
#: the row's own number modulo :data:`_NUMBERS` (NaN: a slot never written).
_WIDTH = 5
#: Row numbers are kept modulo this (exact in float32); a read finds the rows written since
#: the last one by their numbers, so fewer than half of it may be written between two reads.
_NUMBERS = 2**24
#: The backends whose step is ``train_step(data) -> logs`` with the loss tracker updated in it.
_BACKENDS = ("tensorflow", "torch")


class BatchVitals:
    """Captures each batch's vital signs for a :class:`KerasHook` (see the module)."""

    def __init__(self, hook: KerasTapHost) -> None:
        self.hook = hook
        # (loss, batch size) of the step being traced, per thread: tf.distribute traces each
        # replica's step in a thread of its own
        self._local = threading.local()
        self._pending: Any = None  # taken out of the last batch's logs (see _KEY)
        self._last_end: float | None = None  # when the previous TRAIN batch ended
        self._begin = 0.0  # when this batch began
        # the ring of TRAIN rows (TensorFlow, one replica): tf.Variables [RING, _WIDTH] and the
        # count of rows the step wrote
        self.ring: Any = None
        self._written: Any = None
        self._last_written = 0  # the count of rows at the last read
        self._since: float | None = None  # when the steps not read yet began
        self.ring_reads = 0  # host reads of the ring (tests count them)
        self.ring_reads_alone = 0  # ... of them, those not within a saving batch's read

    # -- installing --
    def prepare(self, model: Any, function: str) -> None:
        """Before ``fit`` (``function="train"``) or ``evaluate`` (``"test"``): wrap the model's
        step and the function Keras calls per batch, tracing it anew if the step was wrapped
        after it was made."""
        self._last_end = None
        if model is None or keras.backend.backend() not in _BACKENDS:
            return
        if VITALS not in self.hook.recorder.include_collections:
            return
        if function == "train" and self.ring is None:
            self._guard(self._make_ring, model)
        step_name, make_name = f"{function}_step", f"make_{function}_function"
        function_name = f"{function}_function"
        if not getattr(getattr(model, step_name), "_tensortap_vitals", False):
            wrapped = self._wrap_step(model, getattr(model, step_name), function == "train")
            self.hook.replace(model, step_name, wrapped)
            if getattr(model, function_name, None) is not None:
                getattr(model, make_name)(force=True)  # one traced before cannot hand them out
        current = getattr(model, function_name, None)
        if current is not None and not getattr(current, "_tensortap_vitals", False):
            self.hook.replace(model, function_name, self.wrap_function(current))

            def retrace() -> None:  # a function traced with the wrapped step hands out our keys
                setattr(model, function_name, None)

            self.hook.registered((id(model), function_name, "retrace"), retrace)
        if function == "train":
            self._guard(self._wrap_apply, model)

    def _make_ring(self, model: Any) -> None:
        """The ring's variables, made before the step is traced (TensorFlow, one replica)."""
        replicas = getattr(getattr(model, "distribute_strategy", None), "num_replicas_in_sync", 1)
        if keras.backend.backend() != "tensorflow" or replicas != 1:
            return
        import tensorflow as tf

        self._written = tf.Variable(0, dtype=tf.int64, trainable=False, name="tensortap_rows")
        self.ring = tf.Variable(
            tf.fill([RING, _WIDTH], math.nan), trainable=False, name="tensortap_ring"
        )

    def _write_ring(self, row: Any) -> None:
        """In the step: write ``row`` at the next slot of the ring and count it."""
        import tensorflow as tf

        slot = tf.math.floormod(self._written, RING)
        number = tf.cast(tf.math.floormod(self._written, _NUMBERS), tf.float32)
        full = tf.concat([tf.reshape(row, [_WIDTH - 1]), tf.reshape(number, [1])], axis=0)
        self.ring.scatter_nd_update(tf.reshape(slot, [1, 1]), tf.reshape(full, [1, _WIDTH]))
        self._written.assign_add(1)

    def _wrap_apply(self, model: Any) -> None:
        """Have the optimizer's ``apply`` note the total norm of the gradients it is handed
        (before any clipping: Keras clips inside ``apply``). Not under a loss-scaling optimizer
        (its gradients are scaled) nor across replicas (each sees its own share)."""
        optimizer = getattr(model, "optimizer", None)
        if optimizer is None or getattr(optimizer.apply, "_tensortap_vitals", False):
            return
        replicas = getattr(getattr(model, "distribute_strategy", None), "num_replicas_in_sync", 1)
        if isinstance(optimizer, keras.optimizers.LossScaleOptimizer) or replicas != 1:
            return
        original = optimizer.apply

        def apply(grads: Any, trainable_variables: Any = None) -> Any:
            grads = list(grads)
            self._local.grad_norm = self._guard(_global_norm, grads)
            return original(grads, trainable_variables)

        apply._tensortap_vitals = True  # type: ignore[attr-defined]
        self.hook.replace(optimizer, "apply", apply)

    def _wrap_step(self, model: Any, original: Any, training: bool) -> Any:
        def step(*args: Any, **kwargs: Any) -> Any:
            lr = self._learning_rate(model) if training else None
            self._local.stash = self._local.grad_norm = None
            tracker = getattr(model, "_loss_tracker", None)
            if tracker is not None and not getattr(tracker.update_state, "_tensortap_vitals", 0):
                self._guard(self._wrap_tracker, tracker)
            logs = original(*args, **kwargs)
            stash = self._take_stash()
            grad_norm, self._local.grad_norm = getattr(self._local, "grad_norm", None), None
            ring = training and self.ring is not None
            if not isinstance(logs, dict) or (stash is None and not ring):
                return logs
            if stash is None:  # no loss tracker updated: the ring counts the step all the same
                stash = (math.nan, None)
            parts = [stash[0], -1.0 if stash[1] is None else stash[1]]
            parts.append(math.nan if lr is None else lr)
            if grad_norm is not None or ring:
                parts.append(math.nan if grad_norm is None else grad_norm)
            packed = self._guard(_pack, parts)
            if ring:
                if packed is not None:
                    self._guard(self._write_ring, packed)
                return logs
            return logs if packed is None else {**logs, _KEY: packed}

        step._tensortap_vitals = True  # type: ignore[attr-defined]
        return step

    def _take_stash(self) -> tuple[Any, Any] | None:
        stash: tuple[Any, Any] | None = getattr(self._local, "stash", None)
        self._local.stash = None
        return stash

    def _wrap_tracker(self, tracker: Any) -> None:
        original = tracker.update_state

        def update_state(values: Any, sample_weight: Any = None) -> Any:
            self._local.stash = (values, sample_weight)
            return original(values, sample_weight=sample_weight)

        update_state._tensortap_vitals = True  # type: ignore[attr-defined]
        self.hook.replace(tracker, "update_state", update_state)

    def _learning_rate(self, model: Any) -> Any:
        """The learning rate this step's update uses, as a tensor of the step (read before the
        update: a schedule of the iteration count before it is incremented); None if none."""
        optimizer = getattr(model, "optimizer", None)
        if optimizer is None or not getattr(model, "trainable_weights", None):
            return None
        return self._guard(lambda: keras.ops.convert_to_tensor(optimizer.learning_rate))

    def wrap_function(self, function: Any) -> Any:
        """``function`` (a ``train_function`` / ``test_function``) handing out the batch's vital
        signs: the key taken out of its logs and kept for the batch's end."""

        def run(*args: Any, **kwargs: Any) -> Any:
            logs = function(*args, **kwargs)
            if isinstance(logs, dict) and _KEY in logs:
                self._pending = logs.pop(_KEY)
            return logs

        run._tensortap_vitals = True  # type: ignore[attr-defined]
        return run

    def _guard(self, function: Any, *args: Any) -> Any:
        try:
            return function(*args)
        except Exception:  # never break the user's step: go without this vital sign
            self.hook.warn_once(
                f"vitals-{getattr(function, '__name__', 'lr')}",
                "a vital sign could not be taken from the Keras step; training goes on without it",
            )
            return None

    # -- each batch --
    def begin_batch(self) -> None:
        self._begin = time.perf_counter()

    def new_epoch(self) -> None:
        """The first batch of an epoch is timed from its own start (not the epoch's end)."""
        self._last_end = None
        self._since = None

    def ring_began(self) -> None:
        """A TRAIN batch that follows a read began: the unread steps are timed from here."""
        if self._since is None:
            self._since = time.perf_counter()

    def read_ring(self, steps: int, ring: Any = None) -> list[dict[str, float]]:
        """The vital signs of the last ``steps`` TRAIN steps, oldest first, read back from the
        ring (one host read; ``ring``: its value, read already with others): those the ring no
        longer holds are empty. Each step's time is the time since the last read divided by
        ``steps``. Under ``steps_per_execution`` k, a step is k batches (k rows): its vital
        signs are its last batch's."""
        if steps <= 0:
            return []
        now = time.perf_counter()
        since, self._since = self._since, now
        self.ring_reads += 1
        if ring is None:
            self.ring_reads_alone += 1
            ring = self.ring.numpy()
        ring = np.asarray(ring)
        written = self._rows_written(ring)
        new, self._last_written = written - self._last_written, written
        per_step = new // steps if new > steps and new % steps == 0 else 1
        elapsed = math.nan if since is None else (now - since) / steps
        found = []
        for row in range(written - (steps - 1) * per_step - 1, written, per_step):
            values: dict[str, float] = {}
            if row >= 0 and written - row <= RING:
                loss, samples, lr, grad_norm = (float(v) for v in ring[row % RING, : _WIDTH - 1])
                if not math.isnan(loss):
                    values[Vital.LOSS] = loss
                if not math.isnan(lr):
                    values[Vital.LR] = lr
                if not math.isnan(grad_norm):
                    values[Vital.GRAD_NORM] = grad_norm
                if samples >= 0 and elapsed > 0:
                    values[Vital.SAMPLES_PER_SECOND] = samples / elapsed
            if elapsed > 0:
                values[Vital.STEP_TIME] = elapsed
            found.append(values)
        return found

    def _rows_written(self, ring: np.ndarray) -> int:
        """The count of rows written so far, from the numbers of those written since the last
        read (each ahead of the count then by less than half of :data:`_NUMBERS`)."""
        numbers = ring[:, _WIDTH - 1]
        numbers = numbers[~np.isnan(numbers)].astype(np.int64)
        ahead = (numbers - self._last_written % _NUMBERS) % _NUMBERS
        ahead = ahead[ahead < _NUMBERS // 2]
        return self._last_written + (int(ahead.max()) + 1 if ahead.size else 0)

    def end_batch(self, training: bool) -> dict[str, float]:
        """The vital signs of the batch that ended (``training``: a TRAIN one)."""
        now = time.perf_counter()
        pending, self._pending = self._pending, None
        numbers = [] if pending is None else _floats(pending)
        values: dict[str, float] = {}
        if numbers:
            values[Vital.LOSS] = numbers[0]
        if not training:
            return values
        elapsed = now - (self._begin if self._last_end is None else self._last_end)
        self._last_end = now
        values[Vital.STEP_TIME] = elapsed
        if len(numbers) > 2 and not math.isnan(numbers[2]):
            values[Vital.LR] = numbers[2]
        if len(numbers) > 3:
            values[Vital.GRAD_NORM] = numbers[3]
        if len(numbers) > 1 and numbers[1] >= 0 and elapsed > 0:
            model = self.hook.model
            replicas = getattr(
                getattr(model, "distribute_strategy", None), "num_replicas_in_sync", 1
            )
            # under tf.distribute the replicas' batch sizes were averaged with the losses
            samples = numbers[1] * (replicas if isinstance(replicas, int) else 1)
            values[Vital.SAMPLES_PER_SECOND] = samples / elapsed
        return values


def _pack(parts: list[Any]) -> Any:
    """The step's vital signs as one float32 vector (inside the compiled step)."""
    ops = keras.ops
    return ops.stack([ops.cast(ops.convert_to_tensor(part), "float32") for part in parts])


def _global_norm(grads: list[Any]) -> Any:
    """The L2 norm of all the gradients together, as a tensor of the step."""
    present = [g for g in grads if g is not None]
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        return tf.linalg.global_norm(present)  # IndexedSlices (embeddings) included
    ops = keras.ops
    total = sum(ops.sum(ops.square(ops.cast(g, "float32"))) for g in present)
    return ops.sqrt(total)


def _floats(packed: Any) -> list[float]:
    """The packed vector as floats (a torch one is detached first: the loss holds its graph)."""
    detach = getattr(packed, "detach", None)
    if detach is not None:
        packed = detach().cpu()
    return [float(v) for v in np.asarray(packed, dtype=np.float64).ravel()]
