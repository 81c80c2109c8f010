"""NaNInfRootCause: where a NaN or infinity first appeared, not just that one did."""

from __future__ import annotations

from typing import Any

from tensortap.rules._finding import Said
from tensortap.rules._numbers import Finiteness, Nonfinite
from tensortap.rules._rule import Rule
from tensortap.rules.builtin._common import names_in, select

_NOTHING_SAVED = "none of the selected tensors was saved at this step"

_UPDATE_COLLECTIONS = ("weights", "biases", "optimizer_variables")


class NaNInfRootCause(Rule):
    """Fires once, at the first saved step where a selected tensor holds NaN or +/-inf, and
    names the tensor where the non-finite value first appeared in the order training
    computes: forward tensors (inputs, activations, outputs, losses) in the order they were
    saved, then gradients in backward order (last layer first), then the updated weights and
    optimizer state. Tensors: ``collection_names`` / ``tensor_regex``, every tensor when
    neither is given. Save every step (and the activations) to pin the exact origin.
    """

    config_name = "nan_inf_root_cause"  # not na_n_inf_root_cause
    collections_needed = ("weights", "gradients", "losses", "outputs")
    collection_parameters = {"outputs": {"reductions": "min,max"}}
    judges_numbers_alone = True

    def __init__(
        self,
        base_trial: Any,
        collection_names: list[str] | None = None,
        tensor_regex: list[str] | None = None,
    ) -> None:
        super().__init__(base_trial)
        self.collection_names = collection_names or []
        self.tensor_regex = tensor_regex or []
        self.found_at: int | None = None
        self.reads(Finiteness(self._names, _NOTHING_SAVED))

    def _names(self, step: int | None) -> list[str]:
        return select(self.base_trial, self.collection_names, self.tensor_regex, step=step)

    def _ordered(self, step: int, names: list[str]) -> list[tuple[str, str]]:
        """(phase, name) in computation order."""
        wanted = set(names)
        grads = set(names_in(self.base_trial, "gradients", step))
        update: set[str] = set()
        for coll in _UPDATE_COLLECTIONS:
            update.update(names_in(self.base_trial, coll, step))
        order = [n for n in self.base_trial.saved_order(step) if n in wanted]
        forward = [("forward", n) for n in order if n not in grads and n not in update]
        backward = [("backward", n) for n in reversed(order) if n in grads]
        updated = [("update", n) for n in order if n in update and n not in grads]
        return forward + backward + updated

    def not_judged(self, step: int) -> Said | None:
        if self.found_at is None:
            return None
        return Said(f"already traced to step {self.found_at}")

    def judge(self, step: int, found: Nonfinite) -> bool:
        # every selected tensor checked at once on the step's block (shared with the other
        # rules); the computation order is looked up only where something is not finite
        names, nonfinite = list(found.names), found.any
        bad = [(p, n) for p, n in self._ordered(step, names) if n in nonfinite] if nonfinite else []
        if not bad:
            self.explain(f"all {len(names)} tensors are finite")
            return False
        self.found_at = step
        phase, first = bad[0]
        where = {
            "forward": "in the forward pass",
            "backward": "in the backward pass (the forward pass was finite)",
            "update": "in the weights after the update (forward and backward were finite)",
        }[phase]
        self.explain(
            f"first non-finite value at step {step} {where}: {first}; "
            f"{len(bad)} tensors non-finite at this step",
            tensors=[n for _, n in bad],
            value=len(bad),
            threshold=0,
            origin=first,
            phase=phase,
            nonfinite=True,
            cause="nonfinite",
        )
        return True
