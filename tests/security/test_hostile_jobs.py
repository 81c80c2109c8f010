"""Hostile job directories (issue 45): a ``summary.json``, ``job.json``, ``events.jsonl`` or
session record that is not what tensortap writes is listed with its reason in every view that
shows jobs (``tensortap jobs``, ``summary``, ``report``, the dashboard's runs list, run page and
report), the good runs beside it keep their right values, no view raises an untyped error or
hangs, and every answer, a 500 included, carries the security headers."""

from __future__ import annotations

import io
import json
import os
import sys
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import tensortap as tt
from tensortap.cli import main as cli
from tensortap.jobs import TrainingJob
from tensortap.jobs._record import JobRecord, write_json
from tests.helpers.json_get import get_json as get

GOOD_RULE = {
    "RuleConfigurationName": "LossNotDecreasing",
    "RuleEvaluationStatus": "IssuesFound",
    "StatusDetails": "RuleEvaluationConditionMet",
    "severity": "problem",
    "gravest_step": 2,
    "gravest_message": "the loss stopped decreasing",
    "judged": 3,
}

#: name -> (file, its bytes): the adversary's documents (issue 45's probes, and their kin)
NESTED = b"[" * 100_000 + b"]" * 100_000
HOSTILE: dict[str, tuple[str, bytes]] = {
    "summary-rules-5": ("summary.json", b'{"rules": [5]}'),
    "summary-list": ("summary.json", b"[1, 2, 3]"),
    "summary-step-1e999": (
        "summary.json",
        b'{"status": "Completed", "rules": [{"RuleConfigurationName": "R", '
        b'"RuleEvaluationStatus": "IssuesFound", "gravest_step": 1e999}]}',
    ),
    "summary-nested": ("summary.json", b'{"rules": ' + NESTED + b"}"),
    "summary-gravest-step-x": (
        "summary.json",
        b'{"status": "Completed", "rules": [{"RuleConfigurationName": "R", '
        b'"RuleEvaluationStatus": "IssuesFound", "gravest": {"step": "x"}}]}',
    ),
    "summary-training-x": ("summary.json", b'{"training": "x"}'),
    "summary-failure-text-5": (
        "summary.json",
        b'{"status": "Failed", "training": {"status": "Failed", "failure": {"text": 5}}}',
    ),
    "summary-cause-list": (
        "summary.json",
        b'{"rules": [{"RuleConfigurationName": "R", "RuleEvaluationStatus": "IssuesFound", '
        b'"gravest": {"step": 1, "details": {"cause": [1]}}}]}',
    ),
    "summary-rules-str": ("summary.json", b'{"status": "Completed", "rules": "x"}'),
    "summary-null": ("summary.json", b"null"),
    "summary-not-utf8": ("summary.json", b'{"status": "\xff"}'),
    "summary-status-5": ("summary.json", b'{"status": 5, "rules": []}'),
    "summary-huge-int": (
        "summary.json",
        b'{"rules": [{"RuleConfigurationName": "R", "RuleEvaluationStatus": "IssuesFound", '
        b'"gravest_step": 100000000000000000000000000000, "first_fired_step": -1}]}',
    ),
    "summary-nan": ("summary.json", b'{"status": NaN}'),
    "job-list": ("job.json", b"[1]"),
    "job-rules-5": ("job.json", b'{"rules": [5]}'),
    "job-created-1e300": ("job.json", b'{"created": 1e300, "command": ["x"]}'),
    "job-created-x": ("job.json", b'{"created": "x"}'),
    "job-nested": ("job.json", b'{"hook_config": ' + NESTED + b"}"),
    "job-trial-location-list": ("job.json", b'{"trial_location": [1]}'),
    "events-hostile": (
        "events.jsonl",
        b'{"time": "x", "event": "rule_fired"}\n[1]\n'
        b'{"time": 1, "event": "rule_fired", "rule": "R", "step": 1e999}\n'
        b'{"time": 1, "event": "rule_fired", "rule": ["R"], "step": "x"}\n' + NESTED + b"\nNaN\n",
    ),
    "session-started-1e300": ("session", b""),
}


