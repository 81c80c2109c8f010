"""The save budget under ``tensortap run`` (tensortap.core._save_budget), in every zero-code
attachment (XGBoost, PyTorch, Keras, JAX, Hugging Face Trainer, Lightning): unmodified scripts
run as jobs with a budget so small that every measured saving step is over it
(``--save-budget 1e-9``: deterministic, whatever the machine's speed) save fewer tensor steps
than the job's every 10th step (which ``--save-budget off`` saves exactly, checked in PyTorch),
keep the first five saving steps and the configured interval's multiples, save the vital signs
every step, and say what they did in the trial, the job's events and the summary."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tensortap import create_trial
from tensortap.jobs._record import JobRecord
from tensortap.modes import ModeKeys
from tests.jobs.test_framework_jobs import run_job

HERE = Path(__file__).parent
TINY = "1e-9"

SCRIPTS = {
    "xgboost": (["python", str(HERE / "budget_xgb_script.py")], "feature_importance", 200),
    "pytorch": (
        ["python", str(HERE / "vitals_torch_script.py"), "--steps", "150", "--log", "log.json"],
        "weights",
        150,
    ),
    "keras": (["python", str(HERE / "lr_keras_script.py")], "weights", 150),
    "jax": (["python", str(HERE / "jax_script.py"), "--steps", "150"], "weights", 150),
    "huggingface": (
        ["python", str(HERE / "vitals_hf_script.py"), "--steps", "150", "--log", "log.json"],
        "weights",
        150,
    ),
    "lightning": (  # 20 batches an epoch, a validation pass after each
        ["python", str(HERE / "vitals_lightning_script.py"), "--epochs", "8", "--log", "x"],
        "weights",
        160,
    ),
}
NEEDS = {
    "xgboost": "xgboost",
    "pytorch": "torch",
    "keras": "keras",
    "jax": "optax",
    "huggingface": "transformers",
    "lightning": "lightning",
}


def _run(tmp_path: Path, budget: str, command: list[str]) -> tuple[str, JobRecord]:
    tmp_path.mkdir()
    done, record = run_job(tmp_path, "--save-budget", budget, "--", *command)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout, record


def _saved_steps(record: JobRecord, collection: str) -> tuple[list[int], int, list[dict]]:
    """The TRAIN steps a tensor of ``collection`` was saved at, the TRAIN steps with a vital
    sign, and the session events."""
    trial = create_trial(record.trial_location)
    names = trial.tensor_names(collection=collection)
    assert names, f"nothing in {collection}"
    steps = sorted({s for n in names for s in trial.tensor(n).steps(mode=ModeKeys.TRAIN)})
    vitals = len(trial.tensor("vitals/loss").steps(mode=ModeKeys.TRAIN))
    events = [e for s in trial.sessions() for e in s.events if e["kind"] == "save_budget"]
    return steps, vitals, events


@pytest.mark.parametrize("framework", sorted(SCRIPTS))
def test_a_job_under_a_tiny_save_budget_saves_fewer_tensor_steps_and_says_so(
    tmp_path: Path, framework: str
) -> None:
    pytest.importorskip(NEEDS[framework])
    if framework == "keras":
        pytest.importorskip("tensorflow")
    command, collection, steps = SCRIPTS[framework]
    every = list(range(0, steps, 10))  # the job's every 10th step
    if framework == "pytorch":  # the budget off, in one framework: that schedule, no event
        out, record = _run(tmp_path / "off", "off", command)
        saved, vitals, events = _saved_steps(record, collection)
        assert saved == every and not events
        assert vitals >= steps - 1
        assert "save budget" not in out
    out, record = _run(tmp_path / "tiny", TINY, command)
    budgeted, vitals, events = _saved_steps(record, collection)
    assert budgeted[:5] == every[:5]  # the first five saving steps kept as configured
    assert len(budgeted) < len(every), (budgeted, every)
    assert set(budgeted) <= set(every)  # on multiples of the job's interval
    assert vitals >= steps - 1  # the vital signs every step, whatever the budget
    assert events and events[0]["fields"]["old_interval"] == 10
    assert events[0]["fields"]["new_interval"] == 20 and events[0]["fields"]["budget"] == 1e-9
    job_events = [e for e in record.iter_events() if e["event"] == "save_budget"]
    assert len(job_events) == len(events)
    assert "save budget (1e-07% of training time" in out and "widest every" in out
    print(framework, "saved", every, "->", budgeted, file=sys.stderr)
