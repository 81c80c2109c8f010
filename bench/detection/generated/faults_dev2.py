"""A third, independent implementation of each fault kind: the ``dev2`` split's.

The rules are fitted on the dev split, whose faults all come from one implementation per kind
(faults.py), so a rule can learn the implementation rather than the fault. The dev2 split draws
from the same dev space (dev architectures and data) but injects each kind through other code:
the ways such a bug shows up in people's training scripts (a mistyped config value, a freezing
loop that caught the wrong names, a loss computed on a detached output and "fixed" with
``requires_grad_()``...). Several variants per kind, chosen by the draw's own random numbers.

Each class subclasses its namesake in faults.py, so it keeps the kind's ``name`` and validated
``symptom``; :func:`third` puts every hook the namesake overrides back to the healthy script's,
so that nothing of faults.py's mechanism leaks in: what a class changes it says itself.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from bench.detection.generated import faults
from bench.detection.generated.faults import Fault, LossFn
from bench.detection.generated.models import activations_before, head
from bench.detection.generated.space import Draw, steps_per_epoch

if TYPE_CHECKING:
    from bench.detection.generated.data import Data

#: what a fault implementation changes in the training script (Fault's hooks and switches)
HOOKS = (
    "adjust", "wants_raw_features", "training_rows", "before_normalising", "after_normalising",
    "target_as_column", "handles_imbalance", "softmax_output", "mutate_model", "loss",
    "optimizer_params", "optimizer_options", "schedule", "regression_targets", "recurrence",
    "zero_grad", "optimizer_step", "divide_accumulated", "scheduler_per_batch", "eval_mode",
    "loss_sign", "sum_micro_batches", "clear_grads", "epoch_targets", "eval_module", "backward",
    "take_step",
)  # fmt: skip
#: a third implementation's own random choices are apart from faults.py's (same kind's salt)
SALT_OFFSET = 200

F_ = TypeVar("F_", bound=type[Fault])


def third(cls: F_) -> F_:
    """Reset every hook ``cls`` does not define itself to the healthy script's (``Fault``'s),
    so that it changes only what it says; and give it its own random choices."""
    for hook in HOOKS:
        if hook not in vars(cls):
            setattr(cls, hook, vars(Fault)[hook])
    cls.salt = cls.salt + SALT_OFFSET
    return cls


def _output_hook(model: nn.Module, change: Callable[[torch.Tensor], torch.Tensor]) -> None:
    """Change the model's output as a line at the end of its ``forward`` would."""

    def hook(_m: nn.Module, _inputs: Any, out: torch.Tensor) -> torch.Tensor:
        return change(out)

    model.register_forward_hook(hook)


