"""Which saved series are tensortap's own accounting rather than the user's training: the
facts its hooks save for the rules (``training_loop/<fact>``, ``initial/<weight>``,
``gradient_clip/<threshold>``) and a reduction copied off a value that is shown whole (a
loss's ``max`` and ``min``: a one-element value's reductions are that value). The dashboard
folds these into their own closed group at the bottom of a run's page; this is the one place
that says which they are."""

from __future__ import annotations

from collections.abc import Collection

from tensortap.core._collections import GRADIENT_CLIP, INITIAL_PREFIX, TRAINING_LOOP

#: The name prefixes under which tensortap's hooks save their own facts.
OWN_PREFIXES = (f"{TRAINING_LOOP}/", INITIAL_PREFIX, f"{GRADIENT_CLIP}/")


def is_own_series(name: str, statistic: str, shown_whole: Collection[str] = ()) -> bool:
    """Whether the chart of ``name`` (its ``statistic``: ``"value"`` or a reduction) is
    tensortap's own accounting. ``shown_whole`` holds the names charted as their value: a
    reduction of one of them is a copy (the loss's ``max`` and ``min``)."""
    if name.startswith(OWN_PREFIXES):
        return True
    return statistic != "value" and name in shown_whole


__all__ = ["OWN_PREFIXES", "is_own_series"]
