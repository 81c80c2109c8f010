"""TrainingLoop: faults of the training loop itself, from the facts the PyTorch hook records."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from tensortap.core._collections import TRAINING_LOOP
from tensortap.rules._finding import Severity
from tensortap.rules._rule import Rule
from tensortap.rules.builtin._common import names_in
from tensortap.rules.builtin._fresh_init import FreshInit
from tensortap.rules.builtin._frozen_checks import FrozenChecks
from tensortap.rules.builtin._loop_facts_view import LoopFacts, LoopVerdict
from tensortap.rules.builtin._loss_checks import LossChecks
from tensortap.rules.builtin._mode_checks import ModeChecks
from tensortap.rules.builtin._rate_checks import RateChecks

_PREFIX = TRAINING_LOOP + "/"
#: The share of the trainable values that must get no gradient for gradient_blocked.
_BLOCKED_SHARE = 0.1
#: gradient_blocked is certain where this share of the trainable values gets no gradient and
#: this share of those is cut off: their modules ran in the graph, an optimizer holds them.
_CUT_SHARE = 0.5


class TrainingLoop(Rule):
    """Fires on faults of the training loop that no tensor shows, read from the facts the
    PyTorch hook saves in ``training_loop`` (see docs/rules.md for each test):

    - ``optimizer_not_stepping``: ``min_steps`` backward passes and no optimizer step, the
      weights unchanged; or ``min_steps`` optimizer steps that changed no weight;
    - ``params_not_in_optimizer``: trained parameters (``requires_grad``, with a gradient)
      that no optimizer holds;
    - ``grads_not_cleared``: before a backward pass after an optimizer step, the gradients
      still held that step's (zero_grad never called between steps);
    - ``accumulation_undivided``: a backward pass through an earlier backward pass's graph in
      one optimizer step (a running total of the micro-batches' losses, each time with
      ``retain_graph=True``); or ``accumulation_steps`` optimizer steps each after several
      backward passes on one whole loss (a loss module's output, a functional loss's result
      under zero code change, or ``hook.record_loss``'s loss, alone or plus other terms such as
      a regulariser: gradients summed over micro-batches where they should be averaged), in a
      loop with one optimizer; or ``accumulation_steps`` checked optimizer steps whose one
      backward pass ran on a sum, through additions only, of 3 or more losses of one loss
      function, each after its own forward pass and with graphs apart (``total = total +
      loss`` over the micro-batches, then ``total.backward()``);
    - ``loss_shape_mismatch``: a regression loss whose prediction and target broadcast to a
      larger shape ((N, 1) against (N,));
    - ``softmax_before_loss``: CrossEntropyLoss or NLLLoss fed probabilities;
    - ``lr_too_high``: the first update moved the weights by a median of at least
      ``first_update_threshold`` times their norm (``adam_first_update_threshold`` when every
      optimizer is of Adam's family, whose first step is a tenth of RMSprop's); an Adam-family
      first update from 0.6 of ``adam_first_update_threshold`` in a network (two weight
      tensors or more) is evidence that needs harm (its first step is the learning rate over
      the weights' scale, whatever the gradients);
    - ``lr_too_low``: with adaptive optimizers only (Adam, RMSprop, ...: their first step is
      the learning rate over the weights' scale), a first update below ``low_first_update``,
      judged after ``min_steps`` optimizer steps in which no warm-up raised the rate; the
      first update is the median over the weights it moved (a weight that got no gradient is
      not moved by any rate, so zero gradients are never a low learning rate);
    - ``scheduler_per_batch``: a scheduler stepped about once per optimizer step (a Keras
      ``LearningRateSchedule`` always is) whose learning rate sat at 1% of its peak or below
      for ``low_lr_share`` of the steps, or a CosineAnnealingLR stepped past twice its T_max;
    - ``poor_init``: the trained Linear and convolution weights start with a median
      ``std(w) * sqrt(fan_in)`` above ``init_scale_threshold`` (0.58 for PyTorch's default,
      1.41 for Kaiming/He, about 2.4 at most for any standard scheme);
    - ``eval_in_train_mode``: forward passes under ``torch.no_grad()`` with the model in train
      mode and Dropout or BatchNorm modules in it: consecutive ones, or single ones (an
      evaluation of one batch) in at most half of the intervals between optimizer steps;
    - ``train_in_eval_mode``: optimizer steps whose gradients came from forward passes with
      the model in eval mode (``model.eval`` left on after a validation pass), while it has
      Dropout or BatchNorm modules in eval mode; without them eval mode changes nothing, and
      the steps are only mentioned;
    - ``gradient_blocked``: trainable parameters (``requires_grad``) left with ``grad`` None
      by every backward pass checked (the first 3 and those on due steps): all of them (the
      loss is not connected to the model: a certain fault), or at least 10% of the trainable
      values (evidence that needs harm: unused parameters are not a fault alone); certain
      again where at least half the trainable values get none and at least half of those are
      cut off: their modules ran in train mode with their outputs in the autograd graph
      every time in the forward passes watched, and an optimizer holds them (a stray
      ``.detach()``);
    - ``wrong_sign``: an optimizer's learning rate below 0 (a certain fault: every update
      climbs the loss), or an optimizer built with ``maximize=True`` (evidence that needs harm);
    - ``frozen_layer``: parameters in a param group whose learning rate is exactly 0 at every
      check while another group trains. Evidence, not a certain fault (a rate of 0 may freeze a
      pre-trained layer on purpose): the finding carries ``details["needs_harm"]``, and the
      diagnosis makes it a problem only where the run is harmed in a way a frozen layer
      explains (no progress, predictions at chance). Keras: the weights of layers set
      ``trainable = False`` while others train (``frozen/<name>``), a certain fault where they
      still hold a random initialisation (a copied fine-tuning recipe freezing a layer built
      from scratch), else the same evidence.

    Each fault is reported once, at the first saved step that shows it, with
    ``details["cause"]`` naming it; faults found together are reported on the next saved steps
    (``details["other_causes"]`` lists them meanwhile).
    """

    collections_needed = (TRAINING_LOOP,)

    @classmethod
    def check_values(cls, params: Mapping[str, Any]) -> None:
        min_steps = params["min_steps"]
        first_update_threshold = params["first_update_threshold"]
        adam_first_update_threshold = params["adam_first_update_threshold"]
        low_lr_share = params["low_lr_share"]
        accumulation_steps = params["accumulation_steps"]
        low_first_update = params["low_first_update"]
        init_scale_threshold = params["init_scale_threshold"]
        cls.check_param("min_steps", min_steps, min_steps >= 1, "an integer >= 1")
        cls.check_param(
            "first_update_threshold", first_update_threshold, first_update_threshold > 0, "> 0"
        )
        cls.check_param("low_lr_share", low_lr_share, 0 < low_lr_share <= 1, "in (0, 1]")
        cls.check_param(
            "adam_first_update_threshold",
            adam_first_update_threshold,
            adam_first_update_threshold > 0,
            "> 0",
        )
        cls.check_param(
            "accumulation_steps", accumulation_steps, accumulation_steps >= 1, "an integer >= 1"
        )
        cls.check_param("low_first_update", low_first_update, low_first_update >= 0, ">= 0")
        cls.check_param(
            "init_scale_threshold", init_scale_threshold, init_scale_threshold > 0, "> 0"
        )

    def __init__(
        self,
        base_trial: Any,
        min_steps: int = 20,
        first_update_threshold: float = 5.0,
        adam_first_update_threshold: float = 1.0,
        low_lr_share: float = 0.5,
        accumulation_steps: int = 3,
        low_first_update: float = 3e-5,
        init_scale_threshold: float = 4.0,
    ) -> None:
        super().__init__(base_trial)
        self.min_steps = min_steps
        self.first_update_threshold = first_update_threshold
        self.adam_first_update_threshold = adam_first_update_threshold
        self.low_lr_share = low_lr_share
        self.accumulation_steps = accumulation_steps
        self.low_first_update = low_first_update
        self.init_scale_threshold = init_scale_threshold
        self._facts = LoopFacts()
        self._rates = RateChecks(
            self._facts,
            min_steps=min_steps,
            first_update_threshold=first_update_threshold,
            adam_first_update_threshold=adam_first_update_threshold,
            low_lr_share=low_lr_share,
            low_first_update=low_first_update,
        )
        self._modes = ModeChecks(self._facts)
        self._losses = LossChecks(self._facts, accumulation_steps=accumulation_steps)
        # parameters held still that still hold their initialisation
        self._frozen = FrozenChecks(self._facts, FreshInit(base_trial))
        self._reported: set[str] = set()

    def invoke_at_step(self, step: int) -> bool:
        names = names_in(self.base_trial, TRAINING_LOOP, step)
        if not names:
            raise self.skip("no training_loop facts saved at this step")
        for name in names:
            value = np.asarray(self.base_trial.tensor(name).value(step))
            self._facts.saw(name[len(_PREFIX) :], value)
        found = [v for v in self._verdicts() if v.cause not in self._reported]
        if not found:
            facts = self._facts
            harmless = self._modes.harmless()
            self.explain(
                f"no fault of the training loop after {facts.count('backward_passes')} backward "
                f"passes and {facts.count('optimizer_steps')} optimizer steps{harmless}"
            )
            return False
        first = found[0]
        self._reported.add(first.cause)
        details: dict[str, Any] = {"cause": first.cause}
        severity = None
        if first.needs_harm:  # a warning, which the diagnosis makes a problem where it
            details["needs_harm"] = True  # explains the harm seen
            severity = Severity.WARNING
        if len(found) > 1:  # reported at the next saved steps, one each
            details["other_causes"] = [v.cause for v in found[1:]]
        self.explain(
            first.message,
            tensors=[_PREFIX + t for t in first.tensors],
            value=first.value,
            threshold=first.threshold,
            severity=severity,
            **details,
        )
        return True

    def _verdicts(self) -> Iterator[LoopVerdict]:
        yield from self._no_gradient()
        yield from self._rates.wrong_sign()
        yield from self._not_stepping()
        yield from self._not_in_optimizer()
        yield from self._not_cleared()
        yield from self._modes.train_in_eval_mode()
        yield from self._losses.undivided()
        yield from self._losses.loss_inputs()
        yield from self._init_scale()
        yield from self._rates.first_update()
        yield from self._rates.scheduler()
        yield from self._modes.eval_in_train_mode()
        yield from self._frozen.zero_lr()
        yield from self._frozen.frozen()

    def _not_stepping(self) -> Iterator[LoopVerdict]:
        backward, owned = self._facts.count("backward_passes"), self._facts.count("optimizer_steps")
        other, changed = (
            self._facts.count("other_optimizer_steps"),
            self._facts.num("weights_changed"),
        )
        # another optimizer that stepped before the weights were watched (a backbone trained
        # first) and never since is not stepping this training either
        since = backward - self._facts.first_count("backward_passes")
        stopped = other > 0 and other == self._facts.first_count("other_optimizer_steps")
        if (
            owned == 0
            and changed == 0
            and (
                (other == 0 and backward >= self.min_steps) or (stopped and since >= self.min_steps)
            )
        ):
            before = (
                f" (another optimizer made its {other} steps before that, none since)"
                if other
                else ""
            )
            yield LoopVerdict(
                "optimizer_not_stepping",
                f"optimizer.step() is never called: {since if other else backward} backward "
                f"passes ran, no optimizer stepped and the weights are still those of the first "
                f"step{before}; call optimizer.step() after loss.backward()",
                backward,
                self.min_steps,
                ("backward_passes", "optimizer_steps"),
            )
            return
        lrs = {k: self._facts.num("lr/" + k) for k in self._facts.keys("lr/")}
        blocked = self._facts.num("no_grad_share", 0.0) >= 1.0  # named as gradient_blocked
        if (
            owned >= self.min_steps
            and changed == 0
            and any(lr > 0 for lr in lrs.values())
            and not blocked
        ):
            rates = ", ".join(f"{k} lr {v:g}" for k, v in lrs.items())
            yield LoopVerdict(
                "optimizer_not_stepping",
                f"optimizer.step() ran {owned} times ({rates}) without changing any weight: "
                "the gradients it saw were zero or missing; is zero_grad() called between "
                "backward() and step(), or the loss detached from the model?",
                owned,
                self.min_steps,
                ("optimizer_steps", "weights_changed"),
            )

    def _not_in_optimizer(self) -> Iterator[LoopVerdict]:
        count = self._facts.count("params_not_in_optimizer")
        if count <= 0:
            return
        names = [
            n
            for n in self._facts.keys("not_in_optimizer/")
            if self._facts.num("not_in_optimizer/" + n)
        ]
        shown = ", ".join(names[:8]) + (f" and {len(names) - 8} more" if len(names) > 8 else "")
        copy = (
            self._facts.count("optimizer_steps") == 0
            and self._facts.count("other_optimizer_steps") > 0
        )
        why = (
            " (the optimizers that step hold none of the model's parameters: were they built "
            "over another model, or a copy?)"
            if copy
            else ""
        )
        yield LoopVerdict(
            "params_not_in_optimizer",
            f"{count} trainable parameters (requires_grad=True, with gradients) are held by no "
            f"optimizer{why}, so they never change: {shown}; pass them to the optimizer (create "
            "it once the model is complete), or freeze them with requires_grad_(False)",
            count,
            0,
            ("params_not_in_optimizer",),
        )

    def _no_gradient(self) -> Iterator[LoopVerdict]:
        count, share = self._facts.count("no_grad_params"), self._facts.num("no_grad_share", 0.0)
        if count <= 0 or not share >= _BLOCKED_SHARE:
            return
        names = [n for n in self._facts.keys("no_grad/") if self._facts.num("no_grad/" + n)]
        shown = ", ".join(names[:8]) + (f" and {len(names) - 8} more" if len(names) > 8 else "")
        if share >= 1.0:
            yield LoopVerdict(
                "gradient_blocked",
                f"no trainable parameter receives a gradient: after every backward pass checked, "
                f"all {count} have grad None, so the optimizer has nothing to apply; the loss is "
                "not connected to the model (a .detach(), .data, .item() or numpy round trip, "
                "torch.no_grad(), an argmax in the graph, or a loss rebuilt with "
                "requires_grad_()): compute it from the model's output tensor",
                share,
                _BLOCKED_SHARE,
                ("no_grad_params", "no_grad_share"),
            )
            return
        cut = self._facts.num("no_grad_cut_share", 0.0)
        if share >= _CUT_SHARE and cut >= _CUT_SHARE:
            yield LoopVerdict(
                "gradient_blocked",
                f"{count} trainable parameters ({share:.0%} of the trainable values) never "
                f"receive a gradient (grad None after every backward pass checked): {shown}; "
                "their modules run in every training step with their outputs in the autograd "
                "graph and the optimizer holds them, so the graph is cut between them and the "
                "loss (a .detach(), .data, .item() or numpy round trip on the way): only what "
                "comes after the cut trains",
                share,
                _CUT_SHARE,
                ("no_grad_params", "no_grad_share", "no_grad_cut_share"),
            )
            return
        yield LoopVerdict(
            "gradient_blocked",
            f"{count} trainable parameters ({share:.0%} of the trainable values) never receive "
            f"a gradient (grad None after every backward pass checked): {shown}; the graph is "
            "cut between them and the loss (a .detach(), .data, torch.no_grad() or an argmax "
            "on the way), or they are not used in the forward pass",
            share,
            _BLOCKED_SHARE,
            ("no_grad_params", "no_grad_share"),
            needs_harm=True,  # unused parameters (a pooler, an expert) are not a fault alone
        )

    def _not_cleared(self) -> Iterator[LoopVerdict]:
        if self._facts.count("grads_not_cleared") <= 0:
            return
        step, norm = (
            self._facts.count("grads_not_cleared/step"),
            self._facts.num("grads_not_cleared/norm"),
        )
        optimizers = [
            k for k in self._facts.keys("grads_not_cleared/") if k not in ("step", "norm")
        ]
        of = f" of {optimizers[0]}" if optimizers else ""
        yield LoopVerdict(
            "grads_not_cleared",
            f"optimizer.zero_grad() is not called between steps: at step {step} the gradients"
            f"{of} still held the previous step's (norm {norm:.3g} before backward), so each "
            "step adds up every earlier gradient; call optimizer.zero_grad() once per optimizer "
            "step",
            norm,
            0,
            ("grads_not_cleared", "grads_not_cleared/norm"),
        )

    def _init_scale(self) -> Iterator[LoopVerdict]:
        scale = self._facts.num("init_scale")
        if not scale > self.init_scale_threshold:  # NaN (never measured) included
            return
        per = {k: self._facts.num("init_scale/" + k) for k in self._facts.keys("init_scale/")}
        worst = sorted(per.items(), key=lambda kv: -kv[1])[:3]
        yield LoopVerdict(
            "poor_init",
            f"the weights start far too large: std(w) * sqrt(fan_in) is {scale:.3g} (the median "
            f"over {len(per)} Linear and convolution layers: "
            f"{', '.join(f'{k} {v:.3g}' for k, v in worst)}), where PyTorch's default "
            "initialisation gives 0.58, Kaiming/He 1.41 and no standard scheme more than about "
            f"2.4 (limit {self.init_scale_threshold:g}); activations and gradients grow layer by "
            "layer: drop the extra scaling, or initialise with nn.init.kaiming_normal_ "
            "(ReLU) / xavier_normal_ (tanh)",
            scale,
            self.init_scale_threshold,
            ("init_scale",),
        )
