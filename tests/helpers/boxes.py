"""Boxes drawn on a page, read in a headless browser: which overlap."""

from __future__ import annotations

from typing import Any


def overlapping(boxes: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """The pairs of boxes (``x0``, ``x1``, ``y0``, ``y1``, ``name``) that share some area
    (touching edges do not count)."""
    found = []
    for i, a in enumerate(boxes):
        for b in boxes[i + 1 :]:
            dx = min(a["x1"], b["x1"]) - max(a["x0"], b["x0"])
            dy = min(a["y1"], b["y1"]) - max(a["y0"], b["y0"])
            if dx > 0.5 and dy > 0.5:
                found.append((a["name"], b["name"]))
    return found
