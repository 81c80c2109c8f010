"""plotly for tensortap's pages: names from a trial shown as they are, never as plotly's
pseudo-HTML; a figure's page that opens offline with plotly.js inlined compressed.

plotly renders ``<a href=...>``, ``<b>``, ``<br>`` and entities in trace names, titles,
annotations, tick labels and hover text. A tensor, run or label name is data (a trial may come
from anyone): escaped here, plotly shows its ``<``, ``>`` and ``&`` as text and makes no link.
"""

from __future__ import annotations

import base64
import functools
import gzip
from pathlib import Path
from typing import Any


def as_text(value: object) -> str:
    """``value`` as text plotly shows literally (``&``, ``<``, ``>`` as entities it decodes)."""
    return str(value).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


@functools.cache
def plotly_loader() -> str:
    """A ``<script>`` that defines ``window.Plotly`` from plotly.js inlined gzip-compressed
    (base64: about 2 MB where plotly.js is 4.8 MB), unpacked by the browser's own
    ``DecompressionStream``, once a page whatever the figures; ``window.tensortapPlotly`` is
    the promise of it that the figures' scripts wait on. Nothing is loaded from anywhere: the
    page opens offline. Made once a process (about 0.15 s of CPU)."""
    import plotly

    raw = (Path(plotly.__file__).parent / "package_data" / "plotly.min.js").read_bytes()
    packed = base64.b64encode(gzip.compress(raw, compresslevel=6, mtime=0)).decode("ascii")
    return (
        # a page served under a nonce (the dashboard's report): plotly.js's script carries
        # the nonce of the script that unpacks it, taken before its first await
        "<script>window.tensortapPlotly = window.tensortapPlotly || (async (nonce) => {"
        "if (window.Plotly) return window.Plotly;"
        f'const bytes = Uint8Array.from(atob("{packed}"), (c) => c.charCodeAt(0));'
        "const text = await new Response(new Blob([bytes]).stream()"
        ".pipeThrough(new DecompressionStream('gzip'))).text();"
        "const script = document.createElement('script'); script.textContent = text;"
        "if (nonce) script.nonce = nonce;"
        "document.head.appendChild(script); return window.Plotly;"
        "})(document.currentScript && document.currentScript.nonce);</script>"
    )


def offline_html(fig: Any, full_html: bool = True, **options: Any) -> str:
    """``fig`` as HTML that opens offline (with :func:`plotly_loader`: each figure made so
    carries its copy, which the browser unpacks once a page), its drawing deferred until
    plotly.js is unpacked; with ``full_html`` a whole page. ``options`` go to plotly's
    ``to_html``."""
    figure: str = fig.to_html(include_plotlyjs=False, full_html=False, **options)
    start = figure.index("<script")
    opened = figure.index(">", start) + 1
    end = figure.rindex("</script>")
    figure = (
        figure[:opened]
        + "window.tensortapPlotly.then(() => {"
        + figure[opened:end]
        + "});"
        + figure[end:]
    )
    body = plotly_loader() + figure
    if not full_html:
        return body
    return f'<html><head><meta charset="utf-8" /></head><body>{body}</body></html>'


__all__ = ["as_text", "offline_html", "plotly_loader"]
