"""Hostile small documents beside a trial's data: session records, a job's rule status files,
smdebug's collections files. Each is decoded once with its fields' kinds and ranges checked; a
bad one is listed with its reason beside the good ones, never dropped unsaid (issue 45). The
value-checking fuzzer's subset runs here; ``python bench/bench_fuzz.py --format documents``
runs thousands of cases per kind."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import tensortap as tt
from tensortap.exceptions import FormatError, InvalidConfigError
from tensortap.format._documents import MAX_EVENT_DEPTH, decode_session
from tensortap.jobs._documents import decode_summary
from tensortap.jobs._record import JobRecord, write_json
from tensortap.jobs._supervisor import rule_entry
from tensortap.smdebug._reader import SmdebugReader
from tensortap.storage import LocalStore
from tensortap.testing._doc_fuzz import KINDS, fuzz_documents

SMDEBUG = Path(__file__).parents[1] / "golden" / "smdebug" / "trial"


def _resumed_trial(out: Path) -> Path:
    """Two sessions of one worker: three steps, then one more after a restart."""
    for steps in (3, 1):
        with tt.Hook(out, save_config=tt.SaveConfig(save_interval=1)) as hook:
            for step in range(steps):
                hook.save_tensor("loss", np.float32(1.0 / (step + 1)), collections="losses")
                hook.next_step()
    return out


def _record(trial: Path, index: int) -> Path:
    return trial / "workers" / "worker_0" / "sessions" / f"{index:06d}.json"


# -- session records: ranges checked at decode --


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("started", 1e300),  # the adversary's: tensortap report raised OverflowError
        ("started", -5),
        ("pid", -1),
        ("pid", 1 << 40),
        ("resumed_from_step", -3),
        ("rolled_back", [["TRAIN", 5, 2]]),
        ("rolled_back", [["TRAIN", -1, 2]]),
        ("events", [{"kind": "note", "fields": {}, "global_step": -1}]),
        ("events", [{"kind": "note", "fields": {"x": float("nan")}}]),
        ("session", ""),
        ("host", "h" * 10_000),
    ],
)
def test_a_session_record_out_of_range_is_a_listed_problem_beside_the_good_one(
    tmp_path: Path, field: str, value: object
) -> None:
    trial = _resumed_trial(tmp_path / "t")
    path = _record(trial, 1)
    doc = json.loads(path.read_text())
    doc[field] = value
    path.write_text(json.dumps(doc))
    with pytest.raises(FormatError, match=field if field != "events" else "events|number nan"):
        decode_session(path.read_bytes(), "the record")
    opened = tt.create_trial(trial)
    sessions = opened.sessions()
    assert [s.index for s in sessions if s.id is not None and s.started is not None] == [0]
    assert any("sessions/000001.json" in p for p in opened.problems()), opened.problems()
    assert opened.steps() == [0, 1, 2, 3]  # no row lost


def test_a_session_record_at_another_index_s_key_shadows_nothing(tmp_path: Path) -> None:
    """Record 1 rewritten to say it is session 0 silently replaced session 0's record."""
    trial = _resumed_trial(tmp_path / "t")
    first = json.loads(_record(trial, 0).read_text())
    doc = json.loads(_record(trial, 1).read_text())
    doc["index"] = 0
    _record(trial, 1).write_text(json.dumps(doc))
    opened = tt.create_trial(trial)
    by_index = {s.index: s for s in opened.sessions() if s.started is not None}
    assert by_index[0].id == first["session"]
    assert any("sessions/000001.json" in p and "not 000001" in p for p in opened.problems())


def test_the_dashboard_lists_no_session_record_at_another_index_s_key(
    tmp_path: Path, serve
) -> None:
    """The dashboard's sessions (its resumed-session marks) read the records through the same
    decoder as the trial: a record that names another index is not listed as that session."""
    pytest.importorskip("starlette")
    pytest.importorskip("uvicorn")
    from tests.helpers.json_get import get_json

    trial = _resumed_trial(tmp_path / "t")
    dashboard = serve(trial)
    _, runs = get_json(dashboard.url + "api/runs")
    (run,) = runs["runs"]
    curves = f"{dashboard.url}api/run/{run['id']}/curves?name=loss&stat=value"
    _, body = get_json(curves)
    assert [s["index"] for s in body["sessions"]] == [1]  # the resumed session, as written
    doc = json.loads(_record(trial, 1).read_text())
    doc["index"] = 0
    _record(trial, 1).write_text(json.dumps(doc))
    fresh = serve(trial)  # a new server: nothing cached
    _, runs = get_json(fresh.url + "api/runs")
    (run,) = runs["runs"]
    _, body = get_json(f"{fresh.url}api/run/{run['id']}/curves?name=loss&stat=value")
    assert body["sessions"] == []


