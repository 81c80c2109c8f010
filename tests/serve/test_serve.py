"""The live dashboard (``tensortap serve``), in a real headless Chromium over a real server:
runs listed, a live job's new points and findings appear while the page is open, NaN runs and
dead layers drawn truthfully, runs compared, trials on the local S3 server, the token."""

from __future__ import annotations

import json
import sys
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest

import tensortap as tt
from tests.helpers.json_get import get_json as get

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
from tensortap.exceptions import InvalidConfigError
from tensortap.jobs import Rule, TrainingJob
from tensortap.rules import rule_configs
from tensortap.serve import start
from tensortap.serve._series import BUCKETS
from tensortap.serve._server import _is_local

SCRIPT = Path(__file__).parents[1] / "jobs" / "train_script.py"
CURVES = "return window.tensortapCurves || null;"


def write_trial(
    out: Path | str, steps: int = 12, nan_from: int | None = None, dead: bool = False
) -> None:
    hook = tt.Hook(
        out,
        save_config=tt.SaveConfig(save_interval=1),
        include_collections=["losses", "gradients", "relu_activations"],
    )
    for step in range(steps):
        hook.set_mode(tt.modes.TRAIN)
        loss = np.nan if nan_from is not None and step >= nan_from else 1.0 / (step + 1)
        hook.save_tensor("loss", np.float32(loss), collections="losses")
        hook.save_tensor("gradient/alive", np.full(4, 0.5), collections="gradients")
        if dead:
            hook.save_tensor("gradient/dead", np.zeros(4), collections="gradients")
        hook.save_tensor(
            "relu_output_0", np.ones((2, 4), np.float32), collections="relu_activations"
        )
        hook.next_step()
        if step % 5 == 4:
            hook.set_mode(tt.modes.EVAL)
            hook.save_tensor("loss", np.float32(0.9), collections="losses")
            hook.next_step()
    hook.close()


def run_ids(dashboard) -> dict[str, str]:
    _, body = get(dashboard.url + "api/runs")
    return {r["name"]: r["id"] for r in body["runs"]}


def test_runs_page_lists_runs_and_new_ones_appear_without_reload(tmp_path, serve, browser) -> None:
    write_trial(tmp_path / "runs" / "first")
    dashboard = serve(tmp_path / "runs")
    page = browser.visit(dashboard.url)
    rows = "return [...document.querySelectorAll('#runs tbody tr a')].map(a => a.textContent);"
    assert browser.until(rows, lambda v: v == ["first"]) == ["first"]
    write_trial(tmp_path / "runs" / "second")
    assert sorted(browser.until(rows, lambda v: len(v) == 2)) == ["first", "second"]
    page.find_element("id", "filter").send_keys("seco")
    assert browser.until(rows, lambda v: v == ["second"]) == ["second"]
    assert browser.errors() == []


def test_a_live_job_gets_new_points_and_its_finding_while_the_page_is_open(
    tmp_path, serve, browser
) -> None:
    go = tmp_path / "go"
    job = TrainingJob(
        command=[
            sys.executable,
            str(SCRIPT),
            "--steps",
            "40",
            "--nan-at",
            "20",
            "--wait-for",
            str(go),
        ],
        output_path=tmp_path / "runs",
        job_name="live",
        rules=[Rule.builtin(rule_configs.exploding_tensor())],
    )
    job.fit(wait=False)
    try:
        dashboard = serve(tmp_path / "runs")
        ident = run_ids(dashboard).get("live")
        assert ident is not None
        browser.visit(f"{dashboard.url}run/{ident}")
        count = "const c = window.tensortapCurves; return c && c.series.length ? c.series[0].points : 0;"
        first = browser.until(count, lambda n: n >= 1, timeout=60)
        assert browser.driver.execute_script(CURVES)["findings"] == []  # nothing fired yet
        go.touch()  # training goes on, and its loss turns NaN
        assert browser.until(count, lambda n: n > first, timeout=60) > first  # new points
        marks = (  # the loss's chart, first on the page
            "const d = document.querySelector('#curves .plot');"
            "return d && d.layout ? d.layout.annotations.map(a => a.text) : [];"
        )
        shown = browser.until(marks, lambda v: any("ExplodingTensor" in t for t in v), timeout=90)
        assert any(t.startswith("NaN from step") for t in shown)  # the NaN itself, marked
        finding = browser.driver.execute_script(CURVES)["findings"][0]
        assert finding["rule"] == "ExplodingTensor" and finding["severity"] == "problem"
        timeline = "return document.getElementById('timeline').textContent;"
        assert "rule_fired" in browser.until(timeline, lambda t: "rule_fired" in t)
        verdict = "return document.getElementById('diagnosis').textContent;"
        shown = browser.until(verdict, lambda t: "NaN or infinite values appear" in t)
        assert "try: find the first operation that made them" in shown  # the cause and its fix
        assert browser.errors() == []
    finally:
        go.touch()
        job.stop()
        job.wait(timeout=60, logs=False)


