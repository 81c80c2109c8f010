"""The tensortap command: run, jobs, summary, stop."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

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
    with pytest.raises(
        InvalidConfigError, match="built-in rules are .*all_zero, .*vanishing_gradient"
    ):
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
    assert (
        "VanishingGradient            IssuesFound (problem, a warning here: no rule judged harm) "
        "at step 0" in done.stdout
    )
    listing = tensortap("jobs", cwd=tmp_path)
    header, row = listing.stdout.splitlines()
    assert header.split()[:3] == ["JOB", "VERDICT", "STATUS"] and len(row) <= 100
    # the diagnosis keeps the vanishing gradients as a warning, and no outcome rule judged
    # whether they harm the run: unknown, never healthy
    assert re.search(r"unknown \(1 warning\) +Stopped +\d+ +(\d+m)?\d+s +\d\.\d+ +0\.1\b", row), row
    (shown,) = json.loads(tensortap("jobs", "--json", cwd=tmp_path).stdout)
    assert shown["rules"][0]["name"] == "VanishingGradient"
    assert shown["rules"][0]["text"] == "IssuesFound (problem) at step 0"
    assert shown["hyperparameters"]["learning_rate"] == 0.1 and shown["steps"] >= 1
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

    from tensortap.jobs._live import LiveView
    from tensortap.jobs._record import JobRecord

    record = JobRecord(tmp_path / "job")
    record.create({"name": "job", "rules": []})
    record.append_event("rule_fired", rule="VanishingGradient", step=3, message="tiny")
    summary: dict[str, Any] = {
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
    assert "  diagnosis: healthy: " in done.stdout  # one verdict, before the rules'
    assert done.stdout.index("diagnosis: healthy") < done.stdout.index("rules (problems first)")


def test_the_live_view_streams_the_training_output_between_events(tmp_path: Path) -> None:
    import io

    from tensortap.jobs._live import LiveView
    from tensortap.jobs._record import JobRecord

    record = JobRecord(tmp_path / "job")
    record.create({"name": "job", "rules": []})
    record.training_log.parent.mkdir(parents=True, exist_ok=True)
    summary = {"status": "InProgress", "training": {"status": "InProgress"}, "rules": []}
    out = io.StringIO()
    view = LiveView(record, out)
    with open(record.training_log, "a", encoding="utf-8") as log:
        log.write("epoch 0: loss 2.3\nepoch 1: lo")  # the second line is not whole yet
        log.flush()
        view.update(summary)
        record.append_event("rule_fired", rule="ExplodingTensor", step=9, message="NaN")
        log.write("ss 1.9\nlast words")
        log.flush()
        view.update(summary)
    view.finish({**summary, "status": "Completed"})
    lines = out.getvalue().splitlines()
    assert lines[:4] == [
        "epoch 0: loss 2.3",
        "epoch 1: loss 1.9",
        "[tensortap] ExplodingTensor fired at step 9: NaN",
        "last words",  # what was left when training ended
    ]
    quiet = io.StringIO()
    LiveView(record, quiet, training_output=False).update(summary)
    assert "epoch 0" not in quiet.getvalue() and "ExplodingTensor" in quiet.getvalue()


def test_run_streams_the_script_output_quiet_does_not_and_hints_work_in_a_new_shell(
    tmp_path: Path,
) -> None:
    done = tensortap(
        "run", "--rule", "dead_relu", "--", "python", str(SCRIPT), "--steps", "3", cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert "trained 3 steps" in done.stdout  # the script's own print
    hints = done.stdout.split("next:\n", 1)[1].splitlines()
    assert any(" serve " in h for h in hints) and any(" names " in h for h in hints)
    assert any(" report " in h for h in hints) and any(" tensorplot " in h for h in hints)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}  # a new shell: no .venv on PATH
    for hint in hints:
        command = hint.split("   #")[0].strip()
        if " serve " in command:
            continue  # a server: it would not return
        ran = subprocess.run(
            command, shell=True, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
        )
        assert ran.returncode == 0, f"{command}: {ran.stderr}"
    quiet = tensortap(
        "run", "--quiet", "--no-rules", "--", "python", str(SCRIPT), "--steps", "3", cwd=tmp_path
    )
    assert quiet.returncode == 0 and "trained 3 steps" not in quiet.stdout


def test_names_lists_tensors_and_unknown_names_get_the_closest(tmp_path: Path, capsys) -> None:
    import numpy as np

    import tensortap as tt

    hook = tt.Hook(
        tmp_path / "t",
        save_config=tt.SaveConfig(save_interval=1),
        include_collections=["gradients", "scalars"],
    )
    for step in range(3):
        for i in range(12):
            hook.save_tensor(f"gradient/layer{i}.weight", np.ones((2, 3)), collections="gradients")
        hook.save_scalar("loss", 1.0 / (step + 1))
        hook.next_step()
    hook.close()
    assert main(["names", str(tmp_path / "t"), "--regex", "layer1[01]"]) == 0
    rows = capsys.readouterr().out.splitlines()
    assert rows[0].split() == ["TENSOR", "COLLECTIONS", "STEPS", "SHAPE"]
    assert rows[1].split() == ["gradient/layer10.weight", "all,gradients", "3", "(0..2)", "2x3"]
    assert len(rows) == 3
    assert main(["names", str(tmp_path / "t"), "--regex", "("]) == 2
    assert "invalid regex" in capsys.readouterr().err
    with pytest.raises(tt.exceptions.TensorUnavailable) as caught:
        tt.create_trial(tmp_path / "t").tensor("gradient/layer1.weigth")
    assert "did you mean 'gradient/layer1.weight'" in str(caught.value)
    assert "more" not in str(caught.value)


def test_version_is_printed_and_matches_the_package() -> None:
    import tensortap

    done = subprocess.run(
        [sys.executable, "-m", "tensortap.cli", "--version"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"tensortap {tensortap.__version__}\n"
    pyproject = Path(__file__).parents[2] / "pyproject.toml"
    assert f'\nversion = "{tensortap.__version__}"\n' in pyproject.read_text()
