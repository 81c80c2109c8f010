"""Issue 46: the run page shows what each rollback decided. A real rollback run (a small GPT
whose layer goes non-finite at steps 60 and 61: two remedies, then a stop naming the layer)
served to a real headless Chromium: each decision is a star on the loss chart at its bad
step, in the colour the static report marks it with, its decision and reason on hover; and
a short list (step, decision, reason) under the curves."""

from __future__ import annotations

from pathlib import Path

import pytest

import tensortap as tt
from tensortap.report._colours import SEVERITY_COLOURS
from tests.helpers.json_get import get_json as get

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
torch = pytest.importorskip("torch")

# the loss chart's decision marks, as plotly holds them, and the list under the curves
DRAWN = (
    "const d = document.querySelector('#curves [data-name=loss]');"
    "if (d) d.scrollIntoView();"  # under the vitals' charts: drawn once on screen
    "const marks = d && d.data ? d.data.filter(t => t.meta === 'decisions') : [];"
    "return marks.length ? {"
    " x: Array.from(marks[0].x), y: Array.from(marks[0].y), yaxis: marks[0].yaxis,"
    " colour: marks[0].marker.color, symbol: marks[0].marker.symbol,"
    " hover: Array.from(marks[0].hovertext), n: marks.length,"
    " list: Array.from(document.querySelectorAll('#decision-list li')).map(li => ["
    "   li.querySelector('.decision-step').textContent,"
    "   li.querySelector('.decision').textContent,"
    "   li.querySelector('.decision-reason').textContent,"
    "   getComputedStyle(li.querySelector('.decision')).color])} : null;"
)


def test_a_real_rollbacks_decisions_are_marked_and_listed(tmp_path: Path, serve, browser) -> None:
    from tests.pytorch.test_rollback_decisions import _train_gpt

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a tiny model's ops are slower with two on a shared machine
    try:
        _train_gpt(tmp_path)
    finally:
        torch.set_num_threads(threads)
    decided = [
        (e["fields"]["action"], e["fields"].get("remedy"), e["fields"]["at"])
        for s in tt.create_trial(tmp_path / "run").sessions()
        for e in s.events
        if e["kind"] == "rollback_decision"
    ]
    assert [d[:2] for d in decided] == [
        ("remedy", "lower_lr"),
        ("remedy", "tighter_clip"),
        ("stop", None),
    ]
    dashboard = serve(tmp_path / "run")
    _, runs = get(dashboard.url + "api/runs")
    (run,) = runs["runs"]
    browser.visit(f"{dashboard.url}run/{run['id']}")
    drawn = browser.until(DRAWN, lambda v: v and len(v["list"]) == 3)
    assert drawn["n"] == 1 and drawn["yaxis"] == "y2" and drawn["y"] == [1, 1, 1]
    # each branch is drawn from its fork: every decision is at its bad step, 60
    assert drawn["x"] == [60, 60, 60]
    assert drawn["colour"] == SEVERITY_COLOURS["problem"]  # the report's mark (report/_svg.py)
    assert drawn["symbol"] == "star"
    first, second, stop = drawn["hover"]
    assert first.startswith(
        f"rollback at global step {decided[0][2]}: remedy lower_lr (numerics in blocks.2, step 60)"
    )
    assert second.startswith(
        f"rollback at global step {decided[1][2]}: remedy tighter_clip (numerics in blocks.2"
    )
    assert stop.startswith(f"rollback at global step {decided[2][2]}: stop (numerics in blocks.2")
    steps, decisions, reasons, colours = zip(*drawn["list"], strict=True)
    assert steps == ("step 60",) * 3
    assert decisions == ("remedy lower_lr", "remedy tighter_clip", "stop")
    assert all(r.startswith("numerics in blocks.2: ") for r in reasons)
    assert "blocks.2" in reasons[2][len("numerics in blocks.2: ") :]  # the stop names the layer
    red = SEVERITY_COLOURS["problem"]
    assert set(colours) == {f"rgb({int(red[1:3], 16)}, {int(red[3:5], 16)}, {int(red[5:7], 16)})"}
    assert browser.errors() == []
