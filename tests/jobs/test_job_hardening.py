"""Jobs that survive their supervisor's death, keep secrets off disk, and refuse every mistake
before training starts (Python API and CLI)."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tensortap.cli import main as cli
from tensortap.exceptions import InvalidConfigError
from tensortap.jobs import DebuggerHookConfig, Rule, TrainingJob, rule_configs
from tensortap.rules.builtin import BUILTIN_RULES

from .test_jobs import EVERY_STEP, RULES, SCRIPT, run, statuses

SECRET = "tt-secret-value-5f1c9e"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead too
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def _poll(condition, what: str, deadline: float = 120.0) -> None:
    end = time.monotonic() + deadline
    while not condition():
        assert time.monotonic() < end, what
        time.sleep(0.05)


def test_killing_the_supervisor_leaves_no_orphan_and_a_final_record(tmp_path: Path) -> None:
    job = TrainingJob(
        command=[sys.executable, str(SCRIPT), "--steps", "100000", "--sleep", "0.01"],
        output_path=tmp_path / "runs",
        debugger_hook_config=EVERY_STEP,
        rules=[Rule.builtin(rule_configs.vanishing_gradient())],
    )
    job.fit(wait=False)
    _poll(lambda: (job.summary().get("training") or {}).get("pid"), "training never started")
    summary = job.record.summary()
    assert summary is not None
    training = summary["training"]["pid"]
    supervisor = int((Path(job.job_dir) / "supervisor.pid").read_text())
    hosts = [e["pid"] for e in job.record.iter_events() if e["event"] == "rule_started"] or []
    _poll(lambda: any(e["event"] == "rule_started" for e in job.record.iter_events()), "no rule")
    hosts = [e["pid"] for e in job.record.iter_events() if e["event"] == "rule_started"]
    os.kill(supervisor, signal.SIGKILL)
    _poll(lambda: not _alive(training) and not any(_alive(p) for p in hosts), "orphans run on")
    final = TrainingJob.attach(job.job_dir).summary()
    assert final["status"] == "Failed" and "supervisor died" in final["error"]
    assert statuses(job) == {"VanishingGradient": "Error"}
    on_disk = json.loads((Path(job.job_dir) / "summary.json").read_text())
    assert on_disk["status"] == "Failed"  # finalised on disk, not only in this answer
    out = subprocess.run(
        [sys.executable, "-m", "tensortap.cli", "summary", job.job_dir],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "Failed" in out.stdout


def test_no_secret_value_is_written_to_disk(tmp_path: Path) -> None:
    job = run(
        tmp_path,
        [Rule.builtin(rule_configs.vanishing_gradient())],
        "--steps",
        "5",
        environment={"TT_TOKEN": SECRET},
    )
    assert job.summary()["status"] == "Completed"
    for path in Path(job.job_dir).rglob("*"):
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), path
    record = json.loads((Path(job.job_dir) / "job.json").read_text())
    assert record["environment_names"] == ["TT_TOKEN"]
    for name in ("job.json", "summary.json", "hook.json"):
        found = Path(job.job_dir) / name
        if found.exists():
            assert stat.S_IMODE(found.stat().st_mode) == 0o600, name


def test_the_training_still_gets_the_environment(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(
        f"import os, sys\nsys.exit(0 if os.environ.get('TT_TOKEN') == {SECRET!r} else 7)\n"
    )
    job = TrainingJob(
        command=[sys.executable, str(probe)],
        output_path=tmp_path / "runs",
        environment={"TT_TOKEN": SECRET},
    )
    job.fit(wait=False)
    assert job.wait(timeout=120, logs=False)["training"]["exit_code"] == 0


def test_a_custom_rule_calling_sys_exit_is_an_error(tmp_path: Path) -> None:
    job = run(
        tmp_path, [Rule.custom("ExitsAt", RULES, rule_parameters={"step": "3"})], "--steps", "8"
    )
    assert job.summary()["status"] == "Completed"
    assert statuses(job) == {"ExitsAt": "Error"}
    (rule,) = job.summary()["rules"]
    assert "sys.exit(0)" in rule["StatusDetails"]


def test_rule_jobs_are_described_right_after_fit_without_waiting(tmp_path: Path) -> None:
    job = TrainingJob(
        command=[sys.executable, str(SCRIPT), "--steps", "3"],
        output_path=tmp_path / "runs",
        rules=[Rule.builtin(rule_configs.vanishing_gradient())],
    )
    job.fit(wait=False)
    described = job.describe_rule_execution_jobs()
    assert [d["RuleName"] for d in described] == ["VanishingGradient"]
    assert described[0]["RuleStatus"] in ("InProgress", "NoIssuesFound", "NoData")
    job.wait(timeout=120, logs=False)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"job_name": "../x"}, "invalid job_name"),
        ({"environment": {"A": 1}}, "environment must map names to strings"),
        ({"rule_timeout_secs": "x"}, "rule_timeout_secs must be a number"),
        ({"hyperparamters": {}}, "did you mean 'hyperparameters'"),
        ({"rulez": []}, "did you mean 'rules'"),
        ({"rules_specification": 5}, "rules_specification must be a list"),
        ({"command": [sys.executable, "missing.py"]}, "missing.py does not exist"),
    ],
)
def test_mistakes_are_refused_at_construction(tmp_path: Path, kwargs, message) -> None:
    kwargs.setdefault("command", [sys.executable, str(SCRIPT)])
    with pytest.raises(InvalidConfigError, match=message):
        TrainingJob(output_path=tmp_path / "runs", **kwargs)
    assert not (tmp_path / "runs").exists()


def test_a_name_near_a_known_collection_is_a_warning_not_a_refusal(tmp_path: Path, caplog) -> None:
    """Issue 43 reverses the refusal asserted here before: an unknown name is a collection of
    one's own (smdebug's semantics); one near a known name is warned about, naming it."""
    with caplog.at_level("WARNING", logger="tensortap.core._collections"):
        TrainingJob(
            command=[sys.executable, str(SCRIPT)],
            output_path=tmp_path / "runs",
            debugger_hook_config=DebuggerHookConfig({"include_collections": "gradient"}),
        )
    assert "'gradient' (did you mean 'gradients'?)" in caplog.text


def test_smdebug_cloud_keywords_are_accepted_and_base_job_name_is_used(tmp_path: Path) -> None:
    job = TrainingJob(
        entry_point=str(SCRIPT),
        output_path=tmp_path / "runs",
        base_job_name="smdebug-seed",
        role="arn:aws:iam::1:role/x",
        train_instance_type="ml.p3.2xlarge",
        train_instance_count=1,
        framework_version="2.1",
        py_version="py3",
    )
    assert job.job_name.startswith("smdebug-seed-")


def test_the_seeds_estimator_keywords_are_accepted_and_said_to_be_ignored(
    tmp_path: Path, caplog
) -> None:
    """Seed 000 passes script_mode=True, seed 001 debug=True, seed 004 source_dir='src' with
    an entry_point inside it; none means anything for a local job but where the script is."""
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "train.py").write_text("print('trained')\n")
    with caplog.at_level("INFO", logger="tensortap.jobs"):
        job = TrainingJob(
            entry_point="train.py",
            source_dir=str(tmp_path / "src"),
            output_path=tmp_path / "runs",
            role="arn:aws:iam::1:role/x",
            train_instance_type="ml.m4.xlarge",
            train_volume_size=400,
            train_max_run=3600,
            image_name="custom:latest",
            script_mode=True,
            debug=True,
        )
    assert job.command[1] == str(tmp_path / "src" / "train.py")
    assert "debug, image_name, role, script_mode" in caplog.text
    with pytest.raises(InvalidConfigError, match="entry_point missing.py is not a file"):
        TrainingJob(entry_point="missing.py", source_dir=str(tmp_path / "src"))


def test_a_job_answers_its_name_and_a_sagemaker_secondary_status(tmp_path: Path) -> None:
    """Seed 004: estimator.latest_training_job.name, describe()['SecondaryStatus']."""
    go = tmp_path / "go"
    wait_for_go = f"import os, time\nwhile not os.path.exists({str(go)!r}): time.sleep(0.05)"
    done = TrainingJob(command=[sys.executable, "-c", wait_for_go], output_path=tmp_path / "runs")
    failed = TrainingJob(
        command=[sys.executable, "-c", "raise SystemExit(3)"], output_path=tmp_path / "runs"
    )
    assert done.latest_training_job.name == done.job_name
    done.fit(wait=False)
    _poll(lambda: done.describe()["SecondaryStatus"] != "Starting", "training to start")
    assert done.describe()["SecondaryStatus"] == "Training"
    go.touch()
    failed.fit(wait=False)
    for job in (done, failed):
        assert job.wait(timeout=120, logs=False)["status"] in ("Completed", "Failed")
    assert done.describe()["SecondaryStatus"] == "Completed"
    assert failed.describe()["SecondaryStatus"] == "Failed"
    attached = TrainingJob.attach(done.job_dir)
    assert attached.name == done.name == done.describe()["TrainingJobName"]


def test_rule_parameters_are_checked_by_the_rule_before_training() -> None:
    with pytest.raises(InvalidConfigError, match="num_steps"):
        rule_configs.loss_not_decreasing(num_steps="-5")
    refused = []
    for name in BUILTIN_RULES:  # every default configuration passes, but one that needs a limit
        try:
            rule_configs.config_for(name)
        except InvalidConfigError as exc:
            refused.append((name, str(exc)))
    assert [name for name, _ in refused] == ["TensorVariance"]
    assert "needs at least one limit" in refused[0][1]
    rule_configs.tensor_variance(max_threshold="10")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--rule", "loss_not_decreasing:num_steps=-5"], "num_steps"),
        (["--", sys.executable, "missing.py"], "missing.py does not exist"),
    ],
)
def test_cli_mistakes_exit_non_zero_before_any_job(tmp_path: Path, capsys, args, message) -> None:
    training = [] if "--" in args else ["--", sys.executable, str(SCRIPT)]
    code = cli(["run", "--output", str(tmp_path / "runs"), *args, *training])
    assert code != 0
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("command", ["report", "tensorboard", "tensorplot"])
def test_cli_on_a_folder_that_is_not_a_trial_says_so_in_one_line(tmp_path: Path, command) -> None:
    (tmp_path / "notes.txt").write_text("hello")
    extra = [str(tmp_path / "tb")] if command == "tensorboard" else []
    out = subprocess.run(
        [sys.executable, "-m", "tensortap.cli", command, str(tmp_path), *extra],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2
    # report also reads other trackers' logs (issue 47), so it names those formats too
    said = "is neither a tensortap trial" if command == "report" else "holds no tensortap trial"
    assert said in out.stderr and "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr


def test_report_without_the_viz_extra_says_what_to_install(tmp_path: Path) -> None:
    """Scalars are drawn as SVG with no plotting library: a report of them needs no extra.
    Activations are plotted with matplotlib: without tensortap[viz], the report says what to
    install (no traceback)."""
    import numpy as np

    import tensortap as tt

    def report(trial: Path) -> subprocess.CompletedProcess[str]:
        program = (
            "import sys; sys.modules['matplotlib'] = None\n"  # as if tensortap[viz] were missing
            "from tensortap.cli import main\n"
            f"sys.exit(main(['report', {str(trial)!r}, '-o', {str(trial) + '.html'!r}]))"
        )
        return subprocess.run(
            [sys.executable, "-c", program], capture_output=True, text=True, timeout=120
        )

    with tt.Hook(tmp_path / "t", save_config=tt.SaveConfig(save_interval=1)) as hook:
        hook.save_scalar("loss", 1.0)
    out = report(tmp_path / "t")
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "t.html").stat().st_size > 0
    every = tt.SaveConfig(save_interval=1)
    with tt.Hook(
        tmp_path / "a", save_config=every, include_collections=["relu_activations"]
    ) as hook:
        for _ in range(3):
            hook.save_tensor("l1/relu_output_0", np.ones((8, 4), np.float32), "relu_activations")
            hook.next_step()
    out = report(tmp_path / "a")
    assert out.returncode == 2, out.stderr
    assert "pip install 'tensortap[viz]'" in out.stderr and "Traceback" not in out.stderr
