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
    after ``loss.backward()`` (it scales only the logged value), or each micro-batch calls
    ``backward(retain_graph=True)`` on the running total of the step's losses, so earlier
    micro-batches count again (K = 4 only: with K = 2 the excess is too small to show)."""

    _total: torch.Tensor | None = None  # the running total's variant: the step's losses so far

    def options(self, d: Draw) -> tuple[str, ...]:
        if d.accum_steps >= 4:
            return ("divided_after_backward", "running_total")
        return ("divided_after_backward",)

    def describe(self, d: Draw) -> str:
        return f"accumulated gradients undivided: {self.variant(d, self.options(d))}"

    def backward(self, scaled: torch.Tensor, loss: torch.Tensor, micro: int, d: Draw) -> None:
        k = d.accum_steps
        if self.variant(d, self.options(d)) == "divided_after_backward":
            loss.backward()  # then `loss = loss / k`, for the log only
            return
        part = loss / k
        self._total = part if micro % k == 0 or self._total is None else self._total + part
        last = (micro + 1) % k == 0
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
    target array sorted in place (``y.sort()`` for a class count), or the targets read off by
    one row (a label file with a header line read without skipping it)."""

    VARIANTS: ClassVar[tuple[str, ...]] = ("features_shuffled", "targets_sorted", "off_by_one")

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
        return x, np.roll(y, 1)


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


#: kind -> the dev2 split's implementation
DEV2_FAULTS: dict[str, Fault] = {
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
    )
}

__all__ = ["DEV2_FAULTS"]
