"""What the Keras hook learns of the run's configuration (``trial.config()``): at the start of
``fit``, the model's class and size, its ``compile`` arguments (optimizer config with its
learning rate, and the schedule that sets it if any; loss, metrics) and ``fit``'s epochs and
steps; under zero code change also ``fit``'s own arguments (``batch_size``: Keras' default of
32 for arrays when none is given)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: ``fit`` arguments recorded (by the zero-code attachment, which sees the call).
FIT_ARGUMENTS = (
    "batch_size",
    "epochs",
    "steps_per_epoch",
    "validation_split",
    "validation_steps",
    "validation_freq",
    "shuffle",
    "initial_epoch",
    "class_weight",
)
_KERAS_DEFAULT_BATCH = 32


#: Layers that pass the input on unchanged or only reshaped: its first layer is the next one.
_RESHAPES = frozenset({"InputLayer", "Flatten", "Reshape", "Permute"})


def _class_name(obj: object) -> str:
    cls = type(obj)
    return f"{cls.__module__}.{cls.__qualname__}"


def train_begin_config(model: Any, params: Mapping[str, Any] | None) -> dict[str, Any]:
    """``{"model", "optimizer", "trainer": {"compile", "fit"}}`` of a model starting to fit
    (``params``: the callback's, ``epochs`` and ``steps`` per epoch)."""
    found: dict[str, Any] = {}
    if model is None:
        return found
    try:
        count = int(model.count_params())
    except Exception:  # a model not built yet
        count = None
    found["model"] = {"class": _class_name(model), "parameters": count}
    # what the input meets first (a Normalization layer: the rules judge after it); a
    # functional model lists its InputLayer first; layers that only reshape it are passed
    layers = [
        layer
        for layer in getattr(model, "layers", None) or ()
        if type(layer).__name__ not in _RESHAPES
    ]
    if layers:
        found["model"]["first_layer"] = _class_name(layers[0])
        rescale = _rescaling(layers[0])
        if rescale is not None:
            found["model"]["first_layer_rescaling"] = rescale
    optimizer = getattr(model, "optimizer", None)
    if optimizer is not None:
        config = dict(optimizer.get_config())
        found["optimizer"] = {"class": _class_name(optimizer), **config}
        schedule = config.get("learning_rate")
        if isinstance(schedule, Mapping):  # a LearningRateSchedule, serialised
            found["optimizer"]["learning_rate_schedule"] = dict(schedule)
        rate = _learning_rate(optimizer)
        if rate is not None:
            found["optimizer"]["learning_rate"] = rate
            found["learning_rate"] = rate
    trainer: dict[str, Any] = {"class": "keras.Model.fit"}
    get_compile = getattr(model, "get_compile_config", None)
    compiled = get_compile() if callable(get_compile) else None
    if isinstance(compiled, Mapping):
        trainer["compile"] = {k: v for k, v in compiled.items() if k != "optimizer"}
    if params:
        trainer["fit"] = {k: params[k] for k in ("epochs", "steps") if k in params}
    found["trainer"] = trainer
    return found


def _rescaling(layer: Any) -> dict[str, float] | None:
    """``{"scale", "offset"}`` of a ``Rescaling`` layer whose scale and offset are single
    numbers (the input rules judge ``x * scale + offset``, what the next layer meets), else
    None."""
    if type(layer).__name__ != "Rescaling":
        return None
    scale, offset = getattr(layer, "scale", None), getattr(layer, "offset", None)
    if isinstance(scale, (int, float)) and isinstance(offset, (int, float)):
        return {"scale": float(scale), "offset": float(offset)}
    return None


def _learning_rate(optimizer: Any) -> float | None:
    """The optimizer's learning rate now, as a number (a schedule's current value)."""
    try:
        value = optimizer.learning_rate
        value = value.numpy() if hasattr(value, "numpy") else value
        return float(f"{float(value):.7g}")  # a float32 variable: 0.01, not 0.00999999977
    except Exception:
        return None


def fit_call_config(arguments: Mapping[str, Any]) -> dict[str, Any]:
    """``fit``'s own arguments (of :data:`FIT_ARGUMENTS`) and the batch size it trains on."""
    given = {k: arguments[k] for k in FIT_ARGUMENTS if arguments.get(k) is not None}
    found: dict[str, Any] = {"trainer": {"fit": given}}
    size = arguments.get("batch_size")
    x = arguments.get("x")
    if size is None and (hasattr(x, "shape") or isinstance(x, (list, tuple, Mapping))):
        size = _KERAS_DEFAULT_BATCH  # arrays: Keras batches them by 32
    if isinstance(size, int):
        found["batch_size"] = size
    return found