def test_nan_run_and_dead_layer_are_drawn_truthfully(tmp_path, serve, browser) -> None:
    write_trial(tmp_path / "nan", steps=10, nan_from=0, dead=True)  # every TRAIN loss NaN
    files = {p: p.stat().st_mtime_ns for p in (tmp_path / "nan").rglob("*")}
    dashboard = serve(tmp_path / "nan")
    browser.visit(f"{dashboard.url}run/{run_ids(dashboard)['nan']}")
    marks = (
        "const d = document.querySelector('#curves [data-name=loss]');"
        "return d && d.layout ? [d.layout.annotations.map(a => a.text),"
        " d.layout.shapes.filter(s => s.type === 'rect').length] : null;"
    )
    texts, bands = browser.until(marks, lambda v: v is not None and v[1] > 0)
    assert "NaN from step 0" in texts and bands >= 1
    zeros = (
        "const d = document.getElementById('health-gradients');"
        "if (!d || !d.data) return null;"
        "const t = d.data.find(t => t.name === 'exactly 0');"
        "return [d.data[0].y, t.z.map(row => row.filter(v => v === 1).length)];"
    )
    names, dead = browser.until(zeros, lambda v: v is not None)
    assert dead[names.index("gradient/dead")] == 10 and dead[names.index("gradient/alive")] == 0
    share = (
        "const d = document.getElementById('health-zeros');"
        "return d && d.data ? [d.data[0].zmin, d.data[0].zmax] : null;"
    )
    assert browser.until(share) == [0, 100]
    assert browser.errors() == []
    link = "return document.querySelector('#links a').getAttribute('href');"
    with urllib.request.urlopen(dashboard.url + browser.until(link).lstrip("/")) as report:
        assert b"<title>Training report: nan</title>" in report.read()  # made in memory
    assert {p: p.stat().st_mtime_ns for p in (tmp_path / "nan").rglob("*")} == files  # untouched


def test_compare_overlays_runs_by_step_with_their_rules_side_by_side(
    tmp_path, serve, browser
) -> None:
    write_trial(tmp_path / "runs" / "a")
    write_trial(tmp_path / "runs" / "b", nan_from=6)
    dashboard = serve(tmp_path / "runs")
    ids = run_ids(dashboard)
    browser.visit(f"{dashboard.url}compare?ids={ids['a']},{ids['b']}")
    traces = (
        "const d = document.querySelector('[id^=\"compare-0\"]');"
        "return d && d.data ? d.data.map(t => t.name) : null;"
    )
    assert sorted(browser.until(traces)) == ["a: loss", "b: loss"]  # in the chart "loss (TRAIN)"
    heads = "return [...document.querySelectorAll('#rules th a')].map(a => a.textContent);"
    assert browser.until(heads, lambda v: len(v) == 2) == ["a", "b"]
    asked = (  # each run's curves asked for whole once, then from its last step (after=)
        "return performance.getEntriesByType('resource').map(e => e.name)"
        ".filter(n => n.includes('/curves')).map(n => n.split('/api/run/')[1]);"
    )
    later = browser.until(asked, lambda v: sum("after=" in q for q in v) >= 2)
    for ident in (ids["a"], ids["b"]):
        mine = [q for q in later if q.startswith(ident)]
        assert mine[0] == f"{ident}/curves" and all("after=" in q for q in mine[1:]), mine
    assert sorted(browser.until(traces)) == ["a: loss", "b: loss"]  # still drawn
    assert browser.errors() == []


