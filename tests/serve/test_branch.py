"""The dashboard draws a rollback's branch as a fork of the first session, in a real headless
Chromium over a real server: the branch's steps start where it forks, the steps it abandoned
are drawn dimmed and dashed (one trace per session), the bad steps are marked at the plot's
edge, the default y-range is the kept steps', and the reason (user text) is escaped."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import tensortap as tt
from tests.helpers.branched_trial import (
    OUTLIER,
    write_branched_trial,
    write_thrice_rolled_back_trial,
)
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
        " traces: d.data.filter(t => !['bad', 'trips', 'decisions'].includes(t.meta))"
        "   .map(t => [t.name, Array.from(t.x), (t.line || {}).dash || null, t.opacity ?? 1]),"
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


# what the page drew for the loss: every trace with its points, the branch marks and the axes
FIGURE = (
    "const d = document.querySelector('#curves [data-name=loss]');"
    "return d && d.data && d.layout ? {"
    " traces: d.data.map(t => ({name: t.name, meta: t.meta || null, x: Array.from(t.x),"
    "   y: Array.from(t.y), global: t.customdata ? Array.from(t.customdata) : null,"
    "   dash: (t.line || {}).dash || null, yaxis: t.yaxis || 'y',"
    "   hover: t.hovertext ? Array.from(t.hovertext) : null})),"
    " forks: d.layout.annotations.filter(a => a.name === 'branch').map(a => [a.x, a.y]),"
    " yrange: (d._fullLayout.yaxis.range || []).slice(),"
    " y2: d._fullLayout.yaxis2 ? d._fullLayout.yaxis2.range.slice() : null} : null;"
)


def test_three_rollbacks_to_one_step_draw_one_trace_per_abandoned_session(
    tmp_path: Path, serve, browser
) -> None:
    """Issue 46: three rollbacks to the checkpoint of step 10. One kept line; each abandoned
    session its own dashed trace from its fork (never one line joined across the branch that
    survived); the NaN losses that asked for the rollbacks marked at step 13; the y-range
    the kept steps' (the undone 1.9e6 loss marked at the edge, not scaled to)."""
    write_thrice_rolled_back_trial(tmp_path / "thrice")
    sessions = tt.create_trial(tmp_path / "thrice").sessions()
    assert [s.branch_global_step for s in sessions[1:]] == [10, 14, 18]
    dashboard = serve(tmp_path / "thrice")
    _, runs = get(dashboard.url + "api/runs")
    (run,) = runs["runs"]
    browser.visit(f"{dashboard.url}run/{run['id']}")
    drawn = browser.until(FIGURE, lambda v: v and len(v["forks"]) == 3)
    kept = [t for t in drawn["traces"] if t["meta"] is None]
    dropped = [t for t in drawn["traces"] if t["meta"] == "abandoned"]
    (marks,) = [t for t in drawn["traces"] if t["meta"] == "bad"]
    assert len([t for t in drawn["traces"] if t["meta"] not in ("trips", "decisions")]) == 5
    # the kept line: the first session's 0-9, then the last branch's 10-29, drawn at 10-29
    ((line,),) = [kept]
    assert line["x"] == list(range(30)) and line["dash"] is None
    # one trace per abandoned session, each from the fork at step 10 (its NaN step 13 has no
    # y), each with its own global steps: never one line from global step 12 back to 10
    assert [t["x"] for t in dropped] == [[10, 11, 12]] * 3
    assert [t["global"] for t in dropped] == [[10, 11, 12], [14, 15, 16], [18, 19, 20]]
    assert {t["dash"] for t in dropped} == {"dash"}
    # each branch drawn at its fork, not further on; their marks one above another
    assert [x for x, _ in drawn["forks"]] == [9.5, 9.5, 9.5]
    assert len({y for _, y in drawn["forks"]}) == 3
    # the bad steps at their step, at the edge of a hidden 0-1 axis, saying what they were
    assert marks["yaxis"] == "y2" and drawn["y2"] == [0, 1]
    nan = [(x, h) for x, y, h in zip(marks["x"], marks["y"], marks["hover"]) if "NaN" in h]
    assert [x for x, _ in nan] == [13, 13, 13]
    for (_, hover), step in zip(nan, (13, 17, 21)):
        assert f"global step {step}, abandoned by a rollback" in hover
    (off,) = [
        (x, y, h) for x, y, h in zip(marks["x"], marks["y"], marks["hover"]) if "NaN" not in h
    ]
    assert off[:2] == (12, 1) and "1.90e+6" in off[2] and "off the scale" in off[2]
    # the default y-range: the kept steps' (1.03 to 2), not the undone outlier's
    low, high = drawn["yrange"]
    assert 0.9 < low < 1.04 and 2 < high < 2.2 and high < OUTLIER
    assert browser.driver.execute_script("return window.__xss || null;") is None
    assert browser.errors() == []


