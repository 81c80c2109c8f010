"""The dashboard draws a rollback's branch as a fork of the first session, in a real headless
Chromium over a real server: the branch's steps start where it forks, the steps it abandoned
are drawn dimmed and dashed, and the reason (user text) is escaped."""

from __future__ import annotations

from pathlib import Path

import pytest

import tensortap as tt
from tests.helpers.branched_trial import write_branched_trial
from tests.helpers.json_get import get_json as get

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")


def test_a_rollbacks_branch_is_drawn_as_a_fork(tmp_path: Path, serve, browser) -> None:
    write_branched_trial(tmp_path / "forked")
    first, second = tt.create_trial(tmp_path / "forked").sessions()
    assert (second.branch_of, second.branch_step, second.branch_global_step) == (first.id, 10, 10)
    dashboard = serve(tmp_path / "forked")
    _, runs = get(dashboard.url + "api/runs")
    (run,) = runs["runs"]
    browser.visit(f"{dashboard.url}run/{run['id']}")
    figure = (
        "const d = document.querySelector('#curves [data-name=loss]');"
        "return d && d.data && d.layout ? {"
        " traces: d.data.map(t => [t.name, Array.from(t.x), (t.line || {}).dash || null,"
        "   t.opacity ?? 1]),"
        " marks: d.layout.annotations.filter(a => a.name === 'branch')"
        "   .map(a => [a.text, a.x, a.hovertext]),"
        " axis: d.layout.xaxis.title.text} : null;"
    )
    drawn = browser.until(figure, lambda v: v and v["marks"])
    (kept, abandoned) = drawn["traces"]
    # the branch's steps (global 13-22) are drawn from the fork, at 10-19, after the first
    # session's 0-9; the first session's 10-12, which the rollback abandoned, dashed and dimmed
    assert kept[1] == list(range(20)) and kept[2] is None
    assert abandoned[1] == [10, 11, 12] and abandoned[2] == "dash" and abandoned[3] < 1
    assert "abandoned by a rollback" in abandoned[0]
    ((text, x, hover),) = drawn["marks"]
    assert text == "⑂ session 1: rolled back to step 10" and x == 9.5
    assert f"a branch of session {first.id} from TRAIN step 10 (global step 10)" in hover
    assert "&lt;img src=x" in hover and "<img" not in hover  # escaped, as every user text
    assert "fork" in drawn["axis"]
    assert browser.driver.execute_script("return window.__xss || null;") is None
    assert browser.errors() == []
