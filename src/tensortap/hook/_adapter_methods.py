"""Which framework's hook has a method: the framework-free hook (or another framework's) asked
for one raises :class:`~tensortap.exceptions.FrameworkHookNeeded` naming the hook to make."""

from __future__ import annotations

from tensortap.exceptions import FrameworkHookNeeded

_KERAS_KINDS = ("train", "test", "predict")
#: The methods of each framework's hook (and smdebug's names for them): the framework-free hook,
#: or another framework's, asked for one says which hook has it (tests check the lists).
ADAPTER_METHODS: dict[str, tuple[str, ...]] = {
    "tensortap.pytorch.Hook": (
        "register_module",
        "register_hook",
        "register_loss",
        "register_optimizer",
        "register_grad_scaler",
        "register_router",
        "record_loss",
        "record_tensor_value",
    ),
    "tensortap.mxnet.Hook": ("register_block", "register_module", "register_hook", "register_loss"),
    "tensortap.keras.KerasHook": (
        "register_model",  # smdebug's: a KerasHook learns its model from Keras (set_model)
        "set_model",
        "set_params",
        "wrap_tape",
        *(f"on_{kind}_{edge}" for kind in _KERAS_KINDS for edge in ("begin", "end")),
        *(f"on_{kind}_batch_{edge}" for kind in _KERAS_KINDS for edge in ("begin", "end")),
        "on_epoch_begin",
        "on_epoch_end",
    ),
    "tensortap.xgboost.Hook": ("before_training", "after_iteration", "after_training"),
    "tensortap.jax.Hook": ("save_pytree", "end_step"),
}


def missing_method(cls: type, framework: str | None, name: str) -> AttributeError:
    """The error for ``hook.<name>`` that a hook of class ``cls`` (watching ``framework``)
    lacks: one naming the framework hook that has it when ``name`` is one of theirs."""
    owners = [adapter for adapter, names in ADAPTER_METHODS.items() if name in names]
    if not owners:
        return AttributeError(f"{cls.__name__!r} object has no attribute {name!r}")
    package, _, leaf = cls.__module__.rpartition(".")
    if package == "tensortap.hook":
        package = "tensortap"  # the framework-free hook's public name: tensortap.Hook
    kind = f"{package if leaf.startswith('_') else cls.__module__}.{cls.__name__}"
    what = "the framework-free hook" if framework is None else "this hook"
    return FrameworkHookNeeded(
        f"{kind} ({what}) has no {name}(): that is a method of {' and '.join(owners)}. "
        f"Make the hook of your framework instead, with the same arguments: "
        f"hook = {owners[0]}(out_dir, ...)"
    )
