"""Facts about the training loop itself, which no saved tensor shows: which parameters the
optimizers hold, whether ``step()`` runs and moves the weights, whether gradients are cleared
between steps, whether evaluation runs in train mode and training in eval mode, how the
learning rate is scheduled, how large the weights start and the first update is, what the loss
modules are fed, and whether they weight classes, whether backward runs on the loss negated,
and which parameters get no gradient.

The PyTorch hook hands its events here (a model's forward starts, a backward pass is about to
run, an optimizer is about to step and has stepped, a scheduler stepped, a loss module ran).
Each event costs a few attribute reads; what reads tensor values runs only on steps where the
``training_loop`` collection is due, or on the first few steps (see each check). The facts are
numbers kept here and saved as scalars in ``training_loop`` (``training_loop/<fact>``) at the
next step where the collection is due, and at close: a fact noticed on another step is never
lost. Nothing happens unless ``training_loop`` is included (a job includes it for its
TrainingLoop rule). What the loss modules are fed is noted by :mod:`._loss_facts`, how the
learning rate is scheduled by :mod:`._lr_facts`, which parameters get no gradient by
:mod:`._grad_presence`, how the backward passes between two optimizer steps add up (gradient
accumulation, a negated loss) by :mod:`._accumulation_facts`.
"""

from __future__ import annotations

import statistics
import weakref
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from tensortap.core._collections import TRAINING_LOOP
from tensortap.core._modes import ModeKeys
from tensortap.core._recorder import RAW_PLAN, StepRecorder, records_from_array
from tensortap.pytorch._accumulation_facts import RECORDED, AccumulationFacts
from tensortap.pytorch._grad_presence import GradientPresence
from tensortap.pytorch._loss_facts import LossFacts
from tensortap.pytorch._lr_facts import LearningRates
from tensortap.pytorch._naming import WEIGHT_COLLECTIONS, unwrap
from tensortap.pytorch._registry import Registry
from tensortap.pytorch._weight_stats import init_scales
from tensortap.pytorch._weight_stats import local as _local
from tensortap.pytorch._weight_stats import norms as _norms

_COLLECTIONS = (TRAINING_LOOP,)
#: An optimizer's first steps: the gradient check reads values there whether or not the
#: collection is due (a loop that never clears its gradients shows it from the second step).
FIRST_STEPS = 3
#: Optimizer steps seen before parameters no optimizer holds are named: by then every optimizer
#: of the loop has stepped (a GAN's generator too, whose critic steps five times per step).
MEMBERSHIP_AFTER = 10
#: Backward passes after which the weights are compared with those of the first forward.
CHANGE_AFTER = 5
#: Bytes of weights copied (once, per device) to measure the first update; the rest is skipped.
FIRST_UPDATE_BUDGET = 256 << 20
#: Single forward passes under no_grad in train mode count as evaluations when they fall in
#: at most this share of the intervals between optimizer steps.
ISOLATED_SHARE = 0.5
_BN = nn.modules.batchnorm._BatchNorm
_NORM = nn.modules.batchnorm._NormBase  # BatchNorm, and InstanceNorm with running statistics
_DROPOUT = nn.modules.dropout._DropoutNd


@dataclass
class _Optimizer:
    """What is known of one optimizer seen stepping."""

    owned: bool  # it holds parameters of a registered model
    label: str = ""  # its class name, numbered when two share it (Adam, Adam_1)
    steps: int = 0
    armed: bool = False  # stepped; gradients not yet seen cleared before a backward pass
    read_values: bool = False  # whether the check may read gradient values (a sync)
    stale: tuple[float, int] | None = None  # (norm, step) of gradients found not cleared
    snapshot: list[tuple[str, nn.Parameter, torch.Tensor]] | None = None
    first_done: bool = False


