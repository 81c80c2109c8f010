"""ExplodingTensor: a tensor holding NaN (or infinite) values."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from tensortap.rules._finding import Finding, StepRun
from tensortap.rules._rule import Rule
from tensortap.rules.builtin._bulk import judge_finite, steps_array
from tensortap.rules.builtin._common import collection_names_param, select

if TYPE_CHECKING:
    from tensortap.trials._step_block import StepBlock

_NOTHING_SAVED = "none of the selected tensors was saved at this step"


class ExplodingTensor(Rule):
    """Fires when a selected tensor holds NaN, or +/-inf unless ``only_nan``.

    Tensors: those in ``collection_names`` or matching ``tensor_regex``; every tensor when
    neither is given. Where only reductions were saved, a non-finite min/max (or a NaN in any
    reduction) shows the same.
    """

    def __init__(
        self,
        base_trial: Any,
        collection_names: list[str] | None = None,
        tensor_regex: list[str] | None = None,
        only_nan: bool = False,
    ) -> None:
        super().__init__(base_trial)
        self.collection_names = collection_names or []
        self.tensor_regex = tensor_regex or []
        self.only_nan = only_nan

    @classmethod
    def required_collections(cls, **params: Any) -> tuple[str, ...]:
        return tuple(collection_names_param(params)) or ("weights", "gradients", "losses")

    def _names(self, step: int) -> list[str]:
        return select(self.base_trial, self.collection_names, self.tensor_regex, step=step)

    def _bad(self, block: StepBlock, names: list[str]) -> list[tuple[str, str]]:
        """(name, what) of every tensor holding NaN (or inf unless ``only_nan``)."""
        raw, reduced = block.split_raw(names)
        nans, infs = block.nonfinite(raw)
        found: dict[str, str] = {}
        hits = np.flatnonzero(nans + infs).tolist()
        for name, nan, inf in ((raw[i], nans[i], infs[i]) for i in hits):
            if nan:
                found[name] = "NaN"
            elif inf and not self.only_nan:
                found[name] = "infinite values"
        for name in reduced:
            reductions = block.saved_reductions(name)
            if any(math.isnan(v) for v in reductions.values()):
                found[name] = "NaN"
            elif not self.only_nan:
                extremes = [v for (r, _), v in reductions.items() if r in ("min", "max")]
                if any(math.isinf(v) for v in extremes):
                    found[name] = "infinite values"
        return [(n, found[n]) for n in names if n in found]

    def judge_steps(self, steps: Sequence[int]) -> Iterator[Finding | StepRun]:
        """Steps whose selected tensors are all finite in the saved numbers (reductions,
        one-element values) are OK at once; the others are evaluated one by one."""
        with self.asking():
            names = select(self.base_trial, self.collection_names, self.tensor_regex)
        judged = judge_finite(self, names, steps_array(steps), _NOTHING_SAVED)
        yield from super().judge_steps(steps) if judged is None else judged

    def invoke_at_step(self, step: int) -> bool:
        names = self._names(step)
        if not names:
            raise self.skip(_NOTHING_SAVED)
        bad = self._bad(self.base_trial.step_block(step), names)
        kind = "NaN" if self.only_nan else "NaN or infinite values"
        if not bad:
            self.explain(f"no {kind} in {len(names)} tensors", value=0, threshold=0)
            return False
        first, what = bad[0]
        more = f" and {len(bad) - 1} more tensors" if len(bad) > 1 else ""
        self.explain(
            f"{first} holds {what}{more}",
            tensors=[n for n, _ in bad],
            value=len(bad),
            threshold=0,
            nonfinite=True,
            cause="nonfinite",
        )
        return True
