"""How a run's page is laid out, read from a real headless Chromium over a real server showing a
real job (an unmodified PyTorch script under ``tensortap run``): the verdict above the first
chart, tensortap's own series folded away and not drawn until opened, no two charts
overlapping at the widths people use, the same colours for a mode and a severity on the run
page and in the report."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tensortap.core._own_series import OWN_PREFIXES, is_own_series
from tests.helpers.boxes import overlapping
from tests.helpers.json_get import get_json as get

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
pytest.importorskip("torch")
pytest.importorskip("sklearn")

SCRIPT = Path(__file__).parents[1] / "jobs" / "outcome_torch_script.py"
WIDTHS = (1280, 1400, 1920)

#: The box of every chart drawn (a plotly figure, a chart's plain-SVG first paint, the
#: report's inline SVG), as drawn: the element's box grown by the SVGs it draws (plotly draws
#: past its container when it was sized before the container was).
BOXES = """
const drawn = [...document.querySelectorAll(arguments[0])].filter((d) => d.offsetParent !== null
  && (d.tagName.toLowerCase() === 'svg' || d.querySelector('svg')));
return drawn.map((d) => {
  const boxes = [d, ...d.querySelectorAll('svg')].map((e) => e.getBoundingClientRect())
    .filter((r) => r.width > 0 && r.height > 0);
  return {name: d.id || d.dataset.name || d.getAttribute('aria-label'),
    x0: Math.min(...boxes.map((r) => r.left)), x1: Math.max(...boxes.map((r) => r.right)),
    y0: Math.min(...boxes.map((r) => r.top + scrollY)),
    y1: Math.max(...boxes.map((r) => r.bottom + scrollY))};
});
"""


@pytest.fixture(scope="module")
def job_runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A runs directory holding one finished job of a digits MLP trained on shuffled labels
    (200 steps, evaluated every 40): a problem (accuracy at chance), warnings and advice."""
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
            "200",
            "--shuffle",
        ],
        cwd=where,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return where / "runs"


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


@pytest.mark.parametrize("width", WIDTHS)
def test_no_two_charts_overlap_on_the_run_page_or_the_report(
    job_runs, serve, browser, viewport, width
) -> None:
    viewport(width)
    dashboard = serve(job_runs)
    url = run_url(dashboard)
    browser.visit(url)
    both = (
        "const g = document.getElementById('health-gradients'),"
        " z = document.getElementById('health-zeros');"
        "return !!(g && z && g.querySelector('.main-svg') && z.querySelector('.main-svg'));"
    )
    browser.until(both, timeout=60)  # layer health's two charts, drawn
    browser.until("const c = window.tensortapCurves; return c ? c.drawn.length : 0;", bool)
    assert browser.driver.execute_script("return innerWidth;") == width
    boxes = browser.driver.execute_script(BOXES, "#main .plot, #main .js-plotly-plot")
    names = {b["name"] for b in boxes}
    assert {"health-gradients", "health-zeros"} <= names, names
    assert overlapping(boxes) == []
    health = [b for b in boxes if b["name"].startswith("health-")]
    main = browser.driver.execute_script(
        "const r = document.getElementById('main').getBoundingClientRect();"
        "return [r.left, r.right];"
    )
    assert all(main[0] - 0.5 <= b["x0"] and b["x1"] <= main[1] + 0.5 for b in health), (
        health,
        main,
    )  # inside the page's column, not past it
    browser.visit(url.replace("/run/", "/report/"))
    browser.until("return document.querySelectorAll('.charts svg').length;", bool)
    boxes = browser.driver.execute_script(BOXES, ".charts > svg, .js-plotly-plot")
    assert len(boxes) >= 3 and overlapping(boxes) == []
    assert browser.errors() == []


#: {label text: its computed colour}: the legends' lines (plotly's) or squares (the report's).
LEGEND_COLOURS = """
const out = {};
document.querySelectorAll('.legend .traces').forEach((t) => {
  const line = t.querySelector('.legendlines path, .legendpoints path');
  if (line) out[t.querySelector('.legendtext').textContent] = getComputedStyle(line).stroke;
});
document.querySelectorAll('.charts svg text').forEach((t) => {
  const square = t.previousElementSibling;
  if (square && square.tagName === 'rect' && square.getAttribute('width') === '10') {
    out[t.firstChild.textContent] = getComputedStyle(square).fill;
  }
});
return out;
"""
#: {"IssuesFound (advice)": [colour, weight], ...}: the rules table's status labels.
LABEL_COLOURS = """
const out = {};
document.querySelectorAll(arguments[0]).forEach((e) => {
  const s = getComputedStyle(e);
  out[e.textContent.trim()] = [s.color, s.fontWeight];
});
return out;
"""


def by_mode(colours: dict[str, str]) -> dict[str, set[str]]:
    """{mode: the colours of the lines labelled ``name (MODE)``}."""
    found: dict[str, set[str]] = {}
    for label, colour in colours.items():
        for mode in ("TRAIN", "EVAL"):
            if label.endswith(f" ({mode})"):
                found.setdefault(mode, set()).add(colour)
    return found


def test_a_mode_and_a_severity_have_the_same_colours_on_the_run_page_and_in_the_report(
    job_runs, serve, browser
) -> None:
    dashboard = serve(job_runs)
    url = run_url(dashboard)
    browser.visit(url)
    loss = (
        "const d = document.querySelector('#curves .plot[data-name=\"vitals/loss\"]');"
        "return !!(d && d.querySelector('.legend .traces'));"
    )
    browser.until(loss, timeout=60)
    page = by_mode(browser.driver.execute_script(LEGEND_COLOURS))
    rows = "return document.querySelectorAll('#rules tr').length;"
    browser.until(rows, lambda n: n > 1)
    page_labels = browser.driver.execute_script(LABEL_COLOURS, "#rules td span")
    browser.visit(url.replace("/run/", "/report/"))
    browser.until("return document.querySelectorAll('.charts svg').length;", bool)
    report = by_mode(browser.driver.execute_script(LEGEND_COLOURS))
    report_labels = browser.driver.execute_script(LABEL_COLOURS, "td.IssuesFound, td.NoData")
    assert set(page) == {"TRAIN", "EVAL"} and len(page["TRAIN"]) == len(page["EVAL"]) == 1
    assert page["TRAIN"] != page["EVAL"]
    assert report == page, (report, page)  # one colour per mode, the same on both
    graded = {k for k in page_labels if k.startswith("IssuesFound (")}
    assert {"IssuesFound (problem)", "IssuesFound (warning)", "IssuesFound (advice)"} <= graded
    for label in (*graded, "NoData"):
        assert report_labels[label] == page_labels[label], label
    assert page_labels["IssuesFound (advice)"] != page_labels["IssuesFound (problem)"]
    assert browser.errors() == []
