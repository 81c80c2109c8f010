"""The query layer: the numbers behind every picture, computed once in a module that draws
nothing, and the renderers (viz, the dashboard, the report) drawing what it answers."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

QUERY = Path(__file__).parents[2] / "src" / "tensortap" / "query"
RENDERERS = {"viz", "serve", "report", "cli"}
PLOTTING = {"matplotlib", "plotly"}


def test_query_imports_no_renderer_and_no_plotting_library() -> None:
    problems = []
    for path in sorted(QUERY.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                parts = name.split(".")
                if parts[0] in PLOTTING or (parts[0] == "tensortap" and parts[1] in RENDERERS):
                    problems.append(f"{path.name} imports {name}")
    assert problems == []
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, tensortap.query; print(sorted(m for m in "
            f"{sorted(PLOTTING)!r} if m in sys.modules))",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_each_renderer_draws_the_one_computation() -> None:
    """The old names are the query layer's functions, not copies of them."""
    from tensortap import query
    from tensortap.report import _svg as svg
    from tensortap.report import _training as training
    from tensortap.serve import _layers as layers
    from tensortap.serve import _series as series
    from tensortap.viz import _distributions as distributions
    from tensortap.viz import _health as health
    from tensortap.viz import _series as viz_series

    assert health.layer_health is query.layer_health
    assert distributions.distribution_data is query.distribution_data
    assert viz_series.tensor_series is query.tensor_series
    assert training.read_series is query.read_series
    assert training.HEAT_COLUMNS == layers.HEAT_STEPS == query.HEAT_COLUMNS
    assert svg.MOST_POINTS == series.BUCKETS == query.LINE_BUCKETS