def test_the_hook_refuses_an_event_its_readers_would_refuse(tmp_path: Path) -> None:
    deep: dict[str, object] = {}
    inner = deep
    for _ in range(MAX_EVENT_DEPTH):
        inner["x"] = {}
        inner = inner["x"]  # type: ignore[assignment]
    with tt.Hook(tmp_path / "t") as hook:
        with pytest.raises(InvalidConfigError, match="nested more than"):
            hook.record_event("deep", deep)
        with pytest.raises(InvalidConfigError, match="kind"):
            hook.record_event("k" * 5000, {})
        assert hook.record_event("fine", {"a": [1, {"b": 2}]})
    assert [e["kind"] for e in tt.create_trial(tmp_path / "t").sessions()[0].events] == ["fine"]


# -- rule status files: what cannot be read is said in the summary --


def _job(tmp_path: Path) -> JobRecord:
    record = JobRecord(tmp_path / "job")
    record.create({"name": "job", "created": 1_700_000_000.0, "command": ["x"]})
    return record


@pytest.mark.parametrize(
    ("raw", "said"),
    [
        (b"[1, 2]", "must be an object"),
        (b'{"RuleConfigurationName": "Other", "RuleEvaluationStatus": "Error"}', "not of"),
        (b'{"RuleConfigurationName": "Bad", "RuleEvaluationStatus": NaN}', "NaN"),
        (b'{"RuleConfigurationName": "Bad", "gravest_step": -4}', "gravest_step"),
    ],
)
def test_a_damaged_rule_status_is_named_in_the_summary_not_shown_in_progress_unsaid(
    tmp_path: Path, raw: bytes, said: str
) -> None:
    record = _job(tmp_path)
    good = {"RuleConfigurationName": "Good", "RuleEvaluationStatus": "NoIssuesFound"}
    write_json(record.rule_status_file("Good"), good)
    record.rule_status_file("Bad").write_bytes(raw)
    entries = [rule_entry(record, "Good"), rule_entry(record, "Bad")]
    assert entries[0] == good
    assert entries[1]["RuleConfigurationName"] == "Bad"
    assert any(said in p for p in entries[1]["problems"]), entries[1]
    shown = decode_summary(json.dumps({"status": "Completed", "rules": entries}).encode())
    assert any("rules[1]" in p and said in p for p in shown.problems), shown.problems
    assert [r["RuleConfigurationName"] for r in shown.summary["rules"]] == ["Good", "Bad"]


def test_a_rule_process_that_dies_says_its_last_status_was_unreadable(tmp_path: Path) -> None:
    """A rule process killed after its status file was damaged: the supervisor writes the
    rule's end (Error) and says the status it replaces could not be read."""
    import subprocess
    import sys

    from tensortap.jobs._supervisor import Supervisor, _Child

    record = JobRecord(tmp_path / "job")
    record.create({"name": "job", "created": 1_700_000_000.0, "command": ["x"], "rules": []})
    record.rule_status_file("Bad").write_bytes(b"[1, 2]")
    log = (tmp_path / "rule.log").open("wb+")
    proc = subprocess.Popen([sys.executable, "-c", "raise SystemExit(9)"], stdout=log)
    assert proc.wait(timeout=60) == 9
    supervisor = Supervisor(record)
    supervisor._host_died(_Child("rules", proc, log, rules=["Bad"]), 9)
    log.close()
    status = json.loads(record.rule_status_file("Bad").read_text())
    assert status["RuleEvaluationStatus"] == "Error"
    assert "exited with code 9" in status["StatusDetails"]
    assert "could not be read" in status["StatusDetails"]
    assert "must be an object" in status["StatusDetails"]


def test_a_rule_not_started_yet_is_in_progress_with_no_problem(tmp_path: Path) -> None:
    entry = rule_entry(_job(tmp_path), "Later")
    assert entry["RuleEvaluationStatus"] == "InProgress" and "problems" not in entry


# -- smdebug collections: one bad collection hides neither the file's others nor other files --


def test_one_bad_smdebug_collection_drops_that_collection_only(tmp_path: Path) -> None:
    import shutil

    root = tmp_path / "smdebug"
    shutil.copytree(SMDEBUG, root)
    first = next(root.glob("collections/*/*_collections.json"))
    doc = json.loads(first.read_text())
    held = set(doc["collections"])
    doc["collections"]["weights"]["tensor_names"] = [5]  # not a name
    doc["collections"]["odd"] = ["not", "a", "collection"]
    first.write_text(json.dumps(doc))
    reader = SmdebugReader(LocalStore(str(root)))
    got = reader.collections()
    assert set(got) == held - {"weights"}
    assert got["losses"]["tensor_names"] == doc["collections"]["losses"]["tensor_names"]
    said = [p for p in reader.problems if first.name in p]
    assert any("'weights'" in p for p in said) and any("'odd'" in p for p in said), said


# -- the fuzzer's subset --


@pytest.mark.parametrize("kind", KINDS)
def test_fuzzed_documents_lose_no_value_unsaid(tmp_path: Path, kind: str) -> None:
    found = fuzz_documents(tmp_path, 150, seed=7, kinds=(kind,), smdebug_fixture=SMDEBUG)
    assert found.cases == 150
    assert not found.failures, found.failures[:5]
    assert found.results["listed"] > 0 and found.results["read"] > 0  # both paths exercised
