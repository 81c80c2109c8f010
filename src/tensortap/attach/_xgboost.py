"""Zero code change for XGBoost: ``xgb.train`` and the scikit-learn estimators get the hook
appended to their callbacks, for scripts that never import tensortap.

:func:`enable` (called by ``python -m tensortap.attach`` and so by the job runner) waits for
the script to import XGBoost, then patches ``xgboost.train`` (which the scikit-learn estimators
call too). The hook is created at the first call from the JSON configuration; its validation
data, when the script gave it none, is the last set in ``evals`` that is not the training data,
and the set that is the training data is saved as ``train`` (``XGBClassifier.fit`` calls it
``validation_0``; see :mod:`tensortap.xgboost._hook`). A script that passes its own hook keeps
it (its sets are named the same way).
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


_attachment = Attachment("xgboost", "XGBoost", "tensortap.xgboost._hook:Hook")


def enable(config: HookConfig) -> None:
    _attachment.enable(config, _patch)


def _patch(xgboost: ModuleType) -> None:
    import xgboost.sklearn
    import xgboost.training

    patched = _with_hook(xgboost.training.train)
    for module in (xgboost, xgboost.training, xgboost.sklearn):
        if getattr(module, "train", None) is not None:
            setattr(module, "train", patched)  # noqa: B010 - the module may bind train itself


def _with_hook(original: Any) -> Any:
    signature = inspect.signature(original)

    @functools.wraps(original)
    def train(*args: Any, **kwargs: Any) -> Any:
        try:
            from tensortap.xgboost._hook import Hook

            bound = signature.bind(*args, **kwargs)
            callbacks = list(bound.arguments.get("callbacks") or [])
            dtrain = bound.arguments.get("dtrain")
            evals = list(bound.arguments.get("evals") or ())
            if not any(isinstance(c, Hook) for c in callbacks):
                hook = _attachment.hook()
                if hook.validation_data is None:
                    others = [d for d, _ in evals if d is not dtrain]
                    hook.validation_data = others[-1] if others else None
                callbacks.append(hook)
            for callback in callbacks:  # the script's own hook too: the training set by role
                if isinstance(callback, Hook):
                    callback.name_eval_sets(dtrain, evals)
            bound.arguments["callbacks"] = callbacks
            _gather_train_config(callbacks, dict(bound.arguments))
            args, kwargs = bound.args, bound.kwargs
        except Exception:
            logger.exception("tensortap could not attach to this xgboost.train; it runs unhooked")
        return original(*args, **kwargs)

    return train


def _gather_train_config(callbacks: list[Any], arguments: dict[str, Any]) -> None:
    """``xgb.train``'s arguments, into the run's configuration of the hook that watches it."""
    from tensortap.xgboost._config import train_call_config
    from tensortap.xgboost._hook import Hook

    for callback in callbacks:
        if isinstance(callback, Hook):
            callback.gather_config(functools.partial(train_call_config, arguments))