def test_a_trial_on_s3_is_served_like_a_local_one(s3_bucket, serve, browser) -> None:
    write_trial(f"s3://{s3_bucket}/team/run1", steps=6)
    dashboard = serve(f"s3://{s3_bucket}/team")
    ident = run_ids(dashboard)["run1"]
    browser.visit(f"{dashboard.url}run/{ident}")
    count = "const c = window.tensortapCurves; return c ? c.series.map(s => s.points) : null;"
    assert sorted(browser.until(count, lambda v: v)) == [1, 6]  # EVAL, TRAIN
    assert browser.errors() == []


def test_the_token_is_required_when_one_is_set(tmp_path, serve) -> None:
    write_trial(tmp_path / "t", steps=3)
    dashboard = serve(tmp_path / "t", token="s3cret")
    base = dashboard.url.split("?")[0]
    assert dashboard.url.endswith("?token=s3cret")
    assert get(base + "api/runs")[0] == 401
    request = urllib.request.Request(base + "api/runs", headers={"Cookie": "tensortap_token=no"})
    with pytest.raises(urllib.error.HTTPError):
        urllib.request.urlopen(request, timeout=30)
    status, body = get(base + "api/runs?token=s3cret")
    assert status == 200 and [r["name"] for r in body["runs"]] == ["t"]
    assert _is_local("127.0.0.1") and _is_local("::1") and not _is_local("0.0.0.0")
    # a token the request carries that is not ASCII is refused like any other (was a 500)
    assert get(base + "api/runs?token=%C3%A9s3cret")[0] == 401
    assert get(base + "api/runs?token=")[0] == 401


@pytest.mark.parametrize("token", ["", "two words", "s3cr\u00e9t", "a;b"])
def test_a_token_that_lets_anyone_in_or_cannot_travel_is_refused(tmp_path, token) -> None:
    """``--token ""`` was accepted, and then ``?token=`` let anyone in; a token a URL or a
    cookie cannot carry as it is made requests fail. Refused before the port is bound."""
    with pytest.raises(InvalidConfigError, match="token"):
        start([str(tmp_path)], token=token, background=True)


def test_the_api_downsamples_long_curves_keeping_spikes_and_refuses_bad_places(
    tmp_path, serve
) -> None:
    hook = tt.Hook(tmp_path / "long", save_config=tt.SaveConfig(save_interval=1))
    for step in range(5000):
        hook.save_scalar("loss", 100.0 if step == 3217 else 1.0 / (1 + step))
        hook.next_step()
    hook.close()
    dashboard = serve(tmp_path / "long")
    ident = run_ids(dashboard)["long"]
    _, curves = get(f"{dashboard.url}api/run/{ident}/curves")
    (loss,) = curves["series"]
    assert loss["points"] == 5000 and len(loss["x"]) <= 2 * BUCKETS
    spike = loss["y"].index(100.0)  # kept, in the bucket that holds it
    assert abs(loss["x"][spike] - 3217) <= 5000 // BUCKETS + 1
    _, zoomed = get(f"{dashboard.url}api/run/{ident}/curves?x0=3200&x1=3300")
    assert zoomed["series"][0]["x"] == list(range(3200, 3301))  # zoomed in: every point
    assert zoomed["series"][0]["y"][17] == 100.0  # the spike where it was
    assert get(f"{dashboard.url}api/run/nope")[0] == 404
    with pytest.raises(tt.exceptions.InvalidConfigError, match="does not exist"):
        start([str(tmp_path / "missing")], port=0)