def _trial(out: Path, resumed: bool = False) -> None:
    """Three steps saved; with ``resumed``, a second session carries on from the first."""
    with tt.Hook(out, save_config=tt.SaveConfig(save_interval=1)) as hook:
        for step in range(3):
            hook.save_tensor("loss", np.float32(1.0 / (step + 1)), collections="losses")
            hook.next_step()
    if resumed:
        with tt.Hook(out, save_config=tt.SaveConfig(save_interval=1)) as hook:
            hook.save_tensor("loss", np.float32(0.2), collections="losses")
            hook.next_step()


def make_job(job_dir: Path, name: str | None = None) -> Path:
    """A finished job as `tensortap run` leaves it: job.json, summary.json, events, log."""
    record = JobRecord(job_dir)
    record.create({"name": job_dir.name, "created": 1_700_000_000.0, "command": ["train.py"]})
    _trial(job_dir / "trial", resumed=name == "session-started-1e300")
    write_json(
        record.summary_file,
        {
            "job": job_dir.name,
            "status": "Completed",
            "training": {"status": "Completed", "exit_code": 0},
            "rules": [GOOD_RULE],
        },
    )
    record.append_event("rule_fired", rule="LossNotDecreasing", step=2, message="stopped")
    (job_dir / "logs" / "training.log").write_text("epoch 1\n")
    return job_dir


def make_hostile(job_dir: Path, name: str) -> Path:
    make_job(job_dir, name)
    file, raw = HOSTILE[name]
    if file == "session":
        record = job_dir / "trial" / "workers" / "worker_0" / "sessions" / "000000.json"
        doc = json.loads(record.read_text())
        doc["started"] = 1e300
        record.write_text(json.dumps(doc))
    else:
        (job_dir / file).write_bytes(raw)
    return job_dir


def run_cli(*argv: str) -> tuple[int, str, str]:
    """The CLI in this process: its exit status, what it printed, and what it said."""
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = cli(list(argv))
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_the_command_line_lists_a_hostile_job_with_its_reason_beside_a_good_one(
    tmp_path: Path, name: str
) -> None:
    runs = tmp_path / "runs"
    make_job(runs / "good")
    bad = make_hostile(runs / "bad", name)
    code, out, err = run_cli("jobs", "--runs", str(runs))  # no untyped error: none raised
    assert code == 0, err
    lines: dict[str, str] = {}
    for line in out.splitlines()[1:]:  # a job's row, and under it what could not be read
        if line.startswith("  ! "):
            lines[list(lines)[-1]] += "\n" + line
        else:
            lines[line.split()[0]] = line
    assert set(lines) == {"good", "bad"}
    good = lines["good"]
    assert good.split()[1:6] == ["problem:", "the", "loss", "does", "not"] and "Completed" in good
    assert "\n" not in good
    code, out, err = run_cli("jobs", "--runs", str(runs), "--json")
    rules = {r["name"]: r["rules"] for r in json.loads(out)}["good"]
    assert rules[0]["text"] == "IssuesFound (problem) at step 2"
    if HOSTILE[name][0] in ("summary.json", "job.json"):
        assert f"  ! {HOSTILE[name][0]}" in lines["bad"], lines["bad"]
    # a job's own views: an answer, or one typed line saying why (exit status 2)
    code, out, err = run_cli("summary", str(bad))
    assert code in (0, 2), err
    assert code == 0 or err.startswith("tensortap: "), err
    if code == 0 and HOSTILE[name][0] == "summary.json":
        assert "not shown" in out, out
    code, out, err = run_cli("report", str(bad), "-o", str(tmp_path / "report.html"))
    assert code == 0, err  # the report is written, saying what it could not read
    page = (tmp_path / "report.html").read_text()
    if HOSTILE[name][0] in ("summary.json", "job.json") and name != "job-trial-location-list":
        assert "cannot be read" in page or "left out" in page, name


