"""FrozenLayer: the model's output layer does not train while the layers before it do."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from tensortap.core._modes import ModeKeys
from tensortap.rules._finding import Finding, Severity, StepRun
from tensortap.rules._rule import Rule
from tensortap.rules.builtin._bulk import any_at, emit, modes_of, steps_array
from tensortap.rules.builtin._common import (
    NOT_TRAINING,
    names_in,
    optional_names_in,
    step_mode,
    training_step,
)
from tensortap.trials._records import saved_records

_NO_GRADIENTS = "no gradients saved at this step"
_NO_OUTPUT_LAYER = "no module inputs in forward order with saved weights at this step"

_INPUT = re.compile(r"^(?P<module>.+?)_input_\d+$")

#: a frozen weight is judged fresh from its values only with at least this many of them
_FRESH_MIN = 256


def _uniform_bound(value: np.ndarray) -> tuple[int, float | None]:
    """(the number of values, the bound b where they look drawn evenly from [-b, b], else None).
    Evenly spread values have a kurtosis of 1.8 and their largest magnitude is sqrt(3) standard
    deviations; trained weights grow tails beyond both."""
    flat = value.ravel()
    n = flat.size
    if n < _FRESH_MIN or not np.all(np.isfinite(flat)):
        return n, None
    centred = flat - flat.mean()
    std = float(np.sqrt(np.mean(centred**2)))
    if std == 0.0:
        return n, None
    kurtosis = float(np.mean(centred**4)) / std**4
    largest = float(np.abs(centred).max())
    root = np.sqrt(n)
    # the limits hold 99.9% of evenly drawn values' ratios, and 4 of their kurtosis's standard
    # errors (1.17/sqrt(n)): measured on 4,000 draws of 256, 1,024 and 4,608 values
    if largest / std > np.sqrt(3.0) * (1 + 2.5 / root) or abs(kurtosis - 1.8) > 4.7 / root:
        return n, None
    return n, largest


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
        # a frozen weight's (size, bound of its fresh uniform initialisation or None)
        self._freshness: dict[str, tuple[int, float | None]] = {}

    @classmethod
    def check_values(cls, params: Mapping[str, Any]) -> None:
        share = params["frozen_share"]
        cls.check_param("frozen_share", share, 0 < share <= 1, "in (0, 1]")

    def _mostly_frozen(self, frozen: list[str], total: int, step: int) -> bool:
        """Most saved weights get no gradient while the output layer trains: evidence (a
        pre-trained backbone is frozen on purpose) that needs harm; a certain fault where they
        still hold a fresh random initialisation (never trained, nor loaded)."""
        shown = ", ".join(frozen[:6]) + (f" and {len(frozen) - 6} more" if len(frozen) > 6 else "")
        fresh = self._fresh(frozen, step)
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
        )
        return True

    def _fresh(self, frozen: list[str], step: int) -> str | None:
        """How the frozen weights show a fresh random initialisation, or None: the weights of at
        least ``_FRESH_MIN`` values each (together at least that many) are, for 90% of their
        values, spread evenly within a bound as the default uniform initialisations leave them
        (PyTorch's Linear, convolution and recurrent layers, Keras's Glorot): the largest
        magnitude within sampling noise of sqrt(3) standard deviations. Training, even briefly,
        grows tails beyond it (the weights of pre-trained layers frozen on purpose in the
        development split: 1.96 to 3.5). Read once per weight (it is frozen)."""
        fresh = sized = 0
        bounds: list[float] = []
        for name in frozen:
            verdict = self._freshness.get(name)
            if verdict is None:
                value = np.asarray(self.base_trial.tensor(name).value(step), dtype=np.float64)
                verdict = self._freshness[name] = _uniform_bound(value)
            size, bound = verdict
            if size < _FRESH_MIN:
                continue
            sized += size
            if bound is not None:
                fresh += size
                bounds.append(bound)
        if sized < _FRESH_MIN or fresh < 0.9 * sized:
            return None
        return (
            f"{fresh} of their values spread evenly within ±{min(bounds):.3g} to "
            f"±{max(bounds):.3g}, as a default uniform initialisation leaves them"
        )

    def _output_layer(self, step: int, weights: list[str]) -> tuple[str, list[str]] | None:
        trial = self.base_trial
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

    def invoke_at_step(self, step: int) -> bool:
        trial = self.base_trial
        if training_step(trial, step) is None:
            mode = step_mode(trial, step)[0]
            raise self.skip(NOT_TRAINING.format(mode=mode.name))
        gradients = {g.removeprefix("gradient/") for g in names_in(trial, "gradients", step)}
        if not gradients:
            raise self.skip(_NO_GRADIENTS)
        weights = names_in(trial, "weights", step)
        found = self._output_layer(step, weights)
        if found is None:
            raise self.skip(_NO_OUTPUT_LAYER)
        layer, params = found
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

    def _not_training(self, mode: ModeKeys) -> Callable[[np.ndarray], StepRun]:
        return lambda steps: self.skipped(steps, NOT_TRAINING.format(mode=mode.name))

    def judge_steps(self, steps: Sequence[int]) -> Iterator[Finding | StepRun]:
        """In a trial that saved no module input or no weight, no step has an output layer to
        judge: each is skipped, saying why, at once. Otherwise step by step."""
        trial = self.base_trial
        if optional_names_in(trial, "inputs") and optional_names_in(trial, "weights"):
            yield from super().judge_steps(steps)
            return
        at = steps_array(steps)
        modes = modes_of(trial, at)
        training = np.asarray([m in (ModeKeys.TRAIN, ModeKeys.GLOBAL) for m in modes], bool)
        gradients = optional_names_in(trial, "gradients")
        graded = any_at(at, saved_records(trial, gradients).step)
        if training.any():  # what the walk step by step asks for at training steps
            self.note_asked("gradients")
        if (training & graded).any():
            self.note_asked("weights", "inputs")
        codes = np.where(graded, 1, 0)
        answers: dict[int, Callable[[np.ndarray], StepRun]] = {
            0: lambda s: self.skipped(s, _NO_GRADIENTS),
            1: lambda s: self.skipped(s, _NO_OUTPUT_LAYER),
        }
        for i, mode in enumerate(modes):
            if mode not in (ModeKeys.TRAIN, ModeKeys.GLOBAL):
                codes[i] = 2 + int(mode)
                answers[2 + int(mode)] = self._not_training(mode)
        yield from emit(self, at, codes, answers)