def test_embeddings_of_a_guessed_bottleneck_over_eval_steps(tmp_path, serve, browser) -> None:
    rng = np.random.default_rng(0)
    hook = tt.Hook(tmp_path / "ae", save_config=tt.SaveConfig(save_interval=1), include_regex=".*")
    for step in range(8):
        hook.set_mode(tt.modes.TRAIN)
        hook.save_tensor("loss", np.float32(1.0 / (step + 1)), collections="losses")
        hook.next_step()
        if step % 2:
            hook.set_mode(tt.modes.EVAL)
            labels = np.arange(30) % 3
            points = rng.normal(size=(30, 4)) + labels[:, None] * (step + 1)
            hook.save_tensor("bottleneck_output_0", points.astype(np.float32))
            hook.save_tensor("model_input_1", labels)  # a label tensor by another name
            hook.next_step()
    hook.close()
    dashboard = serve(tmp_path / "ae")
    browser.visit(f"{dashboard.url}run/{run_ids(dashboard)['ae']}")
    note = "return document.getElementById('em-note').textContent;"
    assert "choose the tensor" in browser.until(note)  # the labels' name is not guessable
    page = browser.driver
    page.find_element("id", "em-labels").send_keys("model_input_1")
    page.find_element("id", "em-draw").click()
    drawn = (
        "const d = document.getElementById('embeddings');"
        "return d && d.data && d._transitionData ? [d.data.length, d._transitionData._frames.length,"
        " document.getElementById('em-mode').value] : null;"
    )
    assert browser.until(drawn) == [3, 4, "EVAL"]  # a trace per label, a frame per EVAL step
    assert "steps 0, 1, 2, 3" in browser.until(note, lambda t: "PCA" in t)
    assert browser.errors() == []


def test_where_a_session_resumed_is_marked_on_the_curves(tmp_path, serve, browser) -> None:
    write_trial(tmp_path / "resumed", steps=5)  # TRAIN 0-4, an evaluation: global steps 0-5
    write_trial(tmp_path / "resumed", steps=5)  # the script started again: it continues
    dashboard = serve(tmp_path / "resumed")
    browser.visit(f"{dashboard.url}run/{run_ids(dashboard)['resumed']}")
    marks = (
        "const d = document.querySelector('#curves [data-name=loss]');"
        "return d && d.layout ? d.layout.annotations.filter(a => a.name === 'session')"
        ".map(a => [a.text, a.x, a.hovertext]) : null;"
    )
    ((text, x, hover),) = browser.until(marks, lambda v: v)
    assert text == "↻ session 1" and x == 5.5  # between the first run's last step and its own
    assert "resumed at step 6 (the trial held steps up to 5)" in hover
    (session,) = browser.driver.execute_script(CURVES)["sessions"]
    assert (session["index"], session["step"], session["mode_steps"]) == (
        1,
        6,
        {"TRAIN": 5, "EVAL": 1},
    )
    assert browser.errors() == []


def raw_get(url: str, path: str, host: str | None = None) -> tuple[int, dict[str, str], bytes]:
    """A GET with the ``Host`` header ``host`` (as a DNS-rebound page's requests carry)."""
    import http.client
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    assert parts.hostname is not None
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    try:
        connection.putrequest("GET", path, skip_host=host is not None)
        if host is not None:
            connection.putheader("Host", host)
        connection.endheaders()
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        connection.close()


