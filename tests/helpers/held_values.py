"""How many values a series reader held at once, counted on the real reader (issue 48)."""

from __future__ import annotations

import pytest


class HeldValues:
    """The most values the series reader held at once: the room it made for a read
    (:class:`~tensortap.trials._series_fill.Fill`) and the bytes of one batch of ranges read
    (16 bytes a value), counted by wrapping the real methods."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from tensortap.trials._series_fill import Fill
        from tensortap.trials._series_objects import SeriesObjects

        self.most = 0
        fill_init, get_ranges = Fill.__init__, SeriesObjects.get_ranges

        def counted_fill(fill: Fill, capacity: dict) -> None:
            self.most = max(self.most, sum(capacity.values()))
            fill_init(fill, capacity)

        def counted_ranges(objects: SeriesObjects, requests: list) -> list:
            self.most = max(self.most, sum(length for _, _, length in requests) // 16)
            return get_ranges(objects, requests)

        monkeypatch.setattr(Fill, "__init__", counted_fill)
        monkeypatch.setattr(SeriesObjects, "get_ranges", counted_ranges)


__all__ = ["HeldValues"]
