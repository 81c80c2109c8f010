"""Vital signs: the few numbers of every training step that tell whether it is healthy.

A hook saves them in the ``vitals`` collection, one scalar each, at **every** step of every mode,
whatever the schedule of the other collections (tensors and per-layer statistics keep theirs):
a loss spike or a gradient explosion between two saving steps is never missed, and a dashboard
draws the loss of every step. The collection has its own save config (every step), so a hook's
``save_interval`` does not thin it; ``vitals.save_interval`` (a collection setting) does.

The names, one concept each (a framework saves those it can see):

==============================  ==============================================================
``vitals/loss``                 the loss the step trained on (the framework's logged loss: the
                                mean over micro-batches under accumulation); at EVAL steps the
                                evaluation batch's loss
``vitals/grad_norm``            the total L2 norm of the gradients, before any clipping
``vitals/update_norm``          the L2 norm of the update the optimizer applied to the weights
``vitals/lr``                   the learning rate (of the first parameter group);
                                ``vitals/lr/<k>`` for the parameter group k >= 1 when they differ
``vitals/loss_scale``           the mixed-precision loss scale (GradScaler's, say)
``vitals/step_time``            seconds from the previous step's end to this one's
``vitals/samples_per_second``   samples this step trained on, divided by ``step_time``
==============================  ==============================================================

The collection never makes a step's other work due: ``StepRecorder.is_anything_due`` leaves it
out, so an adapter that skips its per-step work on steps where nothing is due keeps doing so.
Hooks save vital signs with :meth:`tensortap.hook._hook.Hook.save_vitals`.
"""

from __future__ import annotations

from collections.abc import Mapping

from tensortap.core._save_config import SaveConfig
from tensortap.exceptions import InvalidConfigError

VITALS = "vitals"
VITALS_PREFIX = "vitals/"


class Vital:
    """The names of the vital signs (see the module's table)."""

    LOSS = "vitals/loss"
    GRAD_NORM = "vitals/grad_norm"
    UPDATE_NORM = "vitals/update_norm"
    LR = "vitals/lr"
    LOSS_SCALE = "vitals/loss_scale"
    STEP_TIME = "vitals/step_time"
    SAMPLES_PER_SECOND = "vitals/samples_per_second"


ALL_VITALS = (
    Vital.LOSS,
    Vital.GRAD_NORM,
    Vital.UPDATE_NORM,
    Vital.LR,
    Vital.LOSS_SCALE,
    Vital.STEP_TIME,
    Vital.SAMPLES_PER_SECOND,
)
_SHORT = {name[len(VITALS_PREFIX) :]: name for name in ALL_VITALS}
#: The full name of each vital sign by its short and full names (asked at every step).
_FULL_NAMES = {**_SHORT, **{name: name for name in ALL_VITALS}}


def vitals_save_config() -> SaveConfig:
    """The ``vitals`` collection's own schedule: every step of every mode."""
    return SaveConfig(save_interval=1)


def vital_name(name: str) -> str:
    """The full name of a vital sign given as ``"loss"`` or ``"vitals/loss"``
    (``"lr/2"``: the learning rate of parameter group 2)."""
    if not isinstance(name, str):
        raise InvalidConfigError(f"a vital sign's name must be a string, got {name!r}")
    short = name[len(VITALS_PREFIX) :] if name.startswith(VITALS_PREFIX) else name
    if short in _SHORT:
        return _SHORT[short]
    head, _, group = short.partition("/")
    if head == "lr" and group.isdigit() and int(group) >= 1:
        return f"{Vital.LR}/{int(group)}"
    raise InvalidConfigError(
        f"{name!r} is not a vital sign; expected one of "
        f"{', '.join(sorted(_SHORT))} (or lr/<k> for parameter group k >= 1)"
    )


def vital_names(values: Mapping[str, object]) -> dict[str, object]:
    """``values`` keyed by full vital-sign names (None values dropped)."""
    full = _FULL_NAMES.get
    return {full(k) or vital_name(k): v for k, v in values.items() if v is not None}
