"""The dashboard at any size (issue 33): the runs list never waits for a run being read,
charts come from bucketed series (at most a few hundred buckets a line, whatever the run's
length), a page following a run gets only what is newer than the step it holds, requests are
capped with the rest offered, and memory stays bounded per run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest

import tensortap as tt
from tests.helpers.json_get import get_json as get

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

from tensortap.serve._data import MAX_SERIES

SRC = Path(__file__).resolve().parents[2] / "src"


def scalars(out: Path, steps: int, names: int, flush_every: int | None = None) -> tt.Hook:
    """A run of ``names`` scalars saved every step for ``steps`` steps; the hook is returned
    open (close it, or write more)."""
    hook = tt.Hook(out, save_config=tt.SaveConfig(save_interval=1))
    for step in range(steps):
        for i in range(names):
            hook.save_scalar(f"metric_{i:05d}", float(step + i))
        hook.next_step()
        if flush_every and step % flush_every == flush_every - 1:
            hook.flush()
    return hook


def ids(url: str) -> dict[str, str]:
    _, body = get(url + "api/runs")
    return {r["name"]: r["id"] for r in body["runs"]}


def test_the_runs_list_answers_while_a_long_run_is_being_read(tmp_path, serve) -> None:
    """The read of a run held its lock and the runs list took every run's lock: on a
    100k-step run the list first answered after 5.1 s. Now it reads the small documents only
    and answers while a read holds the run's locks (held here, so the read never ends first;
    a list that took them would wait until the request's timeout). How long it takes during a
    real read is measured by ``bench/bench_serve.py --runs-list``, not asserted here."""
    scalars(tmp_path / "runs" / "big", steps=20_000, names=10).close()
    scalars(tmp_path / "runs" / "small", steps=3, names=1).close()
    dashboard = serve(tmp_path / "runs", warm=False)  # a fresh server: nothing read yet
    runs = {run.name: run for run in dashboard.catalog.runs()}
    with runs["big"].lock, runs["big"].trial_lock:  # a read of the long run going on
        for _ in range(5):
            status, body = get(dashboard.url + "api/runs", timeout=30)
            assert status == 200 and len(body["runs"]) == 2
    dashboard.stop()
    # and the runs list says what the read found (the last step, from the data reads)
    dashboard = serve(tmp_path / "runs", warm=False)
    _, body = get(dashboard.url + "api/runs")
    rows = {r["name"]: r for r in body["runs"]}
    assert rows["big"]["status"] == "Ended" and rows["big"]["last_step"] == 19_999
    assert rows["small"]["last_step"] == 2 and rows["small"]["started"] is not None


def test_a_page_following_a_run_gets_only_what_is_newer_than_its_cursor(tmp_path, serve) -> None:
    from tensortap.serve._series import BUCKETS

    hook = scalars(tmp_path / "live", steps=3000, names=2, flush_every=1000)
    hook.flush()
    dashboard = serve(tmp_path / "live", warm=False)
    curves = f"{dashboard.url}api/run/{ids(dashboard.url)['live']}/curves"
    _, first = get(curves)
    assert first["last_step"] == 2999 and [s["name"] for s in first["series"]] == [
        "metric_00000",
        "metric_00001",
    ]
    for line in first["series"]:  # bucketed: a few hundred buckets for 3,000 steps
        assert line["points"] == 3000 and len(line["x"]) <= 2 * BUCKETS
    _, none = get(curves + "?after=2999")  # nothing newer: nothing sent
    assert none["series"] == [] and none["last_step"] == 2999
    for step in range(3000, 3005):
        hook.save_scalar("metric_00000", float(step))
        hook.save_scalar("metric_00001", -1.0)
        hook.next_step()
    hook.flush()
    deadline = time.monotonic() + 30
    while True:
        _, new = get(curves + "?after=2999")
        if new["last_step"] == 3004 or time.monotonic() > deadline:
            break
    assert new["last_step"] == 3004
    zero, one = new["series"]
    assert zero["x"] == [3000, 3001, 3002, 3003, 3004] and zero["points"] == 5
    assert zero["y"] == [3000.0, 3001.0, 3002.0, 3003.0, 3004.0] and one["y"] == [-1.0] * 5
    _, stat = get(curves + "?after=3002&name=metric_00001&stat=value")
    assert [(s["name"], s["x"]) for s in stat["series"]] == [("metric_00001", [3003, 3004])]
    status, body = get(curves + "?after=x")
    assert status == 422 and "whole number" in body["error"]
    hook.close()


CHILD = """
import sys
from tensortap.serve import start
dashboard = start([sys.argv[1]], port=0, warm=False)
print(dashboard.url, flush=True)
sys.stdin.read()
"""


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc")
def test_a_run_of_10000_series_opens_a_page_of_charts_under_500_mb_with_more_offered(
    tmp_path,
) -> None:
    scalars(tmp_path / "wide", steps=20, names=10_000).close()
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]),
    }
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(tmp_path / "wide")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
        text=True,
    )
    try:
        assert child.stdout is not None
        url = child.stdout.readline().strip()
        (ident,) = ids(url).values()
        _, listed = get(f"{url}api/run/{ident}/series")  # what the page asks first
        _, shown = get(f"{url}api/run/{ident}/curves?limit=24")  # the charts in view
        assert listed["total"] == 10_000 and len(listed["charts"]) == MAX_SERIES
        assert listed["charts"][0] == {
            "name": "metric_00000",
            "statistic": "value",
            "modes": ["GLOBAL"],  # no mode set: the hook's GLOBAL
            "own": False,  # the user's series, not tensortap's own bookkeeping
        }
        assert len(shown["series"]) == 24 and shown["truncated"] and shown["total"] == 10_000
        assert peak_rss_mb(child.pid) < 500
        _, page = get(f"{url}api/run/{ident}/series?offset=9900")  # "100 more": the last page
        assert page["total"] == 10_000 and len(page["charts"]) == 100
        assert page["charts"][-1]["name"] == "metric_09999"
        with urllib.request.urlopen(f"{url}api/run/{ident}/curves", timeout=60) as response:
            raw = response.read()
        assert len(json.loads(raw)["series"]) == MAX_SERIES and len(raw) < 200 * 1024
        status, body = get(f"{url}api/run/{ident}/series?limit={MAX_SERIES + 1}")
        assert status == 422 and "next page" in body["error"]
    finally:
        child.kill()
        child.wait()


def test_answers_kept_per_run_stay_under_their_byte_limit() -> None:
    from tensortap.core._memory_budget import MemoryBudget

    cache = MemoryBudget(1000).cache()
    for i in range(100):
        cache.put(i, [i] * 10, 100)
        assert cache.size <= 1000
    assert len(cache) == 10 and cache.get(99) == [99] * 10 and cache.get(0) is None
    cache.put("huge", None, 5000)  # larger than the limit: not kept
    assert cache.get("huge") is None and cache.size <= 1000


def test_long_runs_are_bucketed_keeping_extremes_and_nan_runs(tmp_path, serve, monkeypatch) -> None:
    from tensortap.serve import _data as data
    from tensortap.serve._series import BUCKETS

    hook = tt.Hook(tmp_path / "r", save_config=tt.SaveConfig(save_interval=1))
    values = np.sin(np.arange(20_000) / 500.0)
    values[13_337] = -50.0
    values[12_000:12_100] = np.nan
    values[15_000] = np.inf  # one bad step among finite ones
    for value in values:
        hook.save_scalar("loss", float(value))
        hook.next_step()
    hook.close()
    dashboard = serve(tmp_path / "r", warm=False)
    _, body = get(f"{dashboard.url}api/run/{ids(dashboard.url)['r']}/curves")
    (loss,) = body["series"]  # short enough to be read as saved: everything exact
    assert loss["points"] == 20_000 and len(loss["x"]) <= 2 * BUCKETS + 2
    assert loss["x"][loss["y"].index(-50.0)] == 13_337
    assert loss["gaps"] == [[12_000, 12_099, "nan"], [15_000, 15_000, "inf"]]
    # longer answers come bucketed by the series path: extremes kept, NaN runs marked at
    # the buckets that end in them (a bucket here is 34 steps)
    monkeypatch.setattr(data, "RAW_POINTS", 0)
    dashboard = serve(tmp_path / "r", warm=False)
    _, body = get(f"{dashboard.url}api/run/{ids(dashboard.url)['r']}/curves")
    (loss,) = body["series"]
    assert loss["points"] == 20_000 and len(loss["x"]) <= 2 * BUCKETS
    assert min(loss["y"]) == -50.0 and max(loss["y"]) == pytest.approx(1.0, abs=1e-4)
    assert abs(loss["x"][loss["y"].index(-50.0)] - 13_337) <= 34
    nan = [g for g in loss["gaps"] if g[2] == "nan"]
    assert nan and 12_000 - 34 <= nan[0][0] <= nan[-1][1] < 12_100 + 34


def curves_requests(browser) -> list[str]:
    """The curves requests the page made so far (their query strings)."""
    return browser.driver.execute_script(
        "return performance.getEntriesByType('resource').map(e => e.name)"
        ".filter(n => n.includes('/curves')).map(n => n.split('?')[1] || '');"
    )


def test_the_page_asks_only_for_charts_on_screen_and_offers_the_rest(
    tmp_path, serve, browser
) -> None:
    scalars(tmp_path / "wide", steps=5, names=300).close()
    dashboard = serve(tmp_path / "wide", warm=False)
    browser.visit(f"{dashboard.url}run/{ids(dashboard.url)['wide']}")
    state = (
        "const c = window.tensortapCurves; return c ? [c.listed, c.total, c.fetched.length] : null;"
    )
    listed, total, fetched = browser.until(state, lambda v: v is not None and v[2] > 0)
    assert (listed, total) == (200, 300)
    assert fetched < 20  # the charts in view (and just below), not the 200 listed
    button = (
        "const b = document.getElementById('curves-more'); return b.hidden ? null : b.textContent;"
    )
    assert browser.until(button) == "100 more series"
    asked = curves_requests(browser)
    assert all(q.count("name=") <= 50 for q in asked)  # capped per request
    # scrolled to the end: the last listed charts are asked for, the first ones let go
    browser.driver.execute_script(
        "document.getElementById('curves-more').scrollIntoView({block: 'end'});"
    )
    last = "return (window.tensortapCurves.drawn || []).includes('metric_00199');"
    assert browser.until(last)
    drawn = browser.driver.execute_script("return window.tensortapCurves.drawn;")
    assert "metric_00000" not in drawn and len(drawn) < 20  # purged off screen: a bounded grid
    browser.driver.find_element("id", "curves-more").click()
    assert browser.until(state, lambda v: v[0] == 300)[:2] == [300, 300]
    assert browser.until(button, lambda v: v is None) is None  # nothing more to offer
    assert browser.errors() == []


def test_the_page_follows_a_live_run_from_its_cursor_without_refetching(
    tmp_path, serve, browser
) -> None:
    from tensortap.serve._series import BUCKETS

    hook = scalars(tmp_path / "live", steps=2000, names=2, flush_every=500)
    hook.flush()
    dashboard = serve(tmp_path / "live", warm=False)
    browser.visit(f"{dashboard.url}run/{ids(dashboard.url)['live']}")
    points = (
        "const c = window.tensortapCurves;"
        "return c ? c.series.filter(s => s.name === 'metric_00000').map(s => s.points) : [];"
    )
    assert browser.until(points, lambda v: v == [2000]) == [2000]
    first = browser.driver.execute_script(
        "return window.tensortapCurves.series.find(s => s.name === 'metric_00000').x.length;"
    )
    assert first <= 2 * BUCKETS  # bucketed, not 2,000 points
    for step in range(2000, 2010):
        hook.save_scalar("metric_00000", -5.0 if step == 2005 else float(step))
        hook.save_scalar("metric_00001", 0.0)
        hook.next_step()
    hook.flush()
    assert browser.until(points, lambda v: v == [2010], timeout=60) == [2010]
    line = browser.driver.execute_script(
        "return window.tensortapCurves.series.find(s => s.name === 'metric_00000');"
    )
    assert line["x"][-10:] == list(range(2000, 2010)) and line["y"][-5] == -5.0
    asked = curves_requests(browser)
    whole = [q for q in asked if "after=" not in q]
    assert len(whole) == 1, asked  # one first paint; every later request from the cursor
    assert any("after=1999" in q for q in asked)
    hook.close()
    assert browser.errors() == []


def test_zooming_a_chart_asks_for_that_range_and_gets_every_point(tmp_path, serve, browser) -> None:
    hook = tt.Hook(tmp_path / "long", save_config=tt.SaveConfig(save_interval=1))
    for step in range(20_000):
        hook.save_scalar("loss", 7.0 if step == 12_345 else 1.0)
        hook.next_step()
    hook.close()
    dashboard = serve(tmp_path / "long", warm=False)
    browser.visit(f"{dashboard.url}run/{ids(dashboard.url)['long']}")
    held = (
        "const c = window.tensortapCurves;"
        "const s = c && c.series.find(s => s.name === 'loss'); return s ? s.x.length : 0;"
    )
    assert 0 < browser.until(held) <= 1200  # buckets
    browser.until(
        "const d = document.querySelector('#curves [data-name=loss]'); return !!(d && d.layout);"
    )
    browser.driver.execute_script(
        "Plotly.relayout(document.querySelector('#curves [data-name=loss]'),"
        " {'xaxis.range': [12300, 12400]});"
    )
    line = (
        "const s = window.tensortapCurves.series.find(s => s.name === 'loss');"
        "return s && s.x.length <= 101 ? [s.x[0], s.x[s.x.length - 1], s.y[45]] : null;"
    )
    assert browser.until(line) == [
        12300,
        12400,
        7.0,
    ]  # every step of the range, the spike at its own
    assert any("x0=12300" in q and "x1=12400" in q for q in curves_requests(browser))
    assert browser.errors() == []


def test_a_chart_never_waits_for_a_read_of_the_runs_trial(tmp_path, serve) -> None:
    """Layer health, TensorPlot and embeddings read the trial (its index) under the run's
    lock, and the charts took the same lock: a first paint waited 1.2 s behind the heat map
    of a 100k-step run. Now the trial's reads hold their own lock."""
    scalars(tmp_path / "r", steps=50, names=2).close()
    dashboard = serve(tmp_path / "r", warm=False)
    ident = ids(dashboard.url)["r"]
    (run,) = dashboard.catalog.runs()
    with run.trial_lock:  # a read of the trial going on (a heat map, say); a chart that took
        # the lock would wait until the request's timeout
        status, body = get(f"{dashboard.url}api/run/{ident}/curves", timeout=10)
        assert status == 200 and len(body["series"]) == 2
        status, listed = get(f"{dashboard.url}api/run/{ident}", timeout=10)
        assert status == 200 and listed["last_step"] == 49


