"""A second, independent implementation of every fault kind, used only by the ``family`` split.

Each class here is the same *kind* as its namesake in faults.py (it subclasses it, so it
keeps the kind's name and, unless it says otherwise, the symptom the validation pass checks),
but it reaches the fault through different code: a learning rate x100 through the scheduler
rather than the optimizer, a layer frozen by a parameter group with learning rate 0 rather than
``requires_grad``, labels shuffled every epoch rather than once, and so on. None of them is
fitted to what the rules read: each is written from what the fault is (the rules were never
looked at). ``implementation(kind, split)`` picks the one a split uses; which space a split
draws from is declared in space.py and suite.py.
"""

from __future__ import annotations

import copy
import math
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from bench.detection.generated import faults as base
from bench.detection.generated.faults import FAULTS, Fault, broke, harmed
from bench.detection.generated.models import activations_before, head, param_layers
from bench.detection.generated.record import RunRecord
from bench.detection.generated.space import Draw

if TYPE_CHECKING:
    from bench.detection.generated.data import Data

LossFn = base.LossFn
#: the data sets the family space draws tabular rows from
FAMILY_TABULAR = (*base.TABULAR, "moons", "circles", "synth_reg_t")
#: the family space's architectures whose weights are Linear / Conv layers only (and norms)
LAYERED = ("mlp", "resmlp", "cnn1d")


def _scale_schedule(
    optimizer: torch.optim.Optimizer, scheduler: Any, per_step: bool, factor: float
) -> tuple[Any, bool]:
    """A scheduler whose base value is ``factor`` times the optimizer's: the draw's own
    scheduler with its ``base_lrs`` scaled, or a LambdaLR with a constant ``factor``."""
    if scheduler is None:
        return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _s: factor), True
    scheduler.base_lrs = [lr * factor for lr in scheduler.base_lrs]
    for group in optimizer.param_groups:  # what the scheduler's first value sets
        group["lr"] *= factor
    return scheduler, per_step


class LrX100Scheduler(base.LrX100):
    """The learning rate x100 in the scheduler, not the optimizer: a LambdaLR factor of 100 (a
    percentage where a fraction was meant), or the draw's scheduler given a base value 100x
    the optimizer's."""

    def adjust(self, d: Draw) -> Draw:
        return d

    def schedule(
        self, d: Draw, optimizer: torch.optim.Optimizer, scheduler: Any, per_step: bool
    ) -> tuple[Any, bool]:
        return _scale_schedule(optimizer, scheduler, per_step, 100.0)


class LrDiv1000Scheduler(base.LrDiv1000):
    """The learning rate /1000 in the scheduler: a LambdaLR factor of 1e-3 (a warm-up's first
    value that never rises), or the draw's scheduler's base value /1000."""

    def adjust(self, d: Draw) -> Draw:
        return d

    def schedule(
        self, d: Draw, optimizer: torch.optim.Optimizer, scheduler: Any, per_step: bool
    ) -> tuple[Any, bool]:
        return _scale_schedule(optimizer, scheduler, per_step, 1e-3)