def test_a_foreign_host_is_refused_unless_allowed(tmp_path, serve) -> None:
    """A page that DNS-rebinds its own name to 127.0.0.1 sends its own name as ``Host``:
    it was answered (run names, paths, curves, the log); now 403 unless --allow-host."""
    write_trial(tmp_path / "t", steps=3)
    dashboard = serve(tmp_path / "t")
    port = int(dashboard.url.rstrip("/").rsplit(":", 1)[1])
    for foreign in ("evil.example", f"evil.example:{port}", "127.0.0.1.evil.example", ""):
        status, _, body = raw_get(dashboard.url, "/api/runs", foreign)
        assert status == 403, (foreign, status)
        assert b"--allow-host" in body
    assert raw_get(dashboard.url, "/", f"attacker:{port}")[0] == 403
    assert raw_get(dashboard.url, "/api/runs", f"localhost:{port + 1}")[0] == 403  # other port
    for local in (f"127.0.0.1:{port}", f"localhost:{port}", f"LOCALHOST:{port}", f"[::1]:{port}"):
        status, _, body = raw_get(dashboard.url, "/api/runs", local)
        assert status == 200 and json.loads(body)["runs"][0]["name"] == "t"
    allowed = serve(tmp_path / "t", allow_hosts=["dash.example", "tunnel.example:443"])
    port = int(allowed.url.rstrip("/").rsplit(":", 1)[1])
    assert raw_get(allowed.url, "/api/runs", f"dash.example:{port}")[0] == 200
    assert raw_get(allowed.url, "/api/runs", "dash.example")[0] == 200  # behind a proxy on :80
    assert raw_get(allowed.url, "/api/runs", "tunnel.example:443")[0] == 200
    assert raw_get(allowed.url, "/api/runs", f"tunnel.example:{port}")[0] == 403
    assert raw_get(allowed.url, "/api/runs", "evil.example")[0] == 403
    with pytest.raises(InvalidConfigError, match="--allow-host"):
        start([str(tmp_path)], port=0, allow_hosts=["evil.example/path"])


def test_the_cli_takes_allow_host() -> None:
    import argparse

    from tensortap.cli._serve import add_parser

    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    ns = parser.parse_args(["serve", "r", "--allow-host", "a.example", "--allow-host", "b:8"])
    assert ns.allow_host == ["a.example", "b:8"]


def test_every_answer_carries_the_security_headers(tmp_path, serve) -> None:
    write_trial(tmp_path / "t", steps=3)
    dashboard = serve(tmp_path / "t")
    ident = run_ids(dashboard)["t"]
    paths = [
        "/",
        f"/run/{ident}",
        "/compare",
        f"/report/{ident}",
        "/api/runs",
        f"/api/run/{ident}/curves",
        "/static/dashboard.js",
        "/static/plotly.min.js",
        "/api/run/nope",
        "/favicon.ico",
    ]
    for path in paths:
        status, headers, _ = raw_get(dashboard.url, path)
        assert status in (200, 404), (path, status)
        policy = headers["content-security-policy"]
        scripts = next(d for d in policy.split(";") if d.strip().startswith("script-src"))
        assert "'unsafe-inline'" not in scripts and "'unsafe-eval'" not in scripts, path
        assert "frame-ancestors 'none'" in policy, path
        assert headers["x-frame-options"] == "DENY", path
        assert headers["x-content-type-options"] == "nosniff", path
        assert headers["referrer-policy"] == "no-referrer", path
    # the refusals carry them too
    status, headers, _ = raw_get(dashboard.url, "/api/runs", "evil.example")
    assert status == 403 and headers["x-frame-options"] == "DENY"
    token = serve(tmp_path / "t", token="s3cret")
    status, headers, _ = raw_get(token.url.split("?")[0], "/api/runs")
    assert status == 401 and headers["x-content-type-options"] == "nosniff"
    # the pages hold no inline script: each <script> has a src, the colours' table and
    # dashboard.js (plotly.js is loaded by dashboard.js, beside the page's first requests)
    _, _, shell = raw_get(dashboard.url, "/")
    assert b"<script>" not in shell
    assert shell.count(b"<script") == shell.count(b'<script src="/static/') == 2
    status, headers, _ = raw_get(dashboard.url, "/static/colours.js")
    assert status == 200 and headers["x-content-type-options"] == "nosniff"


