"""The dashboard draws a rollback's branch as a fork of the first session, in a real headless
Chromium over a real server: the branch's steps start where it forks, the steps it abandoned
are drawn dimmed and dashed, and the reason (user text) is escaped."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import tensortap as tt
import tensortap.pytorch as ttp
from helpers.json_get import get_json as get

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

HOSTILE = "<img src=x onerror=window.__xss='branch'>"


def write_branched_trial(out: Path) -> None:
    """20 TRAIN steps; batch 12 spikes, so step 12 asks for a rollback: the checkpoint of step 10
    is restored and a second session (the branch) trains steps 10-19 again."""

    def make_hook() -> tt.Hook:
        return tt.Hook(out, save_config=tt.SaveConfig(save_interval=1))

    rollback = ttp.Rollback(
        ttp.FunctionCheckpoints(lambda step: None, lambda step: None),
        every=5,
        batches=ttp.SkipBatches(list(range(30))),
        hook=make_hook,
    )
    for step, batch_id, _ in rollback.steps(20):
        hook = rollback.hook
        assert hook is not None
        hook.set_mode(tt.modes.TRAIN)
        loss = 100.0 if batch_id == 12 else 1.0 / (step + 1)
        hook.save_tensor("loss", np.float32(loss), collections="losses")
        hook.next_step()
        if loss > 10:
            rollback.request(step, [batch_id], f"loss spike {HOSTILE}")
    rollback.close()


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
