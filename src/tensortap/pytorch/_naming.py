"""How the PyTorch hook names what it saves, and which collections each tensor joins.

- parameters: their ``named_parameters()`` path (``fc1.weight``, ``features.0.bias``); gradients
  ``gradient/<path>``. A parameter joins ``biases`` by name, shape and use (``rnn.bias_hh_l0``
  too: :func:`parameter_collections`), else ``weights``. A second registered model gets its
  class name as a prefix (``Discriminator.fc1.weight``), or the ``name`` given to
  ``register_module``.
- module inputs and outputs: ``<module path>_input_<i>`` and ``<module path>_output_<i>``; the
  top-level model's path is its class name (``Net_output_0``), as in smdebug.
- activation modules (ReLU, LeakyReLU, GELU, Tanh, Sigmoid, ..., and the activation classes of
  Hugging Face ``transformers``: ``GELUActivation``, ``NewGELUActivation``, ...):
  ``<module path>/<kind>_input_<i>`` and ``<module path>/<kind>_output_<i>``
  (``features.1/relu_output_0``, ``transformer.h.0.mlp.act/gelu_output_0``), so that rules find
  them with ``.*relu_output``, ``.*tanh_input`` whatever the layer is called.
- loss modules: ``<LossClass>_output_0`` (``CrossEntropyLoss_output_0``) and their inputs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from tensortap.core._collections import (
    INITIAL_WEIGHTS,
    TRAINING_LOOP,
    Collection,
    CollectionKeys,
)
from tensortap.core._roles import TORCH_LAYOUT, bias_names
from tensortap.pytorch._sharded import dtensor_kind, local_part

RELU_ACTIVATIONS = "relu_activations"
OPTIMIZER_VARIABLES = "optimizer_variables"
GRADIENT_PREFIX = "gradient/"

_ACTIVATION_KINDS: tuple[tuple[type[nn.Module], str], ...] = (
    (nn.ReLU6, "relu6"),
    (nn.ReLU, "relu"),
    (nn.LeakyReLU, "leaky_relu"),
    (nn.PReLU, "prelu"),
    (nn.RReLU, "rrelu"),
    (nn.ELU, "elu"),
    (nn.SELU, "selu"),
    (nn.CELU, "celu"),
    (nn.GELU, "gelu"),
    (nn.SiLU, "silu"),
    (nn.Mish, "mish"),
    (nn.Softplus, "softplus"),
    (nn.Hardswish, "hardswish"),
    (nn.Hardsigmoid, "hardsigmoid"),
    (nn.Hardtanh, "hardtanh"),
    (nn.Tanh, "tanh"),
    (nn.Sigmoid, "sigmoid"),
    (nn.LogSigmoid, "logsigmoid"),
    (nn.Softsign, "softsign"),
)

#: Activation modules of libraries built on torch that are not ``torch.nn`` classes, by the
#: defining module and class name (subclasses included): declared, never guessed from a name,
#: and never imported here (a model holding one has imported its library already).
_LIBRARY_ACTIVATION_KINDS: dict[tuple[str, str], str] = {
    ("transformers.activations", "GELUActivation"): "gelu",
    ("transformers.activations", "NewGELUActivation"): "gelu",
    ("transformers.activations", "FastGELUActivation"): "gelu",
    ("transformers.activations", "QuickGELUActivation"): "gelu",
    ("transformers.activations", "ClippedGELUActivation"): "gelu",
    ("transformers.activations", "AccurateGELUActivation"): "gelu",
    ("transformers.activations", "GELUTanh"): "gelu",
    ("transformers.activations", "PytorchGELUTanh"): "gelu",
    ("transformers.activations", "SiLUActivation"): "silu",
    ("transformers.activations", "MishActivation"): "mish",
    ("transformers.activations", "LaplaceActivation"): "laplace",
    ("transformers.activations", "ReLUSquaredActivation"): "relu2",
    ("transformers.activations", "XIELUActivation"): "xielu",
}

_INPUTS = (CollectionKeys.INPUTS,)
_OUTPUTS = (CollectionKeys.OUTPUTS,)
_ACT_INPUTS = (CollectionKeys.INPUTS, RELU_ACTIVATIONS)
_ACT_OUTPUTS = (CollectionKeys.OUTPUTS, RELU_ACTIVATIONS)
_LOSS_OUTPUTS = (CollectionKeys.OUTPUTS, CollectionKeys.LOSSES)
WEIGHT_COLLECTIONS = (CollectionKeys.WEIGHTS,)
BIAS_COLLECTIONS = (CollectionKeys.BIASES,)
GRADIENT_COLLECTIONS = (CollectionKeys.GRADIENTS,)
LOSS_COLLECTIONS = (CollectionKeys.LOSSES,)
OPTIMIZER_COLLECTIONS = (OPTIMIZER_VARIABLES,)
#: What ``all`` leaves out: the optimizer's hyperparameters and state (``optimizer/...``,
#: ``optimizer_1/...``), as smdebug's ``all`` did; they are saved when ``optimizer_variables``
#: is included (the moments of Adam would otherwise add twice the model's size to every step).
ALL_EXCLUDES = r"^optimizer(_\d+)?/"
#: Collections that module inputs and outputs join by default (saved by per-module hooks).
IO_COLLECTIONS = (CollectionKeys.INPUTS, CollectionKeys.OUTPUTS, RELU_ACTIVATIONS)
#: Collections whose members are never module inputs or outputs.
_NOT_IO = frozenset(
    (
        CollectionKeys.LOSSES,  # loss modules have hooks of their own
        CollectionKeys.WEIGHTS,
        CollectionKeys.BIASES,
        CollectionKeys.GRADIENTS,
        OPTIMIZER_VARIABLES,
        INITIAL_WEIGHTS,
        TRAINING_LOOP,
    )
)


def may_hold_module_io(collection: Collection) -> bool:
    """Whether a module's inputs or outputs can join ``collection`` (so per-module forward hooks
    are needed while it is due): the I/O collections, and any other that has include regexes or
    names like ``<path>_output_<i>``."""
    if collection.name in IO_COLLECTIONS:
        return True
    if collection.name in _NOT_IO:
        return False
    return bool(collection.include_regex) or any(
        "_input_" in n or "_output_" in n for n in collection.tensor_names
    )


def activation_kind(module: nn.Module) -> str | None:
    """``relu``, ``tanh``, ... for activation modules; None for anything else."""
    for cls, kind in _ACTIVATION_KINDS:
        if isinstance(module, cls):
            return kind
    for base in type(module).__mro__:
        found = _LIBRARY_ACTIVATION_KINDS.get((base.__module__, base.__name__))
        if found is not None:
            return found
    return None


def is_loss_module(module: nn.Module) -> bool:
    return isinstance(module, nn.modules.loss._Loss)


def unwrap(module: nn.Module) -> nn.Module:
    """The model inside DistributedDataParallel, DataParallel and torch.compile wrappers."""
    seen = 0
    while seen < 8:
        inner = getattr(module, "_orig_mod", None)  # torch.compile
        if inner is None and isinstance(
            module, (nn.parallel.DistributedDataParallel, nn.DataParallel)
        ):
            inner = module.module
        if not isinstance(inner, nn.Module):
            return module
        module, seen = inner, seen + 1
    return module


@dataclass
class ModuleNames:
    """Tensor names and collections of one module's inputs and outputs (names are cached)."""

    path: str
    kind: str | None = None  # activation kind
    loss: bool = False
    _inputs: list[str] = field(default_factory=list)
    _outputs: list[str] = field(default_factory=list)

    @property
    def input_collections(self) -> tuple[str, ...]:
        return _ACT_INPUTS if self.kind else _INPUTS

    @property
    def output_collections(self) -> tuple[str, ...]:
        if self.loss:
            return _LOSS_OUTPUTS
        return _ACT_OUTPUTS if self.kind else _OUTPUTS

    def input_name(self, i: int) -> str:
        return self._name(self._inputs, "input", i)

    def output_name(self, i: int) -> str:
        return self._name(self._outputs, "output", i)

    def _name(self, cache: list[str], what: str, i: int) -> str:
        while len(cache) <= i:
            n = len(cache)
            cache.append(
                f"{self.path}/{self.kind}_{what}_{n}" if self.kind else f"{self.path}_{what}_{n}"
            )
        return cache[i]


