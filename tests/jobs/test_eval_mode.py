"""Optimizer steps taken in evaluation mode (issue 44): an unmodified PyTorch script that
forgets model.train() after its validation pass is diagnosed "the model trains in evaluation
mode" first under ``tensortap run``; its fixed twin ends healthy, and the same bug in a model
without Dropout or BatchNorm (where eval mode changes nothing) is not a problem."""

from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from tensortap.jobs._record import JobRecord
from tensortap.trials import create_trial
from tests.jobs.test_framework_jobs import run_job, statuses

SCRIPT = str(Path(__file__).parent / "eval_mode_script.py")
STEPS_PER_EPOCH = 38  # 1,200 digits in batches of 32
EPOCHS = 5


def last_facts(record: JobRecord) -> dict[str, int]:
    """The last saved value of each ``training_loop`` fact of the job's trial."""
    trial = create_trial(str(record.trial_dir))
    out = {}
    for name in trial.tensor_names(collection="training_loop"):
        tensor = trial.tensor(name)
        out[name.split("/", 1)[1]] = int(tensor.value(tensor.steps()[-1]))
    return out


def test_training_left_in_eval_mode_is_named_first_its_fixed_twin_is_healthy(
    tmp_path: Path,
) -> None:
    variants = {"bug": (), "fixed": ("--fixed",), "plain": ("--plain",)}
    for name in variants:
        (tmp_path / name).mkdir()

    def job(name: str) -> tuple[Any, JobRecord]:
        return run_job(tmp_path / name, sys.executable, SCRIPT, *variants[name])

    with ThreadPoolExecutor(2) as pool:  # the machine has two cores
        runs = dict(zip(variants, pool.map(job, variants)))
    for done, _ in runs.values():
        assert done.returncode == 0, done.stdout + done.stderr
    in_eval = (EPOCHS - 1) * STEPS_PER_EPOCH  # every step after the first validation pass

    done, record = runs["bug"]
    found = (record.summary() or {})["diagnosis"]
    assert found["verdict"] == "problem" and found["cause"] == "train_in_eval_mode", found
    assert "diagnosis: the model trains in evaluation mode (model.eval left on): " in done.stdout
    assert "try: call model.train() before training steps" in done.stdout
    loop = statuses(record)["TrainingLoop"]
    assert "the model's 1 BatchNorm1d, 1 Dropout behave as in evaluation" in loop["message"]
    facts = last_facts(record)
    assert facts["eval_mode_steps"] == in_eval
    assert facts["optimizer_steps"] == EPOCHS * STEPS_PER_EPOCH
    assert facts["eval_mode_modules/BatchNorm1d"] == facts["eval_mode_modules/Dropout"] == 1

    done, record = runs["fixed"]
    assert (record.summary() or {})["diagnosis"]["verdict"] == "healthy", done.stdout
    assert "eval_mode_steps" not in last_facts(record)

    done, record = runs["plain"]  # the same bug, where it changes nothing
    assert (record.summary() or {})["diagnosis"]["verdict"] == "healthy", done.stdout
    assert statuses(record)["TrainingLoop"]["RuleEvaluationStatus"] == "NoIssuesFound"
    facts = last_facts(record)
    assert facts["eval_mode_steps"] == in_eval
    assert not [k for k in facts if k.startswith("eval_mode_modules/")]
