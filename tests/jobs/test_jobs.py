"""Training jobs end to end: real training processes, real rule processes, real servers."""

from __future__ import annotations

import json
import socket
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

import tensortap as tt
from tensortap.exceptions import InvalidConfigError
from tensortap.jobs import (
    CollectionConfig,
    DebuggerHookConfig,
    Email,
    Rule,
    StopTraining,
    TensorBoardOutputConfig,
    TrainingJob,
    Webhook,
    rule_configs,
)

HERE = Path(__file__).parent
SCRIPT = HERE / "train_script.py"
RULES = HERE / "rules_for_jobs.py"
EVERY_STEP = DebuggerHookConfig(hook_parameters={"save_interval": "1"})


def run(tmp_path: Path, rules: list[Rule], *args: str, **kwargs: Any) -> TrainingJob:
    job = TrainingJob(
        command=[sys.executable, str(SCRIPT), *args],
        output_path=tmp_path / "runs",
        debugger_hook_config=kwargs.pop("debugger_hook_config", EVERY_STEP),
        rules=rules,
        **kwargs,
    )
    job.fit(wait=False)
    summary = job.wait(timeout=240, logs=False)
    assert summary["status"] in ("Completed", "Failed", "Stopped"), summary
    return job


def statuses(job: TrainingJob) -> dict[str, str]:
    return {r["RuleConfigurationName"]: r["RuleEvaluationStatus"] for r in job.rule_job_summary()}


def rule_of(job: TrainingJob, name: str) -> dict[str, Any]:
    return next(r for r in job.summary()["rules"] if r["RuleConfigurationName"] == name)


def events(job: TrainingJob) -> list[dict[str, Any]]:
    return list(job.record.iter_events())


def test_healthy_job_finds_no_issues_and_says_where_everything_is(tmp_path: Path) -> None:
    rules = [
        Rule.builtin(rule_configs.vanishing_gradient()),
        Rule.builtin(rule_configs.exploding_tensor()),
        Rule.builtin(rule_configs.loss_not_decreasing(), rule_parameters={"num_steps": "10"}),
    ]
    job = run(tmp_path, rules, "--steps", "40", tensorboard_output_config=TensorBoardOutputConfig())
    assert job.summary()["status"] == "Completed"
    board = job.record.dir / "tensorboard" / "train"  # written by the training's hook
    assert any(p.name.startswith("events.out.tfevents.") for p in board.iterdir())
    assert statuses(job) == dict.fromkeys(
        ["VanishingGradient", "ExplodingTensor", "LossNotDecreasing"], "NoIssuesFound"
    )
    assert set(job.rule_job_summary()[0]) == {
        "RuleConfigurationName",
        "RuleEvaluationStatus",
        "StatusDetails",
        "LastModifiedTime",
    }
    trial = tt.create_trial(job.debugger_artifacts_path())
    assert trial.steps() == list(range(40)) and trial.tensor_names(collection="gradients")
    assert rule_of(job, "VanishingGradient")["evaluated"] == 40
    assert "trained 40 steps" in job.logs()
    assert "ended: NoIssuesFound (40 steps evaluated" in job.logs("VanishingGradient")
    # the rules open the trial before training writes it, on purpose: no "nothing there" warning
    logged = [p.read_text(errors="replace") for p in Path(job.job_dir).rglob("*.log")]
    assert logged and not any("must_exist=True" in text for text in logged)
    description = job.describe()
    assert description["TrainingJobStatus"] == "Completed" and description["ExitCode"] == 0
    kinds = [e["event"] for e in events(job)]
    assert kinds[0] == "job_started" and kinds[-1] == "job_ended"
    assert kinds.count("rule_started") == 3 and kinds.count("rule_ended") == 3


def test_buggy_job_fires_the_right_rule_at_a_plausible_step(tmp_path: Path) -> None:
    rules = [
        Rule.builtin(rule_configs.vanishing_gradient()),
        Rule.builtin(rule_configs.exploding_tensor()),
    ]
    job = run(tmp_path, rules, "--model", "deep_sigmoid", "--steps", "30")
    assert statuses(job) == {"VanishingGradient": "IssuesFound", "ExplodingTensor": "NoIssuesFound"}
    fired = rule_of(job, "VanishingGradient")
    assert fired["first_fired_step"] == 0  # the first layers' gradients vanish from the start
    assert "smallest mean |gradient|" in fired["message"] and "0.weight" in fired["message"]
    assert "RuleEvaluationConditionMet" in fired["StatusDetails"]
    (event,) = [e for e in events(job) if e["event"] == "rule_fired"]
    assert event["rule"] == "VanishingGradient" and event["step"] == 0
    described = job.describe_rule_execution_jobs()
    assert described[0]["RuleStatus"] == "IssuesFound" and "FailureReason" in described[0]
    # the report shows the job's own rule outcomes, the first finding linked to its step
    pytest.importorskip("plotly")
    from tensortap.cli import main

    trial_dir, report = job.debugger_artifacts_path(), tmp_path / "report.html"
    for args in ([str(job.record.dir)], [str(trial_dir), "--job", str(job.record.dir)]):
        assert main(["report", *args, "-o", str(report)]) == 0
        page = report.read_text()
        assert f"Training report: {job.record.name}" in page and ">Job and rules</h2>" in page
        assert (
            "<td class='text'>VanishingGradient</td><td class='text IssuesFound problem'>IssuesFound (problem)</td>"
            "<td><a href='#curves'>0</a></td>" in page
        )


