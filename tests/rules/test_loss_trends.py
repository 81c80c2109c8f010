"""Overfit and LossNotDecreasing judge trends against the loss's own noise: a wobble is not
overfitting, a small noisy fall is not "no progress", one value or no EVAL step is no verdict,
and the messages never contradict themselves."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

import tensortap as tt
from tensortap.core._modes import ModeKeys
from tensortap.rules import LossNotDecreasing, Overfit, RuleStatus, invoke_rule, iter_findings
from tensortap.rules._finding import Finding, Severity
from tensortap.rules.builtin._samples import DistinctSamples
from tensortap.testing import TrialBuilder
from tests.helpers import job_runs

F32 = np.float32


def phases(path: Path, train: list[list[float]], val: list[list[float]]) -> object:
    """A trial of alternating phases: ``train[i]`` (TRAIN losses), then ``val[i]`` (the batch
    losses of one evaluation pass)."""
    builder = TrialBuilder(path)
    for losses, batches in zip(train, val, strict=True):
        for v in losses:
            builder.step({"loss": F32(v)}, mode="train")
        for v in batches:
            builder.step({"loss": F32(v)}, mode="eval")
    return builder.close()


def falling_train(passes: int, per_phase: int = 5) -> list[list[float]]:
    return [[0.4 * 0.8 ** (p + i / per_phase) for i in range(per_phase)] for p in range(passes)]


def with_batches(means: list[float], seed: int = 0, spread: float = 0.02) -> list[list[float]]:
    """Four validation batches per pass around each pass mean."""
    rng = np.random.default_rng(seed)
    return [list(m + rng.normal(0, spread, 4) - 0) for m in means]


# -- Overfit --


def test_overfit_a_wobble_after_the_best_pass_is_not_a_problem(tmp_path: Path) -> None:
    """The reported run: the validation loss wobbles from 0.153 to 0.19 and back while the
    training loss falls. One or two high passes are noise, not overfitting."""
    val = [0.30, 0.21, 0.17, 0.153, 0.19, 0.158, 0.17, 0.155]
    trial = phases(tmp_path, falling_train(len(val)), with_batches(val))
    summary = invoke_rule(Overfit(trial))
    assert summary.triggered  # the validation loss is well above the training loss
    assert summary.worst_severity is Severity.WARNING
    assert all(f.details["cause"] == "overfitting" for f in summary.findings)


def test_overfit_a_sustained_significant_rise_is_a_problem(tmp_path: Path) -> None:
    val = [0.30, 0.21, 0.17, 0.153, 0.17, 0.19, 0.21, 0.23, 0.25]
    trial = phases(tmp_path, falling_train(len(val)), with_batches(val, spread=0.01))
    summary = invoke_rule(Overfit(trial))
    assert summary.worst_severity is Severity.PROBLEM
    problem = next(f for f in summary.findings if f.severity is Severity.PROBLEM)
    assert problem.details["cause"] == "overfitting"
    assert problem.details["best"] == pytest.approx(0.153, abs=0.02)
    assert "rose from its best" in problem.message


def test_overfit_two_high_passes_are_not_sustained(tmp_path: Path) -> None:
    val = [0.30, 0.21, 0.17, 0.153, 0.153, 0.154, 0.25, 0.26]
    trial = phases(tmp_path, falling_train(len(val)), with_batches(val, spread=0.001))
    assert invoke_rule(Overfit(trial)).worst_severity is Severity.WARNING


def test_overfit_without_an_eval_step_is_no_data(tmp_path: Path) -> None:
    builder = TrialBuilder(tmp_path)
    for v in np.linspace(1.0, 0.1, 30):
        builder.step({"loss": F32(v)}, mode="train")
    summary = invoke_rule(Overfit(builder.close()))
    assert summary.status is RuleStatus.NO_DATA
    assert "EVAL" in summary.details


@pytest.mark.parametrize("mode", ["train", "eval"])
def test_overfit_on_a_single_value_is_no_data(tmp_path: Path, mode: str) -> None:
    builder = TrialBuilder(tmp_path)
    builder.step({"loss": F32(0.5)}, mode=mode)
    assert invoke_rule(Overfit(builder.close())).status is RuleStatus.NO_DATA


def test_overfit_compares_an_evaluation_only_with_a_training_loss_near_it(
    tmp_path: Path,
) -> None:
    """The reported run: TRAIN losses saved every 10th step, an evaluation every 5, a run that
    diverged. The evaluation after step 10 was compared with the training loss of step 0
    ("validation 2328 vs training 3.29"); now it is skipped, saying why, and an evaluation far
    from any saved training loss is too. The first evaluation is not compared with the loss of
    step 0 either: from before the first update (issue 43's "3860 against 3.289")."""
    builder = TrialBuilder(tmp_path)
    train = [3.29 * 2.2**i for i in range(20)]  # diverging
    for step, loss in enumerate(train):
        if step % 10 == 0:
            builder.step({"loss": F32(loss)}, mode="train")
        else:
            builder.skip(1, mode="train")
        if step % 5 == 4:  # one evaluation: one EVAL step
            builder.step({"loss": F32(1.1 * train[step])}, mode="eval")
    builder.step({"loss": F32(train[-1])}, mode="train")
    builder.skip(40, mode="train")  # no loss saved for 40 steps, then an evaluation
    builder.step({"loss": F32(1.1 * train[-1])}, mode="eval")
    findings = [f for f in iter_findings(Overfit(builder.close())) if f.mode is ModeKeys.EVAL]
    judged = [f for f in findings if f.judged]
    assert [f.details["training"] for f in judged] == pytest.approx([train[10]])
    assert [f.step for f in judged] == [17]  # the evaluation after TRAIN step 14
    unjudged = [f.message for f in findings if not f.judged]
    assert sum("from before any update" in m for m in unjudged) == 2, unjudged  # steps 5, 11
    assert sum("since the previous evaluation" in m for m in unjudged) == 1, unjudged
    assert any("saved 41 steps before this evaluation" in m for m in unjudged), unjudged


_COUNT = re.compile(r"(\d+) of (\d+)")


def _consistent(message: str, details: dict[str, object]) -> None:
    for n, m in _COUNT.findall(message):
        assert int(n) <= int(m), message
    if "rose from its best" in message:
        best, recent = float(details["best"]), float(details["recent"])  # type: ignore[arg-type]
        assert recent > best, message
        assert float(details["validation"]) > best, message  # type: ignore[arg-type]


@settings(max_examples=25, deadline=None)
@given(
    means=st.lists(st.floats(0.1, 0.4), min_size=2, max_size=9),
    batches=st.integers(1, 4),
    seed=st.integers(0, 2**16),
    patience=st.integers(1, 3),
)
def test_overfit_messages_never_contradict_themselves(
    tmp_path_factory: pytest.TempPathFactory,
    means: list[float],
    batches: int,
    seed: int,
    patience: int,
) -> None:
    """The other reported run said "rose from its best 0.2039" of a current 0.1456 and "4 of 1
    evaluation phases in a row"."""
    rng = np.random.default_rng(seed)
    val = [list(m + rng.normal(0, 0.03, batches)) for m in means]
    trial = phases(tmp_path_factory.mktemp("wobble"), falling_train(len(means), 3), val)
    for finding in invoke_rule(Overfit(trial, patience=patience)).findings:
        _consistent(finding.message, finding.details)


# -- LossNotDecreasing --


def noisy_run(
    path: Path, fall: float, noise: float, seed: int, eval_noise: float, steps: int = 60
) -> object:
    """``steps`` TRAIN steps whose loss falls by ``fall`` (relative) under batch noise, and an
    evaluation pass of 4 batches every 10 steps whose mean falls alike."""
    rng = np.random.default_rng(seed)
    builder = TrialBuilder(path)
    for step in range(steps):
        level = 1.0 - fall * step / (steps - 1)
        builder.step({"loss": F32(level * (1 + rng.normal(0, noise)))}, mode="train")
        if step % 10 == 9:
            for batch in (0.9, 1.0, 1.0, 1.1):
                shift = rng.normal(0, eval_noise)
                builder.step({"loss": F32(level * batch * (1 + shift))}, mode="eval")
    return builder.close()


def test_loss_not_decreasing_a_small_real_fall_is_advice_not_a_problem(tmp_path: Path) -> None:
    """The reported runs: a 0.8-9% fall with evaluation-pass means a couple of percent above
    one another. A fall that is real against the noise, however small, is at most advice."""
    summary = invoke_rule(LossNotDecreasing(noisy_run(tmp_path, 0.05, 0.01, 0, 0.01)))
    assert summary.triggered  # pass means rise now and then, as smdebug's rule sees
    assert summary.worst_severity is not Severity.PROBLEM
    assert {f.details["cause"] for f in summary.findings} <= {"no_progress", "overtraining"}


@settings(max_examples=20, deadline=None)
@given(fall=st.floats(0.01, 0.09), seed=st.integers(0, 2**16))
def test_loss_not_decreasing_never_calls_a_real_fall_no_progress(
    tmp_path_factory: pytest.TempPathFactory, fall: float, seed: int
) -> None:
    """Noisy training batches (single steps often rise, and smdebug's rule fires), evaluation
    passes steadier: the fall is real against the noise, however small, so never a problem."""
    path = tmp_path_factory.mktemp("fall")
    trial = noisy_run(path, fall, noise=fall / 5, seed=seed, eval_noise=fall / 20)
    assert invoke_rule(LossNotDecreasing(trial)).worst_severity is not Severity.PROBLEM


def series(finding: Finding) -> object:
    """The mode of the series a finding judged (pass means are judged at a later step)."""
    return finding.details.get("mode", finding.mode)


@settings(max_examples=20, deadline=None)
@given(noise=st.floats(0.0, 0.02), seed=st.integers(0, 2**16))
def test_loss_not_decreasing_a_flat_noisy_loss_is_no_progress(
    tmp_path_factory: pytest.TempPathFactory, noise: float, seed: int
) -> None:
    trial = noisy_run(tmp_path_factory.mktemp("flat"), 0.0, noise, seed, noise, steps=150)
    summary = invoke_rule(LossNotDecreasing(trial))
    # from 100 TRAIN steps (10 x num_steps) on, the checks that fire (the loss did not drop
    # since the last one) say: no progress since the start, a warning while training goes on
    # (a plateau the model may still leave); the run's end makes the training loss's a problem.
    # A level validation loss is at most a warning (its first pass came after training began).
    stuck = [f for f in summary.findings if "; no progress since the start" in f.message]
    assert len(stuck) >= 5
    gravest = summary.gravest
    assert gravest is not None and gravest.severity is Severity.PROBLEM
    assert gravest.details["cause"] == "no_progress"
    assert gravest.details["mode"] is ModeKeys.TRAIN and "(TRAIN)" in gravest.message
    assert gravest.message.endswith("(to the end of training)"), gravest.message
    assert [f for f in summary.findings if f.severity is Severity.PROBLEM] == [gravest]


def test_a_plateau_the_model_leaves_is_not_a_problem(tmp_path: Path) -> None:
    """A loss flat for its first 300 steps, then falling by half over 300 more (a stranger's
    multiple-choice model sat at chance for a third of its run, then reached 0.91): the checks
    on the plateau say no progress so far (warnings); the run's end shows progress, so no
    problem."""
    rng = np.random.default_rng(0)
    builder = TrialBuilder(tmp_path)
    for step in range(600):
        level = 1.0 if step < 300 else 1.0 - 0.5 * (step - 300) / 299
        builder.step({"loss": F32(level * (1 + rng.normal(0, 0.02)))}, mode="train")
    summary = invoke_rule(LossNotDecreasing(builder.close()))
    assert any("; no progress since the start" in f.message for f in summary.findings)
    assert summary.worst_severity is not Severity.PROBLEM, summary.gravest


def test_loss_not_decreasing_too_noisy_to_tell_is_a_warning(tmp_path: Path) -> None:
    summary = invoke_rule(LossNotDecreasing(noisy_run(tmp_path, 0.0, 0.4, 3, 0.4)))
    assert summary.worst_severity is Severity.WARNING


def test_loss_not_decreasing_on_a_single_value_is_no_data(tmp_path: Path) -> None:
    builder = TrialBuilder(tmp_path)
    builder.step({"loss": F32(2.3)}, mode="train")
    summary = invoke_rule(LossNotDecreasing(builder.close(), num_steps=1))
    assert summary.status is RuleStatus.NO_DATA
    assert "compare" in summary.details


# -- the same on real training --


def _regression_near_its_noise_floor(seed: int) -> job_runs.Data:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(1000, 8, generator=gen)
    y = 0.1 * x @ torch.randn(8, 1, generator=gen) + torch.randn(1000, 1, generator=gen)
    return job_runs.Data(x[:800], y[:800], x[800:], y[800:])


def test_loss_not_decreasing_on_a_regression_at_its_noise_floor(tmp_path: Path) -> None:
    """A healthy regression whose targets are mostly noise: its loss starts near its floor
    and single batches jump by 2x. Before, this was "no progress since the start"."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    trial = job_runs.train(
        tmp_path,
        model,
        _regression_near_its_noise_floor(0),
        lambda p: torch.optim.Adam(p, lr=1e-2),
        nn.MSELoss(),
        classify=False,
    )
    summary = invoke_rule(LossNotDecreasing(trial))
    assert summary.triggered and summary.worst_severity is not Severity.PROBLEM


@pytest.mark.parametrize("seed", [0, 2])
def test_loss_not_decreasing_on_a_slowly_learning_gru(tmp_path: Path, seed: int) -> None:
    """A GRU on a hard sequence task learns a few percent in 200 steps, under batch noise.
    Before, this was "no progress since the start (8.17% lower)"."""
    torch.manual_seed(seed)
    trial = job_runs.train(
        tmp_path,
        job_runs.Gru(),
        job_runs.sequences(seed=seed),
        lambda p: torch.optim.Adam(p, lr=1e-3),
        nn.CrossEntropyLoss(),
        seed=seed,
    )
    summary = invoke_rule(LossNotDecreasing(trial))
    assert summary.triggered and summary.worst_severity is not Severity.PROBLEM


# -- Overfit: a small training set --


def _mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))


def _adam(p: list[nn.Parameter]) -> torch.optim.Optimizer:
    return torch.optim.Adam(p, lr=3e-3)


def test_overfit_names_a_small_training_set_it_memorises(tmp_path: Path) -> None:
    """40 digits trained on for 300 steps (a debugging subset left in): the training loss goes
    to about 0 while the validation loss stays far above it. The rows of the saved inputs say
    how few samples there were, and the cause is named: a small training set."""
    torch.manual_seed(0)
    trial = job_runs.train(
        tmp_path, _mlp(), job_runs.digits(n_train=40), _adam, nn.CrossEntropyLoss(), steps=300
    )
    summary = invoke_rule(Overfit(trial))
    assert summary.worst_severity is Severity.PROBLEM
    problem = next(f for f in summary.findings if f.severity is Severity.PROBLEM)
    assert problem.details["cause"] == "small_training_set"
    assert problem.details["training_samples"] == pytest.approx(40, abs=2)
    assert "about 40 distinct samples" in problem.message
    diagnosis = tt.diagnose(trial)
    assert diagnosis.causes[0] == "small_training_set"


@pytest.mark.parametrize("noise", [0.0, 0.5])
def test_overfit_a_loss_that_rises_while_the_accuracy_holds_is_not_harm(
    tmp_path: Path, noise: float
) -> None:
    """300 clean digits trained on for 3,000 steps: the validation loss rises 30% from its best
    while the accuracy holds at 0.94 (the model grows more confident in the answers it gets
    wrong). Five healthy development runs (97% accurate) were "overfitting" problems so; it is
    a warning now, saying why. Half the labels noisy: the accuracy falls from 0.78 to 0.63 as
    the model memorises them, and that stays a problem."""
    torch.manual_seed(0)
    data = job_runs.digits(n_train=600 if noise else 300)
    if noise:
        gen = torch.Generator().manual_seed(1)
        flip = torch.rand(len(data.y), generator=gen) < noise
        y = data.y.clone()
        y[flip] = torch.randint(0, 10, (int(flip.sum()),), generator=gen)
        data = job_runs.Data(data.x, y, data.x_val, data.y_val)
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10))
    trial = job_runs.train(
        tmp_path, model, data, _adam, nn.CrossEntropyLoss(), steps=3000, eval_every=100,
        eval_batch=200,
    )  # fmt: skip
    summary = invoke_rule(Overfit(trial))
    last = summary.findings[-1]
    if noise:
        assert summary.worst_severity is Severity.PROBLEM
        assert last.message.endswith("overfitting"), last.message
    else:
        assert summary.worst_severity is Severity.WARNING
        assert "but the accuracy held (0.941 then" in last.message, last.message


@pytest.mark.parametrize("n_train", [40, None])
def test_overfit_judges_a_small_set_validated_once_after_training(
    tmp_path: Path, n_train: int | None
) -> None:
    """A script that evaluates once, after training (a debugging subset of 40 digits left in,
    memorised): one whole pass is all there is. Before, the small set needed 3 passes and this
    run was healthy. The full set, validated once, is not called small."""
    torch.manual_seed(0)
    data = job_runs.digits(n_train=n_train) if n_train else job_runs.digits()
    trial = job_runs.train(
        tmp_path, _mlp(), data, _adam, nn.CrossEntropyLoss(), eval_every=0, evaluate_at_end=True
    )
    summary = invoke_rule(Overfit(trial))
    causes = [f.details.get("cause") for f in summary.findings]
    if n_train:
        assert summary.worst_severity is Severity.PROBLEM
        assert causes[-1] == "small_training_set"
        assert tt.diagnose(trial).causes[0] == "small_training_set"
    else:
        assert summary.worst_severity is not Severity.PROBLEM
        assert "small_training_set" not in causes


@pytest.mark.parametrize("validated_on", [597, 120])
def test_overfit_names_a_small_set_beside_an_evaluation_many_times_its_size(
    tmp_path: Path, validated_on: int
) -> None:
    """80 digits trained on, 597 validated on (the splits swapped, as a development fault
    does): the validation loss keeps 81-89% of what the training loss came down, above the
    75% under which a small set is memorised, so the run was healthy; an evaluation 7.5 times
    the training set with the model falling short of it (under 90%) names the small set. The
    same run validated on 120 samples (1.5 times) is not called small."""
    torch.manual_seed(0)
    data = job_runs.digits(n_train=80)
    data = job_runs.Data(data.x, data.y, data.x_val[:validated_on], data.y_val[:validated_on])
    model = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))
    trial = job_runs.train(
        tmp_path, model, data, lambda p: torch.optim.SGD(p, lr=0.05), nn.CrossEntropyLoss(),
        steps=250, eval_every=50,
    )  # fmt: skip
    summary = invoke_rule(Overfit(trial))
    if validated_on == 120:
        assert summary.worst_severity is not Severity.PROBLEM, summary
        return
    problem = next(f for f in summary.findings if f.severity is Severity.PROBLEM)
    assert problem.details["cause"] == "small_training_set"
    assert problem.details["evaluated_times"] == pytest.approx(597 / 80, rel=0.05)
    assert 0.75 <= problem.details["generalised"] < 0.9
    assert "its last evaluation pass held 597 samples" in problem.message
    assert tt.diagnose(trial).causes[0] == "small_training_set"


def test_overfit_a_full_training_set_is_not_called_small(tmp_path: Path) -> None:
    torch.manual_seed(0)
    trial = job_runs.train(
        tmp_path, _mlp(), job_runs.digits(), _adam, nn.CrossEntropyLoss(), steps=300
    )
    summary = invoke_rule(Overfit(trial))
    assert summary.worst_severity is not Severity.PROBLEM
    assert all(f.details.get("cause") != "small_training_set" for f in summary.findings)


def test_overfit_a_small_set_the_model_generalises_is_not_a_problem(tmp_path: Path) -> None:
    """60 samples of a task a linear model learns from them (two well separated classes):
    the validation loss comes down as far as the training loss. Few samples alone are not
    overfitting."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(560, 64, generator=gen)
    y = (x[:, :4].sum(1) > 0).long()
    x = x + 3.0 * (2 * y[:, None] - 1) * (torch.arange(64) < 4)
    data = job_runs.Data(x[:60], y[:60], x[60:], y[60:])
    torch.manual_seed(0)
    trial = job_runs.train(tmp_path, nn.Linear(64, 2), data, _adam, nn.CrossEntropyLoss())
    summary = invoke_rule(Overfit(trial))
    assert summary.worst_severity is not Severity.PROBLEM


@settings(max_examples=40, deadline=None)
@given(
    size=st.integers(5, 300),
    draws=st.integers(1, 8),
    seed=st.integers(0, 2**31 - 1),
)
def test_distinct_samples_estimate_the_set_they_are_drawn_from(
    size: int, draws: int, seed: int
) -> None:
    """Rows drawn with replacement from a set of ``size``: once each was seen 3 times on
    average among the distinct ones, the estimate is within a fifth of the set's size."""
    rng = np.random.default_rng(seed)
    rows = rng.normal(size=(size, 5)).astype(np.float32)
    counter = DistinctSamples(cap=10_000)
    for _ in range(draws):
        counter.add(rows[rng.integers(0, size, size)])
    estimate = counter.estimate()
    if counter.seen < DistinctSamples.FIRM * counter.distinct:
        assert estimate is None
    else:
        assert estimate is not None and abs(estimate - size) <= 0.2 * size + 1


def test_distinct_samples_stop_at_their_cap() -> None:
    counter = DistinctSamples(cap=10)
    counter.add(np.arange(40, dtype=np.float32).reshape(20, 2))
    assert counter.full and counter.estimate() is None and counter.distinct == 0


def _vital_run(path: Path, spike_at: int) -> tt.Trial:
    """A job's trial: the loss in ``losses`` every 10th step, the vital signs every step (one
    loss spike, one gradient-norm spike, both at ``spike_at``), an evaluation every 10 steps."""
    rng = np.random.default_rng(0)
    hook = tt.Hook(path, save_config=tt.SaveConfig(save_interval=10))
    for step in range(40):
        hook.set_mode(tt.modes.TRAIN)
        loss = 2.0 * 0.98**step * float(rng.uniform(0.95, 1.05))
        norm = float(rng.uniform(0.9, 1.1))
        if step == spike_at:
            loss, norm = loss * 30, norm * 270
        hook.save_tensor("loss", np.float32(loss), collections="losses")  # every 10th kept
        hook.save_vitals({"loss": loss, "grad_norm": norm})
        hook.next_step()
        if step % 10 == 9:
            hook.set_mode(tt.modes.EVAL)
            hook.save_tensor("loss", np.float32(loss * 1.05), collections="losses")
            hook.save_vitals({"loss": loss * 1.05})
            hook.next_step()
    hook.close()
    return tt.create_trial(path)


@pytest.mark.parametrize("bulk", [True, False])
def test_the_rules_read_the_vital_signs_of_every_step_and_each_loss_once(
    tmp_path: Path, bulk: bool
) -> None:
    """Issue 43: a spike between two saving steps is found in the vital signs (LossSpike and
    GradientNormSpike, which has no gradient to read), and a step whose loss is saved twice
    (``losses`` and ``vitals/loss``) is judged once, on ``vitals/loss``."""
    from tensortap.rules import GradientNormSpike, LossSpike
    from tensortap.rules._invoker import walk

    trial = _vital_run(tmp_path, spike_at=25)
    for rule, vital in (
        (LossSpike(trial), "vitals/loss"),
        (GradientNormSpike(trial), "vitals/grad_norm"),
    ):
        found = [f for f in walk([rule], timeout=0, bulk=bulk) if isinstance(f, Finding)]
        fired = [f for f in found if f.outcome.value == "triggered"]
        assert [(f.mode, f.mode_step) for f in fired] == [(ModeKeys.TRAIN, 25)], rule
        assert [list(f.tensors) for f in fired] == [[vital]]
    summary = invoke_rule(LossSpike(tt.create_trial(tmp_path)))
    assert summary.triggered == 1 and summary.judged == 40 - 10  # TRAIN steps after the warm-up


def _train_losses(path: Path, losses: list[float]) -> object:
    builder = TrialBuilder(path)
    for v in losses:
        builder.step({"loss": F32(v)}, mode="train")
    return builder.close()


def test_a_loss_climbing_steadily_from_its_first_step_is_a_flipped_sign(tmp_path: Path) -> None:
    """Issue 44: an update with its sign flipped (loss 2.3 -> 2e10) was blamed on the learning
    rate. A training loss that climbs steadily from its first step, with no jump, ascends
    it; one that jumps at once (a step far too large) or falls first is the learning rate."""
    rng = np.random.default_rng(0)
    ascent = [2.3 * 1.04**i * (1 + 0.01 * rng.normal()) for i in range(60)]
    found = [f for f in iter_findings(LossNotDecreasing(_train_losses(tmp_path / "a", ascent)))
             if f.severity is Severity.PROBLEM]  # fmt: skip
    assert found and found[0].details["cause"] == "wrong_sign", found[:1]
    assert "climbing steadily from its first step" in found[0].message
    # the validation loss diverging first, in a run whose training loss climbs (dev's
    # gradient-ascent runs evaluated every few steps were blamed on the learning rate)
    builder = TrialBuilder(tmp_path / "e")
    for i, v in enumerate(ascent[:50]):
        builder.step({"loss": F32(v)}, mode="train")
        if i % 5 == 4:
            builder.step({"loss": F32(v * 1.1)}, mode="eval")
    found = [f for f in iter_findings(LossNotDecreasing(builder.close()))
             if f.severity is Severity.PROBLEM]  # fmt: skip
    passes = [f for f in found if f.mode is ModeKeys.EVAL]
    assert passes and {f.details["cause"] for f in passes} == {"wrong_sign"}, passes[:1]
    assert "the training loss climbed steadily from its first step" in passes[0].message
    # the same climb ending in NaN: the NaN's cause is the climb before it
    nan = [*ascent[:30], float("nan")]
    [bad] = [f for f in iter_findings(LossNotDecreasing(_train_losses(tmp_path / "n", nan)))
             if f.details.get("nonfinite")]  # fmt: skip
    assert bad.details["cause"] == "wrong_sign" and "before it, the loss climbed" in bad.message
    # a jump at the first steps (too large a step), then a climb: the learning rate
    jump = [2.3, 9.0, 12.0, *(12.0 * 1.04**i for i in range(57))]
    found = [f for f in iter_findings(LossNotDecreasing(_train_losses(tmp_path / "j", jump)))
             if f.severity is Severity.PROBLEM]  # fmt: skip
    assert found and found[0].details["cause"] == "lr_too_high"
    # down first, then blowing up: the learning rate
    late = [2.3 * 0.97**i for i in range(30)] + [2.3 * 0.97**30 * 1.5**i for i in range(30)]
    found = [f for f in iter_findings(LossNotDecreasing(_train_losses(tmp_path / "l", late)))
             if f.severity is Severity.PROBLEM]  # fmt: skip
    assert found and all(f.details["cause"] != "wrong_sign" for f in found)


def test_a_loss_falling_without_a_floor_is_a_flipped_sign(tmp_path: Path) -> None:
    """Issue 44: a Gaussian log-likelihood minimised without its minus fell from -1.5 to -7e20
    and the run was called healthy (the loss only ever "decreased"). A minimised loss has a
    floor; one that falls 100x its start below 0 is a problem, the sign flipped. A Gaussian
    likelihood's loss that settles a few units below 0 is not."""
    rng = np.random.default_rng(0)
    unbounded = [-1.5 * 1.3**i * (1 + 0.05 * rng.normal()) for i in range(60)]
    found = [f for f in iter_findings(LossNotDecreasing(_train_losses(tmp_path / "u", unbounded)))
             if f.severity is Severity.PROBLEM]  # fmt: skip
    assert found and found[0].details["cause"] == "wrong_sign", found[:1]
    assert "fell without a floor" in found[0].message
    first = found[0].mode_step
    assert first is not None and first < 25  # once 100x its start, not at its overflow
    assert len(found) <= len(unbounded) // 10  # judged every num_steps, not at every step
    # the same fall ending in an overflow: the infinity's cause is the fall before it
    inf = [*unbounded[:30], float("-inf")]
    [bad] = [f for f in iter_findings(LossNotDecreasing(_train_losses(tmp_path / "i", inf)))
             if f.details.get("nonfinite")]  # fmt: skip
    assert bad.details["cause"] == "wrong_sign" and "fell without a floor" in bad.message
    # a learned-variance likelihood: from 1.2 down to about -4, and level
    settles = [1.2 - 5.2 * (1 - 0.9**i) + 0.05 * rng.normal() for i in range(200)]
    found = [f for f in iter_findings(LossNotDecreasing(_train_losses(tmp_path / "s", settles)))
             if f.severity is Severity.PROBLEM]  # fmt: skip
    assert not found, found[:1]


def test_a_validation_loss_far_above_its_best_is_harm_and_named_overfitting(
    tmp_path: Path,
) -> None:
    """Issue 44: a validation loss rising under memorisation (training loss 0.0027) was read
    as "diverging" and blamed on the learning rate; a validation loss 4.4x its best was left a
    warning by Overtraining, so the run was "healthy". The training loss fell meanwhile."""
    from tensortap.rules import Overtraining

    val = [1.0, 0.6, 0.5, 0.6, 0.8, 1.1, 1.5, 1.9, 2.2]  # best 0.5, then 4.4x it
    trial = phases(tmp_path, falling_train(len(val)), with_batches(val, spread=0.01))
    found = [f for f in iter_findings(Overtraining(trial)) if f.severity is Severity.PROBLEM]
    assert found and found[0].details["cause"] == "overtraining"
    assert "training on has made the model far worse" in found[0].message
    diverging = [f for f in iter_findings(LossNotDecreasing(trial))
                 if f.details.get("diverging")]  # fmt: skip
    assert diverging and diverging[0].mode is ModeKeys.EVAL
    assert diverging[0].details["cause"] == "overfitting", diverging[0].message
    assert "the training loss came down" in diverging[0].message
    # one pass at 2.4x its best (a noisy validation set: heavy-tailed targets) is no harm
    noisy = [1.0, 0.6, 0.5, 0.55, 1.2, 0.6, 0.62, 0.6, 0.63]
    trial = phases(tmp_path / "noisy", falling_train(len(noisy)),
                   with_batches(noisy, spread=0.01))  # fmt: skip
    assert invoke_rule(Overtraining(trial)).worst_severity is not Severity.PROBLEM
    # a validation loss 1.5x its best stays a warning
    mild = [1.0, 0.6, 0.5, 0.55, 0.6, 0.65, 0.7, 0.72, 0.75]
    trial = phases(tmp_path / "mild", falling_train(len(mild)), with_batches(mild, spread=0.01))
    assert invoke_rule(Overtraining(trial)).worst_severity is Severity.WARNING


def test_loss_not_decreasing_a_loss_that_fell_then_blew_up_is_diverging(tmp_path: Path) -> None:
    """The shape of a one-cycle schedule peaking at 100x a healthy rate: the loss falls from
    1.0 to 0.2 in 5 steps, then blows up to about 1.1 at step 60, barely above its first
    values, and stays there. Before, "no
    progress since the start" (the medians of its first and last 3 values are close): its last
    third is far above its first, so it diverges, and the learning rate is named."""
    rng = np.random.default_rng(0)
    builder = TrialBuilder(tmp_path)
    levels = [max(1.0 - 0.16 * s, 0.2) + min(max(0, s - 50), 10) * 0.09 for s in range(120)]
    for level in levels:
        builder.step({"loss": F32(level * (1 + rng.normal(0, 0.02)))}, mode="train")
    summary = invoke_rule(LossNotDecreasing(builder.close()))
    problems = [f for f in summary.findings if f.severity is Severity.PROBLEM]
    assert problems, [f.message for f in summary.findings]
    assert problems[0].details["cause"] == "lr_too_high", problems[0].message
    assert "diverging" in problems[0].message
