"""The dashboard's runs table (issue 47): one row per run, the rows of ``tensortap jobs``
(the same fields, from tensortap.jobs._runs), read in a real headless Chromium over a real
server after clicking: a header sorts the rows (their order on screen), grouping by seed
shows a row per seed with the mean and spread of the last loss above its runs, and two runs
selected open compare with a verdict row. The list never waits on many trials at once: one
answer reads at most its cap of trials, the others follow.

The jobs are laid out as ``tensortap run`` leaves them over real trials a hook wrote
(tests/helpers/job_documents.py, as ``tensortap jobs``' tests make them)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from tensortap.jobs._record import JobRecord
from tensortap.serve._catalog import Catalog
from tensortap.serve._rows import table
from tests.cli.test_jobs import run_cli
from tests.helpers.job_documents import FIRED, QUIET, make_job
from tests.helpers.json_get import get_json as get

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

#: name: (seed, learning rate, losses)
JOBS = {
    "s0-lr0.1": (0, 0.1, [2.0, 1.0, 0.50]),
    "s0-lr0.01": (0, 0.01, [2.0, 1.5, 0.90]),
    "s1-lr0.1": (1, 0.1, [2.0, 1.0, 0.30]),
    "s1-lr0.01": (1, 0.01, [2.0, 1.5, 1.20]),
    "s2-lr0.1": (2, 0.1, [2.0, 1.0, 0.70]),
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Five jobs over three seeds and two learning rates; one of them has a problem (a rule
    fired), one is still running."""
    root = tmp_path_factory.mktemp("table")
    for k, (name, (seed, lr, losses)) in enumerate(JOBS.items()):
        make_job(
            root,
            name,
            lr=lr,
            batch=32,
            losses=losses,
            accuracy=[0.5 + 0.05 * k],
            seed=seed,
            created=1.79e9 + 10 * k,
            seconds=60.0 * (k + 1),
            rules=[FIRED, QUIET] if name == "s1-lr0.01" else None,
            status="InProgress" if name == "s2-lr0.1" else "Completed",
        )
    return root


def cells(browser, column: str) -> list[str]:
    """The text of ``column``'s cells, top to bottom as drawn (by their boxes' tops)."""
    return browser.driver.execute_script(
        "return [...document.querySelectorAll('#runs td.c-' + arguments[0])]"
        ".map((td) => [td.getBoundingClientRect().top, td.textContent])"
        ".sort((a, b) => a[0] - b[0]).map((p) => p[1]);",
        column,
    )


def test_the_rows_are_tensortap_jobs_rows(runs: Path, serve) -> None:
    dashboard = serve(runs)
    status, body = get(dashboard.url + "api/table?sort=name")
    assert status == 200 and body["total"] == 5 and body["pending"] == 0
    code, out, err = run_cli("jobs", "--runs", str(runs), "--json")
    assert code == 0, err
    expected = {r["name"]: r for r in json.loads(out)}
    assert [r["name"] for r in body["rows"]] == sorted(JOBS)
    for row in body["rows"]:
        want = expected[row["name"]]
        for key in ("verdict", "cause", "status", "steps", "last_loss", "best_metric"):
            assert row[key] == want[key], (row["name"], key)
        assert row["hyperparameters"] == want["hyperparameters"]
        assert row["command"] == want["command"]
        assert row["duration"] == pytest.approx(want["duration"], abs=2.0)  # the live one runs on
    shown = {r["name"]: r for r in body["rows"]}
    assert shown["s1-lr0.01"]["verdict"] == "problem"
    assert shown["s2-lr0.1"]["verdict"] == "running"
    assert shown["s1-lr0.1"]["last_loss"] == 0.3 and shown["s0-lr0.1"]["steps"] == 3
    assert body["keys"][:2] == ["seed", "learning_rate"]


def test_one_answer_reads_at_most_its_cap_of_trials_and_keeps_the_rows_it_read(
    runs: Path,
) -> None:
    catalog = Catalog([str(runs)])
    first = table(catalog.runs(), sort="loss", reads=2)
    assert (first["read"], first["pending"]) == (2, 3)
    pending = [r for r in first["rows"] if r["pending"]]
    # a pending row is the job's own documents: its verdict and status, not yet its loss
    assert all(r["last_loss"] is None and r["verdict"] for r in pending)
    second = table(catalog.runs(), sort="loss", reads=2)
    assert (second["read"], second["pending"]) == (2, 1)
    third = table(catalog.runs(), sort="loss", reads=2)
    assert (third["read"], third["pending"]) == (1, 0)
    losses = [r["last_loss"] for r in third["rows"]]
    assert losses == sorted(losses)
    # the finished jobs' rows are kept while their documents stay the same: only the live
    # one is read again (once its row is older than ROW_SECS)
    again = table(catalog.runs(), reads=100)
    assert again["read"] <= 1 and again["pending"] == 0


