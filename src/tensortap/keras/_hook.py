"""KerasHook: a Keras 3 callback that saves a model's tensors into a trial.

Steps and modes follow Keras: every ``fit`` batch is a TRAIN step, validation batches inside
``fit`` and ``evaluate`` batches are EVAL steps, ``predict`` batches are PREDICT steps. At the
end of each batch the hook saves what is due:

- ``losses`` and ``metrics``: the values Keras logs for the batch (Keras 3 logs the running mean
  over the epoch so far, and so do we);
- ``weights`` / ``biases``: every variable of the model after the batch's update, named by its
  Keras path without the model's name (``dense_1/kernel``, ``conv2d/bias``);
- ``gradients``: the gradients of the batch, named ``gradients/<variable>``, captured where the
  optimizer applies them (see :mod:`tensortap.keras._gradients`) without changing the update;
- ``optimizer_variables``: the learning rate and iteration count;
- ``vitals``, at every batch whatever the schedule: the batch's own loss (not the running
  mean), and for TRAIN batches the learning rate, the batch's time and samples per second
  (see :mod:`tensortap.keras._vitals`);
- ``initial_weights``: the trainable weights before the first update of a step that saves
  ``weights``, once, as ``initial/<name>`` (WeightUpdateRatio judges the first update by them).

Values are converted to NumPy only on steps where their collection is due, all read back with
one compiled call. On TensorFlow the step keeps its TRAIN vital signs in a ring of its own
variables, read back around saving steps, every half ring and at epoch ends: a TRAIN batch
that saves nothing else costs the hook one comparison at its begin and one count at its end,
and its step is published at the next read (EVAL batches read their vital signs each; see
:mod:`tensortap.keras._vital_steps`).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterable, Mapping
from functools import partial
from typing import TYPE_CHECKING, Any

import keras
import numpy as np

from tensortap.core._collections import (
    INITIAL_PREFIX,
    INITIAL_WEIGHTS,
    TRAINING_LOOP,
    CollectionKeys,
)
from tensortap.core._dtypes import as_saveable_array
from tensortap.core._modes import ModeKeys
from tensortap.core._recorder import records_from_array
from tensortap.core._stages import stage_marks_for
from tensortap.exceptions import InvalidTensorError
from tensortap.hook._hook import Hook, HookOptions, HookStatus, OutDir
from tensortap.keras import _convert
from tensortap.keras._activations import TAPPED_COLLECTIONS, ActivationTaps
from tensortap.keras._config import train_begin_config
from tensortap.keras._gradients import GradientCapture
from tensortap.keras._lean import two_traces
from tensortap.keras._vital_steps import VitalSteps
from tensortap.keras._vitals import BatchVitals

if TYPE_CHECKING:
    from typing_extensions import Unpack

logger = logging.getLogger(__name__)

OPTIMIZER_VARIABLES = "optimizer_variables"
_LOSSES = (CollectionKeys.LOSSES,)
_METRICS = (CollectionKeys.METRICS,)


class KerasHook(Hook, keras.callbacks.Callback):  # type: ignore[misc]
    """Pass it in ``callbacks=[hook]`` to ``fit``, ``evaluate`` and ``predict``.

    The constructor takes the arguments of every tensortap hook: ``out_dir``, then the
    :class:`~tensortap.hook._hook.HookOptions` by keyword.
    """

    known_collections = (
        *Hook.known_collections,
        OPTIMIZER_VARIABLES,
        INITIAL_WEIGHTS,
        *TAPPED_COLLECTIONS,
    )
    framework = "keras"

    def __init__(self, out_dir: OutDir, **options: Unpack[HookOptions]) -> None:
        Hook.__init__(self, out_dir, **options)
        keras.callbacks.Callback.__init__(self)
        self.get_collection(OPTIMIZER_VARIABLES)
        for name in TAPPED_COLLECTIONS:
            self.get_collection(name)
        self._taps = ActivationTaps(self)
        self._gradients = GradientCapture(self)
        self._vitals = BatchVitals(self)
        # the weights before the first saving update (once; never, when no weights are saved)
        self._initial_saved = CollectionKeys.WEIGHTS not in self._recorder.include_collections
        if not self._initial_saved:
            self._recorder.include_collection(INITIAL_WEIGHTS)
        self._initial_names: set[str] = set()  # the weights snapshotted (_save_initial)
        self._readers: dict[tuple[tuple[int, ...], ...], Any] = {}  # compiled readers (_read_all)
        self._host_reads = 0  # reads of the model's values (_read_all calls): one per due step
        self._tape_open = False  # a wrap_tape() step is in progress
        self._tape_vars: list[Any] = []  # the variables of the current tape step
        self._steps = VitalSteps(self, self._vitals, lambda: bool(self._tape_vars))
        # whether this TRAIN batch captures in its step (activations, outcome, gradients): it
        # runs the train function's full trace, else its lean one (tensortap.keras._lean)
        self._capturing = True
        self._recorder.add_step_end_callback(self._tape_step_end)
        # the model (and its compiled loss) the last fit trained: a fit of another one starts
        # a new stage, saved at its first TRAIN batch (see _note_stage)
        self._stages = stage_marks_for(self.out_dir, self.worker)
        self._fitting = False  # between on_train_begin and on_train_end (validation inside)

    # -- Keras callback API --
    def on_train_begin(self, logs: Mapping[str, Any] | None = None) -> None:
        self._fitting = True
        self._guard_event(self._note_stage)
        self._guard_event(self._prepare_training)
        self.gather_config(partial(train_begin_config, self.model, self.params))
        self._guard_event(self._instrument, "train")
        self._guard_event(self._vitals.prepare, self.model, "train")
        self._guard_event(self._split_train_function)

    def on_epoch_begin(self, epoch: int, logs: Mapping[str, Any] | None = None) -> None:
        self._vitals.new_epoch()

    def on_epoch_end(self, epoch: int, logs: Mapping[str, Any] | None = None) -> None:
        self._catch_up()

    def on_test_begin(self, logs: Mapping[str, Any] | None = None) -> None:
        self._catch_up()  # fit's validation: the TRAIN steps before it are published first
        self._guard_event(self._instrument, "test")
        self._guard_event(self._vitals.prepare, self.model, "test")

    def on_predict_begin(self, logs: Mapping[str, Any] | None = None) -> None:
        self._catch_up()
        self._guard_event(self._instrument, "predict")

    def on_train_batch_begin(self, batch: int, logs: Mapping[str, Any] | None = None) -> None:
        steps = self._steps
        if not steps.lag:
            self._begin_train_batch()
        elif self._recorder.mode_step + steps.lag < steps.read_at:
            self._capturing = False  # nothing but vital signs due: the ring keeps them
        else:
            with self._saving():  # a read for a saving batch: what the save budget measures
                self._catch_up()  # the recorder moves to this batch's step
                self._begin_train_batch()

    def _begin_train_batch(self) -> None:
        self._enter(ModeKeys.TRAIN)
        self._vitals.begin_batch()
        if self._vitals.ring is not None:
            self._vitals.ring_began()
        if self._gradients.flag is not None:
            self._guard_event(self._gradients.set_due)
        if self._stages.due:
            self._guard_event(self._stages.save, self._recorder)
            # and the new model's weights before their first update
            self._initial_saved = CollectionKeys.WEIGHTS not in self._recorder.include_collections
        if not self._initial_saved:
            self._guard_event(self._save_initial)
        self._capturing = bool(self._taps.mask) or self._gradients.copying

    def on_train_batch_end(self, batch: int, logs: Mapping[str, Any] | None = None) -> None:
        if self._vitals.ring is not None:
            steps = self._steps
            if steps.lag:
                steps.lag += 1  # its step was not due (the batch's begin checked)
                return
            if not self._recorder.is_anything_due():
                steps.lag = 1
                steps.read_at = self._guard(steps.next_read) or 0
                return
        self._end_batch(logs, training=True)

    def on_test_batch_begin(self, batch: int, logs: Mapping[str, Any] | None = None) -> None:
        self._enter(ModeKeys.EVAL)

    def on_test_batch_end(self, batch: int, logs: Mapping[str, Any] | None = None) -> None:
        self._end_batch(logs, training=False)

    def on_predict_batch_begin(self, batch: int, logs: Mapping[str, Any] | None = None) -> None:
        self._enter(ModeKeys.PREDICT)

    def on_predict_batch_end(self, batch: int, logs: Mapping[str, Any] | None = None) -> None:
        self._end_batch(None, training=False)

    def on_train_end(self, logs: Mapping[str, Any] | None = None) -> None:
        self._catch_up()
        self._fitting = False
        self._published_at_end()

    def on_test_end(self, logs: Mapping[str, Any] | None = None) -> None:
        self._published_at_end()

    def on_predict_end(self, logs: Mapping[str, Any] | None = None) -> None:
        self._published_at_end()

    def _published_at_end(self) -> None:
        """At the end of ``fit``, ``evaluate`` or ``predict``: hand the steps to the writer and,
        unless ``fit`` goes on (its validation), wait until they are published
        (:meth:`flush_at_end`). Within ``fit`` it never waits."""
        if self._fitting:
            self.flush(timeout=0)
        else:
            self.flush_at_end()

    # -- steps --
    def _enter(self, mode: ModeKeys) -> None:
        if self.mode != mode:
            self.set_mode(mode)
        if self._taps.taps:
            self._guard_event(self._taps.set_due)

    def _instrument(self, function: str) -> None:
        """Wrap the model's activations; a function traced before that is traced anew."""
        model = self.model
        if model is None or not self._taps.wanted():
            return
        before = len(self._taps.taps)
        self._taps.install(model)
        if len(self._taps.taps) != before and getattr(model, f"{function}_function", None):
            getattr(model, f"make_{function}_function")(force=True)

    def _split_train_function(self) -> None:
        """Keep a lean trace of the train function beside Keras's, for the batches that capture
        nothing (see :mod:`tensortap.keras._lean`): in a compiled TensorFlow step with taps or
        gradient copies only."""
        model = self.model
        current = getattr(model, "train_function", None)
        if (
            current is None
            or getattr(current, "_tensortap_lean", False)
            or keras.backend.backend() != "tensorflow"
            or model.run_eagerly
            or not (self._taps.taps or self._gradients.flag is not None)
        ):
            return
        model.make_train_function(force=True)  # traced at its first call, while lean
        lean = self._vitals.wrap_function(model.train_function)
        self.replace(model, "train_function", two_traces(current, lean, lambda: self._capturing))

    def _end_batch(self, logs: Mapping[str, Any] | None, training: bool) -> None:
        with self._lock:
            if self._closed:
                return
            self._guard_event(self._save_batch, logs, training)
        self.next_step()

    @property
    def step(self) -> int:
        """The current global step (TRAIN steps the ring holds unread count)."""
        return self._recorder.global_step + self._steps.lag

    @property
    def mode_step(self) -> int:
        """The current step within the current mode (as :attr:`step`)."""
        return self._recorder.mode_step + self._steps.lag

    def close(self) -> HookStatus:
        """As for every hook; the TRAIN steps the ring holds unread are published first."""
        self._catch_up()
        return super().close()

    def _catch_up(self) -> None:
        """Read the ring and publish the TRAIN steps not published yet, each under its number
        (see tensortap.keras._vital_steps)."""
        if not self._steps.lag:
            return
        with self._lock:
            if self._closed:
                return
            self._guard_event(self._steps.publish_ring, False)

    def _check_stop(self) -> None:
        """A stop request ends ``fit`` the Keras way: ``model.stop_training = True``."""
        assert self._stop is not None
        reason = self._stop.requested()
        if reason is not None and self.model is not None and not self.model.stop_training:
            logger.warning("tensortap: stopping training after step %d: %s", self.step - 1, reason)
            self.model.stop_training = True

    # -- saving --
    def _save_batch(self, logs: Mapping[str, Any] | None, training: bool) -> None:
        # a TRAIN batch on the ring comes here with the steps before it published (its begin)
        ring = training and self._vitals.ring is not None
        if not ring and self.mode != ModeKeys.PREDICT:
            self._steps.record(self._vitals.end_batch(training), training)
        if not self._recorder.is_anything_due():  # the vital signs only: nothing else to look at
            if ring:
                self._steps.publish_ring(last_open=True)
            return
        with self._saving():  # what the save budget measures
            self._save_due(logs, training, ring)

    def _save_due(self, logs: Mapping[str, Any] | None, training: bool, ring: bool) -> None:
        """A saving batch's tensors: the logs, the variables due, the taps, the optimizer's;
        with ``ring``, the batch's vital signs from the ring, read with them."""
        recorder = self._recorder
        for key, value in (logs or {}).items():
            # Keras hands callbacks Python floats; anything else is checked
            if not isinstance(value, float) and not np.isscalar(value) and np.ndim(value) != 0:
                continue
            logged = _LOSSES if "loss" in key else _METRICS
            self._save_lazy(key, logged, lambda v=value: float(v))
        if self.model is None:
            if ring:
                self._steps.publish_ring(last_open=True)
            return
        model = self.model
        due: list[tuple[str, Any, Any]] = []  # (name, plan, variable): read together below
        for variable in model.weights:
            name = self.variable_name(variable)
            colls = [CollectionKeys.BIASES if name.endswith("bias") else CollectionKeys.WEIGHTS]
            plan = recorder.begin(name, colls)
            if plan is not None:
                due.append((name, plan, variable))
        if training:
            due += self._gradients.due(model)
            due += self._due_optimizer_state(getattr(model, "optimizer", None))
        # one compiled read of all the step needs: the ring of vital signs, the taps written
        # in the step (a flag each says whether it was; the read resets the flags, and clears
        # the taps' mask unless the next step captures too), then the variables due
        taps = self._taps.pending()
        flags = [tap.fresh for tap in taps]
        rows = [self._vitals.ring] if ring else []
        sources = rows + flags + [tap.variable for tap in taps] + [d[2] for d in due]
        clear = taps and self._taps.flag is not None and self._taps.clears()
        mask = [self._taps.flag] if clear else []
        values = self._read_all(sources, flags + mask) if sources else []
        if mask:
            self._taps.cleared()
        if ring:
            self._steps.publish_ring(last_open=True, ring=values[0])
            values = values[1:]
        count = len(taps)
        written = zip(taps, values[:count], values[count : 2 * count], strict=True)
        self._taps.save({tap.name: value for tap, fresh, value in written if bool(fresh)})
        for (name, plan, _), value in zip(due, values[2 * count :], strict=True):
            array = as_saveable_array(value, name)
            recorder.put(name, records_from_array(name, array, plan))
        if training:
            optimizer = getattr(model, "optimizer", None)
            if optimizer is not None:
                self._steps.save_rate_facts(optimizer)
                self._save_lazy(
                    "optimizer/learning_rate",
                    [OPTIMIZER_VARIABLES],
                    lambda: float(_convert.to_numpy(optimizer.learning_rate)),
                )
                self._save_lazy(
                    "optimizer/iterations",
                    [OPTIMIZER_VARIABLES],
                    lambda: int(_convert.to_numpy(optimizer.iterations)),
                )

    def _save_initial(self) -> None:
        """At the first TRAIN batch that saves ``weights``, before its update: the trainable
        weights as ``initial/<name>`` (``initial_weights``), as the PyTorch and JAX hooks do;
        at a new stage of training, those of the new model not snapshotted before."""
        model = self.model
        if model is None or not self._recorder.is_collection_due(CollectionKeys.WEIGHTS):
            return
        self._initial_saved = True
        due: list[tuple[str, Any, Any]] = []
        for variable in model.trainable_weights:
            name = self.variable_name(variable)
            if name.endswith("bias") or name in self._initial_names:
                continue  # the rules judge the updates of weights; each is snapshotted once
            self._initial_names.add(name)
            plan = self._recorder.begin(INITIAL_PREFIX + name, [INITIAL_WEIGHTS])
            if plan is not None:
                due.append((INITIAL_PREFIX + name, plan, variable))
        for (name, plan, _), value in zip(due, self._read_all([d[2] for d in due]), strict=True):
            array = as_saveable_array(value, name)
            self._recorder.put(name, records_from_array(name, array, plan))
        self._save_frozen(model)

    def _note_stage(self) -> None:
        """A ``fit`` of another model than the last fit's, or of the same one compiled again
        with another loss (a pre-trained encoder under a new head for a second task), starts
        a new stage of training: its losses are not comparable with the stage's before."""
        model = self.model
        if model is not None and self._stages.fit_begins(
            model, _loss_key(getattr(model, "loss", None))
        ):
            self._stages.begin()

    def _save_frozen(self, model: Any) -> None:
        """The weights of layers set ``trainable = False`` (not those Keras never trains, such
        as BatchNormalization's moving statistics), as training-loop facts: ``frozen/<name>``
        (its size) and ``frozen_params`` (how many), while other weights train. TrainingLoop
        judges them (frozen on purpose under a new head, or a random layer frozen by a copied
        recipe)."""
        frozen = [
            variable
            for layer in _layers_of(model)
            for variable in getattr(layer, "_trainable_variables", None) or ()
            if not getattr(variable, "trainable", True)
        ]
        if not frozen or not model.trainable_weights:
            return
        facts = [(f"frozen/{self.variable_name(v)}", int(np.prod(v.shape))) for v in frozen]
        for name, value in [*facts, ("frozen_params", len(frozen))]:
            full = f"{TRAINING_LOOP}/{name}"
            plan = self._recorder.begin(full, [TRAINING_LOOP])
            if plan is not None:
                self._recorder.put(full, records_from_array(full, np.asarray(value), plan))

    def layer_name(self, layer: Any) -> str:
        """The name of ``layer``'s tensors: its Keras path without the model's name."""
        path = str(getattr(layer, "path", None) or layer.name)
        if self.model is not None and path.startswith(f"{self.model.name}/"):
            return path[len(self.model.name) + 1 :]
        return path

    def variable_name(self, variable: Any) -> str:
        """The name ``variable`` is saved under: its Keras path without the model's name."""
        path = str(getattr(variable, "path", None) or variable.name).removesuffix(":0")
        if self.model is not None:
            prefix = f"{self.model.name}/"
            return path[len(prefix) :] if path.startswith(prefix) else path
        # a custom loop: drop the model's name (model/layer/variable -> layer/variable)
        return path.split("/", 1)[1] if path.count("/") >= 2 else path

    # -- custom loops: tf.GradientTape --
    def wrap_tape(self, tape: Any) -> _Tape:
        """Record a ``tf.GradientTape`` training loop: each ``with`` block of the returned tape
        is one step (TRAIN unless a mode was set). Its ``gradient(loss, variables)`` saves the
        loss (``losses``) and the gradients; the variables' values are saved when the step ends
        (at the next ``with``, ``next_step`` or ``close``), so after the optimizer's update.
        Inside a ``tf.function`` the values are symbolic and are not recorded (logged once)."""
        return _Tape(self, tape)

    def _begin_tape_step(self) -> None:
        with self._lock:
            if self._tape_open:
                self.next_step()
            if self.mode == ModeKeys.GLOBAL:
                self.set_mode(ModeKeys.TRAIN)
            self._tape_open = True
            self._recorder.touch()

    def _record_tape(self, target: Any, sources: Any, grads: Any) -> None:
        import tensorflow as tf

        if not tf.executing_eagerly():
            self.warn_once(
                "tape-graph",
                "wrap_tape inside a tf.function sees symbolic tensors: that loop is not "
                "recorded (run the step eagerly, or use model.fit with the KerasHook)",
            )
            return
        with self._lock:
            if self._closed:
                return
            if np.ndim(target) == 0:
                self._save_lazy("loss", [CollectionKeys.LOSSES], lambda: float(target))
            variables = tf.nest.flatten(sources)
            self._tape_vars = variables
            for variable, grad in zip(variables, tf.nest.flatten(grads), strict=False):
                if grad is None:
                    continue
                self._save_lazy(
                    f"gradients/{self.variable_name(variable)}",
                    [CollectionKeys.GRADIENTS],
                    lambda g=grad: _convert.to_numpy(tf.convert_to_tensor(g)),
                )

    def _tape_step_end(self) -> None:
        variables, self._tape_vars = self._tape_vars, []
        for variable in variables:
            name = self.variable_name(variable)
            colls = [CollectionKeys.BIASES if name.endswith("bias") else CollectionKeys.WEIGHTS]
            self._save_lazy(name, colls, lambda v=variable: _convert.to_numpy(v))

    def save_tensor(
        self, name: str, value: Any, collections: str | Iterable[str] | None = None
    ) -> bool:
        """As for every hook; a symbolic tensor (inside a ``tf.function``) is refused. The
        script's own ``labels`` or ``predictions`` win over the sampled outcome of the step."""
        if _is_symbolic(value):
            raise InvalidTensorError(
                f"tensor {name!r} is symbolic: save_tensor was called inside a tf.function, "
                "where tensors have no value yet. Return the value from the tf.function and "
                "save it outside, or run the function eagerly"
            )
        self._catch_up()  # a step the ring holds: the script saves into the step it is at
        return super().save_tensor(name, value, collections)  # the tap sees it: has_saved

    # -- gradients --
    def _prepare_training(self) -> None:
        model = self.model
        if self._gradients.install(model) and getattr(model, "train_function", None) is not None:
            model.make_train_function(force=True)  # one traced before the wrapper cannot capture

    def _due_optimizer_state(self, optimizer: Any) -> list[tuple[str, Any, Any]]:
        """The optimizer's state (Adam's moments, ...) as ``optimizer/<path>``; the learning
        rate and iteration count are saved as scalars elsewhere."""
        due: list[tuple[str, Any, Any]] = []
        for variable in getattr(optimizer, "variables", None) or []:
            path = str(getattr(variable, "path", variable.name))
            short = path.split("/", 1)[-1]
            if short in ("iteration", "iterations", "learning_rate"):
                continue
            name = f"optimizer/{short}"
            plan = self._recorder.begin(name, [OPTIMIZER_VARIABLES])
            if plan is not None:
                due.append((name, plan, variable))
        return due

    def _read_all(self, sources: list[Any], reset: list[Any] | None = None) -> list[Any]:
        """The values of many variables and tensors, as NumPy; then the variables ``reset``
        (flags, masks) are set to False or 0. On TensorFlow, variables are read (and reset)
        with one compiled call (one per set of variables, cached): reading them one by one
        costs about 70 us each in eager dispatch."""
        self._host_reads += 1
        reset = reset or []
        values = [s.value if isinstance(s, keras.Variable) else s for s in sources]
        if (
            keras.backend.backend() != "tensorflow"
            or len(sources) + len(reset) < 2
            or not all(_is_tf_variable(v) for v in values + reset)
        ):
            found = [_convert.to_numpy(s) for s in sources]
            for flag in reset:
                flag.assign(keras.ops.zeros_like(flag), read_value=False)
            return found
        import tensorflow as tf

        key = (tuple(id(v) for v in values), tuple(id(v) for v in reset))
        reader = self._readers.get(key)
        if reader is None:

            def read() -> list[Any]:
                read = [v.read_value() for v in values]
                for flag in reset:  # after the reads: automatic control dependencies order them
                    flag.assign(tf.zeros_like(flag), read_value=False)
                return read

            reader = self._readers[key] = tf.function(read)
        return [t.numpy() for t in reader()]


