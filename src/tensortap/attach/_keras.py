"""Zero code change for Keras: ``model.fit``/``evaluate``/``predict`` get the hook appended to
their callbacks, for scripts that never import tensortap.

:func:`enable` (called by ``python -m tensortap.attach`` and so by the job runner) does not
import Keras, which takes seconds: it waits for the script to import it, then patches
``keras.Model``. The hook is created at the first ``fit``/``evaluate``/``predict`` from the JSON
configuration; a script that passes its own KerasHook keeps it.
"""

from __future__ import annotations

import functools
import inspect
import logging
from types import ModuleType
from typing import Any

from tensortap.attach._import_hooks import Attachment
from tensortap.hook._config import HookConfig

logger = logging.getLogger(__name__)


_attachment = Attachment("keras", "Keras", "tensortap.keras._hook:KerasHook")


def enable(config: HookConfig) -> None:
    """Patch Keras now if it is imported, else as soon as the script imports it."""
    _attachment.enable(config, _patch)


def _patch(keras: ModuleType) -> None:
    model_cls = keras.Model
    for method in ("fit", "evaluate", "predict"):
        setattr(model_cls, method, _with_hook(getattr(model_cls, method)))


def _with_hook(original: Any) -> Any:
    signature = inspect.signature(original)

    @functools.wraps(original)
    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            from keras.callbacks import CallbackList

            from tensortap.keras._hook import KerasHook

            bound = signature.bind(self, *args, **kwargs)
            given = bound.arguments.get("callbacks")
            # fit's own validation pass (validation_split, validation_data) calls evaluate with
            # fit's CallbackList: the hook, if fit got one, is in it already
            if not isinstance(given, CallbackList):
                callbacks = list(given or [])
                if not any(isinstance(c, KerasHook) for c in callbacks):
                    callbacks.append(_attachment.hook())
                bound.arguments["callbacks"] = callbacks
                if original.__name__ == "fit":  # fit's arguments: the run's configuration
                    _gather_fit_config(callbacks, dict(bound.arguments))
                args, kwargs = bound.args[1:], bound.kwargs
        except Exception:
            logger.exception("tensortap could not attach to this Keras call; it runs unhooked")
        return original(self, *args, **kwargs)

    return run


def _gather_fit_config(callbacks: list[Any], arguments: dict[str, Any]) -> None:
    from tensortap.keras._config import fit_call_config
    from tensortap.keras._hook import KerasHook

    for callback in callbacks:
        if isinstance(callback, KerasHook):
            callback.gather_config(functools.partial(fit_call_config, arguments))
