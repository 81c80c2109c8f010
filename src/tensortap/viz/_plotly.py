"""Text for plotly: names from a trial shown as they are, never as plotly's pseudo-HTML.

plotly renders ``<a href=...>``, ``<b>``, ``<br>`` and entities in trace names, titles,
annotations, tick labels and hover text. A tensor, run or label name is data (a trial may come
from anyone): escaped here, plotly shows its ``<``, ``>`` and ``&`` as text and makes no link.
"""

from __future__ import annotations


def as_text(value: object) -> str:
    """``value`` as text plotly shows literally (``&``, ``<``, ``>`` as entities it decodes)."""
    return str(value).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


__all__ = ["as_text"]
