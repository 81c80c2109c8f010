"""Faults as mutations of a healthy draw, and the symptom each must show.

A :class:`Fault` changes the training script only at the places it names (the methods and
switches below, all no-ops on the base class, which is the healthy script ``NO_FAULT``). It
declares which draws it applies to, and ``symptom(faulty, twin)``: whether the faulty run's own
record (no tensortap involved) shows what the fault does, compared with its healthy twin (the
same draw without the mutation). The generator keeps only faulty draws whose symptom shows.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from bench.detection.generated.models import activations_before, head, param_layers
from bench.detection.generated.record import RunRecord
from bench.detection.generated.space import Draw, steps_per_epoch

if TYPE_CHECKING:
    from bench.detection.generated.data import Data

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
TABULAR = ("iris", "wine", "breast_cancer", "diabetes", "synth_cls", "synth_reg")


class Fault:
    """The healthy script; a subclass is one kind of fault. Every method gets the draw."""

    name: ClassVar[str] = "healthy"
    salt: ClassVar[int] = 0  # separates the faults' own random choices

    # -- which draws, and the draw-level change (hyperparameters, run length) --
    def applies(self, d: Draw) -> bool:
        return True

    def adjust(self, d: Draw) -> Draw:
        return d

    # -- the data pipeline --
    def wants_raw_features(self, d: Draw) -> bool:
        """Skip the normalisation (features, pixels) altogether."""
        return False

    def training_rows(
        self, x: np.ndarray, y: np.ndarray, d: Draw, n_classes: int, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray]:
        return x, y

    def before_normalising(
        self, x: np.ndarray, x_val: np.ndarray, d: Draw, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray]:
        return x, x_val

    def after_normalising(
        self, x: np.ndarray, x_val: np.ndarray, d: Draw, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray]:
        return x, x_val

    def target_as_column(self, d: Draw) -> bool:
        """Regression targets shaped (N, 1) like the model's output."""
        return True

    def handles_imbalance(self) -> bool:
        return True

    # -- the model, the loss, the optimizer --
    softmax_output: ClassVar[bool] = False

    def mutate_model(self, model: nn.Module, d: Draw) -> None:
        """Change the freshly built (or pre-trained) model's weights or requires_grad."""

    def loss(
        self, d: Draw, data: Data, module: nn.Module | None, fn: LossFn
    ) -> tuple[nn.Module | None, LossFn]:
        return module, fn

    def optimizer_params(self, model: nn.Module, d: Draw) -> list[Any] | None:
        """What the optimizer is built over, parameters or parameter groups (None: the healthy
        choice)."""
        return None

    def optimizer_options(self, d: Draw) -> dict[str, Any]:
        """Extra keyword arguments of the optimizer's constructor."""
        return {}

    def schedule(
        self, d: Draw, optimizer: torch.optim.Optimizer, scheduler: Any, per_step: bool
    ) -> tuple[Any, bool]:
        """The learning-rate scheduler the loop steps, and whether per optimizer step."""
        return scheduler, per_step

    def regression_targets(
        self, y: np.ndarray, y_val: np.ndarray, d: Draw
    ) -> tuple[np.ndarray, np.ndarray]:
        """Standardised regression targets, as the loss gets them."""
        return y, y_val

    #: "relu_rnn" / "relu_cell": the sequence model is a plain ReLU recurrence (models.build)
    recurrence: ClassVar[str | None] = None

    # -- the loop --
    zero_grad: ClassVar[bool] = True
    optimizer_step: ClassVar[bool] = True
    divide_accumulated: ClassVar[bool] = True
    scheduler_per_batch: ClassVar[bool] = False
    eval_mode: ClassVar[bool] = True
    #: -1.0: the loop calls ``(-loss).backward()`` (gradient ascent)
    loss_sign: ClassVar[float] = 1.0
    #: the K micro-batch losses are summed and ``backward()`` called once per step
    sum_micro_batches: ClassVar[bool] = False

    def backward(self, scaled: torch.Tensor, loss: torch.Tensor, micro: int, d: Draw) -> None:
        """The loop's backward call after micro-batch ``micro`` (of ``d.accum_steps`` a step):
        ``scaled`` is the loss as the loop scales it, ``loss`` the micro-batch's own."""
        scaled.backward()

    def take_step(self, optimizer: torch.optim.Optimizer, d: Draw) -> None:
        """What the loop calls where ``optimizer.step()`` belongs."""
        if self.optimizer_step:
            optimizer.step()

    def clear_grads(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
        """What the loop calls where ``optimizer.zero_grad()`` belongs."""
        if self.zero_grad:
            optimizer.zero_grad()

    def epoch_targets(self, y: torch.Tensor, epoch: int, d: Draw) -> torch.Tensor:
        """The training targets the epoch pairs with the rows."""
        return y

    def eval_module(self, model: nn.Module) -> nn.Module:
        """What the validation pass calls ``.eval()`` (and then ``.train()``) on."""
        return model

    def symptom(self, faulty: RunRecord, twin: RunRecord) -> bool:
        return True

    # -- helpers --
    def rng(self, d: Draw) -> np.random.Generator:
        """The fault's own random choices for draw ``d`` (fixed by the draw's seed)."""
        return np.random.default_rng([d.seed, 1000 + self.salt])

    def variant(self, d: Draw, options: tuple[str, ...]) -> str:
        return options[int(self.rng(d).integers(len(options)))]

    def describe(self, d: Draw) -> str:
        """One line about what this fault does to draw ``d``."""
        return (self.__doc__ or self.name).strip().splitlines()[0]


NO_FAULT = Fault()


# ---------------------------------------------------------------- symptoms, shared
def broke(r: RunRecord) -> bool:
    """NaN/inf appeared, in training or in the final model's outputs."""
    return r.nonfinite or r.final is None or not r.final.finite


def gain(r: RunRecord) -> float:
    """How far the final model is above one that learned nothing, in its task's quality."""
    assert r.final is not None
    return r.final.quality - r.chance


def learned_less(f: RunRecord, t: RunRecord, fraction: float) -> bool:
    """The faulty run broke, or got less than ``fraction`` of its twin's gain."""
    return broke(f) or gain(f) < fraction * gain(t)


def loss_progress(r: RunRecord) -> float:
    """How much the proper validation loss fell from before training to after."""
    assert r.initial is not None and r.final is not None
    return r.initial.loss - r.final.loss


def harmed(f: RunRecord, t: RunRecord) -> bool:
    """Training was visibly hurt: it broke, started far worse, learned slower or ended worse."""
    assert f.initial is not None and t.initial is not None and f.final is not None
    assert t.final is not None
    if broke(f):
        return True
    if f.initial.loss > 2.0 * t.initial.loss + 0.1:
        return True
    early_f, early_t = f.train_loss(0.25), t.train_loss(0.25)
    if early_f > 1.25 * early_t + 0.02:
        return True
    return f.final.loss > 1.15 * t.final.loss + 0.02 or gain(f) < gain(t) - 0.03


def weights(model: nn.Module) -> Iterator[nn.Parameter]:
    """Weight matrices and kernels (not biases, not norm layers' scales)."""
    return (p for p in model.parameters() if p.dim() >= 2)


# ---------------------------------------------------------------- the faults
class LrX100(Fault):
    """The learning rate is 100x the intended one (a misplaced decimal point)."""

    name, salt = "lr_x100", 1

    def adjust(self, d: Draw) -> Draw:
        return replace(d, lr=d.lr * 100)

    def symptom(self, f: RunRecord, t: RunRecord) -> bool:
        assert f.final is not None and t.final is not None
        unstable = max(f.losses[len(f.losses) // 20 :], default=0.0) > 2.0 * f.losses[0]
        return (
            broke(f)
            or unstable
            or f.final.loss > 1.5 * t.final.loss + 0.05
            or gain(f) < gain(t) - 0.05
        )


class LrDiv1000(Fault):
    """The learning rate is 1/1000 of the intended one (a wrong exponent)."""

    name, salt = "lr_div1000", 2

    def adjust(self, d: Draw) -> Draw:
        return replace(d, lr=d.lr / 1000)

    def symptom(self, f: RunRecord, t: RunRecord) -> bool:
        return not broke(f) and loss_progress(f) < 0.25 * loss_progress(t)


class NoZeroGrad(Fault):
    """optimizer.zero_grad() is never called: gradients add up over the whole run."""

    name, salt = "no_zero_grad", 3
    zero_grad = False

    def symptom(self, f: RunRecord, t: RunRecord) -> bool:
        late_f = sum(f.grad_norms[-10:]) / max(1, len(f.grad_norms[-10:]))
        late_t = sum(t.grad_norms[-10:]) / max(1, len(t.grad_norms[-10:]))
        return broke(f) or late_f > 5.0 * late_t or harmed(f, t)


class NoOptimizerStep(Fault):
    """optimizer.step() is never called: gradients are computed and zeroed, nothing moves."""

    name, salt = "no_optimizer_step", 4
    optimizer_step = False

    def symptom(self, f: RunRecord, t: RunRecord) -> bool:
        return len(f.unchanged) > len(t.unchanged) and learned_less(f, t, 0.3)


class ParamsNotInOptimizer(Fault):
    """The optimizer is built over one sub-module (the head, or everything but the head, left
    over from a fine-tuning script), so layers that require grad are never updated."""

    name, salt = "params_not_in_optimizer", 5

    def applies(self, d: Draw) -> bool:
        return d.arch not in ("logreg", "linreg") and not d.frozen_backbone

    def optimizer_params(self, model: nn.Module, d: Draw) -> list[nn.Parameter]:
        top = head(model)
        if self.variant(d, ("head_only", "body_only")) == "head_only":
            return list(top.parameters())
        mine = {id(p) for p in top.parameters()}
        return [p for p in model.parameters() if id(p) not in mine]

    def symptom(self, f: RunRecord, t: RunRecord) -> bool:
        return bool(set(f.unchanged) - set(t.unchanged))


class FrozenByMistake(Fault):
    """requires_grad=False on layers that should train: the head, or all but the first layer
    (a freezing loop meant for a backbone that caught the wrong modules)."""

    name, salt = "frozen_by_mistake", 6

    def applies(self, d: Draw) -> bool:
        return d.arch not in ("logreg", "linreg") and not d.frozen_backbone

    def mutate_model(self, model: nn.Module, d: Draw) -> None:
        if self.variant(d, ("head", "all_but_first")) == "head":
            frozen = list(head(model).parameters())
        else:
            first = {id(p) for p in param_layers(model)[0].parameters(recurse=False)}
            frozen = [p for p in model.parameters() if id(p) not in first]
        for p in frozen:
            p.requires_grad_(False)

    def symptom(self, f: RunRecord, t: RunRecord) -> bool:
        return bool(set(f.frozen) - set(t.frozen)) and harmed(f, t)


class ZeroInit(Fault):
    """Every weight and bias initialised to 0 (a "clean start")."""

    name, salt = "zero_init", 7

    def applies(self, d: Draw) -> bool:
        return d.arch not in ("logreg", "linreg")

    def mutate_model(self, model: nn.Module, d: Draw) -> None:
        with torch.no_grad():
            for p in model.parameters():
                p.zero_()

    def symptom(self, f: RunRecord, t: RunRecord) -> bool:
        return learned_less(f, t, 0.5)


class ConstantInit(Fault):
    """Every weight initialised to one constant (biases 0): units within a layer stay
    identical."""

    name, salt = "constant_init", 8

    def applies(self, d: Draw) -> bool:
        return d.arch not in ("logreg", "linreg")

    def mutate_model(self, model: nn.Module, d: Draw) -> None:
        value = float(self.rng(d).choice([0.01, 0.02, 0.05, 0.1]))
        with torch.no_grad():
            for name, p in model.named_parameters():
                if p.dim() >= 2:
                    p.fill_(value)
                elif "bias" in name:
                    p.zero_()

    def symptom(self, f: RunRecord, t: RunRecord) -> bool:
        still_identical = bool(set(f.identical) - set(t.identical))
        return still_identical or learned_less(f, t, 0.75)


class HugeInit(Fault):
    """Weights 10-30x their default scale (a std meant for another parameterisation)."""

    name, salt = "huge_init", 9

    def mutate_model(self, model: nn.Module, d: Draw) -> None:
        scale = float(self.rng(d).uniform(10.0, 30.0))
        with torch.no_grad():
            for p in weights(model):
                p.mul_(scale)

    def symptom(self, f: RunRecord, t: RunRecord) -> bool:
        assert f.initial is not None and t.initial is not None
        return f.initial.loss > 2.5 * t.initial.loss or learned_less(f, t, 0.8)


class DeadReluBias(Fault):
    """Large negative biases (-4 to -8) on the layers feeding ReLUs: the units never fire."""

    name, salt = "dead_relu_bias", 10

    def applies(self, d: Draw) -> bool:
        return d.arch == "cnn" or (d.arch in ("mlp", "autoencoder") and d.activation == "relu")

    def mutate_model(self, model: nn.Module, d: Draw) -> None:
        value = -float(self.rng(d).uniform(4.0, 8.0))
        with torch.no_grad():
            for layer in activations_before(model, (nn.ReLU,)):
                if layer.bias is not None:  # type: ignore[union-attr]
                    layer.bias.fill_(value)  # type: ignore[union-attr, operator]

    def symptom(self, f: RunRecord, t: RunRecord) -> bool:
        return learned_less(f, t, 0.5)


class SaturatingInputs(Fault):
    """Inputs to tanh units (a tanh MLP, a GRU's or LSTM's gates) scaled 20-80x after
    normalising (a percentage where a fraction was meant): the units saturate."""

    name, salt = "saturating_inputs", 11

    def applies(self, d: Draw) -> bool:
        tanh_net = d.arch in ("mlp", "autoencoder") and d.activation == "tanh"
        return tanh_net or d.arch in ("gru", "lstm")

    def after_normalising(
        self, x: np.ndarray, x_val: np.ndarray, d: Draw, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray]:
        scale = float(self.rng(d).uniform(20.0, 80.0))
        return x * scale, x_val * scale

    def symptom(self, f: RunRecord, t: RunRecord) -> bool:
        assert f.final is not None and t.final is not None
        saturated = f.final.saturation > max(0.3, t.final.saturation + 0.2)
        return saturated and harmed(f, t)


class UnnormalisedImages(Fault):
    """Digit images fed as raw pixel values, 0..16 or 0..255, the scaling step dropped."""

    name, salt = "unnormalised_images", 12

    def applies(self, d: Draw) -> bool:
        return d.task == "digits_images" or (
            d.task == "digits" and d.arch in ("mlp", "logreg", "autoencoder")
            and not d.sigmoid_output
        )  # fmt: skip

    def wants_raw_features(self, d: Draw) -> bool:
        return True

    def before_normalising(
        self, x: np.ndarray, x_val: np.ndarray, d: Draw, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray]:
        if self.variant(d, ("0_16", "0_255")) == "0_255":
            return x * 255.0 / 16.0, x_val * 255.0 / 16.0
        return x, x_val

    def symptom(self, f: RunRecord, t: RunRecord) -> bool:
        return harmed(f, t)


class UnnormalisedTabular(Fault):
    """Tabular features fed raw (no standardisation); where the raw features happen to be on
    similar scales, a third of them also come in 1000x larger units."""

    name, salt = "unnormalised_tabular", 13

    def applies(self, d: Draw) -> bool:
        return d.task in TABULAR

    def wants_raw_features(self, d: Draw) -> bool:
        return True

    def before_normalising(
        self, x: np.ndarray, x_val: np.ndarray, d: Draw, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray]:
        if d.task in ("wine", "breast_cancer", "diabetes"):
            return x, x_val  # raw, these span three orders of magnitude already
        pick = self.rng(d).random(x.shape[1]) < 1 / 3
        pick[int(self.rng(d).integers(x.shape[1]))] = True
        scale = np.where(pick, 1000.0, 1.0)
        return x * scale, x_val * scale

    def symptom(self, f: RunRecord, t: RunRecord) -> bool:
        return harmed(f, t)


class ShuffledLabels(Fault):
    """The training labels (targets) are permuted: rows and labels no longer match."""

    name, salt = "shuffled_labels", 14

    def applies(self, d: Draw) -> bool:
        return d.arch != "autoencoder"

    def training_rows(
        self, x: np.ndarray, y: np.ndarray, d: Draw, n_classes: int, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray]:
        return x, y[self.rng(d).permutation(len(y))]

    def symptom(self, f: RunRecord, t: RunRecord) -> bool:
        return not broke(f) and gain(f) < 0.3 * gain(t)


class ClassImbalance(Fault):
    """The training set is subsampled to a strong imbalance (class 0 about 90-97% of it; a
    filter with the wrong condition), and nothing handles it."""

    name, salt = "class_imbalance", 15

    def applies(self, d: Draw) -> bool:
        return d.classify

    def handles_imbalance(self) -> bool:
        return False

    def training_rows(
        self, x: np.ndarray, y: np.ndarray, d: Draw, n_classes: int, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray]:
        share = float(self.rng(d).uniform(0.90, 0.97))
        major = y == 0
        n_minor = max(n_classes - 1, round(major.sum() * (1 - share) / share))
        minor = np.flatnonzero(~major)
        keep = self.rng(d).choice(minor, size=min(n_minor, len(minor)), replace=False)
        rows = np.sort(np.concatenate([np.flatnonzero(major), keep]))
        return x[rows], y[rows]

    def symptom(self, f: RunRecord, t: RunRecord) -> bool:
        assert f.final is not None and t.final is not None
        if broke(f):
            return False
        minority_f = np.nanmean(f.final.recall[1:])
        minority_t = np.nanmean(t.final.recall[1:])
        return bool(minority_f < min(minority_t - 0.2, 0.6 * minority_t))


class TinyTrainSet(Fault):
    """Only a few dozen training samples (a debugging subset left in), trained for as many
    steps as the full set: it fits them and generalises badly."""

    name, salt = "tiny_train_set", 16

    def rows(self, d: Draw) -> int:
        return int(self.rng(d).integers(24, 61))

    def applies(self, d: Draw) -> bool:
        return d.arch != "autoencoder" and d.n_train >= 250 and d.imbalance_keep >= 1.0

    def adjust(self, d: Draw) -> Draw:
        rows = self.rows(d)
        batch = max(b for b in (4, 8, 16, 32) if b <= max(4, rows // 2) and b <= d.batch_size)
        per_epoch = steps_per_epoch(rows, batch, 1, 1.0)
        epochs = math.ceil(d.total_steps / per_epoch)
        eval_every = d.eval_every or max(5, d.total_steps // 10)
        return replace(d, batch_size=batch, accum_steps=1, epochs=epochs, eval_every=eval_every)

    def training_rows(
        self, x: np.ndarray, y: np.ndarray, d: Draw, n_classes: int, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray]:
        rows = self.rows(d)
        return x[:rows], y[:rows]

    def symptom(self, f: RunRecord, t: RunRecord) -> bool:
        assert f.final is not None and t.final is not None
        if broke(f):
            return False
        return gain(f) < gain(t) - 0.08 and f.train_loss() < f.evaluations[-1].loss


class Overtraining(Fault):
    """Far too many epochs for the data (a max_epochs meant for a data set 10x larger): the
    validation loss bottoms out and climbs."""

    name, salt = "overtraining", 17
    MAX_STEPS: ClassVar[int] = 3000

    def applies(self, d: Draw) -> bool:
        """Small or noisy data, where too many epochs show: diabetes, breast_cancer, synthetic
        classification with flipped labels."""
        noisy = d.task == "synth_cls" and d.label_noise > 0
        if (
            d.arch != "mlp"
            or d.frozen_backbone
            or not (noisy or d.task in ("diabetes", "breast_cancer"))
        ):
            return False
        if d.label_smoothing:  # it caps how confident (and how wrong) the model gets
            return False
        return d.n_train <= 600 and d.steps_per_epoch * 15 <= self.MAX_STEPS

    def adjust(self, d: Draw) -> Draw:
        factor = float(self.rng(d).uniform(10.0, 15.0))
        steps = min(self.MAX_STEPS, max(1500, round(d.total_steps * factor)))
        epochs = max(d.epochs * 10, steps // d.steps_per_epoch)
        # evaluations as often as the intended run had them (about 8 over its length)
        every = d.eval_every or d.steps_per_epoch
        return replace(d, epochs=epochs, eval_every=max(5, min(every, d.total_steps // 8)))

    def symptom(self, f: RunRecord, t: RunRecord) -> bool:
        if broke(f) or len(f.evaluations) < 5:
            return False

        def rise(r: RunRecord) -> float:
            losses = [e.loss for e in r.evaluations]
            best = min(losses)
            return (losses[-1] - best) / max(best, 1e-3)

        losses = [e.loss for e in f.evaluations]
        turned = losses.index(min(losses)) < 0.7 * len(losses)
        climbed = losses[-1] - min(losses) > 0.02
        return turned and climbed and rise(f) > 0.2 and rise(f) > rise(t) + 0.1


class NanOp(Fault):
    """A NaN-producing operation: log of features that can be 0 (np.log, not np.log1p), sqrt of
    a feature after standardising it, a log-error loss on standardised targets (log1p of
    values below -1), or a hand-written binary cross-entropy whose log(1 - p) reaches log(0)
    once the model is confident."""

    name, salt = "nan_op", 18

    def options(self, d: Draw) -> tuple[str, ...]:
        found: list[str] = []
        if d.task in ("digits", "digits_images", "breast_cancer") and d.arch != "autoencoder":
            found.append("log_features")
        if d.arch != "autoencoder":
            found.append("sqrt_standardised")
        if d.regression:
            found.append("log_error_loss")
        if d.classify and (
            d.n_classes == 2 or d.task == "breast_cancer" or d.seq_rule == "sign_sum"
        ):
            found.append("handwritten_bce")
        return tuple(found)

    def applies(self, d: Draw) -> bool:
        return bool(self.options(d))

    def describe(self, d: Draw) -> str:
        return f"NaN-producing op: {self.variant(d, self.options(d))}"

    def before_normalising(
        self, x: np.ndarray, x_val: np.ndarray, d: Draw, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray]:
        if self.variant(d, self.options(d)) != "log_features":
            return x, x_val
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.log(x), np.log(x_val)

    def after_normalising(
        self, x: np.ndarray, x_val: np.ndarray, d: Draw, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray]:
        if self.variant(d, self.options(d)) != "sqrt_standardised":
            return x, x_val
        col = int(self.rng(d).integers(x.shape[-1]))
        x, x_val = x.copy(), x_val.copy()
        with np.errstate(invalid="ignore"):
            x[..., col] = np.sqrt(x[..., col])
            x_val[..., col] = np.sqrt(x_val[..., col])
        return x, x_val

    def loss(
        self, d: Draw, data: Data, module: nn.Module | None, fn: LossFn
    ) -> tuple[nn.Module | None, LossFn]:
        variant = self.variant(d, self.options(d))
        if variant == "log_error_loss":

            def log_error(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
                return F.mse_loss(torch.log1p(out), torch.log1p(y))

            return None, log_error
        if variant == "handwritten_bce":

            def bce(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
                p = torch.softmax(out, dim=1)
                onehot = F.one_hot(y, p.shape[1]).float()
                return -(onehot * torch.log(p) + (1 - onehot) * torch.log(1 - p)).sum(1).mean()

            return None, bce
        return module, fn

    def symptom(self, f: RunRecord, t: RunRecord) -> bool:
        return broke(f) and not broke(t)


class LossBroadcast(Fault):
    """Regression targets shaped (N,) against outputs (N, 1): MSELoss broadcasts to (N, N) and
    the model learns the targets' mean."""

    name, salt = "loss_broadcast", 19

    def applies(self, d: Draw) -> bool:
        return d.regression

    def target_as_column(self, d: Draw) -> bool:
        return False

    def symptom(self, f: RunRecord, t: RunRecord) -> bool:
        return learned_less(f, t, 0.5)


class GradAccumulationUndivided(Fault):
    """Gradients accumulated over K micro-batches without dividing each loss by K: every
    update is K times too large."""

    name, salt = "grad_accumulation_undivided", 20
    divide_accumulated = False

    def applies(self, d: Draw) -> bool:
        return d.accum_steps >= 2 and d.optimizer in ("sgd", "sgd_momentum")

    def symptom(self, f: RunRecord, t: RunRecord) -> bool:
        if not (f.grad_norms and t.grad_norms) or t.grad_norms[0] == 0:
            return False
        # the same first batch, K times the gradient, and a first update far larger
        grown = f.grad_norms[0] / t.grad_norms[0] >= 1.5
        return grown and f.first_update > 1.5 * t.first_update


class SchedulerPerBatch(Fault):
    """StepLR(step_size=epochs/3, gamma=0.1), meant per epoch, stepped after every batch: the
    learning rate collapses within the first epoch or two."""

    name, salt = "scheduler_per_batch", 21
    scheduler_per_batch = True

    def applies(self, d: Draw) -> bool:
        return d.schedule == "step" and d.steps_per_epoch >= 4

    def symptom(self, f: RunRecord, t: RunRecord) -> bool:
        collapsed = min(f.lrs[: max(1, len(f.lrs) // 3)]) < 0.01 * f.lrs[0]
        return collapsed and learned_less(f, t, 0.9)


class EvalModeForgotten(Fault):
    """Evaluation under torch.no_grad() without model.eval(): dropout stays on and BatchNorm
    uses (and updates) batch statistics during validation."""

    name, salt = "eval_mode_forgotten", 22
    eval_mode = False

    def applies(self, d: Draw) -> bool:
        return d.dropout >= 0.1 or d.batchnorm

    def symptom(self, f: RunRecord, t: RunRecord) -> bool:
        if broke(f) or f.final_eval_mode is None:
            return False
        loop, proper = f.evaluations[-1], f.final_eval_mode
        loss_gap = abs(loop.loss - proper.loss) / max(proper.loss, 0.05)
        acc_gap = abs(loop.accuracy - proper.accuracy) if not math.isnan(loop.accuracy) else 0.0
        return loss_gap > 0.05 or acc_gap >= 0.01


class SoftmaxTwice(Fault):
    """The model ends in a softmax and its probabilities go into nn.CrossEntropyLoss, which
    applies log-softmax again: the loss saturates and learning crawls."""

    name, salt = "softmax_twice", 23
    softmax_output = True

    def applies(self, d: Draw) -> bool:
        return d.classify

    def symptom(self, f: RunRecord, t: RunRecord) -> bool:
        if broke(f):
            return False

        def drop(r: RunRecord) -> float:
            return 1.0 - r.train_loss() / r.losses[0]

        slow_f, slow_t = f.eval_at(0.25), t.eval_at(0.25)
        slower = bool(slow_f and slow_t and slow_f.accuracy < slow_t.accuracy - 0.1)
        return drop(f) < 0.6 * drop(t) or gain(f) < gain(t) - 0.03 or slower


# ------------------------------------------------- kinds added with the family split (issue 44)
def long_sequences(fault: Fault, d: Draw) -> Draw:
    """The draw over sequences of 40-60 steps (where a recurrence has room to explode)."""
    return replace(d, seq_len=int(fault.rng(d).integers(40, 61)))


def exploded(f: RunRecord, t: RunRecord) -> bool:
    """The run broke, or its gradient norm reached 10x the twin's largest and training was
    hurt."""
    if broke(f):
        return True
    big = max(f.grad_norms, default=0.0) > 10.0 * max(t.grad_norms, default=0.0)
    return big and harmed(f, t)


class RecurrentExplosion(Fault):
    """A GRU/LSTM replaced by a plain ReLU ``nn.RNN`` whose recurrent weights start at 1.1-1.3
    times the identity (an IRNN init scaled past 1), over sequences of 40-60 steps: the state
    and the gradients through time grow geometrically."""

    name, salt = "recurrent_explosion", 24
    recurrence = "relu_rnn"

    def applies(self, d: Draw) -> bool:
        return d.arch in ("gru", "lstm")

    def adjust(self, d: Draw) -> Draw:
        return long_sequences(self, d)

    def mutate_model(self, model: nn.Module, d: Draw) -> None:
        gain = float(self.rng(d).uniform(1.1, 1.3))
        with torch.no_grad():
            w = model.recurrent_weight()  # type: ignore[operator]
            w.copy_(gain * torch.eye(w.shape[0]))

    def symptom(self, f: RunRecord, t: RunRecord) -> bool:
        return exploded(f, t)


class ZeroGradients(Fault):
    """Dropout's rate set to 1.0 (a keep probability passed as the drop rate): in training
    every unit after it is zeroed, so no gradient reaches the layers below it and the layer
    after it sees only zeros."""

    name, salt = "zero_gradients", 25

    def applies(self, d: Draw) -> bool:
        return d.dropout > 0 and d.arch in ("mlp", "cnn", "gru", "lstm") and not d.frozen_backbone

    def mutate_model(self, model: nn.Module, d: Draw) -> None:
        for m in model.modules():
            if isinstance(m, nn.Dropout):
                m.p = 1.0

    def symptom(self, f: RunRecord, t: RunRecord) -> bool:
        late = f.grad_norms[len(f.grad_norms) // 2 :]
        small = max(late, default=0.0) < 0.2 * min(t.grad_norms, default=0.0)
        return not broke(f) and (small or learned_less(f, t, 0.5))


class InputsTooSmall(Fault):
    """Images divided by 255 twice (scaled to [0, 1] in the loader, then again by a transform),
    the standardisation after it dropped: pixels in [0, 1/255]."""

    name, salt = "inputs_too_small", 26

    def applies(self, d: Draw) -> bool:
        return d.task == "digits_images" or (
            d.task == "digits" and d.arch in ("mlp", "logreg", "autoencoder")
        )

    def wants_raw_features(self, d: Draw) -> bool:
        return True

    def before_normalising(
        self, x: np.ndarray, x_val: np.ndarray, d: Draw, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray]:
        pixels = 255.0 / 16.0  # digits' 0..16 as 8-bit values
        return x * pixels / 255.0 / 255.0, x_val * pixels / 255.0 / 255.0

    def symptom(self, f: RunRecord, t: RunRecord) -> bool:
        return harmed(f, t)


class GradientAscent(Fault):
    """The loss's sign flipped at the backward call (``(-loss).backward()``, a reward's
    negation applied twice): every step climbs the loss."""

    name, salt = "gradient_ascent", 27
    loss_sign = -1.0

    def applies(self, d: Draw) -> bool:
        return not d.frozen_backbone

    def symptom(self, f: RunRecord, t: RunRecord) -> bool:
        assert f.initial is not None and f.final is not None
        rose = f.final.loss > f.initial.loss or broke(f)
        return rose and learned_less(f, t, 0.5)


class Memorisation(Fault):
    """A few dozen training samples (the first 24-48 rows) for a model four times as wide,
    trained 600-1000 steps without dropout: it memorises them and does not generalise."""

    name, salt = "memorisation", 28

    def applies(self, d: Draw) -> bool:
        return (
            d.arch == "mlp"
            and d.n_train >= 250
            and d.imbalance_keep >= 1.0
            and not d.frozen_backbone
            and d.label_smoothing == 0.0
        )

    def rows(self, d: Draw) -> int:
        return int(self.rng(d).integers(24, 49))

    def adjust(self, d: Draw) -> Draw:
        steps = int(self.rng(d).integers(600, 1001))
        rows = self.rows(d)
        batch = 8 if rows < 32 else 16
        epochs = math.ceil(steps / (rows // batch))
        hidden = tuple(max(256, 4 * h) for h in d.hidden)
        return replace(
            d, hidden=hidden, dropout=0.0, batch_size=batch, accum_steps=1, epochs=epochs,
            eval_every=max(5, steps // 10), weight_decay=0.0,
        )  # fmt: skip

    def training_rows(
        self, x: np.ndarray, y: np.ndarray, d: Draw, n_classes: int, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray]:
        rows = self.rows(d)
        return x[:rows], y[:rows]

    def symptom(self, f: RunRecord, t: RunRecord) -> bool:
        return memorised(f, t)


def memorised(f: RunRecord, t: RunRecord) -> bool:
    """The training loss near zero, the validation loss far above it, and less learned."""
    if broke(f) or not f.evaluations:
        return False
    fitted = f.train_loss() < 0.1 * f.losses[0]
    gap = f.evaluations[-1].loss > 3.0 * f.train_loss() + 0.05
    return fitted and gap and gain(f) < gain(t) - 0.05


#: kind -> fault, in the order the tables list them
FAULTS: dict[str, Fault] = {
    f.name: f
    for f in (
        LrX100(),
        LrDiv1000(),
        NoZeroGrad(),
        NoOptimizerStep(),
        ParamsNotInOptimizer(),
        FrozenByMistake(),
        ZeroInit(),
        ConstantInit(),
        HugeInit(),
        DeadReluBias(),
        SaturatingInputs(),
        UnnormalisedImages(),
        UnnormalisedTabular(),
        ShuffledLabels(),
        ClassImbalance(),
        TinyTrainSet(),
        Overtraining(),
        NanOp(),
        LossBroadcast(),
        GradAccumulationUndivided(),
        SchedulerPerBatch(),
        EvalModeForgotten(),
        SoftmaxTwice(),
        RecurrentExplosion(),
        ZeroGradients(),
        InputsTooSmall(),
        GradientAscent(),
        Memorisation(),
    )
}
KINDS = tuple(FAULTS)