def _is_tf_variable(value: Any) -> bool:
    import tensorflow as tf

    return isinstance(value, tf.Variable)


def _is_symbolic(value: Any) -> bool:
    if "tensorflow" not in sys.modules or keras.backend.backend() != "tensorflow":
        return False
    import tensorflow as tf

    return bool(tf.is_tensor(value) and tf.is_symbolic_tensor(value))


class _Tape:
    """A ``tf.GradientTape`` that records into a KerasHook (see ``KerasHook.wrap_tape``)."""

    def __init__(self, hook: KerasHook, tape: Any) -> None:
        self._hook, self._tape = hook, tape

    def __enter__(self) -> _Tape:
        self._hook.guard_event(self._hook._begin_tape_step)
        self._tape.__enter__()
        return self

    def __exit__(self, *exc: Any) -> Any:
        return self._tape.__exit__(*exc)

    def gradient(self, target: Any, sources: Any, *args: Any, **kwargs: Any) -> Any:
        grads = self._tape.gradient(target, sources, *args, **kwargs)
        self._hook.guard_event(self._hook._record_tape, target, sources, grads)
        return grads

    def __getattr__(self, name: str) -> Any:  # watch, stop_recording, reset, jacobian, ...
        return getattr(self._tape, name)


#: The open KerasHook made last in this process (see :meth:`tensortap.hook._hook.Hook.current`).
get_hook = KerasHook.current


def _loss_key(loss: Any) -> str:
    """What a compiled loss computes, to tell a new task's loss from the same loss compiled
    again (a model unfrozen and compiled with a lower rate is still on its task): its name, or
    its class and configuration; a function by its qualified name."""
    if loss is None or isinstance(loss, str):
        return repr(loss)
    config = getattr(loss, "get_config", None)
    try:
        described = config() if callable(config) else None
    except Exception:  # a custom loss whose configuration cannot be read
        described = None
    kind = type(loss)
    name = getattr(loss, "__qualname__", None) or f"{kind.__module__}.{kind.__qualname__}"
    return f"{name}:{described!r}"


def _layers_of(model: Any) -> list[Any]:
    """Every layer inside ``model``, nested ones included (Keras's own walk where it has one)."""
    walk = getattr(model, "_flatten_layers", None)
    if callable(walk):
        try:
            return list(walk(include_self=False))
        except Exception:  # another Keras's signature: its top-level layers only
            pass
    return list(getattr(model, "layers", None) or ())
