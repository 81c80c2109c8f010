"""Findings' flags never overprint (issue 47, item 3), read from a real headless Chromium over a
real server: a job whose rules fired at many nearby steps (and at its last step) has each
finding's label in a lane of its own where there is room and, where there is none, counted on
the label nearest it ("⚑ LossSpike +2", all of them on hover): on the run page at the widths
people use, after a zoom, and in the static report. Every finding stays on the chart."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.boxes import overlapping
from tests.helpers.job_documents import make_job
from tests.helpers.json_get import get_json as get

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

STEPS = 200
#: Rules that fired, at steps crowded at the start, two at one step, and two at the very end
#: (a label there must not run past the plot's right edge).
FIRED_AT = {
    "LossNotDecreasing": 20,
    "GradientNormSpike": 20,
    "LossSpike": 21,
    "VanishingGradient": 22,
    "WeightUpdateRatio": 23,
    "PoorWeightInitialization": 24,
    "DeadRelu": 26,
    "ExplodingTensor": 27,
    "Overfit": 29,
    "Overtraining": 31,
    "ClassImbalance": 33,
    "AccuracyAtChance": 36,
    "FrozenLayer": 120,
    "AllZero": 198,
    "UnnormalisedInput": 199,
}


@pytest.fixture(scope="module")
def crowded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    runs = tmp_path_factory.mktemp("flags") / "runs"
    rules = [
        {
            "RuleConfigurationName": name,
            "RuleEvaluationStatus": "IssuesFound",
            "StatusDetails": "RuleEvaluationConditionMet",
            "severity": "problem" if k % 3 == 0 else "warning",
            "gravest_step": step,
            "gravest_message": f"{name} saw something at step {step}",
            "judged": STEPS,
        }
        for k, (name, step) in enumerate(FIRED_AT.items())
    ]
    losses = [2.0 / (1 + 0.05 * k) for k in range(STEPS)]
    make_job(runs, "crowded", lr=0.1, batch=32, losses=losses, rules=rules)
    return runs


#: The finding labels of the first chart drawn with findings, once they were placed: each
#: visible label's box (as drawn), text and hover text, and the plot area's left and right.
FLAGS = """
const isFlag = (a) => a.name === 'finding';
const gd = [...document.querySelectorAll('#curves .js-plotly-plot')]
  .find((d) => d.layout && (d.layout.annotations || []).some(isFlag));
const placing = typeof placeFlags === 'function';  // (a page without lanes is read at once)
if (!gd || (placing && (!window.tensortapFlagsPlaced || gd.tensortapPlacing))) return null;
const indices = new Set();
gd.layout.annotations.forEach((a, i) => { if (isFlag(a)) indices.add(i); });
const size = gd._fullLayout._size, left = gd.getBoundingClientRect().left + size.l;
const area = {left, right: left + size.w};
const labels = [...gd.querySelectorAll('.annotation')]
  .filter((a) => indices.has(Number(a.dataset.index)) && a.querySelector('.annotation-text'))
  .map((a) => {
    const r = a.querySelector('.annotation-text').getBoundingClientRect();
    const given = gd.layout.annotations[Number(a.dataset.index)];
    return {name: a.textContent, x0: r.left, x1: r.right, y0: r.top, y1: r.bottom,
            hover: given.hovertext};
  }).filter((b) => b.x1 > b.x0);
return {labels, left: area.left, right: area.right, placed: window.tensortapFlagsPlaced,
        zoomed: gd._fullLayout.xaxis.range};