def module_names(top: nn.Module, prefix: str) -> dict[nn.Module, ModuleNames]:
    """Names for ``top`` (the unwrapped model) and every submodule."""
    out: dict[nn.Module, ModuleNames] = {}
    for path, module in top.named_modules():
        if module in out:
            continue  # a module shared under two paths keeps its first name
        full = (f"{prefix}.{path}" if prefix else path) if path else (prefix or type(top).__name__)
        out[module] = ModuleNames(full, activation_kind(module), is_loss_module(module))
    return out


def parameter_names(top: nn.Module, prefix: str) -> list[tuple[str, torch.nn.Parameter]]:
    """``(name, parameter)`` for every parameter of ``top``, names prefixed when asked."""
    return [(f"{prefix}.{n}" if prefix else n, p) for n, p in top.named_parameters()]


def parameter_collections(
    params: list[tuple[str, torch.nn.Parameter]], *, initial: bool = True
) -> dict[str, tuple[str, ...]]:
    """Each parameter's collections: the biases for a bias by name, shape and use
    (:mod:`tensortap.core._roles`: ``bias_hh_l0``, or a 1-D parameter of zeros beside its
    module's weight; a norm layer's 1-D scale stays a weight), else the weights. ``initial``:
    the values are those training starts from (a model registered before its first step)."""
    biases = bias_names(params, TORCH_LAYOUT, initial=initial, zeros=_all_zero)
    return {name: BIAS_COLLECTIONS if name in biases else WEIGHT_COLLECTIONS for name, _ in params}


def _all_zero(param: torch.Tensor) -> bool:
    """Whether a parameter holds only zeros (its local shard when sharded; False without values,
    on the meta device)."""
    try:
        local = local_part(param) if dtensor_kind(param) else param
        if local.is_meta or local.numel() == 0:
            return False
        with torch.no_grad():
            return not bool(local.detach().count_nonzero())
    except Exception:  # a tensor we cannot read is not told by its values
        return False


def flatten_tensors(value: object, limit: int = 64) -> list[torch.Tensor]:
    """The tensors in a module's inputs or outputs (tuples, lists, dicts), in order."""
    out: list[torch.Tensor] = []
    stack = [value]
    while stack and len(out) < limit:
        item = stack.pop()
        if isinstance(item, torch.Tensor):
            out.append(item)
        elif isinstance(item, (tuple, list)):
            stack.extend(reversed(item))
        elif isinstance(item, dict):
            stack.extend(reversed(list(item.values())))
    return out
