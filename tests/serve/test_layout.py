"""How a run's page is laid out, read from a real headless Chromium over a real server showing a
real job (an unmodified PyTorch script under ``tensortap run``): the verdict above the first
chart, tensortap's own series folded away and not drawn until opened, no two charts
overlapping at the widths people use."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tensortap.core._own_series import OWN_PREFIXES, is_own_series
from tests.helpers.json_get import get_json as get

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
pytest.importorskip("torch")
pytest.importorskip("sklearn")

SCRIPT = Path(__file__).parents[1] / "jobs" / "outcome_torch_script.py"
WIDTHS = (1280, 1400, 1920)

#: The boxes of the charts drawn (plotly's and the plain-SVG first paint), by id and name.
BOXES = """
return [...document.querySelectorAll('.plot, .js-plotly-plot')]
  .filter((d) => d.offsetParent !== null)
  .map((d) => { const r = d.getBoundingClientRect();
    return {id: d.id, name: d.dataset.name || d.id, x0: r.left, y0: r.top + scrollY,
            x1: r.right, y1: r.bottom + scrollY, svgs: [...d.querySelectorAll('svg.main-svg')]
              .map((s) => { const q = s.getBoundingClientRect(); return [q.left, q.right]; })}; });
"""


@pytest.fixture(scope="module")
def job_runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A runs directory holding one finished job of a digits MLP (60 steps, evaluated every 40)."""
    where = tmp_path_factory.mktemp("layout")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tensortap.cli",
            "run",
            "--output",
            "runs",
            "--",
            "python",
            str(SCRIPT),
            "--steps",
            "60",
        ],
        cwd=where,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return where / "runs"


@pytest.fixture
def viewport(browser) -> Iterator[Any]:
    """Set the page's viewport to a width (exactly, through the DevTools protocol); reset after."""

    def set_width(width: int) -> None:
        browser.driver.execute_cdp_cmd(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": 900, "deviceScaleFactor": 1, "mobile": False},
        )

    yield set_width
    browser.driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})


def run_url(dashboard) -> str:
    _, body = get(dashboard.url + "api/runs")
    (run,) = body["runs"]
    return f"{dashboard.url}run/{run['id']}"


def box_of(browser, selector: str) -> dict[str, float] | None:
    return browser.driver.execute_script(
        "const d = document.querySelector(arguments[0]); if (!d) return null;"
        "const r = d.getBoundingClientRect();"
        "return {top: r.top + scrollY, bottom: r.bottom + scrollY, height: r.height};",
        selector,
    )


def test_the_verdict_comes_before_the_charts_and_tensortaps_own_series_are_folded_away(
    job_runs, serve, browser, viewport
) -> None:
    viewport(1400)
    dashboard = serve(job_runs)
    browser.visit(run_url(dashboard))
    drawn = "const c = window.tensortapCurves; return c ? c.drawn : [];"
    first = browser.until(drawn, bool, timeout=60)
    verdict = "return document.getElementById('diagnosis').textContent;"
    assert "diagnosis:" in browser.until(verdict, lambda t: "diagnosis:" in t)
    diagnosis, chart = box_of(browser, "#diagnosis"), box_of(browser, "#curves .plot")
    assert diagnosis is not None and chart is not None and diagnosis["height"] > 0
    assert diagnosis["bottom"] <= chart["top"], (diagnosis, chart)  # read before any chart

    names = (
        "return [...document.querySelectorAll(arguments[0] + ' .plot')]"
        ".map((d) => [d.dataset.name, d.dataset.statistic]);"
    )
    users = browser.driver.execute_script(names, "#curves")
    own = browser.driver.execute_script(names, "#own-series")
    values = {n for n, s in users + own if s == "value"}
    assert own and all(is_own_series(n, s, values) for n, s in own)  # the rule, in one place
    assert not any(is_own_series(n, s, values) for n, s in users)
    assert any(n.startswith(OWN_PREFIXES) for n, _ in own)  # training_loop/...
    assert any(s != "value" and "Loss" in n for n, s in own)  # the loss's max and min copies
    assert "loss" in users[0][0].casefold()  # the page opens on a loss
    assert (
        browser.driver.execute_script("return document.getElementById('own-series').open;") is False
    )
    own_names = {n for n, _ in own} - {n for n, _ in users}  # drawn lists names only
    assert not own_names & set(first)
    not_drawn = (
        "return [...document.querySelectorAll('#own-series .plot')]"
        ".filter((d) => d.querySelector('svg')).length;"
    )
    # scrolled to, closed: a poll of the charts later, nothing of them is drawn, not even SVG
    browser.driver.execute_script("document.getElementById('own-series').scrollIntoView();")
    polls = browser.driver.execute_script("return window.tensortapCurves.polls;")
    browser.until("return window.tensortapCurves.polls;", lambda n: n > polls + 1)
    assert browser.driver.execute_script(not_drawn) == 0
    browser.driver.execute_script(
        "const d = document.getElementById('own-series'); d.open = true; d.scrollIntoView();"
    )
    opened = browser.until(drawn, lambda v: own_names & set(v), timeout=60)
    assert own_names & set(opened)  # drawn once opened
    assert browser.errors() == []