def test_nothing_written_over_an_unreadable_summary(tmp_path: Path) -> None:
    """A job whose supervisor is gone is finalised on record, but a summary.json that cannot
    be read is said, not replaced (nothing saved is silently lost)."""
    bad = make_hostile(tmp_path / "bad", "summary-list")
    code, _, err = run_cli("summary", str(bad))
    assert code == 2 and "summary.json must hold a JSON object" in err
    assert (bad / "summary.json").read_bytes() == b"[1, 2, 3]"


def test_a_hard_linked_log_is_not_the_jobs_own(tmp_path: Path) -> None:
    job = make_job(tmp_path / "job")
    secret = tmp_path / "secret.txt"
    secret.write_text("a secret outside the job\n")
    (job / "logs" / "training.log").unlink()
    os.link(secret, job / "logs" / "training.log")
    from tensortap.exceptions import StorageError

    with pytest.raises(StorageError, match="hard links"):
        JobRecord(job).log_tail()
    with pytest.raises(StorageError, match="hard links"):
        TrainingJob.attach(job).logs()


def test_the_diagnosis_of_2000_rules_compares_each_cause_with_its_explainers_only() -> None:
    """The runs list did not answer in 90 s over a summary of 2,000 custom rules: the
    diagnosis compared every pair of causes. Counted: the comparisons made."""
    from tensortap.rules._verdict import job_diagnosis

    rules = [
        {
            "RuleConfigurationName": f"Custom{i}",
            "RuleEvaluationStatus": "IssuesFound",
            "gravest": {"rule": f"Custom{i}", "step": i, "message": "m", "severity": "problem"},
        }
        for i in range(400)
    ]
    calls = 0

    def count(frame: Any, event: str, arg: Any) -> None:
        nonlocal calls
        if event == "call" and frame.f_code.co_name == "folds":
            calls += 1

    sys.setprofile(count)
    try:
        found = job_diagnosis({"rules": rules, "training": {"status": "Completed"}})
    finally:
        sys.setprofile(None)
    assert len(found.problems) == 400
    assert calls <= 400  # was 400 * 399: every cause against every other


def test_a_real_jobs_documents_decode_with_nothing_left_out(tmp_path: Path) -> None:
    """The decoders against what the supervisor and the rule processes really write: every
    field of a real job's summary, rule statuses and events is of its kind."""
    from tensortap.jobs import Rule, rule_configs
    from tensortap.jobs._documents import decode_rule_status
    from tests.jobs.test_jobs import EVERY_STEP, SCRIPT

    job = TrainingJob(
        command=[sys.executable, str(SCRIPT), "--model", "deep_sigmoid", "--steps", "6"],
        output_path=tmp_path / "runs",
        debugger_hook_config=EVERY_STEP,
        rules=[
            Rule.builtin(rule_configs.vanishing_gradient()),
            Rule.builtin(rule_configs.loss_not_decreasing()),
        ],
    )
    job.fit(wait=True, logs=False)
    record = job.record
    found = record.read_summary()
    assert found is not None and found.problems == ()
    assert found.summary == json.loads(record.summary_file.read_text())  # nothing dropped
    fired = {r["RuleConfigurationName"]: r for r in found.summary["rules"]}
    assert fired["VanishingGradient"]["RuleEvaluationStatus"] == "IssuesFound"
    assert isinstance(fired["VanishingGradient"]["gravest"]["step"], int)
    for name in fired:
        path = record.rule_status_file(name)
        assert decode_rule_status(path.read_bytes(), str(path)) == json.loads(path.read_text())
    events, _ = record.events()
    lines = record.events_file.read_text().splitlines()
    assert record.skipped_events == 0 and events == [json.loads(line) for line in lines]
    assert record.job() == json.loads(record.job_file.read_text())


