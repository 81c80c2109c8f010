"""Events a session records (``Hook.record_event``: an attribution by replay, say) are kept in
its session record and read back by ``trial.sessions()``, within a budget; a damaged event list
is refused by the reader like any damaged field."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

import tensortap as tt
from tensortap.exceptions import FormatError, InvalidConfigError
from tensortap.format._documents import decode_session
from tensortap.hook import _hook as base_hook


def test_events_are_kept_in_the_session_record(tmp_path: Path) -> None:
    hook = tt.Hook(tmp_path / "run", save_config=tt.SaveConfig(save_interval=1))
    hook.save_scalar("loss", 1.0)
    hook.next_step()
    assert hook.record_event("attribution", {"kind": "data", "loss": math.nan, "at": (1, 2.5)})
    hook.save_scalar("loss", 2.0)
    hook.close()
    (session,) = tt.create_trial(tmp_path / "run").sessions()
    assert session.events == (
        {
            "kind": "attribution",
            "global_step": 1,
            "fields": {"kind": "data", "loss": "nan", "at": [1, 2.5]},
        },
    )
    assert session.to_dict()["events"] == [dict(session.events[0])]


def test_events_over_the_budget_are_counted(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(base_hook, "MAX_SESSION_EVENTS", 2)
    hook = tt.Hook(tmp_path / "run")
    kept = [hook.record_event("note", {"i": i}) for i in range(4)]
    hook.close()
    assert kept == [True, True, False, False]
    (key,) = (tmp_path / "run" / "workers" / "worker_0" / "sessions").glob("*.json")
    doc = json.loads(key.read_text())
    assert [e["fields"]["i"] for e in doc["events"]] == [0, 1]
    assert doc["events_over_budget"] == 2


def test_bad_events_are_refused(tmp_path: Path) -> None:
    with tt.Hook(tmp_path / "run") as hook:
        with pytest.raises(InvalidConfigError, match="non-empty str"):
            hook.record_event("", {})
        with pytest.raises(InvalidConfigError, match="JSON values"):
            hook.record_event("note", {"what": object()})
    raw = json.dumps(
        {"kind": "session", "format_version": 1, "index": 0, "session": "s", "events": [3]}
    ).encode()
    with pytest.raises(FormatError, match="events"):
        decode_session(raw, "a session record")


def _session_file(root: Path) -> Path:
    (path,) = root.glob("workers/*/sessions/*.json")
    return path


@pytest.mark.parametrize(
    ("patch", "complaint"),
    [
        ({"events": [{"kind": "k", "global_step": 1, "fields": {}}] * 257}, "at most 256"),
        ({"branch_of": "s" * 257, "branch_step": 3}, "branch_of must be a session id"),
        ({"branch_of": "a", "branch_step": -5}, "branch_step must be a step >= 0"),
        ({"branch_of": "a", "branch_global_step": 10**30}, "branch_global_step. must be a 64-bit"),
        ({"branch_of": "a", "branch_mode": "<script>"}, "branch_mode must be a mode name"),
        ({"branch_of": "a", "branch_reason": "x" * 5000}, "branch_reason is longer"),
        ({"pad": "x" * (4 * 1024 * 1024)}, "a session record holds at most"),
    ],
)
def test_a_hostile_session_record_is_a_problem_not_a_crash(
    tmp_path: Path, patch: dict, complaint: str
) -> None:
    """Records beyond what a writer writes (more events than its budget, a branch field out
    of range, a huge record) are refused as damaged: listed as a problem of the trial, whose
    steps still read."""
    hook = tt.Hook(tmp_path / "run", save_config=tt.SaveConfig(save_interval=1))
    hook.save_scalar("loss", 1.0)
    hook.close()
    path = _session_file(tmp_path / "run")
    doc = json.loads(path.read_text())
    doc.update(patch)
    path.write_text(json.dumps(doc))
    with pytest.raises(FormatError, match=complaint):
        decode_session(path.read_bytes(), "the record")
    trial = tt.create_trial(tmp_path / "run")
    (session,) = trial.sessions()
    assert session.events == () and session.branch_of is None
    assert any(re.search(complaint, str(problem)) for problem in trial.problems())
    assert trial.tensor("loss").value(0) == 1.0


def test_a_branch_reason_is_cut_to_what_readers_accept(tmp_path: Path) -> None:
    first = tt.Hook(tmp_path / "run")
    parent = first.session_id
    first.close()
    hook = tt.Hook(tmp_path / "run")
    hook.branch_from(parent, 0, reason="why " * 2000)
    hook.close()
    second = tt.create_trial(tmp_path / "run").sessions()[-1]
    assert second.branch_of == parent and second.branch_reason is not None
    assert len(second.branch_reason) == 4096 and second.branch_reason.endswith("...")
    with pytest.raises(InvalidConfigError, match="at most 256 chars"):
        tt.Hook(tmp_path / "other").branch_from("p" * 300, 0)