class _GradReverse(torch.autograd.Function):
    """The identity forward, the gradient negated backward (domain adaptation's gradient
    reversal layer)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        return -grad


# ---------------------------------------------------------------- group 1
@third
class ZeroGradients(faults.ZeroGradients):
    """No gradient reaches any weight: the loss is computed on ``out.detach()`` (and
    ``loss.requires_grad_()`` added to silence the error that raised), on predictions rounded
    in the graph (regression), or on one-hot argmax predictions (classification)."""

    def options(self, d: Draw) -> tuple[str, ...]:
        found = ["detached_output"]
        if d.regression:
            found.append("rounded_predictions")
        if d.classify:
            found.append("argmax_one_hot")
        return tuple(found)

    def applies(self, d: Draw) -> bool:
        return True

    def describe(self, d: Draw) -> str:
        return f"no gradient reaches the weights: {self.variant(d, self.options(d))}"

    def loss(
        self, d: Draw, data: Data, module: nn.Module | None, fn: LossFn
    ) -> tuple[nn.Module | None, LossFn]:
        variant = self.variant(d, self.options(d))

        def detached(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return fn(out.detach(), y).requires_grad_()

        def rounded(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return fn(torch.round(out), y)  # predictions reported as whole numbers

        def one_hot(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            hard = F.one_hot(out.argmax(dim=1), out.shape[1]).float() * 5.0
            return fn(hard, y).requires_grad_()

        chosen = {
            "detached_output": detached,
            "rounded_predictions": rounded,
            "argmax_one_hot": one_hot,
        }[variant]
        return module, chosen


@third
class SoftmaxTwice(faults.SoftmaxTwice):
    """Probabilities go into a loss that applies log-softmax itself: the model's output is
    softmaxed by a line added at the end of ``forward`` (``return out.softmax(1)``, for
    ``predict_proba``), or the loss is ``NLLLoss`` of a ``log_softmax`` taken over the
    probabilities rather than the logits."""

    VARIANTS: ClassVar[tuple[str, ...]] = ("softmax_in_forward", "nll_of_probs")

    def describe(self, d: Draw) -> str:
        return f"softmax applied twice: {self.variant(d, self.VARIANTS)}"

    def mutate_model(self, model: nn.Module, d: Draw) -> None:
        if self.variant(d, self.VARIANTS) == "softmax_in_forward":
            _output_hook(model, lambda out: out.softmax(dim=1))

    def loss(
        self, d: Draw, data: Data, module: nn.Module | None, fn: LossFn
    ) -> tuple[nn.Module | None, LossFn]:
        if self.variant(d, self.VARIANTS) != "nll_of_probs":
            return module, fn
        weight = data.class_weights

        def nll(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            probs = F.softmax(out, dim=1)
            return F.nll_loss(F.log_softmax(probs, dim=1), y, weight=weight)

        return None, nll


@third
class LossBroadcast(faults.LossBroadcast):
    """The prediction and the target of an MSE loss shaped so that they broadcast to (N, N):
    the targets viewed as ``(1, -1)`` where ``(-1, 1)`` was meant, or unsqueezed a second
    time (``y.unsqueeze(1)`` in the dataset and again in the loop: (N, 1, 1) against (N, 1))."""

    VARIANTS: ClassVar[tuple[str, ...]] = ("target_row", "double_unsqueeze")

    def describe(self, d: Draw) -> str:
        return f"MSE over broadcast shapes: {self.variant(d, self.VARIANTS)}"

    def loss(
        self, d: Draw, data: Data, module: nn.Module | None, fn: LossFn
    ) -> tuple[nn.Module | None, LossFn]:
        if self.variant(d, self.VARIANTS) == "target_row":
            return module, lambda out, y: fn(out, y.view(1, -1))
        return module, lambda out, y: fn(out, y.unsqueeze(1))


@third
class GradAccumulationUndivided(faults.GradAccumulationUndivided):
    """Gradients accumulated over K micro-batches K-fold too large: the division by K sits
    after ``loss.backward()`` (it scales only the logged value), each micro-batch calls
    ``backward(retain_graph=True)`` on the running total of the step's losses, so earlier
    micro-batches count again (K = 4 only: with K = 2 the excess is too small to show), or the
    K micro-batch losses are added up (``step_loss += loss``) and one ``backward()`` runs on
    their sum at the step's end."""

    _total: torch.Tensor | None = None  # the running total's variant: the step's losses so far
    _sum: torch.Tensor | None = None  # the summed variant: the step's undivided losses so far

    def options(self, d: Draw) -> tuple[str, ...]:
        if d.accum_steps >= 4:
            return ("divided_after_backward", "running_total", "summed_once")
        return ("divided_after_backward", "summed_once")

    def describe(self, d: Draw) -> str:
        return f"accumulated gradients undivided: {self.variant(d, self.options(d))}"

    def backward(self, scaled: torch.Tensor, loss: torch.Tensor, micro: int, d: Draw) -> None:
        k = d.accum_steps
        variant = self.variant(d, self.options(d))
        last = (micro + 1) % k == 0
        if variant == "divided_after_backward":
            loss.backward()  # then `loss = loss / k`, for the log only
            return
        if variant == "summed_once":
            self._sum = loss if micro % k == 0 or self._sum is None else self._sum + loss
            if last:
                self._sum.backward()
                self._sum = None
            return
        part = loss / k
        self._total = part if micro % k == 0 or self._total is None else self._total + part
        self._total.backward(retain_graph=not last)
        if last:
            self._total = None


@third
class UnnormalisedTabular(faults.UnnormalisedTabular):
    """Tabular features not standardised: each row scaled to unit length
    (``sklearn.preprocessing.normalize`` taken for a scaler), or only centred
    (``StandardScaler(with_std=False)``, ``x - x.mean(0)``), so features keep their different
    units."""

    VARIANTS: ClassVar[tuple[str, ...]] = ("row_normalize", "centred_only")

    def describe(self, d: Draw) -> str:
        return f"tabular features not standardised: {self.variant(d, self.VARIANTS)}"

    def wants_raw_features(self, d: Draw) -> bool:
        return True

    def before_normalising(
        self, x: np.ndarray, x_val: np.ndarray, d: Draw, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray]:
        if self.variant(d, self.VARIANTS) == "row_normalize":

            def rows(v: np.ndarray) -> np.ndarray:
                norm = np.linalg.norm(v, axis=1, keepdims=True)
                return np.asarray(v / np.where(norm > 0, norm, 1.0))

            return rows(x), rows(x_val)
        mean = x.mean(axis=0)
        return x - mean, x_val - mean


@third
class FrozenByMistake(faults.FrozenByMistake):
    """Layers that should train left with ``requires_grad=False``: a loop freezing every
    parameter whose name contains "weight" (meant for one embedding's), everything frozen and
    only the last parameter (the head's bias, not its weight) unfrozen, or a fine-tuning
    recipe's ``children()[:-1]`` freeze kept in a script that trains from scratch."""

    VARIANTS: ClassVar[tuple[str, ...]] = (
        "weights_by_substring",
        "last_param_only",
        "children_but_last",
    )

    def describe(self, d: Draw) -> str:
        return f"frozen by mistake: {self.variant(d, self.VARIANTS)}"

    def mutate_model(self, model: nn.Module, d: Draw) -> None:
        variant = self.variant(d, self.VARIANTS)
        if variant == "weights_by_substring":
            for name, p in model.named_parameters():
                if "weight" in name:
                    p.requires_grad = False
        elif variant == "last_param_only":
            params = list(model.parameters())
            for p in params:
                p.requires_grad = False
            params[-1].requires_grad = True
        else:
            for child in list(model.children())[:-1]:
                for p in child.parameters():
                    p.requires_grad = False


