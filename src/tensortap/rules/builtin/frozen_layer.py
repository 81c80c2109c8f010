"""FrozenLayer: the model's output layer does not train while the layers before it do."""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple

import numpy as np

from tensortap.core._collections import TRAINING_LOOP
from tensortap.rules._finding import Said, Severity
from tensortap.rules._numbers import DOUBT, Numbers, Skipped
from tensortap.rules._rule import Rule, StepSkipped
from tensortap.rules.builtin._common import (
    NOT_TRAINING,
    names_in,
    optional_names_in,
    step_mode,
    training_step,
)
from tensortap.rules.builtin._fresh_init import FreshInit
from tensortap.trials._records import any_at, saved_records

_NO_GRADIENTS = "no gradients saved at this step"
_NO_OUTPUT_LAYER = "no module inputs in forward order with saved weights at this step"

_INPUT = re.compile(r"^(?P<module>.+?)_input_\d+$")

#: What a backbone that was trained (not at a fresh initialisation) and is frozen under an
#: output layer that trains does not explain (``details["explains_not"]``)
_NOT_BY_A_TRAINED_BACKBONE = (
    "no_learnable_signal",
    "not_updating",
    "vanishing_gradient",
    "all_zero",
)


class OutputLayer(NamedTuple):
    """The output layer at a step: its module ``name`` and its own saved weights
    (``params``), with the parameters that have a gradient (``gradients``) and every saved
    weight (``weights``)."""

    name: str
    params: list[str]
    gradients: set[str]
    weights: list[str]


class OutputLayerOf(Numbers[OutputLayer]):
    """The model's output layer at a step: the last module in forward order (the order the
    hook saved module inputs in) that holds saved weights. Skipped at a step without
    gradients, or without such a module. In bulk, a trial that saved no module input or no
    weight has none at any step."""

    def read(self, step: int) -> OutputLayer:
        trial = self.trial
        gradients = {g.removeprefix("gradient/") for g in names_in(trial, "gradients", step)}
        if not gradients:
            raise StepSkipped(_NO_GRADIENTS)
        weights = names_in(trial, "weights", step)
        found = self._output_layer(step, weights)
        if found is None:
            raise StepSkipped(_NO_OUTPUT_LAYER)
        return OutputLayer(found[0], found[1], gradients, weights)

    def _output_layer(self, step: int, weights: list[str]) -> tuple[str, list[str]] | None:
        trial = self.trial
        inputs = set(names_in(trial, "inputs", step))
        order = [n for n in trial.saved_order(step) if n in inputs]
        for name in reversed(order):
            match = _INPUT.match(name)
            if match is None:
                continue
            prefix = match.group("module") + "."
            # its own weights only: a container (a Sequential) holds its children's
            mine = [w for w in weights if w.startswith(prefix) and "." not in w[len(prefix) :]]
            if mine:
                return match.group("module"), mine
        return None

    def gather(self, steps: np.ndarray) -> Iterator[OutputLayer | Skipped | Any]:
        trial = self.trial
        if optional_names_in(trial, "inputs") and optional_names_in(trial, "weights"):
            return itertools.repeat(DOUBT, len(steps))
        graded = any_at(steps, saved_records(trial, optional_names_in(trial, "gradients")).step)
        no_layer = Skipped(_NO_OUTPUT_LAYER, frozenset({"gradients", "weights", "inputs"}))
        none = Skipped(_NO_GRADIENTS, frozenset({"gradients"}))
        return (no_layer if at else none for at in graded.tolist())


