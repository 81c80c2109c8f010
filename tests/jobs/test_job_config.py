"""One typed config path: a job's settings are parsed once per process, and a job sets the
training's writer (WriterOptions) too."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest

import tensortap as tt
from tensortap.cli import main
from tensortap.core._save_config import SaveConfigMode
from tensortap.exceptions import InvalidConfigError
from tensortap.jobs import DebuggerHookConfig, Rule, TrainingJob, rule_configs

HERE = Path(__file__).parent
SCRIPT = HERE / "train_script.py"
#: A value no default has: the calls parsing the job's save_interval are counted by it.
INTERVAL = "7"

# The training process, as a job starts it (``python -m tensortap.attach --config HOOK
# script``), with the parser of save schedules counted from the start of the process.
COUNTED_ATTACH = f"""
import atexit, os, sys
from tensortap.core._save_config import SaveConfigMode
parse = SaveConfigMode.from_dict.__func__
calls = []
def counted(cls, data):
    calls.extend([1] if data.get("save_interval") == {INTERVAL!r} else [])
    return parse(cls, data)
SaveConfigMode.from_dict = classmethod(counted)
atexit.register(lambda: print("save_interval parsed", len(calls), "times", flush=True))
from tensortap import attach
attach.main(["--config", os.environ["TENSORTAP_CONFIG"], *sys.argv[1:]])
"""


def test_a_job_sets_the_writer_and_parses_its_settings_once_per_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    parse = SaveConfigMode.from_dict.__func__  # type: ignore[attr-defined]
    calls: list[dict[str, Any]] = []

    def counted(cls: type[SaveConfigMode], data: dict[str, Any]) -> SaveConfigMode:
        if data.get("save_interval") == INTERVAL:
            calls.append(dict(data))
        return parse(cls, data)

    monkeypatch.setattr(SaveConfigMode, "from_dict", classmethod(counted))
    # a segment at every step, and none published by time: the trial shows these were used
    writer = {"flush_secs": "3600", "idle_flush_secs": None, "segment_bytes": 1}
    job = TrainingJob(
        command=[sys.executable, "-c", COUNTED_ATTACH, str(SCRIPT), "--steps", "12"],
        output_path=tmp_path / "runs",
        debugger_hook_config=DebuggerHookConfig(
            hook_parameters={"save_interval": INTERVAL}, writer_options=writer
        ),
        rules=[Rule.builtin(rule_configs.loss_not_decreasing())],
    )
    job.fit(wait=False)
    summary = job.wait(timeout=240, logs=False)
    assert summary["status"] == "Completed", job.record.training_log.read_text()
    assert len(calls) == 1, calls  # in this process: once, when the job's spec was made

    hook_file = json.loads(job.record.hook_file.read_text())
    assert hook_file["hook_parameters"]["save_interval"] == INTERVAL  # smdebug's format stays
    assert hook_file["writer_options"]["segment_bytes"] == 1
    log = job.record.training_log.read_text()
    assert re.search(r"save_interval parsed (\d+) times", log).group(1) == "1", log  # type: ignore[union-attr]

    trial = tt.create_trial(job.debugger_artifacts_path())
    losses = trial.tensor_names(collection="losses")
    assert losses and all(trial.tensor(n).steps() == [0, 7] for n in losses)  # the job's
    # save_interval reached the hook; the vital signs are saved at every step whatever it is
    assert trial.steps() == trial.tensor("vitals/loss").steps() == list(range(12))
    (worker,) = trial.workers()
    status = trial.worker_status(worker)["status"]  # type: ignore[index]
    assert status["segments_published"] == status["steps_written"] == 12


def test_writer_options_are_checked_when_the_job_is_made(tmp_path: Path) -> None:
    assert DebuggerHookConfig(writer_options={"when_full": "drop"}).writer_options == (
        tt.WriterOptions(when_full="drop")
    )
    with pytest.raises(InvalidConfigError, match=r"writer_options: unknown writer options"):
        DebuggerHookConfig(writer_options={"flush": 1})
    with pytest.raises(InvalidConfigError, match="when_full must be 'block' or 'drop'"):
        DebuggerHookConfig(writer_options={"when_full": "wait"})
    with pytest.raises(InvalidConfigError, match="flush_secs must be a number"):
        DebuggerHookConfig(writer_options={"flush_secs": "soon"})


def test_the_command_line_sets_the_writer(tmp_path: Path, capsys) -> None:
    args = ["run", "--output", str(tmp_path), "--no-rules", "--no-wait"]
    bad = main([*args, "--writer-option", "when_full=wait", "--", "python", str(SCRIPT)])
    assert bad == 2 and "when_full must be 'block' or 'drop'" in capsys.readouterr().err
    writer = ["--writer-option", "flush_secs=5,when_full=drop"]
    code = main([*args, "--name", "w", *writer, "--", "python", str(SCRIPT), "--steps", "2"])
    assert code == 0
    written = json.loads((tmp_path / "w" / "hook.json").read_text())["writer_options"]
    assert (written["flush_secs"], written["when_full"]) == (5.0, "drop")
    assert tt.jobs.TrainingJob.attach(tmp_path / "w").wait(timeout=240, logs=False)["status"] == (
        "Completed"
    )
