"""Vital signs under ``tensortap run`` (issue 43): unmodified scripts of a plain PyTorch loop,
a Hugging Face ``Trainer.train()`` and a Lightning ``Trainer.fit()`` end with the loss and the
gradient norm of *every* optimizer step in the trial, equal to what the framework computed and
logged (under gradient accumulation and clipping); an HF run whose ``grad_norm`` jumps about
300x at one step ends with GradientNormSpike finding it there (the job saved gradients every
10th step before: the spike was never seen)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import tensortap as tt
from tensortap.jobs._record import JobRecord
from tests.jobs.test_framework_jobs import run_job, statuses

HERE = Path(__file__).parent


def _trial_and_log(tmp_path: Path, script: str, *args: str) -> tuple[tt.Trial, Any, str]:
    done, record = run_job(tmp_path, "python", str(HERE / script), "--log", "log.json", *args)
    assert done.returncode == 0, done.stdout + done.stderr
    log = json.loads((tmp_path / "log.json").read_text())
    return tt.create_trial(record.trial_location), log, done.stdout


def _train(trial: tt.Trial, name: str) -> dict[int, float]:
    return {s: float(v) for s, v in trial.tensor(name).values(mode=tt.modes.TRAIN).items()}


@pytest.mark.parametrize("loss", ["module", "functional", "bound"])
def test_a_pytorch_loop_saves_the_loss_and_gradient_norm_of_every_step(
    tmp_path: Path, loss: str
) -> None:
    """Two micro-batches per step, clipped to 0.5: the loss is the mean the step trained on
    (a loss module's outputs, or the shares passed to backward), the norm clip_grad_norm_'s;
    also where the script bound ``clip_grad_norm_`` and ``cross_entropy`` to names of its own
    at its top (``bound``): zero code change wraps them before the script runs."""
    trial, log, _ = _trial_and_log(tmp_path, "vitals_torch_script.py", "--loss", loss)
    steps = list(range(len(log)))
    for vital, key in (("loss", "loss"), ("grad_norm", "grad_norm"), ("lr", "lr")):
        saved = _train(trial, f"vitals/{vital}")
        assert sorted(saved) == steps, vital
        assert [saved[s] for s in steps] == pytest.approx([e[key] for e in log], rel=1e-6)
    assert max(e["grad_norm"] for e in log) > 0.3  # clipped: the norms saved are before it
    assert {"labels", "predictions"} <= set(trial.tensor_names())  # the loss's outcome
    assert _train(trial, "vitals/lr")[10] == pytest.approx(0.1)  # the scheduler halved it
    rates = _train(trial, "vitals/samples_per_second")
    times = _train(trial, "vitals/step_time")
    assert sorted(rates) == steps and all(t > 0 for t in times.values())
    assert rates[5] * times[5] == pytest.approx(32)  # two micro-batches of 16
    # tensors keep the job's schedule
    assert trial.tensor("gradient/0.weight").steps(mode=tt.modes.TRAIN) == [0, 10, 20]


def test_a_hugging_face_trainer_saves_its_logged_loss_and_gradient_norm_every_step(
    tmp_path: Path,
) -> None:
    pytest.importorskip("transformers")
    trial, log, _ = _trial_and_log(tmp_path, "vitals_hf_script.py")
    logged = {int(e["step"]) - 1: e for e in log if "loss" in e}  # TRAIN step k: global k + 1
    assert sorted(logged) == list(range(30))
    for vital, key in (("loss", "loss"), ("grad_norm", "grad_norm"), ("lr", "learning_rate")):
        saved = _train(trial, f"vitals/{vital}")
        assert sorted(saved) == sorted(logged), vital
        assert [saved[s] for s in logged] == pytest.approx(
            [logged[s][key] for s in logged], rel=1e-6
        ), vital
    evaluations = [e["eval_loss"] for e in log if "eval_loss" in e]
    saved_eval = trial.tensor("vitals/loss").values(mode=tt.modes.EVAL)
    assert [float(v) for v in saved_eval.values()] == pytest.approx(evaluations, rel=1e-6)
    rates = _train(trial, "vitals/samples_per_second")
    times = _train(trial, "vitals/step_time")
    assert rates[5] * times[5] == pytest.approx(8)  # 2 micro-batches of 4


def test_a_gradient_norm_jump_in_a_hugging_face_run_is_found_where_it_happened(
    tmp_path: Path,
) -> None:
    pytest.importorskip("transformers")
    _, log, _ = _trial_and_log(tmp_path, "vitals_hf_script.py", "--spike-at", "20")
    norms = {int(e["step"]): e["grad_norm"] for e in log if "grad_norm" in e}
    assert norms[20] > 200 * norms[19]  # the Trainer logged the jump
    found = statuses(JobRecord(next((tmp_path / "runs").iterdir())))["GradientNormSpike"]
    assert found["RuleEvaluationStatus"] == "IssuesFound", found["StatusDetails"]
    gravest = found["gravest"]
    assert (gravest["mode"], gravest["mode_step"]) == ("TRAIN", 19)  # global_step 20
    assert gravest["tensors"] == ["vitals/grad_norm"]
    assert gravest["details"]["measured"] == pytest.approx(norms[20], rel=1e-6)


def test_a_lightning_fit_saves_its_logged_loss_and_gradient_norm_every_step(
    tmp_path: Path,
) -> None:
    pytest.importorskip("lightning")
    trial, rows, _ = _trial_and_log(tmp_path, "vitals_lightning_script.py")
    loss = {int(r["step"]): float(r["train_loss"]) for r in rows if r.get("train_loss")}
    norm = {int(r["step"]): float(r["grad_norm"]) for r in rows if r.get("grad_norm")}
    assert sorted(loss) == list(range(40))  # 2 epochs of 20 batches
    saved_loss, saved_norm = _train(trial, "vitals/loss"), _train(trial, "vitals/grad_norm")
    assert sorted(saved_loss) == sorted(saved_norm) == sorted(loss)
    assert [saved_loss[s] for s in loss] == pytest.approx(list(loss.values()), rel=1e-6)
    assert [saved_norm[s] for s in norm] == pytest.approx(list(norm.values()), rel=1e-5)
    assert max(norm.values()) > 0.5  # clipped at 0.5: the norms saved are from before
    validations = [float(r["val_loss"]) for r in rows if r.get("val_loss")]
    saved_eval = trial.tensor("vitals/loss").values(mode=tt.modes.EVAL)
    assert [float(v) for v in saved_eval.values()] == pytest.approx(validations, rel=1e-6)