def test_fuzzed_job_documents_lose_no_value_unsaid(tmp_path: Path) -> None:
    """The structure-aware fuzzer, 150 cases of each document (bench_fuzz.py --format jobs
    runs thousands): the good job keeps its values beside the mutated one, which is read
    right or listed with its reason; no untyped error."""
    pytest.importorskip("starlette")
    from tensortap.testing._job_fuzz import fuzz_jobs

    found = fuzz_jobs(tmp_path, cases=150, seed=3)
    assert found.failures == []
    for kind in ("summary", "job", "events"):
        counts = found.by_kind[kind]
        assert sum(counts.values()) == 150
        assert counts["read"] and counts["listed"], (kind, counts)  # both paths were taken


pytest.importorskip("starlette")
pytest.importorskip("uvicorn")


def test_every_view_of_the_dashboard_serves_the_good_run_beside_every_hostile_one(
    tmp_path: Path, serve
) -> None:
    from tests.serve.test_serve import raw_get

    runs = tmp_path / "runs"
    make_job(runs / "good")
    for name in HOSTILE:
        make_hostile(runs / name, name)
    dashboard = serve(runs, warm=False)
    status, body = get(dashboard.url + "api/runs", timeout=60)
    assert status == 200, body
    listed = {r["name"]: r for r in body["runs"]}
    assert set(listed) == {"good", *HOSTILE}
    good = listed["good"]
    assert good["status"] == "Completed" and good["last_step"] == 2 and not good["problems"]
    assert good["rules"] == [
        {
            "name": "LossNotDecreasing",
            "status": "IssuesFound",
            "severity": "problem",
            "gravest_step": 2,
            "evaluated": None,
        }
    ]
    assert good["started"] == 1_700_000_000.0
    for name, (file, _) in HOSTILE.items():
        run = listed[name]
        if file in ("summary.json", "job.json") and name != "job-trial-location-list":
            assert any(file in p for p in run["problems"]), (name, run["problems"])
        pages = ("", "/curves", "/health")
        for path in (
            *(f"/api/run/{run['id']}{page}" for page in pages),
            f"/report/{run['id']}",
            f"/run/{run['id']}",
        ):
            status, headers, page = raw_get(dashboard.url, path)
            assert status in (200, 422), (name, path, status, page[:300])
            assert headers["x-content-type-options"] == "nosniff", (name, path)
            assert headers["x-frame-options"] == "DENY", (name, path)
    status, body = get(dashboard.url + f"api/run/{listed['summary-step-1e999']['id']}")
    assert status == 200 and body["status"] == "Unreadable"
    status, body = get(dashboard.url + f"api/run/{listed['summary-gravest-step-x']['id']}")
    assert status == 200 and [r["name"] for r in body["all_rules"]] == ["R"]
    assert any("gravest" in p for p in body["problems"])