@third
class NoOptimizerStep(faults.NoOptimizerStep):
    """The optimizer never updates anything: ``optimizer.step`` written without its
    parentheses, or ``optimizer.zero_grad()`` moved to just before ``optimizer.step()`` (the
    gradients are gone when it steps)."""

    VARIANTS: ClassVar[tuple[str, ...]] = ("missing_parentheses", "zero_grad_before_step")

    def applies(self, d: Draw) -> bool:
        return True

    def describe(self, d: Draw) -> str:
        return f"the optimizer never steps: {self.variant(d, self.VARIANTS)}"

    def take_step(self, optimizer: torch.optim.Optimizer, d: Draw) -> None:
        if self.variant(d, self.VARIANTS) == "missing_parentheses":
            optimizer.step  # noqa: B018 (the bug: a reference, never a call)
            return
        optimizer.zero_grad()
        optimizer.step()


@third
class ShuffledLabels(faults.ShuffledLabels):
    """Rows and targets no longer match: the features shuffled apart from the targets, the
    target array sorted in place (``y.sort()`` for a class count), the targets read off by
    one row (a label file with a header line read without skipping it), or the targets
    permuted anew every epoch (a loader that shuffles its label list apart from its rows)."""

    VARIANTS: ClassVar[tuple[str, ...]] = (
        "features_shuffled",
        "targets_sorted",
        "off_by_one",
        "reshuffled_each_epoch",
    )

    def describe(self, d: Draw) -> str:
        return f"targets do not match rows: {self.variant(d, self.VARIANTS)}"

    def training_rows(
        self, x: np.ndarray, y: np.ndarray, d: Draw, n_classes: int, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray]:
        variant = self.variant(d, self.VARIANTS)
        if variant == "features_shuffled":
            return x[self.rng(d).permutation(len(x))], y
        if variant == "targets_sorted":
            return x, np.sort(y, kind="stable")
        if variant == "off_by_one":
            return x, np.roll(y, 1)
        return x, y

    def epoch_targets(self, y: torch.Tensor, epoch: int, d: Draw) -> torch.Tensor:
        if self.variant(d, self.VARIANTS) != "reshuffled_each_epoch":
            return y
        order = np.random.default_rng([d.seed, 1200 + self.salt, epoch]).permutation(len(y))
        return y[torch.from_numpy(order)]


@third
class GradientAscent(faults.GradientAscent):
    """The update climbs the loss: ``-F.nll_loss(log_probs, y)`` (NLL already negates), a
    Gaussian log-likelihood minimised without its minus, a gradient reversal layer left on
    the model's output, or a linear decay written ``(step - total) / total`` (a negative
    learning rate shrinking to 0)."""

    def options(self, d: Draw) -> tuple[str, ...]:
        first = "nll_minus" if d.classify else "log_likelihood"
        return (first, "gradient_reversal", "decay_sign_typo")

    def describe(self, d: Draw) -> str:
        return f"gradient ascent: {self.variant(d, self.options(d))}"

    def loss(
        self, d: Draw, data: Data, module: nn.Module | None, fn: LossFn
    ) -> tuple[nn.Module | None, LossFn]:
        variant = self.variant(d, self.options(d))
        if variant == "nll_minus":
            weight = data.class_weights
            return None, lambda out, y: -F.nll_loss(F.log_softmax(out, dim=1), y, weight=weight)
        if variant == "log_likelihood":

            def log_likelihood(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
                return (-0.5 * (y - out) ** 2 - 0.5 * math.log(2 * math.pi)).mean()

            return None, log_likelihood
        return module, fn

    def mutate_model(self, model: nn.Module, d: Draw) -> None:
        if self.variant(d, self.options(d)) == "gradient_reversal":
            _output_hook(model, _GradReverse.apply)

    def schedule(
        self, d: Draw, optimizer: torch.optim.Optimizer, scheduler: Any, per_step: bool
    ) -> tuple[Any, bool]:
        if self.variant(d, self.options(d)) != "decay_sign_typo":
            return scheduler, per_step
        total = max(1, d.total_steps)
        decay = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: (s - total) / total)
        return decay, True


