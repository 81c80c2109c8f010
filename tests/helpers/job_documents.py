"""Jobs laid out as ``tensortap run`` leaves them (job.json, summary.json, events.jsonl) over
real trials a hook wrote (vital signs, an evaluation metric, the run's configuration): the
documents without the training, for the runs table's tests (``tensortap jobs``, the
dashboard's runs table) and its benchmark."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import tensortap as tt
from tensortap.jobs._record import JobRecord, write_json

FIRED = {
    "RuleConfigurationName": "LossNotDecreasing",
    "RuleEvaluationStatus": "IssuesFound",
    "StatusDetails": "RuleEvaluationConditionMet",
    "severity": "problem",
    "gravest_step": 2,
    "gravest_message": "the loss stopped decreasing",
    "judged": 3,
}
QUIET = {"RuleConfigurationName": "LossSpike", "RuleEvaluationStatus": "NoIssuesFound", "judged": 5}
LONG = "/home/someone/projects/a-rather-long-directory-name/and-another-one/train.py"


def make_job(
    runs: Path,
    name: str,
    *,
    lr: float,
    batch: int,
    losses: list[float],
    accuracy: list[float] | None = None,
    status: str = "Completed",
    rules: list[dict[str, Any]] | None = None,
    created: float = 1_790_000_000.0,
    seconds: float = 125.0,
    failure: dict[str, Any] | None = None,
    seed: int | None = None,
) -> Path:
    """A job as `tensortap run` leaves it, over a trial of one TRAIN step per loss (and an
    evaluation pass after them, saving ``accuracy`` as a metric, where given); ``seed`` is
    recorded as the run's own seed where given."""
    job_dir = runs / name
    record = JobRecord(job_dir)
    record.create(
        {
            "name": name,
            "created": created,
            "command": ["python", "-m", "tensortap.attach", LONG],
            "user_command": ["python", LONG, "--lr", str(lr), "--batch", str(batch)],
        }
    )
    with tt.Hook(job_dir / "trial", save_config=tt.SaveConfig(save_interval=1)) as hook:
        hook.log_config(
            {
                "learning_rate": lr,
                "batch_size": batch,
                "optimizer": {"class": "torch.optim.adamw.AdamW"},
                "seeds": {"torch": 7},
                **({} if seed is None else {"seed": seed}),
            }
        )
        hook.set_mode("TRAIN")
        for loss in losses:
            hook.save_vitals({"loss": loss})
            hook.next_step()
        for value in accuracy or []:
            hook.set_mode("EVAL")
            hook.save_scalar("accuracy", value, "metrics")
            hook.save_vitals({"loss": 1.0 - value})
            hook.next_step()
    training: dict[str, Any] = {"status": status, "exit_code": 0 if failure is None else 1}
    if failure is not None:
        training["failure"] = failure
    write_json(
        record.summary_file,
        {"job": name, "status": status, "training": training, "rules": rules or [QUIET]},
    )
    record.append_event("training_started", pid=1)
    if status not in ("Starting", "InProgress"):
        record.append_event("training_ended", status=status, exit_code=training["exit_code"])
    events = record.events_file.read_text().splitlines()
    times = [created, created + seconds]
    record.events_file.write_text(
        "".join(
            json.dumps({**json.loads(line), "time": t}) + "\n"
            for line, t in zip(events, times, strict=False)
        )
    )
    return job_dir
