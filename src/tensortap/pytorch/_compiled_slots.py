"""Slot statistics of activations inside a ``torch.compile``'d model, with no graph break.

With ``statistics="slots"`` and ``relu_activations`` included, a compiled model registered with
the hook gets, on each of its activation modules, a forward hook that Dynamo traces into the
graph: it merges the slots of the module's input and output into a small device buffer (an
in-place update of a tensor the graph takes as an input, as BatchNorm updates its running
statistics), and passes the output through an identity autograd function whose backward merges
the slots of the output's gradient into the same buffer. ``fullgraph=True`` holds: nothing
leaves the graph, no value is read.

The hooks are installed once, at registration, and run at every step (a compiled graph cannot
change with the schedule without recompiling); at each step's end the hook reads the rows only
when their collections are due, and empties the buffer. Several calls in one step (gradient
accumulation) merge: the statistics are those of every call's values together. Raw values and
shapes cannot be captured so and are refused at setup.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

from tensortap.core._recorder import StepRecorder
from tensortap.core._records import Record, RecordKind
from tensortap.pytorch._naming import (
    GRADIENT_PREFIX,
    RELU_ACTIVATIONS,
    ModuleNames,
    may_hold_module_io,
)
from tensortap.pytorch._registry import Registry
from tensortap.pytorch._slot_kernels import empty_rows, row_of
from tensortap.pytorch._slot_layout import ACTIVATION_GRADIENTS, SUMMED
from tensortap.pytorch._slots import SlotStatistics

_NAN = float("nan")
_STORED = {
    torch.float16: "float16",
    torch.bfloat16: "bfloat16",
    torch.float32: "float32",
    torch.float64: "float64",
}


def _merge(buffer: torch.Tensor, row: int, values: torch.Tensor) -> None:
    buffer[row, :SUMMED].add_(values[:SUMMED])
    buffer[row, SUMMED:].copy_(torch.maximum(buffer[row, SUMMED:], values[SUMMED:]))


class _GradientTap(torch.autograd.Function):
    """The identity; its backward merges the slots of the gradient into ``buffer[row]``."""

    @staticmethod
    def forward(
        ctx: torch.autograd.function.FunctionCtx, x: torch.Tensor, buffer: torch.Tensor, row: int
    ) -> torch.Tensor:
        ctx.buffer = buffer  # type: ignore[attr-defined]
        ctx.row = row  # type: ignore[attr-defined]
        return x.view_as(x)

    @staticmethod
    def backward(
        ctx: torch.autograd.function.FunctionCtx, grad: torch.Tensor
    ) -> tuple[torch.Tensor, None, None]:
        buffer: torch.Tensor = ctx.buffer  # type: ignore[attr-defined]
        _merge(buffer, ctx.row, row_of(grad, buffer.dtype))  # type: ignore[attr-defined]
        return grad, None, None


def tap(model: nn.Module, registry: Registry, recorder: StepRecorder) -> CompiledTaps:
    """The in-graph slot hooks of the activation modules of ``model`` (unwrapped). The hook's
    per-module hooks then skip its modules quietly (``covered``), unless another included
    collection wants inputs or outputs of its other layers (they warn then)."""
    modules = [(m, registry.names[m]) for m in model.modules() if m in registry.names]
    modules = [(m, names) for m, names in modules if names.kind and not names.loss]
    floats = [p for p in model.parameters() if p.is_floating_point()]
    device = floats[0].device if floats else torch.device("cpu")
    dtype = floats[0].dtype if floats else torch.float32
    taps = CompiledTaps(modules, device, dtype)
    others = [
        c
        for c in recorder.include_collections
        if c != RELU_ACTIVATIONS and may_hold_module_io(recorder.collections.get(c))
    ]
    if not others:
        taps.covered = {id(m) for m in model.modules()}
    return taps


class CompiledTaps:
    """The in-graph slot hooks of one compiled model's activation modules, and their buffer:
    three rows per module (its input, its output, the output's gradient)."""

    def __init__(
        self, modules: list[tuple[nn.Module, ModuleNames]], device: torch.device, dtype: torch.dtype
    ) -> None:
        wide = torch.float64 if device.type == "cpu" or dtype == torch.float64 else torch.float32
        self.stored = _STORED.get(dtype, "float32")
        self.buffer = empty_rows(3 * len(modules), wide, device)
        self.rows: list[tuple[str, tuple[str, ...]]] = []
        self._handles: list[RemovableHandle] = []
        self.modules = [id(module) for module, _ in modules]
        self.covered: set[int] = set(self.modules)  # modules whose wanted I/O the graph gives
        for i, (module, names) in enumerate(modules):
            self.rows.append((names.input_name(0), names.input_collections))
            self.rows.append((names.output_name(0), names.output_collections))
            self.rows.append((GRADIENT_PREFIX + names.output_name(0), (ACTIVATION_GRADIENTS,)))
            self._handles.append(module.register_forward_hook(self._hook(3 * i)))

    def _hook(self, base: int):  # type: ignore[no-untyped-def]
        buffer = self.buffer

        def hook(module: nn.Module, args: tuple[object, ...], output: object) -> object:
            if not isinstance(output, torch.Tensor) or not output.is_floating_point():
                return None
            if args and isinstance(args[0], torch.Tensor) and args[0].is_floating_point():
                _merge(buffer, base, row_of(args[0], buffer.dtype))
            _merge(buffer, base + 1, row_of(output, buffer.dtype))
            if output.requires_grad:
                return _GradientTap.apply(output, buffer, base + 2)  # type: ignore[no-untyped-call]
            return None

        return hook

    def take(self, recorder: StepRecorder, slots: SlotStatistics) -> None:
        """At a step's end: the rows whose tensors are due join the step's slots (a gradient's
        only when its output is saved too); then the buffer is emptied for the next step."""
        picks: list[tuple[int, str, list[Record]]] = []
        for i, (name, collections) in enumerate(self.rows):
            if collections == (ACTIVATION_GRADIENTS,):
                if ACTIVATION_GRADIENTS not in recorder.include_collections:
                    continue
                if recorder.plan_for(name[len(GRADIENT_PREFIX) :]) is None:
                    continue
            plan = recorder.begin(name, collections)
            if plan is None or not plan.reductions:
                continue
            recs = [
                Record(name, RecordKind.REDUCTION, self.stored, (), None, red, on_abs, _NAN)
                for red, on_abs in plan.reductions
            ]
            recorder.put(name, recs)
            picks.append((i, name, recs))
        if picks:
            slots.add_rows(self.buffer, picks)
        self.clear()

    def clear(self) -> None:
        """Empty the buffer for the next step."""
        self.buffer[:, :SUMMED] = 0.0
        self.buffer[:, SUMMED:] = -float("inf")

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []
