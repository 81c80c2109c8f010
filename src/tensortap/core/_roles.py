"""Which parameters of a model are biases: by shape and use, whatever their names.

A bias is a vector added to a layer's output. Names say so only by habit: PyTorch's recurrent
layers call theirs ``bias_ih_l0`` and ``bias_hh_l0``, Haiku ``b``, a hand-written model ``b0``.
Taken for a weight, a bias that starts at zero has no size to measure its updates against (an
update/weight ratio of 1e13) and an initial value of zeros by design. So a parameter is a bias:

- by name: its last name component ends in ``bias`` (whatever its shape, as names always said),
  or holds ``bias`` and it is a vector (one axis longer than 1: ``bias_hh_l0``, and
  ``nn.MultiheadAttention``'s ``bias_k`` of shape (1, 1, E));
- by shape and use: a 1-D parameter beside a kernel (a parameter of 2 or more axes of the same
  parent) with an output axis as long, with the framework's :class:`Layout` saying which axes
  are output axes and whether it must also start at zero;
- where the layout allows it, a 1-D parameter of zeros when training starts, wherever it is.

A norm layer's 1-D scale (ones, no kernel beside it) stays a weight. Framework-free: each
adapter passes ``(name, array)`` pairs and its own layout (NumPy arrays, or its own tensors
with a ``zeros`` test of its own).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Layout:
    """How one framework lays out a layer's parameters.

    ``sep`` joins a name's path (``/`` in JAX trees, ``.`` in PyTorch); ``output_axes`` are the
    axes of a kernel a bias of its length is added along (Flax and Haiku kernels are
    ``(in, out)``: the last; PyTorch's ``(out, in, ...)``: the first, or the last in a module
    computing ``x @ w``); ``beside_needs_zeros``: a 1-D parameter beside a kernel is a bias
    only when it starts at zero (in PyTorch a 1-D scale of ones sits beside weights too: Mamba's
    ``D`` beside ``A_log``); ``zeros_alone``: a 1-D parameter of zeros at the start is a bias
    even with no kernel beside it (a plain JAX tree keeps its biases apart from its kernels)."""

    sep: str
    output_axes: tuple[int, ...]
    beside_needs_zeros: bool
    zeros_alone: bool


#: Pytrees of Flax, Haiku, Equinox and hand-written JAX models.
JAX_LAYOUT = Layout(sep="/", output_axes=(-1,), beside_needs_zeros=False, zeros_alone=True)
#: ``named_parameters()`` of a PyTorch model.
TORCH_LAYOUT = Layout(sep=".", output_axes=(0, -1), beside_needs_zeros=True, zeros_alone=False)


def named_bias(name: str, shape: tuple[int, ...], sep: str) -> bool:
    """Whether a parameter's name makes it a bias (see the module docstring)."""
    last = name.rpartition(sep)[2]
    if last.endswith("bias"):
        return True
    return "bias" in last and sum(1 for n in shape if n > 1) == 1


def bias_names(
    leaves: Iterable[tuple[str, Any]],
    layout: Layout,
    *,
    initial: bool = False,
    zeros: Callable[[Any], bool] | None = None,
) -> set[str]:
    """The names among ``(name, array)`` parameters that are biases (see the module docstring).

    ``initial``: the arrays are the values training starts from, so a 1-D array of zeros may
    tell a bias (``zeros(array)`` tells, default: a NumPy test that is False for an array
    without values, such as a JAX tracer); otherwise shapes alone decide."""
    is_zero = zeros or all_zero
    named = [(name, _shape(leaf), leaf) for name, leaf in leaves]
    kernels: set[tuple[str, int]] = set()  # (parent, length of an output axis)
    for name, shape, _ in named:
        if len(shape) >= 2:
            parent = name.rpartition(layout.sep)[0]
            kernels.update((parent, shape[axis]) for axis in layout.output_axes)
    out = set()
    for name, shape, leaf in named:
        if named_bias(name, shape, layout.sep):
            out.add(name)
            continue
        if len(shape) != 1:
            continue
        beside = (name.rpartition(layout.sep)[0], shape[0]) in kernels
        if not (beside or layout.zeros_alone):
            continue
        if (beside and not layout.beside_needs_zeros) or (initial and is_zero(leaf)):
            out.add(name)
    return out


def _shape(leaf: Any) -> tuple[int, ...]:
    return tuple(int(n) for n in getattr(leaf, "shape", ()))


def all_zero(leaf: Any) -> bool:
    """Whether a concrete array holds only zeros (False for one without values, a tracer)."""
    try:
        return bool(np.all(np.asarray(leaf) == 0))
    except Exception:  # a tracer has no values: the shape alone decides
        return False
