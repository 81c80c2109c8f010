"""The hook and ``torch.compile``.

Registered as the compiled wrapper (``model = torch.compile(model); hook.register_module(model)``),
a model's step callbacks run around the compiled call, outside its graph: weights, gradients,
losses and optimizer state are captured with no graph break. Module inputs and outputs would need
hooks on every layer inside the graph, so they are refused for a compiled model. A model compiled
*after* it was registered still trains and is captured, with graph breaks, and a warning says how
to avoid them.
"""

from __future__ import annotations

import logging

import torch
from torch import nn

from tensortap.core._recorder import StepRecorder
from tensortap.exceptions import InvalidConfigError
from tensortap.pytorch._naming import IO_COLLECTIONS, RELU_ACTIVATIONS

logger = logging.getLogger(__name__)
_warned = False


def is_compiled(module: nn.Module) -> bool:
    """True for the wrapper ``torch.compile(model)`` returns."""
    return isinstance(getattr(module, "_orig_mod", None), nn.Module)


def refuse_io_inside_compiled(recorder: StepRecorder, slots_on: bool = False) -> None:
    """Refuse a compiled model when module inputs or outputs are to be saved. With
    statistics="slots" (``slots_on``) the statistics of ``relu_activations`` are computed inside
    the graph, but their raw values cannot be."""
    wanted = sorted(set(IO_COLLECTIONS) & recorder.include_collections)
    slots = None
    if slots_on:
        slots = recorder.collections.get(RELU_ACTIVATIONS).reduction_config
        slots = slots or recorder.reduction_config
    if slots is not None and RELU_ACTIVATIONS in wanted:
        wanted.remove(RELU_ACTIVATIONS)
        if slots.saves_raw or slots.save_shape:
            raise InvalidConfigError(
                "a torch.compile'd model was registered with statistics='slots' and "
                "relu_activations included, whose reduction config saves raw values or shapes "
                f"({slots!r}); inside a compiled graph only their statistics can be captured "
                "(without a graph break). Give relu_activations reductions only, e.g. "
                "hook.get_collection('relu_activations').reduction_config = "
                "ReductionConfig(reductions=['mean', 'std', 'max', 'nonfinite'], norms=['l2'])"
            )
    if wanted:
        also = (
            " (with statistics='slots', relu_activations are captured as statistics inside the "
            "graph; inputs and outputs of every layer are not)"
            if slots is not None
            else ""
        )
        raise InvalidConfigError(
            f"a torch.compile'd model was registered with {wanted} included, but capturing "
            "module inputs and outputs inside a compiled model would break its graphs at every "
            "layer. Leave those collections out for the compiled model (weights, gradients, "
            "losses and optimizer state are captured without a graph break), or register and "
            f"train the model uncompiled while you look at its activations{also}"
        )


@torch.compiler.disable  # type: ignore[untyped-decorator]
def warn_traced() -> None:
    """Called from a hook callback that Dynamo is tracing: say once how to avoid the breaks."""
    global _warned
    if not _warned:
        _warned = True
        logger.warning(
            "tensortap: a registered model is being compiled by torch.compile, and the hook's "
            "callbacks inside it break its graph on every step. Register the compiled module "
            "instead (model = torch.compile(model); hook.register_module(model)): its callbacks "
            "then run outside the compiled graph"
        )
