"""PoorWeightInitialization: signs in the first steps that the initial weights are badly scaled."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

import numpy as np

from tensortap.core._collections import INITIAL_PREFIX, INITIAL_WEIGHTS
from tensortap.rules._finding import Said, Severity
from tensortap.rules._rule import Rule
from tensortap.rules.builtin._common import (
    NOT_TRAINING,
    fire_nonfinite,
    has_raw,
    loss_names,
    names_in,
    nonfinite_names,
    scalar,
    step_mode,
    training_step,
)
from tensortap.rules.builtin._labels import zero_output_loss
from tensortap.rules.builtin._samples import (
    ConfigFact,
    input_rescaling,
    model_input,
    normalised_in_model,
)

#: A badly scaled initialisation compounds: the variance grows at least this much per layer ...
_GROWTH = 2.0
#: ... (no initialisation in use makes it grow), or shrinks by ``threshold`` per layer (PyTorch's
#: default initialisation shrinks it up to ~6.5x per ReLU layer, levelling off at the biases').
_OUTPUT_KINDS = re.compile(r"sigmoid|softmax", re.IGNORECASE)
#: A loss this many times its first value a few steps in: the updates, not the initialisation,
#: threw it up (a learning rate too high; a stranger's Adam at 3e-1 took 1.8 to 626 in 5 steps).
_BLOWN_UP = 10.0
#: Rows equal to this share of the weights' largest magnitude are the same weights.
_SAME = 1e-6
#: A model input whose root mean square is at least this (standardised inputs: 1; the healthy
#: runs of the generated development split: 1.6 at most) scales the outputs of weights of any
#: initialisation: a first loss far too large is judged as the input at order 1 would give it.
_INPUT_SCALE = 2.0


class PoorWeightInitialization(Rule):
    """Looks at the first ``steps`` TRAIN steps only, and fires on any of:

    - a hidden layer whose units all get the same weights (the rows of its weight matrix are
      identical: a constant or zero initialisation); the units compute the same function and
      training cannot tell them apart;
    - the variance of the activation inputs (``activation_inputs_regex``) of the hidden layers
      differs by more than ``threshold`` times between layers (well-scaled initialisation keeps
      it similar);
    - the gradients of all layers together span less than ``distribution_range`` between their
      5th and 95th percentiles (they barely move anything);
    - the loss has not decreased ``patience`` steps after the first saved step (where it is,
      or was at a step between, 10x its first value or more, the cause named is
      ``lr_too_high``, as evidence that needs harm: no initialisation makes a loss climb; the
      first updates did; a burst at step 1 that settled by the check counts);
    - the loss of the first training step (before any update) is more than
      ``first_loss_ratio`` times what a model whose outputs are all 0 would score (``log K``
      for K classes, the mean squared target of a regression): the outputs are far too large
      at initialisation, as when the weights (or a recurrent layer's, compounding over time)
      are scaled too large. Outputs scale with the input too: where the model's input has a
      root mean square of ``_INPUT_SCALE`` (2) or more and an input at order 1 would have
      started within the limit, the cause named is ``unnormalised_input``.

    The output layer is not compared: the input of a final sigmoid or softmax (one after the
    last layer with weights; where layer inputs were not saved, a sigmoid or softmax that is the
    last activation) is scaled by what the model must predict, not by the initialisation, and a
    zero-initialised output layer is good practice. The weights judged for identical rows are
    those before the first update (``initial_weights``) where the hook saved them.

    Severity: identical rows are a problem. The variance ratio is judged by how it builds up
    through the network's depth (its layers' variances in forward order): it is a *problem*
    when it compounds, the sign of a badly scaled initialisation: the variances change in one
    direction through every layer to more than ``threshold`` squared between the first and
    the last, growing at least 2x per layer or shrinking at least ``threshold`` times per layer
    (measured: PyTorch's default initialisation shrinks it up to 6.5x per ReLU layer, 210x over
    8 layers, levelling off at the biases' variance; an autoencoder's bottleneck moves it both
    ways), or when a layer's input is the same for every sample and unit (variance 0: no
    signal reaches it). A ratio over ``threshold`` otherwise is a warning. A narrow gradient
    spread or a slow first few steps also happen in healthy models (an autoencoder with a
    sigmoid output, a warm-up), so they are warnings. NaN or infinite activation inputs,
    gradients or losses are a problem (non-finite).
    """

    collections_needed = ("relu_activations", "gradients", "losses", "weights")

    @classmethod
    def check_values(cls, params: Mapping[str, Any]) -> None:
        threshold = params["threshold"]
        distribution_range = params["distribution_range"]
        patience = params["patience"]
        steps = params["steps"]
        cls.check_param("threshold", threshold, threshold > 1, "a ratio > 1")
        cls.check_param(
            "distribution_range", distribution_range, distribution_range >= 0, "a number >= 0"
        )
        cls.check_param("patience", patience, patience >= 1, "an integer >= 1")
        cls.check_param("steps", steps, steps >= 1, "an integer >= 1")
        ratio = params["first_loss_ratio"]
        cls.check_param("first_loss_ratio", ratio, ratio > 1, "a ratio > 1")

    def __init__(
        self,
        base_trial: Any,
        activation_inputs_regex: list[str] | None = None,
        threshold: float = 10.0,
        distribution_range: float = 0.001,
        patience: int = 5,
        steps: int = 10,
        first_loss_ratio: float = 5.0,
    ) -> None:
        super().__init__(base_trial)
        self.activation_inputs_regex = activation_inputs_regex or [
            ".*relu_input",
            ".*tanh_input",
            ".*sigmoid_input",
        ]
        self.threshold = threshold
        self.distribution_range = distribution_range
        self.patience = patience
        self.steps = steps
        self.first_loss_ratio = first_loss_ratio
        self._first_loss: tuple[int, float] | None = None
        # the highest loss after the first, within ``patience`` steps of it (its step, value)
        self._peak: tuple[int, float] | None = None
        self._first_judged = False
        self._normaliser = ConfigFact(base_trial, normalised_in_model)
        self._rescaling = ConfigFact(base_trial, input_rescaling)

    # -- the network's structure, as the trial shows it --

    def _activation_inputs(self, step: int) -> list[str]:
        """The activation inputs saved at ``step``, in forward order."""
        names: set[str] = set()
        for regex in self.activation_inputs_regex:
            names.update(self.base_trial.tensor_names(step=step, regex=regex))
        order = {n: i for i, n in enumerate(self.base_trial.saved_order(step))}
        return sorted(names, key=lambda n: (order.get(n, len(order)), n))

    def _layers(self, step: int) -> list[tuple[int, str]]:
        """(forward position of its input, weight name) of the layers whose input was saved."""
        order = {n: i for i, n in enumerate(self.base_trial.saved_order(step))}
        found = []
        for weight in names_in(self.base_trial, "weights", step):
            module = weight.rsplit(".", 1)[0] if "." in weight else ""
            position = order.get(f"{module}_input_0")
            if module and position is not None:
                found.append((position, weight))
        return sorted(found)

    def _output_activations(self, step: int, inputs: list[str]) -> set[str]:
        """The activation inputs that feed the model's output rather than another layer."""
        layers = self._layers(step)
        if layers:
            order = {n: i for i, n in enumerate(self.base_trial.saved_order(step))}
            last = layers[-1][0]
            return {a for a in inputs if order.get(a, -1) > last}
        if inputs and _OUTPUT_KINDS.search(inputs[-1]):
            return {inputs[-1]}
        return set()

    def _output_layer(self, step: int, weights: list[str]) -> str | None:
        """The weights of the output layer: the last layer in forward order, else the last
        weights saved."""
        layers = self._layers(step)
        if layers:
            return layers[-1][1]
        order = {n: i for i, n in enumerate(self.base_trial.saved_order(step))}
        return max(weights, key=lambda w: order.get(w, -1)) if weights else None

    # -- the checks --

    def _same_rows(self, step: int) -> list[tuple[str, int]]:
        """(layer weights, units) of the hidden layers whose units all got the same weights,
        as initialised (``initial/<name>`` where the hook saved it)."""
        trial = self.base_trial
        weights = names_in(trial, "weights", step)
        output = self._output_layer(step, weights)
        snapshots = set(names_in(trial, INITIAL_WEIGHTS, step))
        found = []
        for weight in weights:
            if weight == output:
                continue
            name = INITIAL_PREFIX + weight if INITIAL_PREFIX + weight in snapshots else weight
            tensor = trial.tensor(name)
            if not has_raw(tensor, step):
                continue
            value = np.asarray(tensor.value(step), dtype=np.float64)
            if value.ndim < 2 or value.shape[0] < 2 or not np.isfinite(value).all():
                continue
            rows = value.reshape(value.shape[0], -1)
            scale = float(np.abs(rows).max())
            if np.all(np.abs(rows - rows[0]) <= _SAME * scale):
                found.append((weight, int(value.shape[0])))
        return found

    def _variances(self, step: int, hidden: list[str]) -> list[tuple[float, str]]:
        """(variance, name) of the hidden layers' activation inputs, in forward order."""
        found = []
        for name in hidden:
            tensor = self.base_trial.tensor(name)
            if has_raw(tensor, step):
                found.append((float(np.var(tensor.value(step), dtype=np.float64)), name))
        return found

    def _compounding(self, variances: list[tuple[float, str]]) -> tuple[bool, float, bool]:
        """(whether the variance compounds through depth, its factor per layer, growing)."""
        logs = np.log10([v for v, _ in variances])
        steps = np.diff(logs)
        growing = bool(np.all(steps > 0))
        if not (growing or np.all(steps < 0)):
            return False, 10 ** float(np.mean(np.abs(steps))), growing
        per_layer = 10 ** (abs(float(logs[-1] - logs[0])) / len(steps))
        total = 10 ** abs(float(logs[-1] - logs[0]))
        compounding = total >= self.threshold**2 and (
            per_layer >= _GROWTH if growing else per_layer >= self.threshold
        )
        return compounding, per_layer, growing

    def _judge_variances(self, variances: list[tuple[float, str]], outputs: set[str]) -> bool:
        (low, low_name), (high, high_name) = min(variances), max(variances)
        ratio = high / low if low > 0 else math.inf
        if not ratio > self.threshold:
            return False
        left_out = f"; {', '.join(sorted(outputs))} (the output's) not compared" if outputs else ""
        silent = [name for v, name in variances if v == 0]
        if silent:
            severity = Severity.PROBLEM
            why = (
                f"; {silent[0]} is the same for every sample and unit: no signal reaches it "
                "(zero or constant weights before it, or dead units)"
            )
        else:
            compounding, per_layer, growing = self._compounding(variances)
            severity = Severity.PROBLEM if compounding else Severity.WARNING
            way = "grows" if growing else "shrinks"
            if compounding:
                why = (
                    f"; it {way} {per_layer:.3g}x per layer through all {len(variances)} hidden "
                    "layers: the compounding of a badly scaled initialisation"
                )
            else:
                why = (
                    f"; it does not compound through depth (about {per_layer:.3g}x per layer, "
                    f"problem from {self.threshold**2:g}x overall when it grows {_GROWTH:g}x or "
                    f"shrinks {self.threshold:g}x per layer through every layer), as healthy "
                    "initialisations do (PyTorch's default shrinks it up to 6.5x per ReLU layer)"
                )
        self.explain(
            f"activation input variance differs {ratio:.3g}x between {high_name} and "
            f"{low_name} (limit {self.threshold:g}x){why}{left_out}",
            tensors=[high_name, low_name],
            value=ratio,
            threshold=self.threshold,
            severity=severity,
            cause="poor_init",
            variances={name: v for v, name in variances},
        )
        return True

    def _gradient_range(self, names: list[str], step: int) -> float | None:
        # from the step's block, shared with the other rules: asking each gradient's Tensor
        # read that tensor's whole index (every step of the run) for one step's question
        block = self.base_trial.step_block(step)
        grads = [block.value(n).ravel() for n in names if block.has_raw(n)]
        if not grads:
            return None
        low, high = np.percentile(np.concatenate(grads), [5, 95])
        return float(high - low)

    def _judge_first_loss(
        self, step: int, first_loss: tuple[int, float], losses: list[str]
    ) -> bool:
        """Whether the loss of the first training step (``s`` 0, before any update) is far
        above an all-zero output's, judged once, at the first of the first ``steps`` steps
        where that reference can be found (the outcome or a regression loss's inputs)."""
        first_step, first = first_loss
        if first_step != 0:  # the trial does not begin at training's first step (a resume)
            self._first_judged = True
            return False
        found = zero_output_loss(self.base_trial, step)
        if found is None:
            return False
        self._first_judged = True
        reference, how = found
        if not reference > 0 or not first > self.first_loss_ratio * reference:
            return False
        said = (
            f"the loss of the first training step, {first:.4g}, is {first / reference:.3g}x what "
            f"outputs of 0 would score ({reference:.4g}: {how}; limit {self.first_loss_ratio:g}x)"
        )
        why = (
            ": the model's outputs are far too large at initialisation (weights scaled too "
            "large, or a recurrent layer whose weights make its state grow over time)"
        )
        cause = "poor_init"  # the weights', unless the input explains the loss
        extra: dict[str, Any] = {}
        scale = self._input_scale(step)
        if scale is not None and scale >= _INPUT_SCALE:
            # outputs scale with the input (a linear layer, and ReLU-like units, are
            # homogeneous): at order 1 the loss's excess over an all-zero output's would be
            # scale**2 (squared error) or scale (otherwise) times smaller
            squared = how.startswith("the mean squared")
            at_order_1 = reference + (first - reference) / (scale**2 if squared else scale)
            if at_order_1 <= self.first_loss_ratio * reference:
                why = (
                    f", but the model's input has a root mean square of {scale:.3g} (normalised "
                    f"inputs: about 1): through the same weights an input at order 1 would start "
                    f"near {at_order_1:.4g} ({at_order_1 / reference:.3g}x), so the outputs are "
                    "large because the inputs are; standardise the input features"
                )
                cause, extra = "unnormalised_input", {"input_rms": scale}
        self.explain(
            said + why,
            tensors=losses,
            value=first / reference,
            threshold=self.first_loss_ratio,
            severity=Severity.PROBLEM,
            cause=cause,
            first_loss=first,
            zero_output_loss=reference,
            **extra,
        )
        return True

    def _input_scale(self, step: int) -> float | None:
        """The root mean square of the model's floating-point input at ``step`` as its first
        weight layer meets it (after a first ``Rescaling``); None where there is none, or the
        model normalises its input itself."""
        if self._normaliser() is not None:
            return None
        found = model_input(self.base_trial, step)
        if found is None:
            return None
        x = found[1]
        if not np.issubdtype(x.dtype, np.floating) or not x.size:
            return None
        x = x.astype(np.float64)
        rescaling = self._rescaling()
        if rescaling is not None:
            x = x * rescaling[0] + rescaling[1]
        rms = math.sqrt(float(np.mean(np.square(x))))
        return rms if math.isfinite(rms) else None

    def _only_first(self) -> str:
        return f"only the first {self.steps} training steps are judged"

    def not_judged(self, step: int) -> Said | None:
        training = training_step(self.base_trial, step)
        if training is None:
            mode = step_mode(self.base_trial, step)[0]
            return Said(NOT_TRAINING.format(mode=mode.name), judged=False)
        if training[1] >= self.steps:
            return Said(self._only_first())
        return None

    def invoke_at_step(self, step: int) -> bool:
        training = training_step(self.base_trial, step)
        if training is None:  # (not_judged says what a step of another mode is)
            return False
        _, s = training
        trial = self.base_trial
        inputs = self._activation_inputs(step)
        gradients = names_in(trial, "gradients", step)
        losses = loss_names(trial, True, None, step)
        for names, what in (
            (inputs, "the activation input"),
            (gradients, "the gradient"),
            (losses, "the loss"),
        ):
            bad = nonfinite_names(trial, names, step)
            if bad:
                return fire_nonfinite(self, bad, what)
        checked = False
        loss: float | None = None
        if losses:  # the loss's peak over the first updates (a burst may settle by the check)
            loss = float(np.mean([scalar(trial.tensor(n), step) for n in losses]))
            if self._first_loss is None:
                self._first_loss = (s, loss)
            elif s <= self._first_loss[0] + self.patience and (
                self._peak is None or loss > self._peak[1]
            ):
                self._peak = (s, loss)
        first_loss = self._first_loss if losses else None
        same = self._same_rows(step)
        if same:
            weight, units = same[0]
            more = (
                f" (and {len(same) - 1} more layer{'s' if len(same) > 2 else ''})"
                if len(same) > 1
                else ""
            )
            self.explain(
                f"every one of the {units} units of {weight} got the same weights{more}: a "
                "constant (or zero) initialisation; the units compute the same function and "
                "training cannot tell them apart (initialise randomly, e.g. the default or "
                "nn.init.kaiming_normal_)",
                tensors=[w for w, _ in same],
                value=len(same),
                threshold=0,
                severity=Severity.PROBLEM,
                cause="poor_init",
            )
            return True
        if (
            first_loss is not None
            and not self._first_judged
            and self._judge_first_loss(step, first_loss, losses)
        ):
            return True
        outputs = self._output_activations(step, inputs)
        variances = self._variances(step, [a for a in inputs if a not in outputs])
        if len(variances) >= 2:
            checked = True
            if self._judge_variances(variances, outputs):
                return True
        spread = self._gradient_range(gradients, step)
        if spread is not None:
            checked = True
            if spread < self.distribution_range:
                self.explain(
                    f"gradients span only {spread:.3g} between their 5th and 95th percentiles "
                    f"(limit {self.distribution_range:g})",
                    value=spread,
                    threshold=self.distribution_range,
                    severity=Severity.WARNING,
                    cause="poor_init",
                )
                return True
        if loss is not None and first_loss is not None:
            checked = True
            first_step, first = first_loss
            said_step, said = s, loss
            if self._peak is not None and self._peak[1] > loss:
                said_step, said = self._peak  # the burst's top, since settled
            if s >= first_step + self.patience and (loss >= first or said >= _BLOWN_UP * first):
                if first > 0 and said >= _BLOWN_UP * first:
                    # no initialisation makes the loss climb: the first updates did
                    self.explain(
                        f"loss {said:.4g} at step {said_step} is {said / first:.3g}x its "
                        f"{first:.4g} at step {first_step}"
                        + (f" (and {loss:.4g} at step {s})" if said_step != s else "")
                        + ": the first updates threw the weights far from where they started, "
                        "as a learning rate too high does (dead units and vanishing gradients "
                        "follow from it)",
                        tensors=losses,
                        value=said,
                        threshold=_BLOWN_UP * first,
                        severity=Severity.WARNING,
                        cause="lr_too_high",
                        needs_harm=True,  # a run may recover from an early burst
                    )
                    return True
                self.explain(
                    f"loss {loss:.4g} at step {s} is no lower than {first:.4g} at step "
                    f"{first_step}",
                    tensors=losses,
                    value=loss,
                    threshold=first,
                    severity=Severity.WARNING,
                    cause="poor_init",
                )
                return True
        if not checked:
            raise self.skip("no activation inputs, gradients or losses saved at this step")
        ratio = (
            max(v for v, _ in variances) / min(v for v, _ in variances)
            if len(variances) >= 2 and min(v for v, _ in variances) > 0
            else None
        )
        self.explain(
            "activation variances, gradient spread and loss look like a sound initialisation",
            value=ratio,
            threshold=self.threshold,
        )
        return False