def test_a_job_writes_its_trial_to_s3_and_its_rules_read_it_there(
    tmp_path: Path, s3_bucket: str
) -> None:
    """s3_output_path as SageMaker lays it out: {s3_output_path}/{job_name}/debug-output."""
    config = DebuggerHookConfig(
        hook_parameters={"save_interval": "1"}, s3_output_path=f"s3://{s3_bucket}/jobs/"
    )
    rules = [Rule.builtin(rule_configs.vanishing_gradient())]
    job = run(
        tmp_path, rules, "--model", "deep_sigmoid", "--steps", "12", debugger_hook_config=config
    )
    location = f"s3://{s3_bucket}/jobs/{job.job_name}/debug-output"
    assert job.debugger_artifacts_path() == location == job.describe()["DebuggerArtifactsPath"]
    assert statuses(job) == {"VanishingGradient": "IssuesFound"}
    assert tt.create_trial(location).steps() == list(range(12))
    assert not (job.record.dir / "trial").exists()  # nothing written locally
    with pytest.raises(InvalidConfigError, match="s3_output_path must be a location"):
        DebuggerHookConfig(s3_output_path="")


def test_crashing_training_is_reported_and_the_rules_still_end(tmp_path: Path) -> None:
    job = run(tmp_path, [Rule.builtin(rule_configs.vanishing_gradient())], "--crash-at", "12")
    summary = job.summary()
    assert summary["status"] == "Failed" and summary["training"]["exit_code"] == 1
    (ended,) = [e for e in events(job) if e["event"] == "training_ended"]
    assert "planted crash at step 12" in ended["log_tail"]
    assert "planted crash at step 12" in summary["training"]["log_tail"]
    assert statuses(job) == {"VanishingGradient": "NoIssuesFound"}
    assert tt.create_trial(job.debugger_artifacts_path()).steps()[-1] == 11


def test_killed_training_gets_its_trial_sealed(tmp_path: Path) -> None:
    """SIGKILL leaves no end marker; the supervisor writes it so the rules end."""
    rules = [Rule.builtin(rule_configs.vanishing_gradient())]
    job = run(tmp_path, rules, "--kill-at", "25", "--sleep", "0.1")  # > flush_secs: published
    summary = job.summary()
    assert summary["status"] == "Failed" and summary["training"]["exit_code"] == -9
    (ended,) = [e for e in events(job) if e["event"] == "training_ended"]
    assert ended["sealed_workers"] == ["worker_0"]
    trial = tt.create_trial(job.debugger_artifacts_path())
    assert trial.loaded_all_steps and trial.steps()  # what was published stays readable
    assert statuses(job) == {"VanishingGradient": "NoIssuesFound"}


def test_crashing_custom_rule_is_an_error_with_its_traceback(tmp_path: Path) -> None:
    rules = [
        Rule.custom("CrashesAt", RULES, rule_parameters={"step": "3"}),
        Rule.builtin(rule_configs.vanishing_gradient()),
    ]
    job = run(tmp_path, rules, "--steps", "20")
    assert job.summary()["status"] == "Completed"
    assert statuses(job) == {"CrashesAt": "Error", "VanishingGradient": "NoIssuesFound"}
    (error,) = [e for e in events(job) if e["event"] == "rule_error"]
    assert error["step"] == 3 and "ZeroDivisionError: the rule divided by zero" in error["message"]
    assert "rules_for_jobs.py" in error["traceback"]
    assert "Traceback" in job.logs("CrashesAt")


