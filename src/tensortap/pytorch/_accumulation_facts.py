"""How the backward passes between two optimizer steps add up: gradient accumulation that sums
micro-batches where it should average them, a running total back-propagated at every
micro-batch, losses summed into one backward pass, and a loss negated before backward.

:class:`~tensortap.pytorch._loop_facts.LoopFacts` hands its events here (a forward with
gradients, a loss computed, a backward pass about to run, an optimizer step taken) and records
what this finds through the setter it is given (``training_loop/accumulation_undivided``,
``accumulation_retained``, ``accumulation_summed``, ``loss_negated``). Each event costs a few
attribute reads; walking a backward pass's graph runs only on the passes the loop checks (the
first ones, and due steps). Autograd nodes are kept, not tensors: a loss summed with other
terms before backward is gone as a tensor by then, and a node does not keep its saved tensors
once its backward ran.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from tensortap.pytorch._loss_facts import apart, negated, reaches, summed_into

#: The id given to a loss recorded with ``hook.record_loss`` (no loss module).
RECORDED = -1
#: Losses summed into one backward pass, each after its own forward of a model, that make an
#: accumulation (two are a semi-supervised pair, a weak and a strong view of one batch) ...
SUMMED_MICRO_BATCHES = 3
#: ... or two, where their targets are known to be two tensors of one shape, each micro-batch's
#: own labels (R-Drop's two forwards of one batch share one target tensor; a consistency loss
#: between two views is another loss function; FixMatch's pseudo-label loss is masked, so not
#: summed whole)
SUMMED_PAIR = 2
#: Loss nodes kept between two backward passes, at most (each keeps its graph alive until the
#: backward pass, as the script's running total does; only in train mode, on checked steps).
LOSSES_KEPT = 16


@dataclass(frozen=True)
class StepPasses:
    """The backward passes of one optimizer step, as :meth:`AccumulationFacts.take` ends them."""

    #: how many ran
    passes: int
    #: the id of the loss module whose whole output every one ran on (None: not so)
    loss: int | None
    #: whether a pass ran backward through an earlier pass's graph (a running total)
    retained: bool
    #: the most micro-batch losses one pass summed whole (0: none)
    summed: int


class AccumulationFacts:
    """The backward passes between optimizer steps, and what they ran on."""

    def __init__(
        self, set_fact: Callable[[str, Any], None], checks_next: Callable[[], bool]
    ) -> None:
        self._set = set_fact
        self._checks_next = checks_next  # the coming backward pass is one the loop checks
        # the last loss module output (and the module's id), and its autograd node
        self._loss_output: tuple[weakref.ref[torch.Tensor], int] | None = None
        self._loss_node: Any = None
        # the backward passes since the last optimizer step, and the id of the loss module
        # whose whole output every one ran on
        self._micro_passes = 0
        self._micro_loss: int | None = None
        self._undivided = 0
        # since the last backward pass: forwards of a registered model with gradients, and
        # each loss's node with its loss module's id and the forwards before it
        self._forwards = 0
        self._forward_training = False  # the last of them ran in train mode
        # (node, loss module id, forwards before it, its target's storage and shape or None)
        self._step_losses: list[tuple[Any, int, int, tuple[int, tuple[int, ...]] | None]] = []
        self._summed_passes = 0  # losses of micro-batches summed into this step's backward
        self._summed = 0  # optimizer steps whose backward ran on such a sum
        # the root of the last checked backward pass since the optimizer step (a node, not
        # its saved tensors: those are freed by a backward without retain_graph)
        self._last_root: Any = None
        self._retained = 0  # optimizer steps whose micro-batches ran backward through another's
        self._retained_passes = 0  # backward passes of the current step that did so
        self._negated_passes = 0  # checked backward passes on a negated loss (-loss)

    def on_forward(self, training: bool) -> None:
        """A registered model's forward with gradients begins (in train mode, or not)."""
        self._forwards += 1
        self._forward_training = training

    def on_loss(self, output: torch.Tensor, module: int, target: Any = None) -> None:
        """A loss was computed: ``output`` of the loss module ``module`` (its id, or
        :data:`RECORDED`) on ``target`` (None: not known). Its node is kept for the
        summed-losses check when the coming backward pass is one the loop checks (asked last:
        the cheap tests come first)."""
        node = output.grad_fn
        self._loss_output, self._loss_node = (weakref.ref(output), module), node
        if node is None or not self._forward_training:
            return
        # one loss told of twice (a loss module calls the functional one; or recorded, then
        # wrapped): kept once, with its target where the second telling knows it; the target
        # is read only for a loss kept (none on the steps the loop does not check)
        start = max(len(self._step_losses) - 2, 0)
        for i, kept in enumerate(self._step_losses[start:], start):
            if kept[0] is node:
                if kept[3] is None and target is not None:
                    self._step_losses[i] = (*kept[:3], _target_key(target))
                return
        if len(self._step_losses) < LOSSES_KEPT and self._checks_next():
            self._step_losses.append((node, module, self._forwards, _target_key(target)))

    def before_backward(self, tensor: torch.Tensor, checked: bool) -> None:
        """A backward pass on ``tensor`` is about to run; ``checked``: the loop checks this
        one (its graph is walked)."""
        last, node = self._loss_output, self._loss_node
        module = None
        if last is not None and last[0]() is tensor:
            module = last[1]
        elif (
            last is not None
            and node is not None
            and tensor.grad_fn is not None
            and summed_into(tensor.grad_fn, node)
        ):
            # the loss plus other terms (a regulariser, an auxiliary loss): still whole (a walk
            # through additions only, a few attribute reads)
            module = last[1]
        if self._micro_passes and module != self._micro_loss:
            module = None  # passes on different losses (or not on a loss module's output)
        self._micro_passes += 1
        self._micro_loss = module
        if checked:
            root = tensor.grad_fn
            if module is None and node is not None and root is not None and negated(root, node):
                self._negated_passes += 1  # (-loss).backward(): gradient ascent on the loss
                self._set("loss_negated", self._negated_passes)
            if self._last_root is not None and root is not None and reaches(root, self._last_root):
                self._retained_passes += 1  # a running total of losses, backward each time
            self._last_root = root
            if root is not None:  # (the last loss is summed whole into a running total too)
                self._summed_passes = max(self._summed_passes, self._summed_losses(root))
        self._forwards, self._step_losses = 0, []

    def take(self) -> StepPasses:
        """An optimizer step was taken: the backward passes since the last one, which start
        anew."""
        passes = StepPasses(
            self._micro_passes, self._micro_loss, self._retained_passes > 0, self._summed_passes
        )
        self._micro_passes, self._micro_loss = 0, None
        self._retained_passes, self._last_root, self._summed_passes = 0, None, 0
        return passes

    def record(self, step: StepPasses, one_optimizer: bool, others_stepped: bool) -> None:
        """Record the facts of ``step``, an optimizer step of the registered parameters:
        ``one_optimizer``, it is the only optimizer that has stepped; ``others_stepped``, an
        optimizer holding none of them has too. Several passes in a loop with one optimizer,
        every one on the whole output of one loss, sum the micro-batches' gradients where they
        should average them (loops with several optimizers, a GAN's, back-propagate several
        losses by design)."""
        if step.passes >= 2 and step.loss is not None and one_optimizer and not others_stepped:
            self._undivided += 1
            self._set("accumulation_undivided", self._undivided)
            self._set("accumulation_undivided/micro_batches", step.passes)
        if step.retained:
            self._retained += 1
            self._set("accumulation_retained", self._retained)
            self._set("accumulation_retained/micro_batches", step.passes)
        if step.summed and one_optimizer:
            self._summed += 1
            self._set("accumulation_summed", self._summed)
            self._set("accumulation_summed/micro_batches", step.summed)

    def close(self) -> None:
        """Training has ended: keep nothing of the last graph."""
        self._loss_node = self._last_root = None
        self._step_losses = []

    def _summed_losses(self, root: Any) -> int:
        """How many losses of micro-batches ``root`` (a backward pass's) sums whole: at least
        :data:`SUMMED_MICRO_BATCHES` losses of one loss module (or functional loss), or
        :data:`SUMMED_PAIR` whose targets are two tensors of one shape, each after a forward of
        its own, entering ``root`` through additions only, whose graphs are apart (``total =
        total + loss`` over the micro-batches, then ``total.backward()``); 0 otherwise. A
        multi-task sum follows one forward; a sequence's per-step losses share the hidden
        state's graph."""
        found = list(self._step_losses)
        if len(found) < SUMMED_PAIR:
            return 0
        found = [f for f in found if summed_into(root, f[0])]
        forwards = [f[2] for f in found]
        targets = [f[3] for f in found]
        pair = (
            len(found) == SUMMED_PAIR
            and targets[0] is not None
            and targets[1] is not None
            and targets[0][1] == targets[1][1]  # one shape
            and targets[0][0] != targets[1][0]  # two tensors (a loss keeps its target alive)
        )
        if (
            (len(found) < SUMMED_MICRO_BATCHES and not pair)
            or len({f[1] for f in found}) != 1
            or len(set(forwards)) != len(found)
            or min(forwards) < 1
            or not apart([f[0] for f in found])
        ):
            return 0
        return len(found)


def _target_key(target: Any) -> tuple[int, tuple[int, ...]] | None:
    """A loss's target as its storage's address and its shape (None: not a tensor, or not
    known): two micro-batches' labels are two tensors, alive together until the backward pass
    that runs on their losses' sum (each loss node keeps its target)."""
    if not isinstance(target, torch.Tensor) or target.is_meta:
        return None
    try:
        return target.data_ptr(), tuple(target.shape)
    except RuntimeError:  # a tensor without storage (a functional transform's wrapper)
        return None