def test_no_payload_in_a_trial_or_a_job_runs_on_any_page(tmp_path, serve, browser) -> None:
    """Stored XSS: summary.json's fields went into /report/<job> unescaped (script ran), and
    tensor names became live links in the charts (plotly's pseudo-HTML). Seven kinds of
    payload in every field, every page: none runs, none becomes markup, each is shown."""
    from tests.helpers.xss_payloads import PAYLOADS, assert_no_payload_ran, shown, write_hostile_job

    write_hostile_job(tmp_path / "runs")
    dashboard = serve(tmp_path / "runs")
    (ident,) = run_ids(dashboard).values()
    base = dashboard.url

    browser.visit(base)
    rows = "return document.querySelectorAll('#runs tbody tr').length;"
    browser.until(rows, lambda n: n == 1)
    assert "onerror=window.__xss='run-name'" in shown(browser)
    assert_no_payload_ran(browser)

    browser.visit(f"{base}run/{ident}")
    drawn = (
        "const n = (s) => document.querySelectorAll(s).length;"
        "const t = document.getElementById('tensorplot');"
        "return [n('#curves .js-plotly-plot'), n('#health .js-plotly-plot'),"
        " !!(t && t.data), n('#rules tr'), n('#timeline tr'),"
        " document.getElementById('log').textContent.length];"
    )
    found = browser.until(drawn, lambda v: v[0] and v[1] and v[2] and v[3] > 1 and v[4] and v[5])
    assert found[3] == len(PAYLOADS) + 2  # a header and a row per rule
    text = shown(browser)
    for payload in PAYLOADS.values():
        assert payload in text  # shown as text, in the tables and the log
    assert "loss <a href=" in text  # and in the charts (the legend, as written)
    assert_no_payload_ran(browser)

    browser.visit(f"{base}compare?ids={ident},{ident}")
    browser.until("return document.querySelectorAll('#curves .js-plotly-plot').length;")
    browser.until("return document.querySelectorAll('#rules tr').length;", lambda n: n > 1)
    assert_no_payload_ran(browser)

    browser.visit(f"{base}report/{ident}")
    assert browser.until("return !!document.querySelector('.js-plotly-plot');")
    text = shown(browser)
    for payload in PAYLOADS.values():
        assert payload in text
    assert_no_payload_ran(browser)


def test_a_regex_from_the_url_is_matched_by_re2_or_refused(tmp_path, serve) -> None:
    """``(a+)+$`` against a long name took Python's backtracking re minutes of CPU under the
    run's lock (the run's page froze); RE2 answers it at once, and a pattern RE2 cannot
    match in linear time is refused with a 400 that says why."""
    hook = tt.Hook(tmp_path / "t", save_config=tt.SaveConfig(save_interval=1))
    for _ in range(2):
        hook.save_tensor("a" * 40 + "!", np.ones((2, 4), np.float32), collections="default")
        hook.save_tensor("relu_output_0", np.ones((2, 4), np.float32), collections="default")
        hook.next_step()
    hook.close()
    dashboard = serve(tmp_path / "t")
    api = f"{dashboard.url}api/run/{run_ids(dashboard)['t']}/tensorplot?regex="
    from urllib.parse import quote

    status, body = get(api + quote("(a+)+$"))  # 2**40 paths for re; none for RE2
    assert status == 200 and body["figure"] is None
    assert body["note"] == "no tensor matches '(a+)+$'"
    status, body = get(api + quote(r"(relu)_output_\d$"))  # matched by RE2, drawn
    assert status == 200 and [t["name"] for t in body["figure"]["data"]] == ["relu_output_0"]
    assert len(body["labels"]) == len(body["steps"]) == 2  # each step says its mode
    assert all(
        label.startswith(f"global step {s} (") for s, label in zip(body["steps"], body["labels"])
    )
    status, body = get(api + quote(r"(a)\1"))  # a backreference: RE2 cannot, refused
    assert status == 400 and "RE2" in body["error"] and "backreferences" in body["error"]
    status, body = get(api + quote("a" * 5000))
    assert status == 400 and "5000 characters" in body["error"]