def test_stop_training_action_ends_training_early(tmp_path: Path) -> None:
    stop = StopTraining(grace_secs=60)
    rules = [Rule.custom("FiresFrom", RULES, rule_parameters={"step": "5"}, actions=[stop])]
    job = run(tmp_path, rules, "--steps", "100000", "--sleep", "0.01")
    summary = job.summary()
    assert summary["status"] == "Stopped" and summary["training"]["exit_code"] == 0
    kinds = [e["event"] for e in events(job)]
    assert "stop_requested" in kinds and "training_terminated" not in kinds
    last = tt.create_trial(job.debugger_artifacts_path()).steps()[-1]
    assert 5 <= last < 100000
    assert statuses(job) == {"FiresFrom": "IssuesFound"}


class _Collector(BaseHTTPRequestHandler):
    received: list[dict[str, Any]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        type(self).received.append(json.loads(body))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


def test_webhook_and_email_actions_reach_real_local_servers(tmp_path: Path) -> None:
    aiosmtpd = pytest.importorskip("aiosmtpd.controller")
    from aiosmtpd.handlers import Message

    mails: list[Any] = []

    class Keep(Message):
        def handle_message(self, message: Any) -> None:
            mails.append(message)

    with socket.socket() as probe:  # aiosmtpd cannot take port 0: pick a free one
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    smtp = aiosmtpd.Controller(Keep(), hostname="127.0.0.1", port=port)
    smtp.start()
    http = ThreadingHTTPServer(("127.0.0.1", 0), _Collector)
    threading.Thread(target=http.serve_forever, daemon=True).start()
    _Collector.received = []
    try:
        actions = [
            Webhook(url=f"http://127.0.0.1:{http.server_address[1]}/hook"),
            Email(to="oncall@example.com", smtp_host="127.0.0.1", smtp_port=smtp.port),
        ]
        rules = [Rule.builtin(rule_configs.vanishing_gradient(), actions=actions)]
        job = run(tmp_path, rules, "--model", "deep_sigmoid", "--steps", "10")
    finally:
        http.shutdown()
        smtp.stop()
    (posted,) = _Collector.received  # the first firing only
    assert posted["rule"] == "VanishingGradient" and posted["step"] == 0
    assert posted["job"] == job.job_name and "smallest mean |gradient|" in posted["message"]
    (mail,) = mails
    assert mail["To"] == "oncall@example.com"
    assert "VanishingGradient fired at step 0" in mail["Subject"]
    done = [e for e in events(job) if e["event"] == "action"]
    assert sorted(e["action"] for e in done) == ["email", "webhook"]


def test_fit_without_waiting_then_attach(tmp_path: Path) -> None:
    job = TrainingJob(
        entry_point=SCRIPT,
        hyperparameters={"steps": 15},
        output_path=tmp_path / "runs",
        rules=[Rule.builtin(rule_configs.vanishing_gradient())],
    )
    job.fit(wait=False)
    attached = TrainingJob.attach(job.job_dir)
    summary = attached.wait(timeout=240, logs=False)
    assert summary["status"] == "Completed"
    assert attached.rule_job_summary() == job.rule_job_summary()
    assert attached.debugger_artifacts_path() == job.latest_job_debugger_artifacts_path()
    assert job.latest_training_job.rule_job_summary() == job.rule_job_summary()  # seed 000
    # the job's default save interval for rules is 10: steps 0 and 10 (the vital signs: every step)
    trial = tt.create_trial(job.debugger_artifacts_path())
    assert trial.tensor_names(collection="gradients")
    for name in trial.tensor_names(collection="gradients"):
        assert trial.tensor(name).steps() == [0, 10]
    assert trial.tensor("vitals/loss").steps() == trial.steps() == list(range(15))


def test_bad_rules_and_configs_are_rejected_before_training(tmp_path: Path) -> None:
    with pytest.raises(InvalidConfigError, match="built-in rules are .*AllZero, CheckInputImages"):
        Rule.builtin("VanishingGradients")
    with pytest.raises(InvalidConfigError, match=r"no parameter 'treshold'.*threshold"):
        Rule.builtin(rule_configs.vanishing_gradient(), rule_parameters={"treshold": "1"})
    with pytest.raises(InvalidConfigError, match="threshold"):
        Rule.builtin(rule_configs.vanishing_gradient(), rule_parameters={"threshold": "small"})
    with pytest.raises(InvalidConfigError, match="no parameter 'limit'.*step"):
        Rule.custom("FiresFrom", RULES, rule_parameters={"limit": "3"})
    with pytest.raises(InvalidConfigError, match="NoSuchRule"):
        Rule.custom("NoSuchRule", RULES)
    with pytest.raises(InvalidConfigError, match="unknown parameter 'save_every'"):
        CollectionConfig("gradients", {"save_every": "5"})
    with pytest.raises(InvalidConfigError, match="entry_point .* is not a file"):
        TrainingJob(entry_point=tmp_path / "missing.py", output_path=tmp_path / "runs")
    twice = Rule.builtin(rule_configs.vanishing_gradient())
    with pytest.raises(InvalidConfigError, match="two rules are named 'VanishingGradient'"):
        TrainingJob(command=["python", str(SCRIPT)], output_path=tmp_path, rules=[twice, twice])
    assert not (tmp_path / "runs").exists()


def test_seed_flows_translate(tmp_path: Path) -> None:
    """Seed 000's Rule.sagemaker list and seed 001's rules_specification build the same jobs."""
    rules = [
        Rule.sagemaker(rule_configs.vanishing_gradient()),
        Rule.sagemaker(rule_configs.loss_not_decreasing()),
    ]
    job = TrainingJob(entry_point=SCRIPT, hyperparameters={"steps": 3}, rules=rules)
    assert [r.name for r in job.rules] == ["VanishingGradient", "LossNotDecreasing"]
    spec = [
        {
            "RuleName": "CustomGradientRule",
            "SourceS3Uri": str(HERE.parent / "rules" / "my_custom_rule.py"),
            "InstanceType": "ml.c5.4xlarge",
            "RuntimeConfigurations": {"threshold": "0.5"},
        }
    ]
    job = TrainingJob(entry_point=SCRIPT, output_path=tmp_path, rules_specification=spec)
    (rule,) = job.rules
    assert (rule.name, rule.class_name, dict(rule.parameters)) == (
        "CustomGradientRule",
        "CustomGradientRule",
        {"threshold": "0.5"},
    )


def test_hook_config_saves_what_the_rules_read(tmp_path: Path) -> None:
    from tensortap.jobs._specs import hook_config

    rules = [Rule.builtin(rule_configs.nan_inf_root_cause())]
    mine = DebuggerHookConfig(
        collection_configs=[CollectionConfig("outputs", {"save_interval": "5"})]
    )
    config = hook_config("out", mine, rules, "stop")
    by_name = {c.name: dict(c.parameters) for c in config.collections}
    assert by_name["outputs"] == {"reductions": "min,max", "save_interval": "5"}
    assert {"weights", "gradients", "losses"} <= set(by_name)
    assert config.include_collections is not None and "losses" in config.include_collections
    assert config.hook_parameters["save_interval"] == "10" and config.stop_file == "stop"


def test_a_custom_rule_reading_an_unsaved_collection_ends_no_data(tmp_path: Path) -> None:
    """The README's custom rule reads gradients, which nothing asked the job to save: it
    must say so, not report NoIssuesFound at a learning rate of 50."""
    rule = Rule.custom("GradientMean", RULES, rule_parameters={"threshold": "0.5"})
    job = run(tmp_path, [rule], "--steps", "20", "--lr", "50")
    status = rule_of(job, "GradientMean")
    assert status["RuleEvaluationStatus"] == "NoData", status
    assert "no tensor in gradients" in status["StatusDetails"]
    assert status["judged"] == 0


def test_a_custom_rule_declaring_its_collections_gets_them_saved(tmp_path: Path) -> None:
    rule = Rule.custom("DeclaredGradientMean", RULES, rule_parameters={"threshold": "0.5"})
    assert [c.name for c in rule.collections] == ["gradients"]
    job = run(tmp_path, [rule], "--steps", "20", "--lr", "50")
    assert statuses(job) == {"DeclaredGradientMean": "IssuesFound"}


def test_a_nan_job_is_reported_as_non_finite_and_by_no_rule_as_dead_or_fine(
    tmp_path: Path,
) -> None:
    rules = [Rule.builtin(config) for config in rule_configs.recommended()]
    job = run(tmp_path, rules, "--steps", "30", "--lr", "1e15", debugger_hook_config=None)
    found = {r["RuleConfigurationName"]: r for r in job.summary()["rules"]}
    for name in ("ExplodingTensor", "NaNInfRootCause", "LossNotDecreasing"):
        assert found[name]["RuleEvaluationStatus"] == "IssuesFound", found[name]
        assert found[name]["severity"] == "problem"
    for name, status in found.items():
        assert "dead" not in str(status.get("gravest_message")), name
        if name in ("DeadRelu", "VanishingGradient", "WeightsNotUpdating", "WeightUpdateRatio"):
            assert status["RuleEvaluationStatus"] == "IssuesFound", status
            assert status["severity"] == "problem"
    assert "NaN or infinite" in found["DeadRelu"]["gravest_message"]  # not "dead"
    assert "NaN or infinite" in found["VanishingGradient"]["gravest_message"]  # not "vanishing"
    # the first update, 1e15 x the gradient, was judged against the weights before it
    assert found["WeightUpdateRatio"]["gravest_step"] == 0
