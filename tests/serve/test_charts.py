"""Charts as a TensorBoard user expects them on a run's page (issue 47), read from a real
headless Chromium over a real server: moving the smoothing slider draws TensorBoard's debiased
EMA over the raw line (the raw one kept, faint, behind), switching the y axis to log draws the
same points on a log scale (read from the SVG path plotly drew), every chart shares one
x-range (a series saved at a few steps is drawn over the whole run, not its own 0-60), and
the x axis can be the wall time the steps were saved at."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import tensortap as tt
from tensortap.trials._series import SeriesReader
from tests.helpers.json_get import get_json as get

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

STEPS = 300


def write_trial(path: Path) -> None:
    """A loss that wobbles (smoothing has something to smooth), a learning rate decaying
    over two decades (a straight line on a log axis, a curve on a linear one), and an
    accuracy saved at three early steps only."""
    with tt.Hook(path, save_config=tt.SaveConfig(save_interval=1)) as hook:
        for step in range(STEPS):
            hook.save_scalar("loss", 1.0 + 0.5 * math.sin(1.3 * step) + 1.0 / (1 + step), "losses")
            hook.save_scalar("lr", 10.0 * math.exp(-step * math.log(100) / STEPS), "scalars")
            if step in (10, 20, 30):
                hook.save_scalar("accuracy", step / 100, "metrics")
            hook.next_step()


def tensorboard_smoothing(values: list[float], weight: float) -> list[float]:
    """TensorBoard's smoothing, written from its formula (a debiased EMA)."""
    out, last = [], 0.0
    for n, value in enumerate(values, start=1):
        last = last * weight + (1 - weight) * value
        out.append(last / (1 - weight**n))
    return out


#: A chart's traces as plotly holds them (by the chart's series name).
TRACES = """
const d = [...document.querySelectorAll('#curves .plot')].find((p) => p.dataset.name === NAME);
if (!d || !d.data || !d._fullLayout) return null;
return {traces: d.data.map((t) => ({meta: t.meta || null, y: t.y, x: t.x, opacity: t.opacity ?? 1})),
        ytype: d._fullLayout.yaxis.type, xtype: d._fullLayout.xaxis.type,
        xrange: d._fullLayout.xaxis.range,
        paths: [...d.querySelectorAll('.scatterlayer .trace path.js-line')].map((p) => p.getAttribute('d'))};
"""


def traces(browser, name: str, check: Any = bool) -> dict[str, Any]:
    script = f"const NAME = {json.dumps(name)};" + TRACES
    return browser.until(script, check, timeout=60)


def vertices(path: str) -> np.ndarray:
    """The (x, y) pixels of an SVG path made of M and L commands."""
    numbers = [float(v) for v in re.findall(r"-?\d+(?:\.\d+)?(?:e-?\d+)?", path)]
    return np.asarray(numbers).reshape(-1, 2)


def straightness(points: np.ndarray) -> float:
    """R^2 of the pixels' y against their x: 1 for a straight line."""
    x, y = points[:, 0], points[:, 1]
    return float(np.corrcoef(x, y)[0, 1] ** 2)