@third
class TinyTrainSet(faults.TinyTrainSet):
    """Training on a few dozen rows without meaning to, for as many steps as planned (a
    ``max_steps`` budget): ``train_test_split`` with its sizes swapped (3-6% of the rows
    train), or a ``dropna()`` over all columns where one is mostly missing (only the rows
    that have it, 4-8%, survive)."""

    VARIANTS: ClassVar[tuple[str, ...]] = ("swapped_split", "dropna_sparse_column")

    def describe(self, d: Draw) -> str:
        return f"a tiny training set: {self.variant(d, self.VARIANTS)}"

    def keep(self, d: Draw) -> np.ndarray:
        """Which training rows survive (a mask over the draw's training rows)."""
        rng = self.rng(d)
        if self.variant(d, self.VARIANTS) == "swapped_split":
            rows = max(24, round(d.n_train * float(rng.uniform(0.03, 0.06))))
            mask = np.zeros(d.n_train, dtype=bool)
            mask[rng.choice(d.n_train, size=min(rows, d.n_train), replace=False)] = True
            return mask
        present = rng.random(d.n_train) < float(rng.uniform(0.04, 0.08))
        if present.sum() < 24:  # at least a few dozen rows have the column
            present[rng.choice(np.flatnonzero(~present), 24 - int(present.sum()), False)] = True
        return present

    def adjust(self, d: Draw) -> Draw:
        rows = int(self.keep(d).sum())
        batch = min(d.batch_size, max(4, rows // 4))
        epochs = math.ceil(d.total_steps / steps_per_epoch(rows, batch, 1, 1.0))
        every = d.eval_every or max(5, d.total_steps // 8)
        return replace(d, batch_size=batch, accum_steps=1, epochs=epochs, eval_every=every)

    def training_rows(
        self, x: np.ndarray, y: np.ndarray, d: Draw, n_classes: int, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray]:
        mask = self.keep(d)
        return x[mask], y[mask]


# ---------------------------------------------------------------- group 2
def _groups_at(model: nn.Module, lr: float) -> list[dict[str, Any]]:
    return [{"params": [p for p in model.parameters() if p.requires_grad], "lr": lr}]


@third
class LrX100(faults.LrX100):
    """The learning rate about 100x too high, not in the draw's config: a parameter group's
    own ``lr`` written 100x (it overrides the optimizer's), ``OneCycleLR`` given
    ``max_lr=100 * lr`` (the peak taken for a multiplier), or the linear scaling rule
    applied with a reference batch of 1 (``lr * batch_size``, batches of 32-128)."""

    def options(self, d: Draw) -> tuple[str, ...]:
        found = ["group_lr"]
        if d.imbalance_keep >= 1.0:  # the run's length is known exactly (OneCycleLR needs it)
            found.append("one_cycle_peak")
        if 32 <= d.batch_size <= 128:
            found.append("lr_times_batch")
        return tuple(found)

    def describe(self, d: Draw) -> str:
        return f"learning rate about 100x: {self.variant(d, self.options(d))}"

    def optimizer_params(self, model: nn.Module, d: Draw) -> list[Any] | None:
        variant = self.variant(d, self.options(d))
        if variant == "group_lr":
            return _groups_at(model, d.lr * 100)
        if variant == "lr_times_batch":
            return _groups_at(model, d.lr * d.batch_size)
        return None

    def schedule(
        self, d: Draw, optimizer: torch.optim.Optimizer, scheduler: Any, per_step: bool
    ) -> tuple[Any, bool]:
        if self.variant(d, self.options(d)) != "one_cycle_peak":
            return scheduler, per_step
        cycle = torch.optim.lr_scheduler.OneCycleLR(
            optimizer, max_lr=100 * d.lr, total_steps=d.total_steps + 1
        )
        return cycle, True


@third
class LrDiv1000(faults.LrDiv1000):
    """The learning rate about 1/1000 of the intended one: a ``LinearLR`` warm-up from
    ``start_factor=1e-3`` whose length was given in samples where steps were meant (the run
    ends a fraction of a percent into it), or a parameter group's ``lr`` written
    ``1e-3 * lr`` (a multiplier applied to a value already absolute)."""

    VARIANTS: ClassVar[tuple[str, ...]] = ("warmup_in_samples", "group_lr_multiplier")

    def describe(self, d: Draw) -> str:
        return f"learning rate about 1/1000: {self.variant(d, self.VARIANTS)}"

    def optimizer_params(self, model: nn.Module, d: Draw) -> list[Any] | None:
        if self.variant(d, self.VARIANTS) == "group_lr_multiplier":
            return _groups_at(model, 1e-3 * d.lr)
        return None

    def schedule(
        self, d: Draw, optimizer: torch.optim.Optimizer, scheduler: Any, per_step: bool
    ) -> tuple[Any, bool]:
        if self.variant(d, self.VARIANTS) != "warmup_in_samples":
            return scheduler, per_step
        samples = d.total_steps * d.batch_size * d.accum_steps * 10  # 10 epochs' worth
        warmup = torch.optim.lr_scheduler.LinearLR(
            optimizer, start_factor=1e-3, total_iters=max(1, samples)
        )
        return warmup, True


@third
class NoZeroGrad(faults.NoZeroGrad):
    """Gradients are not cleared between steps: ``criterion.zero_grad()`` (the loss module,
    which has no parameters) where ``optimizer.zero_grad()`` was meant, or the clearing
    indented under the logging ``if step % every == 0`` (every 25-100 steps)."""

    VARIANTS: ClassVar[tuple[str, ...]] = ("criterion_zero_grad", "zero_grad_when_logging")
    _seen: torch.optim.Optimizer | None = None
    _calls: int = 0

    def describe(self, d: Draw) -> str:
        return f"gradients not cleared: {self.variant(d, self.VARIANTS)}"

    def adjust(self, d: Draw) -> Draw:
        self._every = int(self.rng(d).integers(25, 101))
        self._variant = self.variant(d, self.VARIANTS)
        return d

    def clear_grads(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
        if self._variant == "criterion_zero_grad":
            nn.MSELoss().zero_grad()
            return
        if optimizer is not self._seen:  # a new run
            self._seen, self._calls = optimizer, 0
        self._calls += 1
        if self._calls % self._every == 0:
            optimizer.zero_grad()


@third
class ParamsNotInOptimizer(faults.ParamsNotInOptimizer):
    """Trainable parameters the optimizer never got: the head replaced (``model.fc =
    nn.Linear(...)``) after the optimizer was built over the old one, or parameter groups
    built by module type (decay for Linear weights, none for biases and LayerNorm, as in
    minGPT's ``configure_optimizers``) without its completeness check, so convolutions,
    recurrent layers, BatchNorm and attention projections are left out."""

    TYPED: ClassVar[tuple[str, ...]] = ("cnn", "gru", "lstm", "transformer")

    def options(self, d: Draw) -> tuple[str, ...]:
        return ("head_replaced", "groups_by_type") if d.arch in self.TYPED else ("head_replaced",)

    def applies(self, d: Draw) -> bool:
        return d.arch not in ("logreg", "linreg") and not d.frozen_backbone

    def describe(self, d: Draw) -> str:
        return f"parameters not in the optimizer: {self.variant(d, self.options(d))}"

    def optimizer_params(self, model: nn.Module, d: Draw) -> list[Any]:
        if self.variant(d, self.options(d)) == "head_replaced":
            params = list(model.parameters())  # the optimizer is built over these
            old = head(model)
            name = next(n for n, m in model.named_modules() if m is old)
            parent, _, attr = name.rpartition(".")
            new = nn.Linear(old.in_features, old.out_features)  # type: ignore[arg-type]
            setattr(model.get_submodule(parent), attr, new)  # then `model.fc = nn.Linear(...)`
            return params
        linear = [m for m in model.modules() if isinstance(m, nn.Linear)]
        decay = [m.weight for m in linear]
        no_decay = [m.bias for m in linear if m.bias is not None]
        no_decay += [
            p for m in model.modules() if isinstance(m, nn.LayerNorm) for p in m.parameters()
        ]
        return [
            {"params": decay, "weight_decay": d.weight_decay},
            {"params": no_decay, "weight_decay": 0.0},
        ]


def _weights_by_layer(model: nn.Module) -> list[tuple[nn.Module, str, nn.Parameter]]:
    """Every (module, name, weight matrix or kernel) a per-module init loop visits."""
    return [
        (m, n, p)
        for m in model.modules()
        for n, p in m.named_parameters(recurse=False)
        if p.dim() >= 2
    ]


@third
class ZeroInit(faults.ZeroInit):
    """Weights that start at zero: an ``init_weights`` applied with ``model.apply`` that zeroes
    every weight (biases left at their defaults), or ``nn.init.normal_(w, 0.0, std)`` with a
    std rounded to 0 by an integer config field (biases zeroed)."""

    VARIANTS: ClassVar[tuple[str, ...]] = ("apply_zeros", "std_rounded_to_zero")

    def describe(self, d: Draw) -> str:
        return f"weights initialised to zero: {self.variant(d, self.VARIANTS)}"

    def mutate_model(self, model: nn.Module, d: Draw) -> None:
        variant = self.variant(d, self.VARIANTS)
        std = round(0.02)  # the config's init_std, parsed as an int
        with torch.no_grad():
            for m, name, w in _weights_by_layer(model):
                if variant == "apply_zeros":
                    nn.init.zeros_(w)
                else:
                    nn.init.normal_(w, 0.0, std)
                    bias = getattr(m, name.replace("weight", "bias"), None)
                    if isinstance(bias, torch.Tensor):
                        nn.init.zeros_(bias)


@third
class ConstantInit(faults.ConstantInit):
    """Every unit of a layer starts the same: ``torch.full_like(w, std)`` where
    ``normal_(w, 0, std)`` was meant (std the default's, ``1 / sqrt(3 * fan_in)``), or every
    row copied from one random row (``w.copy_(w[0].expand_as(w))``, a template expanded);
    biases zero: the units of a layer get the same gradient and stay identical."""

    VARIANTS: ClassVar[tuple[str, ...]] = ("full_like_std", "one_row_expanded")

    def describe(self, d: Draw) -> str:
        return f"constant per-unit init: {self.variant(d, self.VARIANTS)}"

    def mutate_model(self, model: nn.Module, d: Draw) -> None:
        variant = self.variant(d, self.VARIANTS)
        with torch.no_grad():
            for name, p in model.named_parameters():
                if p.dim() >= 2:
                    if variant == "full_like_std":
                        p.copy_(torch.full_like(p, 1.0 / math.sqrt(3.0 * p[0].numel())))
                    else:
                        p.copy_(p[0:1].expand_as(p))
                elif "bias" in name:
                    p.zero_()


@third
class HugeInit(faults.HugeInit):
    """Weights far above their default scale: ``nn.init.uniform_(w)`` with its default bounds
    (0, 1) (all positive, mean 0.5), or a He init with a gain of 8 (a ``gain`` argument meant
    for another parameterisation: std ``8 * sqrt(2 / fan_in)``)."""

    VARIANTS: ClassVar[tuple[str, ...]] = ("uniform_default_bounds", "he_gain_8")

    def describe(self, d: Draw) -> str:
        return f"huge init: {self.variant(d, self.VARIANTS)}"

    def mutate_model(self, model: nn.Module, d: Draw) -> None:
        variant = self.variant(d, self.VARIANTS)
        with torch.no_grad():
            for _m, _name, w in _weights_by_layer(model):
                if variant == "uniform_default_bounds":
                    nn.init.uniform_(w)
                else:
                    fan_in = w[0].numel()
                    nn.init.normal_(w, 0.0, 8.0 * math.sqrt(2.0 / fan_in))


@third
class DeadReluBias(faults.DeadReluBias):
    """Units behind ReLUs that never fire: their biases drawn by ``nn.init.normal_(b, mean,
    std)`` with the mean and std swapped in the call (mean -3 to -6), or every weight of the
    layers after the first ReLU drawn from ``uniform_(w, -bound, 0)`` (a typo for
    ``(-bound, bound)``), so after non-negative ReLU outputs their pre-activations are
    negative."""

    def options(self, d: Draw) -> tuple[str, ...]:
        if d.arch == "cnn" or len(d.hidden) >= 2:
            return ("bias_mean_std_swapped", "negative_uniform")
        return ("bias_mean_std_swapped",)

    def describe(self, d: Draw) -> str:
        return f"dead ReLUs: {self.variant(d, self.options(d))}"

    def mutate_model(self, model: nn.Module, d: Draw) -> None:
        variant = self.variant(d, self.options(d))
        feeding = activations_before(model, (nn.ReLU,))
        with torch.no_grad():
            if variant == "bias_mean_std_swapped":
                mean = -float(self.rng(d).uniform(3.0, 6.0))
                for layer in feeding:
                    bias = getattr(layer, "bias", None)
                    if isinstance(bias, torch.Tensor):
                        nn.init.normal_(bias, mean, 1.0)
                return
            layers = [m for m in model.modules() if isinstance(m, nn.Linear | nn.Conv2d)]
            for layer in layers[1:-1]:  # the hidden-to-hidden ones
                w = layer.weight
                bound = 1.0 / math.sqrt(w[0].numel())
                nn.init.uniform_(w, -bound, 0.0)


@third
class SaturatingInputs(faults.SaturatingInputs):
    """Tanh units fed inputs far outside their range: each feature binned into 100 quantile
    bins and the bin index (0-99) fed as a number (an ordinal ``KBinsDiscretizer`` left
    before the model; sequences: token-like codes fed as floats), or, on tabular data whose
    raw units are large, the raw features fed to a tanh network."""

    RAW_LARGE: ClassVar[tuple[str, ...]] = ("wine", "breast_cancer", "diabetes")

    def options(self, d: Draw) -> tuple[str, ...]:
        if d.task in self.RAW_LARGE and d.arch in ("mlp", "autoencoder"):
            return ("ordinal_bins", "raw_units")
        return ("ordinal_bins",)

    def describe(self, d: Draw) -> str:
        return f"saturating inputs: {self.variant(d, self.options(d))}"

    def wants_raw_features(self, d: Draw) -> bool:
        return self.variant(d, self.options(d)) == "raw_units"

    def after_normalising(
        self, x: np.ndarray, x_val: np.ndarray, d: Draw, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray]:
        if self.variant(d, self.options(d)) != "ordinal_bins":
            return x, x_val
        flat = x.reshape(-1, x.shape[-1])
        edges = np.quantile(flat, np.linspace(0.0, 1.0, 101)[1:-1], axis=0)  # (99, features)

        def codes(v: np.ndarray) -> np.ndarray:
            out = np.empty_like(v)
            for f in range(v.shape[-1]):
                out[..., f] = np.searchsorted(edges[:, f], v[..., f])
            return out

        return codes(x), codes(x_val)


@third
class UnnormalisedImages(faults.UnnormalisedImages):
    """Digit images fed on the 0-255 scale: each image stretched to 0-255 by its own minimum
    and maximum (``cv2.normalize(img, None, 0, 255, NORM_MINMAX)``) and fed as is, or 0-255
    pixels with only the mean subtracted (no division by the std)."""

    VARIANTS: ClassVar[tuple[str, ...]] = ("minmax_to_255", "mean_only")

    def describe(self, d: Draw) -> str:
        return f"unnormalised images: {self.variant(d, self.VARIANTS)}"

    def wants_raw_features(self, d: Draw) -> bool:
        return True

    def before_normalising(
        self, x: np.ndarray, x_val: np.ndarray, d: Draw, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray]:
        x, x_val = x * 255.0 / 16.0, x_val * 255.0 / 16.0  # 8-bit pixel values
        if self.variant(d, self.VARIANTS) == "minmax_to_255":

            def stretch(v: np.ndarray) -> np.ndarray:
                low, high = v.min(axis=1, keepdims=True), v.max(axis=1, keepdims=True)
                return np.asarray((v - low) / np.where(high > low, high - low, 1.0) * 255.0)

            return stretch(x), stretch(x_val)
        mean = float(x.mean())
        return x - mean, x_val - mean


@third
class ClassImbalance(faults.ClassImbalance):
    """A strongly imbalanced training set nobody handles: an outlier filter written with ``|``
    for ``&`` (``keep = (y == 0) | (x[:, f] > q95)``, so class 0 keeps all its rows and the
    others ~5%), or, on data imbalanced already, class weights set to the class frequencies
    instead of their inverse (the majority weighted up)."""

    def options(self, d: Draw) -> tuple[str, ...]:
        if d.imbalance_keep < 1.0:
            return ("or_filter", "frequency_weights")
        return ("or_filter",)

    def describe(self, d: Draw) -> str:
        return f"class imbalance: {self.variant(d, self.options(d))}"

    def training_rows(
        self, x: np.ndarray, y: np.ndarray, d: Draw, n_classes: int, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray]:
        if self.variant(d, self.options(d)) != "or_filter":
            return x, y
        flat = x.reshape(len(x), -1)
        spread = flat.std(axis=0)
        col = int(self.rng(d).choice(np.flatnonzero(spread > 0)))
        q = float(self.rng(d).uniform(0.95, 0.98))
        keep = (y == 0) | (flat[:, col] > np.quantile(flat[:, col], q))
        return x[keep], y[keep]

    def loss(
        self, d: Draw, data: Data, module: nn.Module | None, fn: LossFn
    ) -> tuple[nn.Module | None, LossFn]:
        if self.variant(d, self.options(d)) != "frequency_weights":
            return module, fn
        counts = torch.bincount(data.y, minlength=data.n_classes).float()
        criterion = nn.CrossEntropyLoss(
            weight=counts / counts.sum() * data.n_classes, label_smoothing=d.label_smoothing
        )
        return criterion, criterion


@third
class Overtraining(faults.Overtraining):
    """Far too many epochs: a fixed ``epochs=300`` copied from a recipe for another data set
    (capped at 3000 steps), or early stopping that monitors a metric the loop never logs
    (``val_acc`` for ``val_accuracy``), so it runs to ``max_epochs`` (12-20x the intended)."""

    VARIANTS: ClassVar[tuple[str, ...]] = ("fixed_recipe_epochs", "early_stopping_never_fires")

    def describe(self, d: Draw) -> str:
        return f"overtraining: {self.variant(d, self.VARIANTS)}"

    def adjust(self, d: Draw) -> Draw:
        if self.variant(d, self.VARIANTS) == "fixed_recipe_epochs":
            epochs = max(300, d.epochs * 8)
        else:
            epochs = round(d.epochs * float(self.rng(d).uniform(12.0, 20.0)))
        epochs = max(d.epochs * 8, min(epochs, self.MAX_STEPS // d.steps_per_epoch))
        every = max(5, min(d.eval_every or d.steps_per_epoch, d.total_steps // 8))
        return replace(d, epochs=epochs, eval_every=every)


@third
class NanOp(faults.NanOp):
    """A NaN-producing operation: standardising with an unguarded std (digits' always-blank
    pixels divide 0 by 0), a "balanced" loss averaging per-class means (a class absent from a
    batch averages nothing: 0/0), or a regression trained with
    ``PoissonNLLLoss(log_input=False)`` on unconstrained outputs (the log of negative
    predictions)."""

    def options(self, d: Draw) -> tuple[str, ...]:
        found: list[str] = []
        if d.task == "digits":
            found.append("unguarded_std")
        if d.classify:  # a class missing from a batch: more likely with more classes
            found.append("per_class_mean_loss")
        if d.regression:
            found.append("poisson_raw_outputs")
        return tuple(found)

    def describe(self, d: Draw) -> str:
        return f"NaN-producing op: {self.variant(d, self.options(d))}"

    def before_normalising(
        self, x: np.ndarray, x_val: np.ndarray, d: Draw, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray]:
        if self.variant(d, self.options(d)) != "unguarded_std":
            return x, x_val
        mean, std = x.mean(axis=0), x.std(axis=0)
        with np.errstate(divide="ignore", invalid="ignore"):
            return (x - mean) / std, (x_val - mean) / std

    def loss(
        self, d: Draw, data: Data, module: nn.Module | None, fn: LossFn
    ) -> tuple[nn.Module | None, LossFn]:
        variant = self.variant(d, self.options(d))
        if variant == "poisson_raw_outputs":
            poisson = nn.PoissonNLLLoss(log_input=False)
            return poisson, poisson
        if variant != "per_class_mean_loss":
            return module, fn
        classes = data.n_classes

        def balanced(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            each = F.cross_entropy(out, y, reduction="none")
            return torch.stack([each[y == c].mean() for c in range(classes)]).mean()

        return None, balanced


@third
class SchedulerPerBatch(faults.SchedulerPerBatch):
    """A per-epoch scheduler stepped after every batch: ``ExponentialLR(gamma=0.8-0.95)``
    meant per epoch, or the draw's ``CosineAnnealingLR(T_max=epochs)`` (cosine-per-epoch
    draws), each stepped in the batch loop: the learning rate collapses within a few epochs'
    worth of batches."""

    def options(self, d: Draw) -> tuple[str, ...]:
        if d.schedule == "cosine_epoch":
            return ("exponential_per_batch", "cosine_epochs_per_batch")
        return ("exponential_per_batch",)

    def applies(self, d: Draw) -> bool:
        return d.schedule in ("constant", "step", "cosine_epoch") and d.steps_per_epoch >= 4

    def describe(self, d: Draw) -> str:
        return f"scheduler stepped per batch: {self.variant(d, self.options(d))}"

    def schedule(
        self, d: Draw, optimizer: torch.optim.Optimizer, scheduler: Any, per_step: bool
    ) -> tuple[Any, bool]:
        if self.variant(d, self.options(d)) == "cosine_epochs_per_batch":
            return scheduler, True
        gamma = float(self.rng(d).uniform(0.8, 0.95))
        return torch.optim.lr_scheduler.ExponentialLR(optimizer, gamma=gamma), True


@third
class EvalModeForgotten(faults.EvalModeForgotten):
    """Validation with dropout/BatchNorm still in training mode: ``criterion.eval()`` where
    ``model.eval()`` was meant, or ``model.eval()`` followed by an ``enable_dropout(model)``
    left over from Monte Carlo dropout (every ``nn.Dropout`` back to training mode)."""

    _variant: str = "criterion_eval"

    def options(self, d: Draw) -> tuple[str, ...]:
        return ("criterion_eval", "mc_dropout") if d.dropout >= 0.1 else ("criterion_eval",)

    def describe(self, d: Draw) -> str:
        return f"eval mode forgotten: {self.variant(d, self.options(d))}"

    def adjust(self, d: Draw) -> Draw:
        self._variant = self.variant(d, self.options(d))  # eval_module does not get the draw
        return d

    def eval_module(self, model: nn.Module) -> nn.Module:
        if self._variant == "mc_dropout":
            return _McDropout(model)
        return nn.CrossEntropyLoss()


class _McDropout(nn.Module):
    """What ``.eval()`` then ``enable_dropout(model)`` amount to: eval mode but for dropout."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.target = [model]  # not a submodule: this object only switches its modes

    def train(self, mode: bool = True) -> _McDropout:
        model = self.target[0]
        model.train(mode)
        if not mode:
            for m in model.modules():
                if isinstance(m, nn.Dropout):
                    m.train()
        return self


@third
class RecurrentExplosion(faults.RecurrentExplosion):
    """A GRU/LSTM swapped for a plain ReLU ``nn.RNN`` (the kind's precondition: a gated cell
    does not explode) whose recurrent weights are initialised too large another way: the
    identity *added* to the default init (``w += eye``, an IRNN init written as an update)
    or ``orthogonal_(w, gain=2.0)``; over sequences of 45-70 steps."""

    recurrence = "relu_rnn"
    VARIANTS: ClassVar[tuple[str, ...]] = ("identity_added", "orthogonal_gain_2")

    def describe(self, d: Draw) -> str:
        return f"recurrent explosion: {self.variant(d, self.VARIANTS)}"

    def adjust(self, d: Draw) -> Draw:
        return replace(d, seq_len=int(self.rng(d).integers(45, 71)))

    def mutate_model(self, model: nn.Module, d: Draw) -> None:
        with torch.no_grad():
            w = model.recurrent_weight()  # type: ignore[operator]
            if self.variant(d, self.VARIANTS) == "identity_added":
                w.add_(torch.eye(w.shape[0]))
            else:
                nn.init.orthogonal_(w, gain=2.0)


@third
class InputsTooSmall(faults.InputsTooSmall):
    """Pixels scaled far too small: each image divided by its own pixel sum (an L1
    "normalise" for a standardisation, pixels ~1/64), or divided by 255 and then standardised
    with the mean and std computed on the 0-255 values (a near-constant input around -0.5)."""

    VARIANTS: ClassVar[tuple[str, ...]] = ("per_image_sum", "stats_from_raw")

    def describe(self, d: Draw) -> str:
        return f"inputs too small: {self.variant(d, self.VARIANTS)}"

    def wants_raw_features(self, d: Draw) -> bool:
        return True

    def before_normalising(
        self, x: np.ndarray, x_val: np.ndarray, d: Draw, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray]:
        x, x_val = x * 255.0 / 16.0, x_val * 255.0 / 16.0  # 8-bit pixel values
        if self.variant(d, self.VARIANTS) == "per_image_sum":

            def l1(v: np.ndarray) -> np.ndarray:
                total = v.sum(axis=1, keepdims=True)
                return np.asarray(v / np.where(total > 0, total, 1.0))

            return l1(x), l1(x_val)
        mean, std = float(x.mean()), float(x.std())
        return (x / 255.0 - mean) / std, (x_val / 255.0 - mean) / std


@third
class Memorisation(faults.Memorisation):
    """``train_test_split(..., train_size=48)`` meant as 48% (an int is a row count): 40-60
    rows train, for a step budget (``max_steps``) of 1200-2000 with dropout and weight decay
    off: the model memorises them."""

    def describe(self, d: Draw) -> str:
        return f"memorisation: train_size={self.rows(d)} (an int, a row count)"

    def rows(self, d: Draw) -> int:
        return int(self.rng(d).integers(40, 61))

    def adjust(self, d: Draw) -> Draw:
        rows = self.rows(d)
        steps = int(self.rng(d).integers(1200, 2001))
        batch = 8 if rows < 48 else 16
        epochs = math.ceil(steps / (rows // batch))
        return replace(
            d, dropout=0.0, weight_decay=0.0, batch_size=batch, accum_steps=1, epochs=epochs,
            eval_every=max(5, steps // 10),
        )  # fmt: skip

    def training_rows(
        self, x: np.ndarray, y: np.ndarray, d: Draw, n_classes: int, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray]:
        picked = np.sort(self.rng(d).choice(len(y), size=self.rows(d), replace=False))
        return x[picked], y[picked]


_WRITTEN: dict[str, Fault] = {
    f.name: f
    for f in (
        ZeroGradients(),
        SoftmaxTwice(),
        LossBroadcast(),
        GradAccumulationUndivided(),
        UnnormalisedTabular(),
        FrozenByMistake(),
        NoOptimizerStep(),
        ShuffledLabels(),
        GradientAscent(),
        TinyTrainSet(),
        LrX100(),
        LrDiv1000(),
        NoZeroGrad(),
        ParamsNotInOptimizer(),
        ZeroInit(),
        ConstantInit(),
        HugeInit(),
        DeadReluBias(),
        SaturatingInputs(),
        UnnormalisedImages(),
        ClassImbalance(),
        Overtraining(),
        NanOp(),
        SchedulerPerBatch(),
        EvalModeForgotten(),
        RecurrentExplosion(),
        InputsTooSmall(),
        Memorisation(),
    )
}
#: kind -> the dev2 split's implementation, in the tables' order (faults.KINDS)
DEV2_FAULTS: dict[str, Fault] = {kind: _WRITTEN[kind] for kind in faults.KINDS}

__all__ = ["DEV2_FAULTS"]