def test_forks_an_older_tensortap_wrote_wrong_are_read_true(tmp_path: Path, serve) -> None:
    """Trials written before issue 46 hold, for the second and third rollback to one
    checkpoint, the parent's first global step plus ``branch_step`` (24 and 28 here, after
    the parent's last step): the trial and the dashboard's API read the fork at the parent's
    first global step (14 and 18), where the parent trained the restored step."""
    out = tmp_path / "old"
    ids: list[str] = []
    for at, last in ((None, 14), (10, 14), (24, 14), (28, 20)):
        hook = tt.Hook(out, save_config=tt.SaveConfig(save_interval=1))
        if at is not None:  # what tensortap before issue 46 recorded
            hook.branch_from(ids[-1], 10, global_step=at, reason="NaN loss")
        hook.set_mode(tt.modes.TRAIN)
        for step in range(0 if at is None else 10, last):
            hook.save_tensor("loss", np.float32(1.0 / (step + 1)), collections="losses")
            hook.next_step()
        ids.append(hook.session_id)
        hook.close()
    sessions = tt.create_trial(out).sessions()
    assert [s.first_step for s in sessions] == [0, 14, 18, 22]
    assert [s.branch_global_step for s in sessions[1:]] == [10, 14, 18]
    dashboard = serve(out)
    _, runs = get(dashboard.url + "api/runs")
    (run,) = runs["runs"]
    _, body = get(f"{dashboard.url}api/run/{run['id']}/curves?name=loss&stat=value")
    assert [s["branch_global_step"] for s in body["sessions"]] == [10, 14, 18]


def test_steps_a_guard_skipped_are_marked_and_set_no_y_range(
    tmp_path: Path, serve, browser
) -> None:
    """Issue 46: a PyTorch guard's trip is kept in the hook's session (at the global step it
    happened, though read a step or more later); the dashboard marks it at that step and the
    skipped step's loss (a x1e4 batch) does not set the default y-range."""
    torch = pytest.importorskip("torch")
    import tensortap.pytorch as ttp

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    hook = ttp.Hook(tmp_path / "guarded", save_config=tt.SaveConfig(save_interval=1))
    guard = ttp.Guard(optimizer, model)
    generator = torch.Generator().manual_seed(1)
    for i in range(30):
        x = torch.randn(16, 8, generator=generator) * (1e4 if i == 15 else 1.0)
        y = torch.randint(0, 3, (16,), generator=generator)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        guard.observe(loss)
        hook.save_tensor("loss", np.float32(loss.item()), collections="losses")
        optimizer.step()
        hook.next_step()
    assert guard.flush() and [e.step for e in guard.events] == [15]
    hook.close()
    (session,) = tt.create_trial(tmp_path / "guarded").sessions()
    (trip,) = [e for e in session.events if e["kind"] == "guard_trip"]
    assert trip["fields"]["at"] == 15 and trip["fields"]["skipped"] is True
    dashboard = serve(tmp_path / "guarded")
    _, runs = get(dashboard.url + "api/runs")
    (run,) = runs["runs"]
    _, body = get(f"{dashboard.url}api/run/{run['id']}/curves?name=loss&stat=value")
    assert [(t["global_step"], t["skipped"]) for t in body["trips"]] == [(15, True)]
    browser.visit(f"{dashboard.url}run/{run['id']}")
    drawn = browser.until(FIGURE, lambda v: v and any(t["meta"] == "trips" for t in v["traces"]))
    (marks,) = [t for t in drawn["traces"] if t["meta"] == "trips"]
    assert marks["x"] == [15] and marks["yaxis"] == "y2" and drawn["y2"] == [0, 1]
    assert "skipped" in marks["hover"][0] and "spike" in marks["hover"][0]
    (line,) = [t for t in drawn["traces"] if t["meta"] is None]
    _, high = drawn["yrange"]
    assert high < line["y"][15] / 10 and high >= max(v for k, v in enumerate(line["y"]) if k != 15)
    assert browser.errors() == []


def test_a_rollbacks_decision_is_marked_at_its_bad_step(tmp_path: Path, serve, browser) -> None:
    """Issue 46: what a rollback decided (kept as a ``rollback_decision`` event of its session,
    ``at`` the bad step's global step) is marked there on the curves and listed under them,
    its reason escaped in both."""
    hook = tt.Hook(tmp_path / "decided", save_config=tt.SaveConfig(save_interval=1))
    for step in range(12):
        hook.save_tensor("loss", np.float32(1.0 / (step + 1)), collections="losses")
        if step == 9:  # recorded at the boundary after the bad step 7
            hook.record_event(
                "rollback_decision",
                {
                    "step": 7,
                    "at": 7,
                    "action": "stop",
                    "evidence": "numerics",
                    "layer": "blocks.2",
                    "reason": "went non-finite <img src=x onerror=window.__xss=1>",
                },
            )
        hook.next_step()
    hook.close()
    dashboard = serve(tmp_path / "decided")
    _, runs = get(dashboard.url + "api/runs")
    (run,) = runs["runs"]
    browser.visit(f"{dashboard.url}run/{run['id']}")
    drawn = browser.until(
        FIGURE, lambda v: v and any(t["meta"] == "decisions" for t in v["traces"])
    )
    (marks,) = [t for t in drawn["traces"] if t["meta"] == "decisions"]
    assert marks["x"] == [7]
    assert not [t for t in drawn["traces"] if t["meta"] == "trips"]  # a decision, no guard trip
    (hover,) = marks["hover"]
    assert "rollback at global step 7: stop (numerics in blocks.2, step 7)" in hover
    assert "&lt;img" in hover and "<img" not in hover
    listed = browser.driver.execute_script(
        "return Array.from(document.querySelectorAll('#decision-list li')).map(li => "
        "[li.textContent, li.querySelectorAll('img').length]);"
    )
    ((text, images),) = listed
    assert images == 0 and "went non-finite <img src=x onerror=window.__xss=1>" in text
    assert browser.driver.execute_script("return window.__xss || null;") is None
    assert browser.errors() == []
