"""The tensortap command: run, jobs, summary, stop."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tensortap.cli import builtin_rule, collection, custom_rule, main, parse_params
from tensortap.exceptions import InvalidConfigError

HERE = Path(__file__).parent
SCRIPT = HERE / "train_script.py"


def tensortap(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tensortap.cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_parameters_parse_like_the_issue_spells_them() -> None:
    assert parse_params("include_regex=.*,save_steps=1,2,3", "x") == {
        "include_regex": ".*",
        "save_steps": "1,2,3",
    }
    assert parse_params("", "x") == {}
    with pytest.raises(InvalidConfigError, match="expected name=value pairs"):
        parse_params("oops", "--rule x")
    rule = builtin_rule("loss_not_decreasing:num_steps=20")
    assert rule.name == "LossNotDecreasing" and rule.parameters["num_steps"] == "20"
    assert builtin_rule("VanishingGradient").class_name == "VanishingGradient"
    with pytest.raises(InvalidConfigError, match="built-in rules: vanishing_gradient"):
        builtin_rule("vanishing_gradients")
    custom = custom_rule(f"{HERE / 'rules_for_jobs.py'}:FiresFrom:step=3")
    assert (custom.class_name, dict(custom.parameters)) == ("FiresFrom", {"step": "3"})
    with pytest.raises(InvalidConfigError, match=r"path.py:ClassName"):
        custom_rule("FiresFrom")
    assert collection("all:include_regex=.*,save_steps=1,2,3").parameters["save_steps"] == "1,2,3"


def test_bad_rule_exits_2_before_anything_runs(tmp_path: Path, capsys) -> None:
    code = main(["run", "--output", str(tmp_path), "--rule", "nope", "--", "python", "x.py"])
    assert code == 2
    assert "no built-in rule 'nope'" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []
    assert main(["run", "--rule", "vanishing_gradient"]) == 2  # no training command


def test_run_then_jobs_and_summary(tmp_path: Path) -> None:
    done = tensortap(
        "run",
        "--rule",
        "vanishing_gradient",
        "--hook-param",
        "save_interval=2",
        "--collection",
        "all:include_regex=.*,save_steps=1,2,3",
        "--stop-on",
        "VanishingGradient",
        "--fail-on-issues",
        "--",
        "python",
        str(SCRIPT),
        "--model",
        "deep_sigmoid",
        "--steps",
        "2000",
        "--sleep",
        "0.01",
        cwd=tmp_path,
    )
    assert done.returncode == 3, done.stdout + done.stderr  # a rule fired
    assert "VanishingGradient fired at step 0" in done.stdout
    assert "stop requested" in done.stdout
    assert "VanishingGradient            IssuesFound (problem) at step 0" in done.stdout
    listing = tensortap("jobs", cwd=tmp_path)
    assert "Stopped  VanishingGradient: IssuesFound (problem) at step 0" in listing.stdout
    (job,) = (tmp_path / "runs").iterdir()
    summary = tensortap("summary", job.name, cwd=tmp_path)
    assert summary.returncode == 0 and "training: Stopped (exit code 0)" in summary.stdout
    assert tensortap("summary", "nope", cwd=tmp_path).returncode == 2


def test_a_command_that_cannot_start_fails_the_job(tmp_path: Path) -> None:
    done = tensortap("run", "--rule", "vanishing_gradient", "--", "no-such-command-x", cwd=tmp_path)
    assert done.returncode == 1
    assert "cannot start no-such-command-x" in done.stdout
    (job,) = (tmp_path / "runs").iterdir()
    summary = tensortap("summary", job.name, cwd=tmp_path).stdout
    assert f"job {job.name}: Failed" in summary and "exit code 127" in summary


def test_live_view_redraws_in_a_terminal_and_prints_lines_elsewhere(tmp_path: Path) -> None:
    import io

    from tensortap.jobs.live import LiveView
    from tensortap.jobs.record import JobRecord

    record = JobRecord(tmp_path / "job")
    record.create({"name": "job", "rules": []})
    record.append_event("rule_fired", rule="VanishingGradient", step=3, message="tiny")
    summary = {
        "status": "InProgress",
        "training": {"status": "InProgress"},
        "rules": [{"RuleConfigurationName": "VanishingGradient", "RuleEvaluationStatus": "x"}],
    }

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    screen = Terminal()
    view = LiveView(record, screen)
    view.update(summary)
    view.update({**summary, "rules": [{**summary["rules"][0], "RuleEvaluationStatus": "y"}]})
    text = screen.getvalue()
    assert "VanishingGradient fired at step 3: tiny" in text
    assert "\x1b[2F\x1b[J" in text  # the two-line table was redrawn in place
    plain = io.StringIO()
    LiveView(record, plain).update(summary)
    assert plain.getvalue().splitlines() == [
        "[tensortap] VanishingGradient fired at step 3: tiny",
        "[tensortap] rule VanishingGradient: x",
    ]


def test_run_without_rules_runs_the_recommended_set_and_says_what_it_could_not_judge(
    tmp_path: Path,
) -> None:
    done = tensortap(
        "run", "--custom-rule", f"{HERE / 'rules_for_jobs.py'}:GradientMean:threshold=0.5",
        "--", sys.executable, str(SCRIPT), "--steps", "20", cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "GradientMean                 NoData: nothing was judged: the trial has no tensor " \
        "in gradients" in done.stdout  # fmt: skip
    done = tensortap("run", "--", sys.executable, str(SCRIPT), "--steps", "30", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    ran = done.stdout.split("rules (problems first):")[1].split("trial (debugger")[0]
    for name in ("ExplodingTensor", "LossNotDecreasing", "VanishingGradient", "DeadRelu"):
        assert name in ran
    assert "(problem)" not in ran  # a healthy run: nothing graver than advice
    assert "IssuesFound (problem)" not in done.stdout
