"""The live dashboard (``tensortap serve``): runs, curves with findings, layer health,
TensorPlot, rule timelines and logs, comparisons, in the browser. Needs
``pip install 'tensortap[serve]'`` (Starlette, uvicorn, plotly.js)."""

from tensortap.serve._server import Dashboard, start

__all__ = ["Dashboard", "start"]
