"""Events a session records (``Hook.record_event``: an attribution by replay, say) are kept in
its session record and read back by ``trial.sessions()``, within a budget; a damaged event list
is refused by the reader like any damaged field."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

import tensortap as tt
from tensortap import _hook as base_hook
from tensortap.exceptions import FormatError, InvalidConfigError
from tensortap.format._documents import decode_session


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
