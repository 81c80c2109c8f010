"""ExplodingTensor: a tensor holding NaN (or infinite) values."""

from __future__ import annotations

from typing import Any

from tensortap.rules._numbers import Finiteness, Nonfinite
from tensortap.rules._rule import Rule
from tensortap.rules.builtin._common import collection_names_param, select

_NOTHING_SAVED = "none of the selected tensors was saved at this step"


class ExplodingTensor(Rule):
    """Fires when a selected tensor holds NaN, or +/-inf unless ``only_nan``.

    Tensors: those in ``collection_names`` or matching ``tensor_regex``; every tensor when
    neither is given. Where only reductions were saved, a non-finite min/max (or a NaN in any
    reduction) shows the same.
    """

    judges_numbers_alone = True

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
        self.reads(Finiteness(self._names, _NOTHING_SAVED))

    @classmethod
    def required_collections(cls, **params: Any) -> tuple[str, ...]:
        return tuple(collection_names_param(params)) or ("weights", "gradients", "losses")

    def _names(self, step: int | None) -> list[str]:
        return select(self.base_trial, self.collection_names, self.tensor_regex, step=step)

    def judge(self, step: int, found: Nonfinite) -> bool:
        bad = [
            (n, "NaN" if n in found.nan else "infinite values")
            for n in found.names
            if n in found.nan or (n in found.infinite and not self.only_nan)
        ]
        kind = "NaN" if self.only_nan else "NaN or infinite values"
        if not bad:
            self.explain(f"no {kind} in {len(found.names)} tensors", value=0, threshold=0)
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