def test_smoothing_log_scale_and_one_x_range_change_the_drawn_data(
    tmp_path: Path, serve, browser
) -> None:
    write_trial(tmp_path / "runs" / "wobbly")
    dashboard = serve(tmp_path / "runs")
    _, body = get(dashboard.url + "api/runs")
    page = browser.visit(f"{dashboard.url}run/{body['runs'][0]['id']}")

    loss = traces(browser, "loss", lambda v: v and len(v["traces"][0]["y"]) == STEPS)
    (raw,) = [t for t in loss["traces"] if t["meta"] is None]
    assert raw["opacity"] == 1  # no smoothing until asked
    page.execute_script(
        "const s = document.getElementById('smoothing'); s.value = '0.9';"
        "s.dispatchEvent(new Event('input'));"
    )
    loss = traces(
        browser, "loss", lambda v: v and any(t["meta"] == "smoothed" for t in v["traces"])
    )
    by_meta = {t["meta"]: t for t in loss["traces"]}
    assert by_meta["raw"]["y"] == raw["y"] and by_meta["raw"]["opacity"] < 0.5  # faint behind
    assert by_meta["smoothed"]["y"] == pytest.approx(tensorboard_smoothing(raw["y"], 0.9))
    assert np.std(np.diff(by_meta["smoothed"]["y"])) < np.std(np.diff(raw["y"])) / 3
    smoothed_path, raw_path = loss["paths"][1], loss["paths"][0]
    assert smoothed_path != raw_path  # drawn, not only computed
    page.execute_script(  # back to the raw line
        "const s = document.getElementById('smoothing'); s.value = '0';"
        "s.dispatchEvent(new Event('input'));"
    )
    traces(browser, "loss", lambda v: v and [t["meta"] for t in v["traces"]][:1] == [None])

    page.execute_script(
        "[...document.querySelectorAll('#curves .plot')].find((p) => p.dataset.name === 'lr')"
        ".scrollIntoView();"
    )
    linear = traces(browser, "lr", lambda v: v and v["paths"] and len(v["traces"][0]["y"]) == STEPS)
    assert linear["ytype"] == "linear"
    assert straightness(vertices(linear["paths"][0])) < 0.9  # an exponential decay: a curve
    page.execute_script(
        "const s = document.getElementById('y-scale'); s.value = 'log';"
        "s.dispatchEvent(new Event('change'));"
    )
    logged = traces(browser, "lr", lambda v: v and v["ytype"] == "log" and v["paths"])
    assert logged["paths"][0] != linear["paths"][0]
    assert straightness(vertices(logged["paths"][0])) > 0.999  # the same points, a line now
    assert logged["traces"][0]["y"] == linear["traces"][0]["y"]  # the data, not a copy of it

    page.execute_script(
        "[...document.querySelectorAll('#curves .plot')].find((p) => p.dataset.name === "
        "'accuracy').scrollIntoView();"
    )
    accuracy = traces(browser, "accuracy", lambda v: v and v["traces"][0]["x"] == [10, 20, 30])
    # three points drawn over the whole run, as the loss is: one x-range for every chart
    assert accuracy["xrange"] == pytest.approx(logged["xrange"])
    assert accuracy["xrange"][0] <= 0 and accuracy["xrange"][1] >= STEPS - 1

    # over wall time: the same points at the times they were saved (a date axis, in ms)
    browser.until(
        "return !document.querySelector('#x-axis option[value=wall]').disabled;", timeout=30
    )
    page.execute_script(
        "const s = document.getElementById('x-axis'); s.value = 'wall';"
        "s.dispatchEvent(new Event('change'));"
    )
    page.execute_script(
        "[...document.querySelectorAll('#curves .plot')].find((p) => p.dataset.name === 'loss')"
        ".scrollIntoView();"
    )
    timed = traces(browser, "loss", lambda v: v and v["xtype"] == "date" and v["paths"])
    saved = SeriesReader(str(tmp_path / "runs" / "wobbly")).series(["loss"], statistic="value")
    wall_ms = np.asarray(saved["wall_time"], dtype=np.float64) * 1000
    x = np.asarray(timed["traces"][0]["x"], dtype=np.float64)
    assert len(x) == STEPS and np.all(np.diff(x) >= 0)
    assert x == pytest.approx(wall_ms, abs=1.0)  # each step at its own time, within 1 ms
    assert timed["paths"][0] != logged["paths"][0]
    assert browser.errors() == []


def test_the_x_axis_can_be_the_epoch_where_the_run_saved_it(tmp_path: Path, serve, browser) -> None:
    """A run that saved its epoch (as a Trainer logs ``epoch``: fractional, every 10 steps,
    50 steps an epoch) can be drawn over epochs: each step at its epoch, on the line through
    the saved ones; a run without one is not offered the choice."""
    with tt.Hook(tmp_path / "runs" / "epochs", save_config=tt.SaveConfig(save_interval=1)) as hook:
        for step in range(STEPS):
            hook.save_scalar("loss", 2.0 / (1 + step), "losses")
            if step % 10 == 0:
                hook.save_scalar("epoch", step / 50, "metrics")
            hook.next_step()
    write_trial(tmp_path / "runs" / "wobbly")
    dashboard = serve(tmp_path / "runs")
    _, body = get(dashboard.url + "api/runs")
    ids = {r["name"]: r["id"] for r in body["runs"]}

    page = browser.visit(f"{dashboard.url}run/{ids['wobbly']}")
    traces(browser, "loss", lambda v: v and len(v["traces"][0]["y"]) == STEPS)
    browser.until(  # the clock came (wall time offered): the epoch is still not
        "return !document.querySelector('#x-axis option[value=wall]').disabled;", timeout=30
    )
    assert page.execute_script(
        "return document.querySelector('#x-axis option[value=epoch]').disabled;"
    )

    page = browser.visit(f"{dashboard.url}run/{ids['epochs']}")
    steps = traces(browser, "loss", lambda v: v and len(v["traces"][0]["y"]) == STEPS)
    browser.until(
        "return !document.querySelector('#x-axis option[value=epoch]').disabled;", timeout=30
    )
    page.execute_script(
        "const s = document.getElementById('x-axis'); s.value = 'epoch';"
        "s.dispatchEvent(new Event('change'));"
    )
    epochs = traces(browser, "loss", lambda v: v and v["traces"][0]["x"][-1] < 10 and v["paths"])
    x = np.asarray(epochs["traces"][0]["x"], dtype=np.float64)
    assert x == pytest.approx(np.asarray(steps["traces"][0]["x"]) / 50, abs=1e-9)
    assert epochs["traces"][0]["y"] == steps["traces"][0]["y"]
    title = page.execute_script(
        "const d = [...document.querySelectorAll('#curves .plot')]"
        ".find((p) => p.dataset.name === 'loss'); return d._fullLayout.xaxis.title.text;"
    )
    assert title == "epoch"
    assert browser.errors() == []