class NoZeroGradWrongModule(base.NoZeroGrad):
    """``zero_grad()`` called on the wrong module: the head's (a helper handed ``model.head``),
    so every other layer's gradients add up over the run."""

    zero_grad = True

    def applies(self, d: Draw) -> bool:
        return d.arch not in ("logreg", "linreg")

    def clear_grads(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
        head(model).zero_grad()


class NoOptimizerStepStaleModel(base.NoOptimizerStep):
    """The optimizer steps a different model object: it was built over a copy (the model was
    re-created from a checkpoint after the optimizer), so the model that trains never moves."""

    optimizer_step = True

    def optimizer_params(self, model: nn.Module, d: Draw) -> list[Any]:
        return list(copy.deepcopy(model).parameters())


class ParamsNotInOptimizerGroups(base.ParamsNotInOptimizer):
    """Per-layer parameter groups from a hand-written list that names the head where the
    layer before it belonged: that layer is left out of the optimizer."""

    def optimizer_params(self, model: nn.Module, d: Draw) -> list[Any]:
        layers = param_layers(model)
        left_out = layers[-2]
        return [{"params": list(m.parameters(recurse=False))} for m in layers if m is not left_out]


class FrozenByZeroLr(base.FrozenByMistake):
    """Everything but the head in a parameter group with learning rate 0 (a fine-tuning
    recipe's "freeze the backbone" left in): those layers get gradients and never move."""

    def mutate_model(self, model: nn.Module, d: Draw) -> None:
        pass

    def optimizer_params(self, model: nn.Module, d: Draw) -> list[Any]:
        top = {id(p) for p in head(model).parameters()}
        body = [p for p in model.parameters() if id(p) not in top]
        return [{"params": list(head(model).parameters())}, {"params": body, "lr": 0.0}]

    def symptom(self, f: RunRecord, t: RunRecord) -> bool:
        return bool(set(f.unchanged) - set(t.unchanged)) and harmed(f, t)


def _init_layers(model: nn.Module, init: Any) -> None:
    """``model.apply`` of an ``_init_weights`` over Linear and Conv layers."""

    def visit(m: nn.Module) -> None:
        if isinstance(m, nn.Linear | nn.Conv1d | nn.Conv2d):
            with torch.no_grad():
                init(m)

    model.apply(visit)


class ZeroInitApply(base.ZeroInit):
    """An ``_init_weights`` applied to every Linear/Conv layer with ``weight.zero_()`` where
    ``normal_()`` was meant (biases zeroed too, as such functions do)."""

    def applies(self, d: Draw) -> bool:
        return d.arch in LAYERED

    def mutate_model(self, model: nn.Module, d: Draw) -> None:
        def init(m: nn.Module) -> None:
            m.weight.zero_()  # type: ignore[operator]
            if m.bias is not None:
                m.bias.zero_()  # type: ignore[operator]

        _init_layers(model, init)


class ConstantInitFanIn(base.ConstantInit):
    """An averaging init: every Linear/Conv weight set to 1/fan_in, biases 0, so the units of a
    layer start (and stay) identical."""

    def applies(self, d: Draw) -> bool:
        return d.arch in LAYERED

    def mutate_model(self, model: nn.Module, d: Draw) -> None:
        def init(m: nn.Module) -> None:
            w = m.weight
            w.fill_(1.0 / (w[0].numel()))  # type: ignore[index, operator]
            if m.bias is not None:
                m.bias.zero_()  # type: ignore[operator]

        _init_layers(model, init)


class HugeInitUnitNormal(base.HugeInit):
    """Every weight matrix drawn from N(0, 1) (a std of 1 where about 1/sqrt(3 fan_in) was
    meant: 3.5x too large for 4 inputs, 20x for 128)."""

    def mutate_model(self, model: nn.Module, d: Draw) -> None:
        with torch.no_grad():
            for p in base.weights(model):
                p.normal_(0.0, 1.0)


class DeadReluSignFlip(base.DeadReluBias):
    """The layers feeding ReLUs initialised with the sign flipped (``-w.abs()``) and a bias of
    -1.5 to -3: after the first of them every input is >= 0, so the units below never fire."""

    def applies(self, d: Draw) -> bool:
        return d.arch == "cnn1d" or (d.arch in ("mlp", "resmlp") and d.activation == "relu")

    def mutate_model(self, model: nn.Module, d: Draw) -> None:
        value = -float(self.rng(d).uniform(1.5, 3.0))
        with torch.no_grad():
            for layer in activations_before(model, (nn.ReLU,)):
                if isinstance(layer, nn.Linear | nn.Conv1d):
                    layer.weight.copy_(-layer.weight.abs())
                if layer.bias is not None:
                    layer.bias.fill_(value)  # type: ignore[operator]


class SaturatingPercentages(base.SaturatingInputs):
    """Features min-max scaled to percentages, [0, 100], where [0, 1] was meant, into tanh
    units: they saturate (and the inputs are no longer centred)."""

    def applies(self, d: Draw) -> bool:
        return d.arch in ("mlp", "resmlp") and d.activation == "tanh"

    def after_normalising(
        self, x: np.ndarray, x_val: np.ndarray, d: Draw, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray]:
        low, high = x.min(axis=0), x.max(axis=0)
        span = np.where(high > low, high - low, 1.0)
        return 100.0 * (x - low) / span, 100.0 * (x_val - low) / span


class ImagesNormalisedAsUnit(base.UnnormalisedImages):
    """Pixels 0..16 normalised as though they were in [0, 1] (``(x - 0.5) / 0.25``, a recipe
    for another data set): inputs from -2 to 62."""

    def applies(self, d: Draw) -> bool:
        return d.task == "digits" and d.arch == "resmlp"

    def before_normalising(
        self, x: np.ndarray, x_val: np.ndarray, d: Draw, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray]:
        return (x - 0.5) / 0.25, (x_val - 0.5) / 0.25


class TabularGlobalScale(base.UnnormalisedTabular):
    """Tabular features standardised with one mean and std over the whole table (the image
    recipe), not per feature; where they share a scale, a third come in 1000x larger units
    (grams for kilograms), which that cannot undo."""

    def applies(self, d: Draw) -> bool:
        return d.task in FAMILY_TABULAR

    def before_normalising(
        self, x: np.ndarray, x_val: np.ndarray, d: Draw, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray]:
        if d.task not in ("wine", "breast_cancer", "diabetes"):
            pick = np.less(self.rng(d).random(x.shape[1]), 1 / 3)
            pick[int(self.rng(d).integers(x.shape[1]))] = True
            scale = np.where(pick, 1000.0, 1.0)
            x, x_val = x * scale, x_val * scale
        mean, std = x.mean(), x.std()
        return (x - mean) / std, (x_val - mean) / std


class ShuffledLabelsPerEpoch(base.ShuffledLabels):
    """The targets permuted afresh every epoch (a dataset whose ``__getitem__`` draws its label
    index at random): no row keeps a label long enough to learn it."""

    def training_rows(
        self, x: np.ndarray, y: np.ndarray, d: Draw, n_classes: int, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray]:
        return x, y

    def epoch_targets(self, y: torch.Tensor, epoch: int, d: Draw) -> torch.Tensor:
        order = np.random.default_rng([d.seed, 1000 + self.salt, epoch]).permutation(len(y))
        return y[torch.from_numpy(order)]


class OneClassSubsampled(base.ClassImbalance):
    """One class (not the first) subsampled to 3-8% of its rows (a filter on the wrong
    column), nothing handling it: that class is rarely predicted."""

    def training_rows(
        self, x: np.ndarray, y: np.ndarray, d: Draw, n_classes: int, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray]:
        gen = self.rng(d)
        victim = int(gen.integers(1, max(2, n_classes)))
        keep = float(gen.uniform(0.03, 0.08))
        rows = np.flatnonzero((y != victim) | (gen.random(len(y)) < keep))
        if not (y[rows] == victim).any():  # one row of it stays
            rows = np.sort(np.append(rows, np.flatnonzero(y == victim)[:1]))
        return x[rows], y[rows]

    def symptom(self, f: RunRecord, t: RunRecord) -> bool:
        assert f.final is not None and t.final is not None
        if broke(f):
            return False
        return any(
            rf < min(rt - 0.2, 0.6 * rt)
            for rf, rt in zip(f.final.recall, t.final.recall, strict=False)
            if not (math.isnan(rf) or math.isnan(rt))
        )


class SmallPoolResampled(base.TinyTrainSet):
    """The training set resampled with replacement from a pool of 24-60 rows (a ``sample``
    on a frame filtered for debugging): as many rows and steps as the full set, few distinct."""

    def adjust(self, d: Draw) -> Draw:
        return d if d.eval_every else replace(d, eval_every=max(5, d.total_steps // 10))

    def training_rows(
        self, x: np.ndarray, y: np.ndarray, d: Draw, n_classes: int, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray]:
        gen = self.rng(d)
        pool = gen.choice(len(y), size=self.rows(d), replace=False)
        rows = gen.choice(pool, size=len(y), replace=True)
        return x[rows], y[rows]


class OvertrainingRepeatedData(base.Overtraining):
    """The training set repeated 10-15 times per epoch (``ConcatDataset([ds] * n)`` meant for
    augmentation, with none): far too many passes over small or noisy data."""

    def applies(self, d: Draw) -> bool:
        noisy = d.task in ("synth_cls", "moons", "circles") and d.label_noise > 0.1
        small = d.task in ("diabetes", "breast_cancer", "synth_reg_t")
        if d.arch not in ("mlp", "resmlp") or d.label_smoothing or not (noisy or small):
            return False
        return d.n_train <= 600 and d.total_steps * 10 <= self.MAX_STEPS

    def repeats(self, d: Draw) -> int:
        return min(int(self.rng(d).integers(10, 16)), self.MAX_STEPS // max(1, d.total_steps))

    def adjust(self, d: Draw) -> Draw:
        every = d.eval_every or d.steps_per_epoch
        return replace(d, eval_every=max(5, min(every, d.total_steps // 8)))

    def training_rows(
        self, x: np.ndarray, y: np.ndarray, d: Draw, n_classes: int, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray]:
        n = self.repeats(d)
        return np.concatenate([x] * n), np.concatenate([y] * n)


class NanUnderflow(base.NanOp):
    """NaN from an underflow: a classifier's entropy bonus ``-(p * log p)`` on a softmax
    sharpened by a temperature of 0.02 (1/50 where 50 was meant; once a probability underflows
    to 0, 0 * log 0 is NaN), or a regression's targets through a square root after
    standardising (half of them negative)."""

    def options(self, d: Draw) -> tuple[str, ...]:
        return ("entropy_bonus",) if d.classify else ("sqrt_targets",)

    def applies(self, d: Draw) -> bool:
        return d.classify or d.regression

    def before_normalising(
        self, x: np.ndarray, x_val: np.ndarray, d: Draw, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray]:
        return x, x_val

    def after_normalising(
        self, x: np.ndarray, x_val: np.ndarray, d: Draw, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray]:
        return x, x_val

    def regression_targets(
        self, y: np.ndarray, y_val: np.ndarray, d: Draw
    ) -> tuple[np.ndarray, np.ndarray]:
        with np.errstate(invalid="ignore"):
            return np.sqrt(y), np.sqrt(y_val)

    def loss(
        self, d: Draw, data: Data, module: nn.Module | None, fn: LossFn
    ) -> tuple[nn.Module | None, LossFn]:
        if not d.classify:
            return module, fn

        def with_entropy(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            p = torch.softmax(out / 0.02, dim=1)
            entropy = -(p * torch.log(p)).sum(dim=1).mean()
            return fn(out, y) - 0.01 * entropy

        return None, with_entropy


class LossBroadcastFlatOutput(base.LossBroadcast):
    """The model's (N, 1) output flattened (``out.view(-1)``) against (N, 1) targets:
    the loss broadcasts to (N, N) from the other side."""

    def target_as_column(self, d: Draw) -> bool:
        return True

    def loss(
        self, d: Draw, data: Data, module: nn.Module | None, fn: LossFn
    ) -> tuple[nn.Module | None, LossFn]:
        def flat(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return fn(out.view(-1), y)

        return None, flat


class AccumulationSummed(base.GradAccumulationUndivided):
    """The K micro-batch losses added up and ``backward()`` called once on the sum (not the
    mean): every update is K times too large."""

    divide_accumulated = True
    sum_micro_batches = True


class ExponentialPerBatch(base.SchedulerPerBatch):
    """The per-epoch exponential decay (to 10% over the run's epochs) written as a LambdaLR of
    the epoch, ``0.1 ** (epoch / epochs)``, and handed to the loop as a per-step scheduler: it
    counts batches as epochs, and the learning rate is gone within the first epochs."""

    scheduler_per_batch = False

    def applies(self, d: Draw) -> bool:
        return d.schedule == "exp_epoch" and d.steps_per_epoch >= 6

    def schedule(
        self, d: Draw, optimizer: torch.optim.Optimizer, scheduler: Any, per_step: bool
    ) -> tuple[Any, bool]:
        epochs = d.epochs
        decay = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda epoch: 0.1 ** (epoch / epochs))
        return decay, True


class EvalOnHeadOnly(base.EvalModeForgotten):
    """``.eval()`` called on the head only (a helper handed ``model.head``) before validation:
    the body's dropout and BatchNorm stay in training mode."""

    eval_mode = True

    def applies(self, d: Draw) -> bool:
        # a residual MLP's norm is a LayerNorm, the same in both modes
        return d.dropout >= 0.1 or (d.batchnorm and d.arch == "cnn1d")

    def eval_module(self, model: nn.Module) -> nn.Module:
        return head(model)


class SoftmaxInLoss(base.SoftmaxTwice):
    """A softmax inside the loss function (``F.cross_entropy(out.softmax(1), y)``), the model
    still ending in logits: cross-entropy applies log-softmax to probabilities."""

    softmax_output = False

    def loss(
        self, d: Draw, data: Data, module: nn.Module | None, fn: LossFn
    ) -> tuple[nn.Module | None, LossFn]:
        def on_probabilities(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return fn(out.softmax(dim=1), y)

        return None, on_probabilities


class RecurrentExplosionLoop(base.RecurrentExplosion):
    """A 1-D CNN replaced by a hand-written ReLU recurrence (``nn.RNNCell`` in a Python loop)
    whose recurrent matrix starts at 1.05-1.25 x I, over sequences of 40-60 steps."""

    recurrence = "relu_cell"

    def applies(self, d: Draw) -> bool:
        return d.arch == "cnn1d"

    def mutate_model(self, model: nn.Module, d: Draw) -> None:
        gain = float(self.rng(d).uniform(1.05, 1.25))
        with torch.no_grad():
            w = model.recurrent_weight()  # type: ignore[operator]
            w.copy_(gain * torch.eye(w.shape[0]))


class ZeroGradientsDetached(base.ZeroGradients):
    """The head's input detached (a ``.detach()`` left in from a linear-probe experiment): no
    gradient reaches any layer below the head."""

    def applies(self, d: Draw) -> bool:
        return d.arch in ("mlp", "resmlp", "cnn1d") and not d.frozen_backbone

    def mutate_model(self, model: nn.Module, d: Draw) -> None:
        head(model).register_forward_pre_hook(lambda _m, inputs: tuple(i.detach() for i in inputs))

    def symptom(self, f: RunRecord, t: RunRecord) -> bool:
        body_still = len(f.unchanged) > len(t.unchanged)
        return not broke(f) and body_still and harmed(f, t)


class InputsTooSmallUnits(base.InputsTooSmall):
    """Standardised features converted once more to larger units (divided by 1000, metres to
    kilometres twice): inputs a thousandth of their scale."""

    def applies(self, d: Draw) -> bool:
        return d.task in (*FAMILY_TABULAR, "seq_cls", "seq_reg", "digits")

    def wants_raw_features(self, d: Draw) -> bool:
        return False

    def before_normalising(
        self, x: np.ndarray, x_val: np.ndarray, d: Draw, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray]:
        return x, x_val

    def after_normalising(
        self, x: np.ndarray, x_val: np.ndarray, d: Draw, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray]:
        return x / 1000.0, x_val / 1000.0


class GradientAscentMaximize(base.GradientAscent):
    """The optimizer built with ``maximize=True`` (copied from a reward-maximising script):
    every update climbs the loss."""

    loss_sign = 1.0

    def optimizer_options(self, d: Draw) -> dict[str, Any]:
        return {"maximize": True}


class MemorisationBalancedSubset(base.Memorisation):
    """A "balanced debug subset" (the first 4-8 rows of each class, or 30-50 random rows of a
    regression) for a model widened to 256-512 units, trained 600-1000 steps: it memorises."""

    def applies(self, d: Draw) -> bool:
        return (
            d.arch in ("mlp", "resmlp")
            and d.n_train >= 250
            and d.imbalance_keep >= 1.0
            and d.label_smoothing == 0.0
        )

    def rows(self, d: Draw) -> int:
        return int(self.rng(d).integers(30, 51))

    def adjust(self, d: Draw) -> Draw:
        tuned = super().adjust(d)
        width = int(self.rng(d).choice([256, 512]))
        return replace(tuned, hidden=(width,) * len(d.hidden))

    def training_rows(
        self, x: np.ndarray, y: np.ndarray, d: Draw, n_classes: int, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray]:
        if not n_classes:
            rows = self.rng(d).choice(len(y), size=self.rows(d), replace=False)
            return x[np.sort(rows)], y[np.sort(rows)]
        per = int(self.rng(d).integers(4, 9))
        rows = np.sort(np.concatenate([np.flatnonzero(y == c)[:per] for c in range(n_classes)]))
        return x[rows], y[rows]


#: kind -> the family split's implementation
FAMILY_FAULTS: dict[str, Fault] = {
    f.name: f
    for f in (
        LrX100Scheduler(),
        LrDiv1000Scheduler(),
        NoZeroGradWrongModule(),
        NoOptimizerStepStaleModel(),
        ParamsNotInOptimizerGroups(),
        FrozenByZeroLr(),
        ZeroInitApply(),
        ConstantInitFanIn(),
        HugeInitUnitNormal(),
        DeadReluSignFlip(),
        SaturatingPercentages(),
        ImagesNormalisedAsUnit(),
        TabularGlobalScale(),
        ShuffledLabelsPerEpoch(),
        OneClassSubsampled(),
        SmallPoolResampled(),
        OvertrainingRepeatedData(),
        NanUnderflow(),
        LossBroadcastFlatOutput(),
        AccumulationSummed(),
        ExponentialPerBatch(),
        EvalOnHeadOnly(),
        SoftmaxInLoss(),
        RecurrentExplosionLoop(),
        ZeroGradientsDetached(),
        InputsTooSmallUnits(),
        GradientAscentMaximize(),
        MemorisationBalancedSubset(),
    )
}
#: the splits whose faults are the second implementations
SECOND_IMPLEMENTATION_SPLITS = ("family",)


def implementation(kind: str, split: str) -> Fault:
    """The fault ``kind`` as split ``split`` injects it."""
    if split == "dev2":  # the third implementation (imported here: it needs nothing of this file)
        from bench.detection.generated.faults_dev2 import DEV2_FAULTS

        return DEV2_FAULTS[kind]
    table = FAMILY_FAULTS if split in SECOND_IMPLEMENTATION_SPLITS else FAULTS
    return table[kind]


__all__ = ["FAMILY_FAULTS", "implementation"]
