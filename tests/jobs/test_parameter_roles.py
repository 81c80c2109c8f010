"""An unmodified PyTorch script under ``tensortap run`` whose gradients explode through time
(a ReLU RNN, recurrent weights 1.1 times the identity, zero biases, 60 time steps, SGD at 0.01):
its recurrent biases (``bias_ih_l0``, ``bias_hh_l0``: not named ``*bias``) are biases, no rule
judges one as a weight, a batch of 0/1 targets that are all 0 is not "all zero", and the
diagnosis does not name the (ordinary) learning rate first (issue 44). Before, it read "the
learning rate is too high: update/weight ratio of rnn.bias_ih_l0 is 2.56e+09"."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from tensortap.trials import create_trial
from tests.jobs.test_framework_jobs import run_job

SCRIPT = str(Path(__file__).parent / "rnn_identity_script.py")


def test_recurrent_biases_are_biases_and_the_learning_rate_is_not_blamed(tmp_path: Path) -> None:
    done, record = run_job(tmp_path, "python", SCRIPT)
    assert done.returncode == 0, done.stdout + done.stderr
    trial = create_trial(str(record.trial_dir))
    biases = set(trial.tensor_names(collection="biases"))
    assert {"rnn.bias_ih_l0", "rnn.bias_hh_l0", "head.bias"} <= biases
    assert not biases & set(trial.tensor_names(collection="weights"))
    assert not biases & {n.removeprefix("initial/") for n in trial.tensor_names(regex="^initial/")}
    # the script's data give a saved batch whose 0/1 targets are all 0 (what AllZero named)
    targets = trial.tensor("BCEWithLogitsLoss_input_1")
    assert any(not np.any(targets.value(s)) for s in targets.steps())
    # no rule judged a bias as a weight, nor the targets as a tensor of the model
    for rule in ("WeightUpdateRatio", "PoorWeightInitialization", "TrainingLoop"):
        log = record.rule_log(rule).read_text()
        assert "bias" not in log, (rule, log)
    log = record.rule_log("AllZero").read_text()
    assert "initial/" not in log and "BCEWithLogitsLoss_input_1" not in log, log
    found = json.loads(record.summary_file.read_text())["diagnosis"]
    assert found["cause"] != "lr_too_high", found["headline"]
    assert "diagnosis: the learning rate is too high" not in done.stdout