def test_a_nan_inside_a_long_bucket_is_marked() -> None:
    """A bucket whose last value is finite but which holds a NaN is drawn with a gap (a long
    run's chart came from buckets that only said the last value)."""
    import numpy as np

    from tensortap.core._modes import ModeKeys
    from tensortap.serve._data import _line
    from tensortap.trials._series import SeriesKey, bucketed

    steps = np.arange(1000, dtype=np.int64)
    values = np.ones(1000)
    values[455] = np.nan
    cols = ("first_step", "last_step", "count", "min", "max", "last", "nonfinite")
    got = dict(zip(cols, bucketed(steps, values, 0, 1000, 10), strict=True))
    line = _line(SeriesKey("loss", "value", ModeKeys.TRAIN, "worker_0"), got)
    assert line["gaps"] == [[400, 499, "nonfinite"]]


def test_layer_health_from_saved_norms_opens_no_trial(tmp_path, serve, monkeypatch) -> None:
    """Gradients saved as their l2 norm (no activations): the heat map comes from the series
    path, as the trial would draw it, and the run's trial index is never opened (a 10^6-step
    run's index is gigabytes: the first paint took 7.4 s and 5.9 GB)."""
    from tensortap.serve import _data as data

    hook = tt.Hook(
        tmp_path / "norms",
        save_config=tt.SaveConfig(save_interval=1),
        include_collections=["gradients", "losses"],
    )
    hook.get_collection("gradients").reduction_config = tt.ReductionConfig(norms=["l2"])
    rng = np.random.default_rng(0)
    for step in range(40):
        hook.save_tensor("loss", np.float32(1 / (1 + step)), collections="losses")
        for layer in ("fc1", "fc2"):
            grad = rng.normal(size=6) * (0.0 if layer == "fc2" and step > 30 else 1.0)
            hook.save_tensor(f"{layer}.weight_grad", grad, collections="gradients")
        hook.next_step()
    hook.close()
    dashboard = serve(tmp_path / "norms", warm=False)
    health = f"{dashboard.url}api/run/{ids(dashboard.url)['norms']}/health"
    opened = []
    monkeypatch.setattr(data, "create_trial", lambda *a, **k: opened.append(a) or 1 / 0)  # type: ignore[func-returns-value]
    _, quick = get(health)
    assert opened == []
    assert quick["gradient_names"] == ["fc1.weight_grad", "fc2.weight_grad"]
    trial = tt.create_trial(tmp_path / "norms")
    assert quick["steps"] == list(range(40))
    for row, name in enumerate(quick["gradient_names"]):
        expected = [trial.tensor(name).reduction_value(s, "l2") for s in range(40)]
        assert np.allclose(quick["gradient_norms"][row], expected)
    assert quick["gradient_norms"][1][-1] == 0.0  # a dead layer stays an exact zero


