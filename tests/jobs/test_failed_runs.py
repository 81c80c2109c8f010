"""A run that did not finish is never "healthy" (issue 43): a PyTorch script that raises at its
13th step ended "Failed", then "diagnosis: healthy: 12 rules judged the run and found no
problem". Now its verdict is how it ended, with what the rules saw before it, in
``tensortap run``'s output, ``tensortap summary``, ``diagnose()``, the dashboard and the report.
Real scripts under ``tensortap run`` (subprocesses)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import tensortap as tt
from tensortap.jobs._failure import last_exception
from tests.jobs.test_framework_jobs import run_job

SCRIPT = str(Path(__file__).parent / "train_script.py")


def _cli(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "tensortap.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return done.stdout + done.stderr


def _diagnosis_line(text: str) -> str:
    (line,) = [line for line in text.splitlines() if line.strip().startswith("diagnosis:")]
    return line


def test_a_crashed_script_is_failed_at_its_step_with_its_exception(tmp_path: Path) -> None:
    done, record = run_job(tmp_path, "python", SCRIPT, "--crash-at", "12")
    assert done.returncode != 0
    line = _diagnosis_line(done.stdout)
    assert "healthy" not in line
    # the hook had seen steps 0..11 begin when the loop raised before its 13th forward pass
    expected = "training failed at step 11: RuntimeError: planted crash at step 12; before it, "
    assert expected in line, line
    assert re.search(r"before it, \d+ rules judged the steps saved and found no problem", line)
    assert "training ended: Failed (exit code 1): training failed at step 11: " in done.stdout
    summary_text = _cli("summary", str(record.dir))
    assert expected in _diagnosis_line(summary_text)
    no_data = [line for line in summary_text.splitlines() if " NoData" in line]
    assert no_data  # rules with nothing of their kind saved (no EVAL step, no input image)
    for line in no_data:  # a rule that judged nothing never says "(2 steps judged)"
        assert line.endswith("(no step judged)"), line
    found = tt.diagnose(record.dir)
    assert found.verdict == "failed" and not found.healthy
    assert found.failure == "training failed at step 11: RuntimeError: planted crash at step 12"
    summary = record.summary() or {}
    assert summary["diagnosis"]["verdict"] == "failed"
    assert summary["training"]["failure"]["step"] == 11
    report = tmp_path / "report.html"
    _cli("report", str(record.dir), "-o", str(report))
    page = report.read_text()
    assert expected.replace("; before it, ", "") in page
    assert "<th>steps judged</th>" in page  # counted as the summary counts them
    judged = {}
    for rule in summary["rules"]:  # a rule that judged nothing says "none", never a count
        name, status = rule["RuleConfigurationName"], rule["RuleEvaluationStatus"]
        row = re.search(
            rf"<tr><td class='text'>{name}</td><td class='text {status}'>{status}</td>"
            r"<td>[^<]*</td><td>([^<]*)</td>",
            page,
        )
        assert row, name
        judged[name] = row.group(1)
        assert judged[name] == ("none" if status == "NoData" else str(rule["judged"])), name
    assert "none" in judged.values()  # Overfit: no EVAL step; CheckInputImages: no image
    # the loss is a vital sign saved at every step (not at the job's every 10th): LossSpike
    # judged steps 10 and 11 once its baseline of 10 steps was warm, and its row counts them
    assert judged["LossSpike"] == "2"


def test_a_killed_script_is_killed_after_its_last_saved_step(tmp_path: Path) -> None:
    done, record = run_job(tmp_path, "python", SCRIPT, "--kill-at", "25", "--sleep", "0.1")
    line = _diagnosis_line(done.stdout)
    assert "healthy" not in line
    last = tt.create_trial(record.trial_location).steps()[-1]
    expected = f"training was killed after step {last}, the last one saved (signal 9, SIGKILL)"
    assert expected in line, line
    assert tt.diagnose(record.dir).verdict == "failed"


def test_the_dashboard_shows_a_failed_run_as_failed(tmp_path: Path, serve) -> None:
    pytest.importorskip("starlette")
    pytest.importorskip("uvicorn")
    from tests.helpers.json_get import get_json

    done, _ = run_job(tmp_path, "python", SCRIPT, "--crash-at", "12")
    assert done.returncode != 0
    dashboard = serve(tmp_path / "runs")
    _, runs = get_json(dashboard.url + "api/runs")
    (run,) = runs["runs"]
    assert run["diagnosis"]["verdict"] == "failed"
    assert run["diagnosis"]["headline"].startswith("training failed at step 11: RuntimeError")
    _, one = get_json(dashboard.url + f"api/run/{run['id']}")
    assert one["diagnosis"]["verdict"] == "failed"
    judged = {r["name"]: r["steps_judged"] for r in one["all_rules"]}
    statuses = {r["name"]: r["status"] for r in one["all_rules"]}
    for name, status in statuses.items():  # a rule that judged nothing never shows a count
        if status == "NoData":
            assert judged[name] == "no step judged", (name, judged[name])


def test_the_exception_is_the_last_tracebacks_last_line() -> None:
    """For a command that is no Python script run by the job: read from the training log."""
    log = "\n".join(
        [
            "epoch 1 loss 0.5",
            "Traceback (most recent call last):",
            '  File "a.py", line 3, in <module>',
            "KeyError: 'x'",
            "",
            "During handling of the above exception, another exception occurred:",
            "",
            "Traceback (most recent call last):",
            '  File "a.py", line 5, in <module>',
            "    raise ValueError('the batch had no rows')",
            "ValueError: the batch had no rows",
            "some output after it",
        ]
    )
    assert last_exception(log) == "ValueError: the batch had no rows"
    assert last_exception("no traceback here\nValueError: looks like one") is None
