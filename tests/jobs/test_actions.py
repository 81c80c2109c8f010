"""Actions one by one, and the hard stop of a training that ignores the stop request."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tensortap.exceptions import InvalidConfigError
from tensortap.jobs import Call, Command, Email, StopTraining, TrainingJob, Webhook
from tensortap.jobs._actions import ActionContext, action_from_dict

FINDING = {"job": "j", "rule": "R", "step": 7, "message": "too small", "mode": "TRAIN"}
received: list[dict] = []


def remember(finding: dict) -> None:
    received.append(finding)


def test_command_and_call_get_the_finding(tmp_path: Path) -> None:
    context = ActionContext(str(tmp_path), str(tmp_path / "stop"))
    out = tmp_path / "finding.json"
    script = f"import sys, os; open({str(out)!r}, 'w').write(sys.stdin.read())"
    assert "ran" in Command(argv=[sys.executable, "-c", script]).run(FINDING, context)
    assert json.loads(out.read_text())["step"] == 7
    bad = Command(argv=[sys.executable, "-c", "import sys; sys.stderr.write('boom'); sys.exit(3)"])
    with pytest.raises(RuntimeError, match="exited with 3: boom"):
        bad.run(FINDING, context)
    received.clear()
    Call(target=f"{__name__}:remember").run(FINDING, context)
    assert received == [FINDING]
    StopTraining().run(FINDING, context)
    assert (tmp_path / "stop").read_text() == "R fired at step 7: too small"


def test_actions_are_validated_and_round_trip() -> None:
    for action in (
        StopTraining(grace_secs=5),
        Webhook(url="http://127.0.0.1:9/x", headers={"A": "b"}),
        Email(to="a@b.c", smtp_port=2525),
        Command(argv=["true"], every_time=True),
        Call(target="m:f"),
    ):
        assert action_from_dict(json.loads(json.dumps(action.to_dict()))) == action
    with pytest.raises(InvalidConfigError, match="http:// or https://"):
        Webhook(url="file:///etc/passwd")
    with pytest.raises(InvalidConfigError, match="addresses"):
        Email(to="nobody")
    with pytest.raises(InvalidConfigError, match="argv"):
        Command(argv=[])
    with pytest.raises(InvalidConfigError, match="package.module:function"):
        Call(target="nocolon")
    with pytest.raises(InvalidConfigError, match="grace_secs"):
        StopTraining(grace_secs=-1)
    with pytest.raises(InvalidConfigError, match="unknown action 'page'"):
        action_from_dict({"kind": "page"})


def test_training_that_ignores_the_stop_is_terminated_after_the_grace(tmp_path: Path) -> None:
    job = TrainingJob(
        command=[sys.executable, "-c", "import time; time.sleep(600)"],
        output_path=tmp_path,
        stop_grace_secs=0.5,
    )
    job.fit(wait=False)
    job.stop()
    summary = job.wait(timeout=120, logs=False)
    assert summary["status"] == "Stopped" and summary["training"]["exit_code"] == -15
    kinds = [e["event"] for e in job.record.iter_events()]
    assert "stop_asked" in kinds and "training_terminated" in kinds