"""


def represented(labels: list[dict[str, Any]]) -> int:
    """How many findings the drawn labels stand for: one each, plus the count a label gained."""
    return sum(
        1 + int(m.group(1)) if (m := re.search(r"\+(\d+)$", b["name"])) else 1 for b in labels
    )


def check_flags(flags: dict[str, Any]) -> None:
    labels = flags["labels"]
    assert overlapping(labels) == [], labels
    assert represented(labels) == len(FIRED_AT), [b["name"] for b in labels]
    hovered = "<br>".join(b["hover"] for b in labels)
    assert all(f"{name} (" in hovered for name in FIRED_AT)  # each finding on hover
    # within the plot's width (a label at the last step is set to the left of its line)
    assert all(flags["left"] - 1 <= b["x0"] and b["x1"] <= flags["right"] + 1 for b in labels)


@pytest.mark.parametrize("width", [900, 1280, 1920])
def test_finding_labels_never_overprint_on_the_run_page(
    crowded, serve, browser, viewport, width
) -> None:
    viewport(width)
    dashboard = serve(crowded)
    _, body = get(dashboard.url + "api/runs")
    (run,) = body["runs"]
    browser.visit(f"{dashboard.url}run/{run['id']}")
    flags = browser.until(FLAGS, lambda v: v and v["labels"], timeout=60)
    check_flags(flags)
    assert len(flags["labels"]) >= 5  # lanes used, not everything folded into one label
    # zoomed in on the crowd: more room, so fewer labels are folded, and still none overprints
    browser.driver.execute_script(
        "const gd = [...document.querySelectorAll('#curves .js-plotly-plot')]"
        "  .find((d) => (d.layout.annotations || []).some((a) => a.name === 'finding'));"
        "Plotly.relayout(gd, {'xaxis.range': [15, 45]});"
    )
    zoomed = browser.until(
        FLAGS, lambda v: v and v["zoomed"][1] < 50 and v["placed"] > flags["placed"], timeout=60
    )
    inside = [b for b in zoomed["labels"] if b["x0"] >= zoomed["left"] - 1]
    assert overlapping(inside) == [], inside
    assert browser.errors() == []


def test_finding_labels_never_overprint_in_the_report(crowded, serve, browser, viewport) -> None:
    viewport(1280)
    dashboard = serve(crowded)
    _, body = get(dashboard.url + "api/runs")
    (run,) = body["runs"]
    browser.visit(f"{dashboard.url}report/{run['id']}")
    browser.until("return document.querySelectorAll('.charts svg text.flag').length;", bool)
    charts = browser.driver.execute_script(
        """
        return [...document.querySelectorAll('.charts svg')].filter((s) => s.querySelector('text.flag'))
          .map((s) => [...s.querySelectorAll('text.flag')].map((t) => {
            const r = t.getBoundingClientRect();
            return {name: t.textContent, x0: r.left, x1: r.right, y0: r.top, y1: r.bottom};
          }));
        """
    )
    assert charts
    for labels in charts:
        assert overlapping(labels) == [], labels
    assert browser.errors() == []


def test_an_evidence_step_links_to_the_charts_at_that_step(crowded, serve, browser) -> None:
    """The diagnosis's evidence ("step 120, FrozenLayer: ...") links to the charts: a click zooms
    every chart on screen to a window around that step (as a drag would) and scrolls to them."""
    dashboard = serve(crowded)
    _, body = get(dashboard.url + "api/runs")
    (run,) = body["runs"]
    browser.visit(f"{dashboard.url}run/{run['id']}")
    browser.until(FLAGS, lambda v: v and v["labels"], timeout=60)  # the charts drawn
    steps = browser.until(
        "return [...document.querySelectorAll('#diagnosis a.step')].map((a) => a.dataset.step);",
        bool,
    )
    assert "120" in steps  # FrozenLayer's, mid-run
    browser.driver.execute_script(
        "document.querySelector('#diagnosis a.step[data-step=\"120\"]').click();"
    )
    ranges = browser.until(
        "return [...document.querySelectorAll('#curves .js-plotly-plot')]"
        "  .map((d) => d._fullLayout.xaxis.range);",
        lambda v: v and all(r[1] - r[0] < 50 for r in v),
        timeout=60,
    )
    assert all(r[0] <= 120 <= r[1] for r in ranges), ranges  # each chart around the step
    top = browser.driver.execute_script(
        "return document.getElementById('curves').getBoundingClientRect().top;"
    )
    assert abs(top) < 5  # scrolled to the charts
    assert browser.errors() == []
