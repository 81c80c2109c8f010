"""Shared by DeadRelu and SaturatedActivation: the share of units that are (almost) never active."""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Mapping
from typing import Any

import numpy as np

from tensortap.core._modes import ModeKeys
from tensortap.exceptions import MissingCollectionFiles
from tensortap.rules._finding import Severity
from tensortap.rules._rule import Rule
from tensortap.rules.builtin._common import fire_nonfinite, has_raw, unit_activity

#: Saved steps in a row a unit must be inactive on for its layer to be a problem: a unit
#: silent on one batch (at initialisation, say) may fire on the next.
PERSISTENT = 5
#: The kind in an activation's saved name (``features.1/relu_output_0``: ``relu``).
_KIND = re.compile(r"/([A-Za-z0-9_]+?)_(?:input|output)_\d+$")


def raw_matching(rule: Rule, regexes: list[str], step: int) -> list[str]:
    """Tensors matching any of ``regexes`` saved raw at ``step``."""
    found: set[str] = set()
    for regex in regexes:
        found.update(rule.base_trial.tensor_names(step=step, regex=regex))
    return sorted(n for n in found if has_raw(rule.base_trial.tensor(n), step))


class ActivityRule(Rule):
    """Base of DeadRelu and SaturatedActivation: judges the units of every raw tensor
    matching ``tensor_regex`` by how often they are active.

    A unit counts as ``what`` (dead, saturated) when it is active in less than
    ``threshold_inactivity`` percent of the samples of a step; the rule fires when more than
    ``threshold_layer`` percent of a layer's units are. That is a *problem* when the same units were
    inactive on the last 5 saved training steps of the layer (so through training, not over a few
    evaluation batches), and a *warning* before (one batch proves little, and units dead at
    initialisation often recover). A layer holding NaN or inf is reported as non-finite (a problem),
    never as dead or saturated.
    """

    collections_needed = ("relu_activations",)
    #: What an inactive unit is called in findings ("dead", "saturated").
    what = "inactive"
    #: The cause its findings name (``details["cause"]``), if any.
    cause: str | None = None
    #: The cause named instead when the units were already inactive at the first saved
    #: training step (before any update) and still are: evidence that needs harm.
    init_cause: str | None = None

    @classmethod
    def check_values(cls, params: Mapping[str, Any]) -> None:
        threshold_inactivity = params["threshold_inactivity"]
        threshold_layer = params["threshold_layer"]
        for name, value in (
            ("threshold_inactivity", threshold_inactivity),
            ("threshold_layer", threshold_layer),
        ):
            cls.check_param(name, value, 0 <= value <= 100, "a percentage in [0, 100]")

    def __init__(
        self,
        base_trial: Any,
        tensor_regex: list[str] | None,
        default_regex: list[str],
        threshold_inactivity: float,
        threshold_layer: float,
    ) -> None:
        super().__init__(base_trial)
        self.default_regex = default_regex
        self.tensor_regex = tensor_regex or default_regex
        self.threshold_inactivity = threshold_inactivity
        self.threshold_layer = threshold_layer
        self._inactive: dict[str, deque[np.ndarray]] = {}
        self._at_start: dict[str, np.ndarray] = {}  # each layer's mask at its first training step

    def inactive(self, name: str, values: np.ndarray) -> np.ndarray:
        """Which samples leave each unit of ``name`` inactive (booleans, like ``values``)."""
        raise NotImplementedError

    def _names(self, step: int) -> list[str]:
        return raw_matching(self, self.tensor_regex, step)

    def no_data_reason(self) -> str:
        """Why nothing was judged, from what ``relu_activations`` holds: nothing (not saved, or
        the model has no activation module the hook captures), or only activations of other
        kinds (a GELU transformer has no ReLU for DeadRelu to judge)."""
        try:
            saved = self.base_trial.tensor_names(collection="relu_activations")
        except MissingCollectionFiles:
            saved = []
        if not saved:
            return (
                "the trial has no activation in relu_activations: the collection was not "
                "saved (include_collections=['relu_activations']; a job saves it for this "
                "rule), or the model has no activation module the hook captures (torch.nn's "
                "and transformers' activation classes; an activation called as a function, "
                "such as F.relu, is no module)"
            )
        if any(re.search(regex, name) for regex in self.tensor_regex for name in saved):
            return super().no_data_reason()
        kinds = sorted({m.group(1) for m in map(_KIND.search, saved) if m is not None})
        return (
            f"no saved activation matches {', '.join(self.tensor_regex)}: the model's "
            f"activations are {', '.join(kinds) or 'of other kinds'} (such as {saved[0]}), so "
            f"{self.rule_name} has none of its kind to judge"
        )

    def set_required_tensors(self, step: int) -> None:
        for name in self._names(step):
            self.req_tensors.add(name, [step])

    def invoke_at_step(self, step: int) -> bool:
        names = self._names(step)
        if not names:
            raise self.skip("no matching activation saved at this step")
        worst: tuple[float, float, str, int, int] | None = None
        from_start = 0.0  # of the worst layer: its lasting units inactive from the first step
        bad: list[str] = []
        training = self.base_trial.mode(step) not in (ModeKeys.EVAL, ModeKeys.PREDICT)
        for name in names:
            values = self.base_trial.tensor(name).value(step)
            if values.size == 0:
                continue
            if not np.isfinite(values).all():
                bad.append(name)
                continue
            activity = unit_activity(values, ~self.inactive(name, values))
            mask = activity < self.threshold_inactivity
            history = self._inactive.setdefault(name, deque(maxlen=PERSISTENT))
            if history and history[-1].shape != mask.shape:
                history.clear()
            if training:  # only training moves units: EVAL batches add no evidence of lasting
                self._at_start.setdefault(name, mask)
                history.append(mask)
                recent = list(history)
            else:
                recent = [*list(history)[1:], mask]
            lasting = np.logical_and.reduce(recent) if len(recent) == PERSISTENT else None
            persistent = 0.0 if lasting is None else 100.0 * float(lasting.mean())
            percent = 100.0 * float(mask.mean())
            if worst is None or (persistent, percent) > worst[:2]:
                worst = (persistent, percent, name, int(mask.sum()), mask.size)
                start = self._at_start.get(name)
                from_start = (
                    0.0
                    if lasting is None or start is None or start.shape != lasting.shape
                    else 100.0 * float((lasting & start).mean())
                )
        if bad:
            return fire_nonfinite(self, bad, "the activation")
        if worst is None:
            raise self.skip("the matching activations are empty at this step")
        persistent, percent, name, bad_units, units = worst
        fired = percent > self.threshold_layer
        lasting_problem = persistent > self.threshold_layer
        extra: dict[str, Any] = {"cause": self.cause} if self.cause else {}
        since_start = ""
        if lasting_problem and self.init_cause and from_start > self.threshold_layer:
            # inactive before training could move them: the set-up did it, not training
            extra = {"cause": self.init_cause, "needs_harm": True, "symptom": self.cause}
            since_start = (
                f"; {from_start:.3g}% were already at the first saved training step, before "
                "any update: the initialisation (a bias pushed negative, weights of one sign) "
                "or the inputs left them so"
            )
        self.explain(
            f"{percent:.3g}% of the units of {name} are {self.what} ({bad_units} of {units} "
            f"active in less than {self.threshold_inactivity:g}% of samples); limit "
            f"{self.threshold_layer:g}%"
            + (
                f"; {persistent:.3g}% were on the last {PERSISTENT} saved training steps"
                if lasting_problem
                else f"; not yet on {PERSISTENT} saved training steps in a row"
                if fired
                else ""
            )
            + since_start,
            tensors=[name],
            value=percent,
            threshold=self.threshold_layer,
            severity=Severity.PROBLEM if lasting_problem else Severity.WARNING,
            **extra,
        )
        return fired