def tick(page: Any, xpath: str, deadline_s: float = 30.0) -> None:
    """Click a row's box until it reads ticked: the table may be drawn again between finding
    and clicking (a pending row's answer came; the ticks are kept across draws), and a click
    whose press and release straddle a draw is lost, so it is found again and looked at."""
    from selenium.common.exceptions import StaleElementReferenceException

    until = time.monotonic() + deadline_s
    while True:
        try:
            box = page.find_element("xpath", xpath)
            if box.is_selected():
                return
            box.click()
        except StaleElementReferenceException:
            pass
        if time.monotonic() > until:
            raise AssertionError(f"the box {xpath} is still not ticked after {deadline_s} s")


def test_sorting_grouping_and_compare_in_the_browser(runs: Path, serve, browser) -> None:
    dashboard = serve(runs)
    page = browser.visit(dashboard.url)
    browser.until("const r = window.tensortapRuns; return r && r.rows === 5 && !r.pending;")

    page.find_element("css selector", "th[data-sort=loss]").click()
    ascending = browser.until("return window.tensortapRuns.sort;", lambda v: v == "loss") and cells(
        browser, "loss"
    )
    assert [float(v) for v in ascending] == [0.3, 0.5, 0.7, 0.9, 1.2]
    assert cells(browser, "name")[0] == "s1-lr0.1"
    page.find_element("css selector", "th[data-sort=loss]").click()
    browser.until("return window.tensortapRuns.sort;", lambda v: v == "-loss")
    assert [float(v) for v in cells(browser, "loss")] == [1.2, 0.9, 0.7, 0.5, 0.3]
    assert cells(browser, "verdict")[0].startswith("problem")

    box = page.find_element("id", "group")
    box.send_keys("seed")
    page.execute_script("document.getElementById('group').dispatchEvent(new Event('change'));")
    browser.until("return window.tensortapRuns.groups;", lambda n: n == 3)
    drawn = page.execute_script(
        "return [...document.querySelectorAll('#runs tbody tr')].map((tr) =>"
        " [tr.className, tr.getBoundingClientRect().top, tr.textContent]);"
    )
    drawn.sort(key=lambda t: t[1])
    kinds = [cls.split()[0] for cls, _, _ in drawn]
    assert kinds == ["group", "run", "run", "group", "run", "run", "group", "run"]
    seed0 = drawn[0][2]
    # seed 0: last losses 0.5 and 0.9: mean 0.7, sample sd 0.2828
    assert "seed = 0" in seed0 and "2 runs" in seed0 and "0.7" in seed0 and "0.2828" in seed0
    assert "seed = 2" in drawn[6][2] and "1 run" in drawn[6][2]
    # within a group, the rows keep the order asked for (the last loss, descending)
    assert "s0-lr0.01" in drawn[1][2] and "s0-lr0.1" in drawn[2][2]

    for name in ("s1-lr0.01", "s1-lr0.1"):
        tick(page, f"//tr[contains(@class, 'run')][.//a[text()='{name}']]//input")
    browser.until("return !document.getElementById('compare').disabled;")
    # the ticks are kept across a poll; a poll that brings the same answer leaves the rows (and a
    # box under the pointer) alone
    ticked = "return [...document.querySelectorAll('#runs tr.run input:checked')].length;"
    for _ in range(2):
        drawn_at = page.execute_script("return window.tensortapRuns.drawnAt;")
        browser.until("return window.tensortapRuns.drawnAt;", lambda t, at=drawn_at: t > at)
        assert page.execute_script(ticked) == 2
        marked = page.execute_script("return document.querySelector('#runs tr.run').dataset.mark;")
        page.execute_script("document.querySelector('#runs tr.run').dataset.mark = 'kept';")
    assert marked == "kept"
    # a row whose answer changes (the running job ends) is drawn again alone: the rows around it,
    # and a box under the pointer there, are left as they are
    running = (
        "//tr[contains(@class, 'run')][.//a[text()='s2-lr0.1']]/td[contains(@class, 'c-status')]"
    )
    before = page.find_element("xpath", running).text
    summary = runs / "s2-lr0.1" / "summary.json"
    document = json.loads(summary.read_text())
    document["status"] = document["training"]["status"] = "Completed"
    summary.write_text(json.dumps(document))
    JobRecord(runs / "s2-lr0.1").append_event("training_ended", status="Completed", exit_code=0)
    browser.until(
        f"const td = document.evaluate({json.dumps(running)}, document, null, 9, null)"
        ".singleNodeValue; return td && td.textContent;",
        lambda text: text is not None and text != before,
    )
    assert page.execute_script("return document.querySelector('#runs tr.run').dataset.mark;") == (
        "kept"
    )
    assert page.execute_script(ticked) == 2
    page.find_element("id", "compare").click()
    browser.until("return location.pathname;", lambda p: p == "/compare")
    verdicts = browser.until(
        "return [...document.querySelectorAll('#rules tr.verdict td')].map((t) => t.textContent);",
        lambda v: len(v) == 3,
    )
    heads = page.execute_script(
        "return [...document.querySelectorAll('#rules tr:first-child th a')]"
        ".map((a) => a.textContent);"
    )
    by_run = dict(zip(heads, verdicts[1:], strict=True))
    assert verdicts[0] == "verdict"
    assert by_run["s1-lr0.01"].startswith("problem") and by_run["s1-lr0.1"].startswith("healthy")
    assert browser.errors() == []