class LoopFacts:
    """Collects the facts (see the module docstring) and saves them in ``training_loop``."""

    def __init__(
        self,
        recorder: StepRecorder,
        registry: Registry,
        contain: Callable[[BaseException, str], None],
    ) -> None:
        self._recorder = recorder
        self._registry = registry
        self._contain = contain
        self._values: dict[str, Any] = {}
        self._unsaved: set[str] = set()
        self._optimizers: weakref.WeakKeyDictionary[torch.optim.Optimizer, _Optimizer] = (
            weakref.WeakKeyDictionary()
        )
        self._labels: set[str] = set()
        self._rates = LearningRates(self._set)
        self._norm_modules: weakref.WeakKeyDictionary[nn.Module, list[nn.Module]] = (
            weakref.WeakKeyDictionary()
        )
        self._losses = LossFacts(registry, self._set, self._due, FIRST_STEPS)
        self._backward_passes = 0
        self._steps_seen = 0  # of every optimizer
        self._other_steps = 0  # of optimizers holding none of the registered parameters
        self._owned_steps = 0
        self._membership_step = -1
        self._fingerprint: tuple[list[nn.Parameter], list[float]] | None = None
        self._changed: bool | None = None
        self._no_grad_run = 0
        self._no_grad_active: list[nn.Module] = []  # what behaved as in training, last time
        self._eval_in_train = 0
        self._dropout_on = 0  # of those, passes of a model in eval mode with Dropout training
        # the forwards with gradients since the last optimizer step: whether one ran in train
        # mode; of the last one in eval mode, its mode-dependent modules in eval mode
        self._train_forward = False
        self._eval_forward: list[nn.Module] | None = None
        self._eval_steps = 0  # owned optimizer steps after forwards in eval mode only
        self._eval_layers: list[nn.Module] = []  # those of the last such step
        # optimizer steps seen when a single forward pass under no_grad in train mode ended
        self._isolated: set[int] = set()
        self._accumulation = AccumulationFacts(self._set, self._checks_next)
        self._gradients = GradientPresence(registry, self._set, contain)
        self._zero_lr: set[str] | None = None  # parameters in groups at rate 0 at every check
        recorder.add_step_end_callback(self._on_step_end)

    @property
    def enabled(self) -> bool:
        """Whether the facts are collected (``training_loop`` is included)."""
        return TRAINING_LOOP in self._recorder.include_collections

    # -- events --
    def on_forward(self, module: nn.Module) -> None:
        """A registered model's forward begins."""
        if torch.is_grad_enabled():
            self._end_no_grad_run()
            self._accumulation.on_forward(module.training)
            if self._fingerprint is None:
                self._fingerprint = self._weights_now()
                self._init_scale(module)
            if module.training:
                self._train_forward = True
            else:  # training in eval mode, unless a forward in train mode comes before the step
                modules = self._train_mode_modules(module)
                self._eval_forward = [m for m in modules if not m.training]
            return
        active = [m for m in self._train_mode_modules(module) if m.training]
        if not module.training:
            # evaluation done right (eval mode), unless Dropout was switched back on after
            # model.eval (a Monte Carlo dropout helper left in): the model's flag says eval
            active = [m for m in active if isinstance(m, _DROPOUT)]
        if not active or any(isinstance(m, _BN) and m.momentum in (None, 1.0) for m in active):
            return  # no module behaves differently; or BatchNorm statistics being recomputed
        self._no_grad_run += 1
        self._no_grad_active = active
        if self._no_grad_run >= 2:  # an evaluation loop, not one no_grad call in a training step
            self._eval_in_train += 2 if self._no_grad_run == 2 else 1
            self._set("eval_in_train_mode", self._eval_in_train)
            if not module.training:
                self._dropout_on += 2 if self._no_grad_run == 2 else 1
                self._set("eval_in_train_mode/dropout_on", self._dropout_on)
            self._set_kinds()

    def before_backward(self, tensor: torch.Tensor) -> None:
        """A backward pass on ``tensor`` is about to run (any ``Tensor.backward`` in the
        process)."""
        self._backward_passes += 1
        checked = self._backward_passes <= FIRST_STEPS or self._due()
        if checked:
            self._losses.on_backward(tensor)
        self._accumulation.before_backward(tensor, checked)
        self._end_no_grad_run()
        for optimizer, facts in list(self._optimizers.items()):
            if facts.armed:
                self._check_cleared(optimizer, facts)

    def after_backward(self, tensor: torch.Tensor) -> None:
        """A backward pass ran (any ``Tensor.backward``, whether it reached the models or not):
        which trainable parameters get no gradient (:mod:`._grad_presence`), checked on the
        first passes and on due steps."""
        self._gradients.after_backward(self._backward_passes <= FIRST_STEPS or self._due())

    def before_optimizer_step(self, optimizer: torch.optim.Optimizer, owned: bool) -> None:
        facts = self._optimizers.get(optimizer)
        if facts is None:
            facts = self._optimizers[optimizer] = _Optimizer(owned, self._label(optimizer, owned))
        if facts.armed and facts.stale is not None:
            # a backward pass ran on the gradients of its last step
            facts.armed = False
            self._grads_not_cleared(facts, *facts.stale)
        # armed without a backward pass since its last step: stays armed, the step's own
        # closure may run one (``step(closure)``: LBFGS, Lightning's automatic optimization)
        if owned and not facts.first_done and facts.snapshot is None:
            facts.snapshot = self._snapshot(optimizer)
        step = self._recorder.global_step
        # once enough optimizers stepped, then on due steps (a walk over the parameters)
        if (
            self._steps_seen >= MEMBERSHIP_AFTER
            and step != self._membership_step
            and (self._membership_step < 0 or self._due())
        ):
            self._membership_step = step
            self._check_membership()

    def after_optimizer_step(self, optimizer: torch.optim.Optimizer, owned: bool) -> None:
        self._end_no_grad_run()
        self._steps_seen += 1
        facts = self._optimizers.get(optimizer)
        if facts is not None and facts.armed and facts.stale is not None:
            # the step's closure ran its backward pass on the last step's gradients
            self._grads_not_cleared(facts, *facts.stale)
        passes = self._accumulation.take()
        in_eval = self._eval_forward if not self._train_forward else None
        self._train_forward, self._eval_forward = False, None
        if facts is None or not owned:
            self._other_steps += 1
            return
        self._owned_steps += 1
        if in_eval is not None:
            self._stepped_in_eval_mode(in_eval)
        facts.steps += 1
        one = sum(1 for f in self._optimizers.values() if f.steps) == 1
        self._accumulation.record(passes, one, self._other_steps > 0)
        self._rates.after_step(optimizer, facts.steps)
        if facts.snapshot is not None:
            self._first_update(facts)
        if facts.steps <= FIRST_STEPS or self._due_next():
            facts.armed, facts.stale = True, None
            facts.read_values = facts.steps <= FIRST_STEPS

    def after_scheduler_step(self, scheduler: Any) -> None:
        """A learning-rate scheduler stepped (also once when it is created)."""
        if not self._rates.has_scheduler(scheduler):
            optimizer = getattr(scheduler, "optimizer", None)
            facts = self._optimizers.get(optimizer) if optimizer is not None else None
            steps = facts.steps if facts is not None else 0
            self._rates.add_scheduler(scheduler, steps)

    def on_loss(self, module: nn.Module, inputs: Any, output: Any = None) -> None:
        """A registered loss module ran on ``inputs`` (prediction, target) giving ``output``."""
        if isinstance(output, torch.Tensor):
            target = inputs[1] if isinstance(inputs, tuple) and len(inputs) > 1 else None
            self._accumulation.on_loss(output, id(module), target)
        self._losses.on_loss(module, inputs)

    def on_recorded_loss(self, loss: torch.Tensor, target: Any = None) -> None:
        """A loss computed without a loss module was recorded (``hook.record_loss``) or came
        from a functional loss (``F.cross_entropy``, wrapped under zero code change: its
        ``target`` known): a backward pass on this very tensor runs on a whole loss, as on a
        loss module's output."""
        self._accumulation.on_loss(loss, RECORDED, target)

    def _checks_next(self) -> bool:
        """Whether the next backward pass is one the checks walk (the first, and due steps)."""
        return self._backward_passes < FIRST_STEPS or self._due()

    def close(self) -> None:
        """Save what was not saved yet into the last step, due or not (training has ended)."""
        self._end_no_grad_run()
        self._gradients.close()
        self._accumulation.close()  # nothing of the last graph kept
        self._measure()
        recorder = self._recorder
        for name in sorted(self._unsaved):
            full = f"{TRAINING_LOOP}/{name}"
            plan = recorder.begin(full, _COLLECTIONS) or RAW_PLAN
            recorder.put(full, records_from_array(full, np.asarray(self._values[name]), plan))
        self._unsaved.clear()

    # -- checks --
    def _stepped_in_eval_mode(self, layers: list[nn.Module]) -> None:
        """An optimizer step whose gradients came from forwards in eval mode only
        (``model.eval`` left on); ``layers``: the modules that behave differently in eval
        mode, in it (none: eval mode changes nothing)."""
        self._eval_steps += 1
        self._set("eval_mode_steps", self._eval_steps)
        if self._eval_steps == 1:
            self._set("eval_mode_steps/step", self._recorder.global_step)
        self._eval_layers = layers  # counted by class when saved

    def _end_no_grad_run(self) -> None:
        """The forward passes under no_grad in train mode (if any) are over: a single one is
        an evaluation of one batch when it happens in few of the optimizer steps' intervals
        (an evaluation cadence), not in nearly every one (a target computed each step)."""
        if self._no_grad_run == 1:
            self._isolated.add(self._steps_seen)
        self._no_grad_run = 0

    def _set_kinds(self) -> None:
        for kind, n in Counter(type(m).__name__ for m in self._no_grad_active).items():
            self._set(f"train_mode_modules/{kind}", n)

    def _init_scale(self, model: nn.Module) -> None:
        """How large the trained Linear and convolution weights start (``init_scale/<name>``;
        ``init_scale``: the median; see weight_stats.init_scales): once, at the first forward
        pass with gradients (a sync)."""
        names = {id(p): name for name, p, _ in self._registry.params}
        scales = init_scales(model, names)
        for name, scale in scales.items():
            self._set(f"init_scale/{name}", scale)
        if scales:
            self._set("init_scale", statistics.median(scales.values()))

    def _check_cleared(self, optimizer: torch.optim.Optimizer, facts: _Optimizer) -> None:
        """Before a backward pass, after ``optimizer`` stepped: are its gradients cleared?"""
        grads = [p.grad for g in optimizer.param_groups for p in g["params"] if p.grad is not None]
        if not grads:
            facts.armed = False  # zero_grad(set_to_none=True)
            return
        if not (facts.read_values or self._due()):
            facts.armed = False  # no verdict: the values cannot be read on this step
            return
        norm = float(np.linalg.norm(_norms(grads)))
        if norm == 0.0:
            facts.armed = False  # zero_grad(set_to_none=False)
        else:  # not cleared yet: zero_grad may still come before this optimizer's next step
            facts.stale = (norm, self._recorder.global_step)

    def _grads_not_cleared(self, facts: _Optimizer, norm: float, step: int) -> None:
        count = int(self._values.get("grads_not_cleared", 0)) + 1
        self._set("grads_not_cleared", count)
        if count == 1:
            self._set("grads_not_cleared/step", step)
            self._set("grads_not_cleared/norm", norm)
            self._set(f"grads_not_cleared/{facts.label}", 1)

    def _held(self) -> set[int]:
        """The ids of the parameters the optimizers seen stepping hold."""
        return {
            id(p)
            for optimizer in list(self._optimizers)
            for g in optimizer.param_groups
            for p in g["params"]
        }

    def _check_membership(self) -> None:
        """Name the trained parameters (requires_grad, with a gradient) no optimizer holds."""
        held = self._held()
        missing = [
            (name, p)
            for name, p, _ in self._registry.params
            if p.requires_grad and p.grad is not None and id(p) not in held
        ]
        for old in [n for n in self._values if n.startswith("not_in_optimizer/")]:
            self._set(old, 0)  # held by an optimizer now
        for name, p in missing:
            self._set(f"not_in_optimizer/{name}", p.numel())
        self._set("params_not_in_optimizer", len(missing))
        self._check_zero_lr()
        for optimizer, facts in list(self._optimizers.items()):
            if facts.owned and any(g.get("maximize") is True for g in optimizer.param_groups):
                self._set(f"maximize/{facts.label}", 1)  # it climbs what it is given

    def _check_zero_lr(self) -> None:
        """Name the parameters held in a param group whose learning rate is exactly 0 (a group
        frozen by its rate, at every check so far) while another group of an optimizer holding
        the model's parameters trains: they never move from where they started."""
        zero: set[int] = set()
        trains = False
        for optimizer, facts in list(self._optimizers.items()):
            if not facts.owned:
                continue
            for group in optimizer.param_groups:
                lr = _rate(group.get("lr"))
                if lr == 0.0:
                    zero.update(id(p) for p in group["params"])
                elif lr is not None:
                    trains = True
        named = {
            name: p.numel()
            for name, p, _ in self._registry.params
            if p.requires_grad and id(p) in zero and trains
        }
        if self._zero_lr is not None:  # zero at every check: a group unfrozen later is not
            named = {n: k for n, k in named.items() if n in self._zero_lr}
        self._zero_lr = set(named)
        for old in [n for n in self._values if n.startswith("zero_lr/")]:
            self._set(old, 0)
        for name, numel in named.items():
            self._set(f"zero_lr/{name}", numel)
        self._set("zero_lr_params", len(named))

    def _snapshot(
        self, optimizer: torch.optim.Optimizer
    ) -> list[tuple[str, nn.Parameter, torch.Tensor]]:
        """Copies of the trained weights ``optimizer`` holds, before its first step."""
        names = {id(p): (name, colls) for name, p, colls in self._registry.params}
        budget: Counter[torch.device] = Counter()
        copies = []
        for group in optimizer.param_groups:
            if _rate(group.get("lr")) == 0.0:
                continue  # a group frozen by its rate: its weights say nothing of the rate
            for p in group["params"]:
                named = names.get(id(p))
                if named is None or not p.requires_grad or p.grad is None:
                    continue
                if named[1] != WEIGHT_COLLECTIONS:
                    continue  # biases start at zero
                local = _local(p).detach()
                size = local.numel() * local.element_size()
                if budget[local.device] + size > FIRST_UPDATE_BUDGET:
                    continue
                budget[local.device] += size
                copies.append((named[0], p, local.clone()))
        if copies:
            # a weight whose gradient is all zero before the first step (units dead below it,
            # a dropout of 1) is not moved by the rate: it says nothing of it (one read, once)
            grads = _norms([_local(p.grad).detach() for _, p, _ in copies if p.grad is not None])
            copies = [c for c, g in zip(copies, grads, strict=True) if g > 0]
        return copies

    def _first_update(self, facts: _Optimizer) -> None:
        """||w_after - w_before|| / ||w_before|| of each weight copied before the first step."""
        snapshot, facts.snapshot, facts.first_done = facts.snapshot or [], None, True
        if not snapshot:
            return
        befores = [before for _, _, before in snapshot]
        diffs = [_local(p).detach() - before for _, p, before in snapshot]
        norms = _norms(befores + diffs)
        n = len(snapshot)
        ratios = {}
        for (name, _, _), size, moved in zip(snapshot, norms[:n], norms[n:], strict=True):
            if size > 0:
                ratios[name] = moved / size
                self._set(f"first_update_ratio/{name}", moved / size)
        every = [v for k, v in self._values.items() if k.startswith("first_update_ratio/")]
        if every:
            self._set("first_update_ratio", statistics.median(every))

    # -- saving --
    def _on_step_end(self) -> None:
        try:
            if self.enabled and self._recorder.is_collection_due(TRAINING_LOOP):
                self._measure()
                for name in sorted(self._unsaved):
                    self._recorder.record(
                        f"{TRAINING_LOOP}/{name}", self._values[name], _COLLECTIONS
                    )
                self._unsaved.clear()
        except Exception as exc:
            self._contain(exc, "LoopFacts._on_step_end")

    def _measure(self) -> None:
        """The facts read at saving time: counters, weights changed, learning rates."""
        isolated = len(self._isolated)
        if isolated >= 2 and isolated <= ISOLATED_SHARE * max(self._steps_seen, 1):
            self._set("eval_in_train_mode", self._eval_in_train + isolated)
            self._set("eval_in_train_mode/single_batch", isolated)
            self._set_kinds()
        for kind, n in Counter(type(m).__name__ for m in self._eval_layers).items():
            self._set(f"eval_mode_modules/{kind}", n)
        self._gradients.measure(self._held)
        if self._backward_passes or self._steps_seen:
            # a session that trained nothing (an evaluation after training, in a session of
            # its own) has nothing to count: zeros saved at its steps would read as training
            # having stepped no optimizer
            self._set("backward_passes", self._backward_passes)
            self._set("optimizer_steps", self._owned_steps)
            self._set("other_optimizer_steps", self._other_steps)
        if self._changed is not True and self._fingerprint is not None:
            params, norms = self._fingerprint
            if params and self._backward_passes >= CHANGE_AFTER:
                now = self._weights_now()
                same = len(now[0]) == len(params) and all(
                    a is b for a, b in zip(now[0], params, strict=True)
                )
                if same:
                    self._changed = now[1] != norms
                    self._set("weights_changed", int(self._changed))
                else:  # the parameters were replaced (sharded by FSDP2): judged from here
                    self._fingerprint = now
        for optimizer, facts in list(self._optimizers.items()):
            if facts.owned and self._rates.read(optimizer):
                self._rates.measure(optimizer, facts.label, facts.steps)
                self._set(f"steps/{facts.label}", facts.steps)

    # -- helpers --
    def _set(self, name: str, value: Any) -> None:
        old = self._values.get(name)
        if old is None or not np.array_equal(old, value):
            self._values[name] = value
            self._unsaved.add(name)

    def _due(self) -> bool:
        return self._recorder.is_collection_due(TRAINING_LOOP)

    def _due_next(self) -> bool:
        """Whether ``training_loop`` is due at the next TRAIN step."""
        recorder = self._recorder
        config = recorder.collections.get(TRAINING_LOOP).save_config or recorder.save_config
        return config.should_save(ModeKeys.TRAIN, recorder.mode_step + 1)

    def _weights_now(self) -> tuple[list[nn.Parameter], list[float]]:
        """The trained parameters and their norms (a sync: at the first forward, on due steps)."""
        params = [p for _, p, _ in self._registry.params if p.requires_grad]
        return params, _norms(params) if params else []

    def _label(self, optimizer: torch.optim.Optimizer, owned: bool) -> str:
        if not owned:
            return ""
        base = label = type(optimizer).__name__
        n = 1
        while label in self._labels:
            label, n = f"{base}_{n}", n + 1
        self._labels.add(label)
        return label

    def _train_mode_modules(self, model: nn.Module) -> list[nn.Module]:
        """The modules of ``model`` that behave differently in train mode (cached)."""
        found = self._norm_modules.get(model)
        if found is None:
            found = self._norm_modules[model] = [
                m
                for m in unwrap(model).modules()
                if (isinstance(m, _DROPOUT) and m.p > 0)
                or (isinstance(m, _NORM) and m.track_running_stats)
            ]
        return found


def _rate(lr: Any) -> float | None:
    """A param group's learning rate as a number, None where it is not one or reading it would
    wait for the device."""
    if isinstance(lr, torch.Tensor):
        return float(lr) if lr.device.type == "cpu" and lr.numel() == 1 else None
    return float(lr) if isinstance(lr, (int, float)) else None
