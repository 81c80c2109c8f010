"""What the Hugging Face callback learns of the run's configuration (``trial.config()``): the
Trainer's class and its ``TrainingArguments`` (``to_dict()``: secrets such as ``hub_token``
are redacted when recorded), and the seed it sets. The model, optimizer, schedulers and batch
size come from the PyTorch hook (:mod:`tensortap.pytorch._config`)."""

from __future__ import annotations

from typing import Any


def trainer_config(args: Any, trainer: Any = None) -> dict[str, Any]:
    """``{"trainer": {"class", "arguments"}, "seeds": {"trainer": seed}}`` of a Trainer's
    ``args`` (a ``TrainingArguments``)."""
    to_dict = getattr(args, "to_dict", None)
    arguments = to_dict() if callable(to_dict) else dict(vars(args))
    name = "transformers.Trainer" if trainer is None else _class_name(trainer)
    found: dict[str, Any] = {"trainer": {"class": name, "arguments": arguments}}
    rate = arguments.get("learning_rate")
    if isinstance(rate, (int, float)) and not isinstance(rate, bool):
        found["learning_rate"] = float(rate)
    size = arguments.get("per_device_train_batch_size")
    if isinstance(size, int) and not isinstance(size, bool):
        found["batch_size"] = size  # what each device's forward takes
    seed = arguments.get("seed")
    if isinstance(seed, int):
        found["seeds"] = {"trainer": seed}
    return found


def _class_name(obj: object) -> str:
    cls = type(obj)
    return f"{cls.__module__}.{cls.__qualname__}"
