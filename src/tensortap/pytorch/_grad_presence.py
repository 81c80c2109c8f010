"""Which trainable parameters get no gradient, part of the training loop's facts (see
:mod:`tensortap.pytorch._loop_facts`): after the first backward passes and on due steps, the
trainable parameters of the registered models that every backward pass so far left with
``grad`` None (``no_grad/<name>``: its number of values; ``no_grad_params``; ``no_grad_share``:
their share of the trainable values), and, once that share reaches :data:`CUT_PROBE_SHARE`,
how much of it is cut off on its way back from the loss (``no_grad_cut_share``, from the
:class:`~tensortap.pytorch._cut_probe.CutProbe`).

Reading whether a gradient exists is an attribute read: no value is read, nothing waits for
the device. The parameters found without a gradient are held by weak reference, by name: the
facts keep no model alive.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

from torch import nn

from tensortap.pytorch._cut_probe import CutProbe
from tensortap.pytorch._registry import Registry

#: Checks after which the parameters without a gradient are named (the first backward passes
#: of a loop can run before every part of the model is in its graph).
FIRST_CHECKS = 3
#: The share of the trainable values left without a gradient from which the modules owning them
#: are probed for a cut graph (:mod:`._cut_probe`).
CUT_PROBE_SHARE = 0.5


class GradientPresence:
    """Tracks the trainable parameters that no backward pass gives a gradient."""

    def __init__(
        self,
        registry: Registry,
        note: Callable[[str, Any], None],
        contain: Callable[[BaseException, str], None],
    ) -> None:
        self._registry = registry
        self._note = note
        self._contain = contain
        # trainable parameters left without a gradient by every backward pass, by name (None
        # before the first check)
        self._blocked: dict[str, weakref.ref[nn.Parameter]] | None = None
        self._named: set[str] = set()  # the names noted as ``no_grad/<name>`` so far
        self._checks = 0
        self._cut: CutProbe | None = None  # once most trainable values get no gradient

    def after_backward(self, check: bool) -> None:
        """A backward pass ran (any ``Tensor.backward``). Every pass drops, from the parameters
        found without a gradient, those that have one now (attribute reads): one that gets
        its gradient in passes never checked is not blocked (a GAN's generator, left without
        one by its critic's steps, gets its own every fifth step). With ``check`` (the first
        passes, due steps), which trainable parameters this pass left without one."""
        if self._blocked:
            for name in [n for n, p in self._blocked.items() if _has_grad(p)]:
                del self._blocked[name]
        if not check:
            return
        params = [(name, p) for name, p, _ in self._registry.params if p.requires_grad]
        if not params:
            return
        before = self._blocked
        self._blocked = {
            name: weakref.ref(p)
            for name, p in params
            if p.grad is None and (before is None or name in before)
        }
        self._checks += 1
        if self._checks < FIRST_CHECKS:
            return
        for old in self._named - set(self._blocked):
            self._note(f"no_grad/{old}", 0)  # got a gradient since
        sizes = {name: p.numel() for name, p in params}
        for name in self._blocked:
            self._note(f"no_grad/{name}", sizes[name])
        self._named |= set(self._blocked)
        self._note("no_grad_params", len(self._blocked))
        share = sum(sizes[n] for n in self._blocked) / sum(sizes.values())
        self._note("no_grad_share", share)
        if self._cut is None and share >= CUT_PROBE_SHARE:
            blocked = {name: p for name, p in params if name in self._blocked}
            self._cut = CutProbe(self._registry.models, blocked, self._contain)

    def measure(self, held: Callable[[], set[int]]) -> None:
        """At saving time: of the values without a gradient, the share cut off on their way
        back from the loss, once the probe is done (``held``: the ids of the parameters the
        optimizers hold)."""
        if self._cut is not None and self._cut.done and self._blocked is not None:
            self._note("no_grad_cut_share", self._cut.share(set(self._blocked), held()))

    def close(self) -> None:
        """Training ended: the probe's hooks come off (what was found stays)."""
        if self._cut is not None:
            self._cut.close()


def _has_grad(ref: weakref.ref[nn.Parameter]) -> bool:
    """Whether a parameter found without a gradient got one since (or is gone)."""
    param = ref()
    return param is None or param.grad is not None
