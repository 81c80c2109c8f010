"""The one-element values of tensors by global step, read as series in bulk (what a rule
asking for a loss at every step reads)."""

from __future__ import annotations

from collections.abc import Callable

from tensortap.trials._index import natural_key
from tensortap.trials._series import SeriesReader


class OneNumbers:
    """The one-element values of tensors (losses, metrics) by global step, read as series in
    bulk and then only what is newer: what a rule asking for a loss at every step reads,
    instead of one read of the data object per step. Where several workers saved one, the
    first (natural order) is taken, and a step saved again by a later session is the later
    one's value, as :meth:`Tensor.value` answers."""

    def __init__(self, reader: Callable[[], SeriesReader]) -> None:
        self._reader = reader
        self._known: dict[str, tuple[int, dict[int, float]]] = {}

    def at(self, name: str, step: int) -> float | None:
        """The value saved at global ``step``; None when the series path has none there (not
        one element, or not published yet)."""
        found = self._known.get(name)
        if found is None or step > found[0]:
            found = self._take_newer(name, found)
        return found[1].get(step)

    def _take_newer(
        self, name: str, found: tuple[int, dict[int, float]] | None
    ) -> tuple[int, dict[int, float]]:
        reader = self._reader()
        extent, values = found if found is not None else (-1, {})
        cols = reader.series(name, statistic="value", start=extent + 1)
        parts = list(cols.groups())
        parts.sort(key=lambda kp: natural_key(kp[0].worker), reverse=True)  # first wins
        for _, part in parts:
            values.update(zip(part["global_step"].tolist(), part["value"].tolist(), strict=True))
        found = (max(extent, reader.last_step), values)
        self._known[name] = found
        return found
