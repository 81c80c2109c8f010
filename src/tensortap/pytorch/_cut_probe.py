"""Whether parameters that get no gradient sit behind a cut graph (a part of
:mod:`tensortap.pytorch._loop_facts`).

Trainable parameters left with ``grad`` None by every backward pass are ambiguous alone: they
may be unused (a pooler, an expert no token chose) or cut off from the loss (a stray
``.detach()``, ``.data``, a NumPy round trip). Once the loop facts have named them, a probe
watches the modules that own them for the next :data:`PROBE_FORWARDS` forward passes with
gradients on: a module that runs in each of them, in train mode, and hands out a tensor in the
autograd graph (``grad_fn`` set) was meant to be trained through; when the optimizer holds its
parameters as well, the gradient was cut on its way back from the loss. The probe costs one
forward hook per owning module, for those passes only; it reads attributes, never values.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import nn

#: The forward passes with gradients the owning modules are watched for.
PROBE_FORWARDS = 8


def _first_tensor(out: Any) -> torch.Tensor | None:
    """The first tensor of a module's output (a tensor, or one in a tuple, list or dict: an
    RNN's ``(output, hidden)``, a Hugging Face output's first field)."""
    if isinstance(out, torch.Tensor):
        return out
    values: Iterable[Any] = ()
    if isinstance(out, tuple | list):
        values = out
    elif isinstance(out, dict):
        values = out.values()
    return next((v for v in values if isinstance(v, torch.Tensor)), None)


class CutProbe:
    """Watches the modules owning ``blocked`` parameters; :meth:`share` answers once done."""

    def __init__(
        self,
        models: Iterable[nn.Module],
        blocked: dict[str, nn.Parameter],
        contain: Callable[[BaseException, str], None],
    ) -> None:
        """``blocked``: name -> parameter left without a gradient."""
        self._contain = contain
        self._sizes = {name: p.numel() for name, p in blocked.items()}
        self._ids = ids = {id(p): name for name, p in blocked.items()}
        # module -> the blocked parameters it holds itself (not its children's)
        self._owned: dict[nn.Module, list[str]] = {}
        for model in models:
            for module in model.modules():
                mine = [ids[id(p)] for p in module._parameters.values() if id(p) in ids]
                if mine:
                    self._owned.setdefault(module, []).extend(mine)
        self._forwards: dict[nn.Module, int] = dict.fromkeys(self._owned, 0)
        self._in_graph: dict[nn.Module, int] = dict.fromkeys(self._owned, 0)
        self._in_graph_names: set[str] = set()  # set at close
        self._handles = [m.register_forward_hook(self._on_output) for m in self._owned]
        self.done = False
        if not self._handles:
            self.close()

    def _on_output(self, module: nn.Module, _inputs: Any, out: Any) -> None:
        try:
            if module not in self._forwards or not torch.is_grad_enabled() or not module.training:
                return  # a replica (DataParallel), a pass without gradients or in eval mode
            self._forwards[module] += 1
            tensor = _first_tensor(out)
            if tensor is not None and tensor.grad_fn is not None:
                self._in_graph[module] += 1
            if min(self._forwards.values()) >= PROBE_FORWARDS or (
                max(self._forwards.values()) >= 4 * PROBE_FORWARDS
            ):
                self.close()
        except Exception as exc:  # a probe never breaks training
            self.close()
            self._contain(exc, "watching the modules whose parameters get no gradient")

    def close(self) -> None:
        """Remove the probe's hooks and let go of the modules (the answer stays)."""
        for handle in self._handles:
            handle.remove()
        self._handles = []
        if not self.done:
            self._in_graph_names = {
                name
                for module, names in self._owned.items()
                if self._forwards[module] and self._in_graph[module] == self._forwards[module]
                for name in names
            }
        self._owned, self._forwards, self._in_graph = {}, {}, {}
        self.done = True

    def share(self, blocked: set[str], held: set[int]) -> float:
        """Of the values of the parameters ``blocked`` now (names, by element count: those the
        loop facts still find without a gradient), the share cut off: their module in train
        mode with its output in the graph every time it ran while watched, held by an
        optimizer (``held``: the ids of the parameters the optimizers hold)."""
        held_names = {self._ids[i] for i in held if i in self._ids}
        total = sum(self._sizes.get(name, 0) for name in blocked)
        cut = sum(self._sizes[name] for name in self._in_graph_names & held_names & blocked)
        return cut / total if total else 0.0