class FrozenLayer(Rule):
    """At each training step that saved gradients, finds the model's *output layer*: the last
    module in forward order (the order the hook saved module inputs in) that holds saved
    weights. Fires when it has no gradient while other parameters have one: it was frozen
    (``requires_grad=False``) or left out of the backward pass, so the model cannot fit its
    targets however the layers before it learn. Fine-tuning freezes a backbone, never the
    head that maps features to outputs; a layer frozen by mistake usually includes it.

    When the output layer trains but at least ``frozen_share`` (half) of the saved weights
    get no gradient, it fires too, as evidence that needs harm (``details["needs_harm"]``): a
    pre-trained backbone is frozen on purpose, so the diagnosis makes it a problem only where
    the run is harmed in a way a frozen layer explains, and ranks it after any other cause.

    Reads the ``inputs`` collection (module inputs in forward order), ``weights`` and
    ``gradients``.
    """

    collections_needed = ("inputs", "weights", "gradients")

    def __init__(self, base_trial: Any, frozen_share: float = 0.5) -> None:
        super().__init__(base_trial)
        self.frozen_share = frozen_share
        self._fresh = FreshInit(base_trial)  # frozen weights still at their initialisation
        self.reads(OutputLayerOf())

    @classmethod
    def check_values(cls, params: Mapping[str, Any]) -> None:
        share = params["frozen_share"]
        cls.check_param("frozen_share", share, 0 < share <= 1, "in (0, 1]")

    def _mostly_frozen(self, frozen: list[str], total: int, step: int) -> bool:
        """Most saved weights get no gradient while the output layer trains: evidence (a
        pre-trained backbone is frozen on purpose) that needs harm; a certain fault where they
        still hold a fresh random initialisation (never trained, nor loaded)."""
        shown = ", ".join(frozen[:6]) + (f" and {len(frozen) - 6} more" if len(frozen) > 6 else "")
        # trainable weights left without a gradient are cut from the loss, not frozen: the
        # training-loop facts name them (TrainingLoop's gradient_blocked judges them)
        names = set(self.base_trial.tensor_names())
        cut = [w for w in frozen if f"{TRAINING_LOOP}/no_grad/{w}" in names]
        fresh = None if cut else self._fresh.verdict(frozen, step)
        said = (
            f"{len(frozen)} of the {total} saved weights get no gradient (frozen with "
            f"requires_grad=False, or outside the backward pass) while the output layer "
            f"trains: {shown}; "
        )
        if fresh is not None:
            self.explain(
                said + f"they still hold a random initialisation ({fresh}), so they were never "
                "trained nor loaded from a trained model, and a frozen random layer only mixes "
                "its inputs: let them train (or load the trained weights meant to be frozen)",
                tensors=frozen,
                value=len(frozen) / total,
                threshold=self.frozen_share,
                judged=True,
                cause="frozen_layer",
            )
            return True
        self.explain(
            said + "if they were not loaded from a trained model they keep their "
            "random initialisation: let them train",
            tensors=frozen,
            value=len(frozen) / total,
            threshold=self.frozen_share,
            judged=True,
            severity=Severity.WARNING,  # a problem where the diagnosis finds harm it explains
            cause="frozen_layer",
            needs_harm=True,  # fine-tuning freezes a pre-trained backbone on purpose
            # a trained backbone under an output layer that trains gives it features to learn
            # from: frozen, it may slow or limit the fit, never leave it at the class shares,
            # nor make the gradients of the layers that train vanish or be zero
            explains_not=list(_NOT_BY_A_TRAINED_BACKBONE),
        )
        return True

    def not_judged(self, step: int) -> Said | None:
        if training_step(self.base_trial, step) is not None:
            return None
        return Said.skip(NOT_TRAINING.format(mode=step_mode(self.base_trial, step)[0].name))

    def judge(self, step: int, found: OutputLayer) -> bool:
        layer, params, gradients, weights = found
        frozen = [p for p in params if p not in gradients]
        fired = len(frozen) == len(params)
        if not fired:
            still = [w for w in weights if w not in gradients]
            if still and len(still) >= self.frozen_share * len(weights):
                return self._mostly_frozen(still, len(weights), step)
        self.explain(
            f"the output layer {layer} ({', '.join(params)}) "
            + (
                f"gets no gradient while {len(gradients)} other parameters do: it is frozen "
                "(requires_grad=False) or outside the backward pass, so the model cannot fit "
                "its targets; let it train"
                if fired
                else "trains"
            ),
            tensors=params,
            value=float(len(frozen)),
            threshold=len(params),
            judged=True,  # which parameters have gradients: names, not values
            cause="frozen_layer",
        )
        return fired