def test_an_unexpected_error_answers_500_with_the_security_headers(
    tmp_path: Path, serve, monkeypatch
) -> None:
    from tensortap.serve import _data
    from tests.serve.test_serve import raw_get

    make_job(tmp_path / "runs" / "good")
    dashboard = serve(tmp_path / "runs", warm=False)
    (ident,) = [r["id"] for r in get(dashboard.url + "api/runs")[1]["runs"]]

    def fault(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("a fault of ours")

    monkeypatch.setattr(_data, "detail", fault)
    status, headers, body = raw_get(dashboard.url, f"/api/run/{ident}")
    assert status == 500
    assert headers["x-frame-options"] == "DENY" and headers["x-content-type-options"] == "nosniff"
    assert "content-security-policy" in headers and b"a fault of ours" not in body
    status, _, _ = raw_get(dashboard.url, "/api/runs")  # and the server goes on answering
    assert status == 200


def test_the_dashboard_keeps_a_bounded_number_of_a_jobs_events(tmp_path: Path, monkeypatch) -> None:
    """An events.jsonl of millions of lines was kept whole in the server's memory."""
    from tensortap.serve import _data
    from tensortap.serve._catalog import Catalog

    job = make_job(tmp_path / "runs" / "job")
    record = JobRecord(job)
    for step in range(25):
        record.append_event("rule_fired", rule="R", step=step, message=f"fired {step}")
    monkeypatch.setattr(_data, "MAX_EVENTS_KEPT", 10)
    (run,) = Catalog([str(tmp_path / "runs")]).runs()
    kept = _data._events(run)
    assert [e["step"] for e in kept] == list(range(15, 25))  # the newest
    record.append_event("rule_fired", rule="R", step=25, message="fired 25")
    assert [e["step"] for e in _data._events(run)] == list(range(16, 26))


def test_the_fuzzers_killed_job_is_read_with_nothing_left_out(tmp_path: Path) -> None:
    """The fuzzer's seeds are documents tensortap writes: decoded whole, the killed one's
    failure kept (a signal number was once refused as no string)."""
    from tensortap.testing._job_fuzz import healthy_job

    healthy_job(tmp_path / "job", killed=True)
    found = JobRecord(tmp_path / "job").read_summary()
    assert found is not None and found.problems == ()
    assert found.summary["training"]["failure"]["signal"] == 9
    assert JobRecord(tmp_path / "job").events()[0] and JobRecord(tmp_path / "job").job()


@pytest.mark.parametrize("planted", ["fifo", "-1", "0"])
def test_a_planted_supervisor_pid_neither_hangs_nor_names_a_process_group(
    tmp_path: Path, planted: str
) -> None:
    """``supervisor.pid`` as a FIFO hung ``tensortap summary`` (opened to read, forever); -1
    or 0 asked ``kill`` about every process or the group: a job no supervisor runs."""
    import subprocess

    job = make_job(tmp_path / "job")
    record = JobRecord(job)
    write_json(record.summary_file, {"status": "InProgress", "rules": []})
    if planted == "fifo":
        os.mkfifo(job / "supervisor.pid")
    else:
        (job / "supervisor.pid").write_text(planted)
    done = subprocess.run(
        [sys.executable, "-m", "tensortap.cli", "summary", str(job)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    if planted == "fifo":  # not read: taken as a supervisor not started yet
        assert "InProgress" in done.stdout
    else:  # no supervisor: the record is finalised
        assert "job job: Failed" in done.stdout
        assert "supervisor died" in json.loads(record.summary_file.read_text())["error"]


def test_a_rule_statuss_bad_evidence_is_listed_and_the_good_kept() -> None:
    """A rule status's ``evidence`` (its findings that need harm, beside the gravest): each
    item that is no finding is left out with its reason; the others are kept."""
    from tensortap.jobs._documents import MAX_EVIDENCE_READ, decode_rule_status_listed

    good = {"rule": "R", "step": 3, "severity": "warning", "details": {"needs_harm": True}}
    status = {"RuleConfigurationName": "R", "RuleEvaluationStatus": "IssuesFound",
              "evidence": [good, "junk", {"step": "x"}, {**good, "details": {"cause": 7}}]}  # fmt: skip
    kept, problems = decode_rule_status_listed(json.dumps(status).encode(), "rules/R.json")
    assert kept["evidence"] == [good]
    assert len(problems) == 3, problems
    for i, problem in enumerate(problems, start=1):
        assert problem.startswith(f"rules/R.json ('R') evidence[{i}]") and "left out" in problem
    assert "must be an object (a finding), got 'junk'" in problems[0]
    flood = {**status, "evidence": [good] * (MAX_EVIDENCE_READ + 5)}
    kept, problems = decode_rule_status_listed(json.dumps(flood).encode(), "rules/R.json")
    assert len(kept["evidence"]) == MAX_EVIDENCE_READ
    assert problems and "more than the 16 read" in problems[0]
    not_a_list = {**status, "evidence": {"step": 1}}
    kept, problems = decode_rule_status_listed(json.dumps(not_a_list).encode(), "rules/R.json")
    assert "evidence" not in kept and "'evidence' must be a list of findings" in problems[0]