def test_the_first_charts_are_drawn_before_plotly_js_is_started(tmp_path, serve, browser) -> None:
    """Starting plotly.js holds the page's thread for a second or more: the charts on screen
    are drawn first as plain SVG (names as text, never markup), then by plotly."""
    hook = tt.Hook(tmp_path / "quick", save_config=tt.SaveConfig(save_interval=1))
    for step in range(3000):
        hook.save_scalar("<b>loss</b>", 1 / (1 + step))
        hook.next_step()
    hook.close()
    dashboard = serve(tmp_path / "quick", warm=False)
    browser.visit(f"{dashboard.url}run/{ids(dashboard.url)['quick']}")
    seen = (
        "const q = document.querySelector('.plot svg.quick');"
        "return q && q.querySelector('polyline') ? [!!window.Plotly, q.textContent] : null;"
    )
    plotly_loaded, text = browser.until(seen)
    assert plotly_loaded is False  # drawn before plotly.js was even loaded
    assert "<b>loss</b>" in text  # the name as text
    plotted = (
        "return [...document.querySelectorAll('.js-plotly-plot')]"
        ".some((p) => p.data && p.data.some((t) => t.x && t.x.length));"
    )
    assert browser.until(plotted)
    assert browser.errors() == []


def test_the_vital_signs_are_the_first_charts_of_a_run(tmp_path, serve) -> None:
    """A run's page opens on its vital signs (issue 43): the loss of every step, then the
    gradient norm and the learning rates, before any other loss, metric or tensor."""
    hook = tt.Hook(tmp_path / "r", save_config=tt.SaveConfig(save_interval=1))
    for step in range(5):
        hook.save_scalar("accuracy", 0.5)
        hook.save_scalar("loss", 1.0 / (step + 1), "losses")
        hook.save_vitals(
            {"step_time": 0.01, "lr/1": 0.2, "lr": 0.1, "grad_norm": 2.0, "loss": 1.0 / (step + 1)}
        )
        hook.next_step()
    hook.close()
    dashboard = serve(tmp_path / "r", warm=False)
    ident = ids(dashboard.url)["r"]
    _, listed = get(f"{dashboard.url}api/run/{ident}/series")
    names = [c["name"] for c in listed["charts"]]
    assert names[:5] == [
        "vitals/loss",
        "vitals/grad_norm",
        "vitals/lr",
        "vitals/lr/1",
        "vitals/step_time",
    ]
    assert names[5:] == ["loss", "accuracy"]
