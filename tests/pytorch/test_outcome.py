"""The outcome of PyTorch steps (tensortap.pytorch._outcome): a registered classification
loss's inputs become labels and predicted classes at due steps, token positions ignored by the
loss are dropped, and steps that save nothing never touch the values."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

import tensortap.pytorch as tt
from tensortap.core._outcome import IGNORE_INDEX, MAX_ROWS
from tensortap.pytorch._outcome import CLASSES, LOGITS, SCORES_READ, OutcomeTap


class Tokens(nn.Module):
    """A tiny language model: logits [batch, vocabulary, positions] for CrossEntropyLoss."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(11, 8)
        self.out = nn.Linear(8, 11)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.embed(x)).transpose(1, 2)


def test_a_sequence_loss_saves_its_positions_without_the_ignored_ones(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model, loss_fn = Tokens(), nn.CrossEntropyLoss()
    hook = tt.Hook(
        str(tmp_path),
        include_collections=["labels", "predictions"],
        save_config=tt.SaveConfig(save_interval=2),
    )
    hook.register_module(model)
    hook.register_loss(loss_fn)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    expected = {}
    for step in range(4):
        x = torch.randint(0, 11, (3, 5))
        y = torch.randint(0, 11, (3, 5))
        y[:, :2] = IGNORE_INDEX  # a prompt the loss ignores
        out = model(x)
        loss = loss_fn(out, y)
        expected[step] = (y[:, 2:].reshape(-1), out.argmax(1)[:, 2:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
    hook.close()
    trial = tt.create_trial(str(tmp_path))
    assert trial.tensor("labels").steps() == [0, 2]  # the hook's schedule
    for step in (0, 2):
        labels, predicted = expected[step]
        assert trial.tensor("labels").value(step).tolist() == labels.tolist()
        assert trial.tensor("predictions").value(step).tolist() == predicted.tolist()


class Recorder:
    """The few answers OutcomeTap asks of a StepRecorder."""

    def __init__(self, due: bool) -> None:
        self.due, self.mode, self.mode_step = due, "TRAIN", 0

    def begin(self, name: str, collections: tuple[str, ...]) -> object | None:
        return object() if self.due else None  # a save plan where due


class Untouchable(torch.Tensor):
    """A tensor whose values must not be read (a read would be a host sync on a device)."""

    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        raise AssertionError(f"{func} read the values on a step that saves nothing")


@pytest.mark.parametrize("before", [True, False])
def test_a_scripts_own_labels_and_predictions_win_over_the_sampled_ones(
    tmp_path: Path, before: bool
) -> None:
    """Saved before the loss call or after it, what the script saves itself is kept: the loss
    call never replaces it (a later call in the step neither)."""
    torch.manual_seed(0)
    model, loss_fn = nn.Linear(4, 3), nn.CrossEntropyLoss()
    hook = tt.Hook(
        str(tmp_path),
        include_collections=["labels", "predictions"],
        save_config=tt.SaveConfig(save_interval=1),
    )
    hook.register_module(model)
    hook.register_loss(loss_fn)
    y = torch.tensor([0, 1, 2, 1])
    mine = torch.tensor([2, 2, 2, 2])  # not what the model predicts
    for _ in range(2):
        out = model(torch.randn(4, 4))
        if not before:
            loss_fn(out, y)
        hook.save_tensor("labels", y, "labels")
        hook.save_tensor("predictions", mine, "predictions")
        loss_fn(out, y).backward()
        hook.next_step()
    hook.close()
    trial = tt.create_trial(str(tmp_path))
    for step in (0, 1):
        assert trial.tensor("labels").value(step).tolist() == y.tolist()
        assert trial.tensor("predictions").value(step).tolist() == mine.tolist()


def test_a_step_that_saves_nothing_never_reads_the_values() -> None:
    saved: list[tuple[str, np.ndarray]] = []
    tap = OutcomeTap(Recorder(due=False), lambda n, v, c: saved.append((n, v)))  # type: ignore[arg-type]
    scores = torch.zeros(4, 3).as_subclass(Untouchable)
    tap.on_loss(CLASSES, scores, torch.zeros(4, dtype=torch.long), IGNORE_INDEX)
    assert saved == []


def test_a_steps_batches_are_gathered_up_to_the_bound_thinned_on_the_device() -> None:
    recorder = Recorder(due=True)
    saved: list[tuple[str, np.ndarray]] = []
    tap = OutcomeTap(recorder, lambda n, v, c: saved.append((n, v)))  # type: ignore[arg-type]
    logits = torch.randn(3000, 1)
    tap.on_loss(LOGITS, logits, (logits > 0).float(), None)
    tap.on_loss(LOGITS, logits, (logits > 0).float(), None)  # the step's next batch
    tap.on_loss(LOGITS, logits, (logits > 0).float(), None)  # the step is full: not read
    assert [n for n, _ in saved] == ["labels", "predictions"] * 2  # each replaces the last
    assert saved[0][1].size == 3000 and saved[-1][1].size == MAX_ROWS
    assert np.array_equal(saved[-2][1], saved[-1][1])  # binary logits > 0: the labels
    recorder.mode_step = 1
    tap.on_loss(CLASSES, torch.randn(2, 5, 7), torch.zeros(2, 3, dtype=torch.long), None)
    assert len(saved) == 4  # shapes that do not pair up: nothing saved, nothing raised
    tap.on_loss(CLASSES, torch.randn(2, 5, 7), torch.zeros(2, 7, dtype=torch.long), None)
    assert saved[-1][1].size == 14  # a new step starts its own gathering


def test_a_large_vocabulary_reads_only_the_chosen_positions_scores() -> None:
    """Logits [batch, vocabulary, positions] of a 70,000-token vocabulary: a few evenly spaced
    positions are chosen from the targets (ignored ones never), and only their scores read."""
    saved: list[tuple[str, np.ndarray]] = []
    tap = OutcomeTap(Recorder(due=True), lambda n, v, c: saved.append((n, v)))  # type: ignore[arg-type]
    torch.manual_seed(0)
    logits = torch.randn(4, 70_000, 16)
    target = torch.randint(0, 70_000, (4, 16))
    target[:, :8] = IGNORE_INDEX
    tap.on_loss(CLASSES, logits, target, IGNORE_INDEX)
    labels, predicted = saved[0][1], saved[1][1]
    assert 1 <= labels.size <= SCORES_READ // 16 // 70_000  # not the 32 kept positions
    flat_target, flat_predicted = target.reshape(-1), logits.argmax(dim=1).reshape(-1)
    kept = (flat_target != IGNORE_INDEX).nonzero().squeeze(1)
    rows = np.linspace(0, kept.numel() - 1, labels.size).round().astype(int)
    assert labels.tolist() == flat_target[kept[rows]].tolist()
    assert predicted.tolist() == flat_predicted[kept[rows]].tolist()


def test_a_wrapped_functional_loss_hands_on_its_result_and_survives_a_failing_callback(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Zero code change lets the wrapped F.cross_entropy hand on: the callback gets the loss it
    computed (the training-loop facts know it as a whole loss), and a callback that raises
    never fails the script's loss, which is returned as the original computes it. Without it
    only a regression loss hands on (every hook saves a regression's outcome)."""
    from torch.nn import functional

    from tensortap.pytorch import _outcome

    original = getattr(functional.cross_entropy, "__wrapped__", functional.cross_entropy)
    seen: list[Any] = []
    scores, target = torch.randn(4, 3), torch.tensor([0, 1, 2, 1])
    handed = _outcome._wrapped(original, "cross_entropy", CLASSES, lambda *a: seen.append(a))
    monkeypatch.setattr(_outcome, "_classification_tapped", False)
    handed(scores, target)
    assert seen == []  # an explicit hook takes its outcome from its loss modules
    monkeypatch.setattr(_outcome, "_classification_tapped", True)
    loss = handed(scores, target, ignore_index=1)
    name, kind, given, wanted, ignore, value = seen[0]
    assert (name, kind, ignore) == ("cross_entropy", CLASSES, 1)
    assert given is scores and wanted is target
    assert value is loss and torch.equal(loss, original(scores, target, ignore_index=1))

    def fails(*args: Any) -> None:
        raise RuntimeError("injected")

    wrapped = _outcome._wrapped(original, "cross_entropy", CLASSES, fails)
    assert torch.equal(wrapped(scores, target), original(scores, target))

    monkeypatch.setattr(_outcome, "_classification_tapped", False)
    mse = getattr(functional.mse_loss, "__wrapped__", functional.mse_loss)
    prediction, wanted_values = torch.randn(5), torch.randn(5)
    regression = _outcome._wrapped(mse, "mse_loss", _outcome.REGRESSION, lambda *a: seen.append(a))
    value = regression(prediction, wanted_values, reduction="sum")
    assert seen[-1][:5] == ("mse_loss", _outcome.REGRESSION, prediction, wanted_values, None)
    assert torch.equal(value, mse(prediction, wanted_values, reduction="sum"))


def test_scores_met_outside_a_loss_give_way_to_a_loss_of_the_same_step() -> None:
    """An evaluation without a loss hands scores and targets (``on_scores``); a loss of the step
    replaces what they gave and stops them; a new step takes scores again; the script's own
    outcome stops both."""
    recorder = Recorder(due=True)
    saved: list[tuple[str, np.ndarray]] = []
    tap = OutcomeTap(recorder, lambda n, v, c: saved.append((n, v)))  # type: ignore[arg-type]
    scores, target = torch.eye(3)[[0, 1, 2, 1]], torch.tensor([0, 1, 2, 0])
    assert tap.wants_scores()
    tap.on_scores(scores, target)
    tap.on_scores(scores, target)  # the step's next batch
    assert saved[-2][1].tolist() == [0, 1, 2, 0] * 2 and saved[-1][1].tolist() == [0, 1, 2, 1] * 2
    tap.on_loss(CLASSES, scores, torch.tensor([2, 2, 2, 2]), None)
    assert saved[-2][1].tolist() == [2, 2, 2, 2]  # the loss's alone
    assert not tap.wants_scores()
    tap.on_scores(scores, target)
    assert saved[-2][1].tolist() == [2, 2, 2, 2]
    recorder.mode_step = 1
    assert tap.wants_scores()
    tap.stand_aside()
    assert not tap.wants_scores()
    count = len(saved)
    tap.on_loss(CLASSES, scores, target, None)
    assert len(saved) == count  # the script's own values win


def _regression_run(
    out: Path, loss: str, shuffled: bool = False, steps: int = 60
) -> tuple[Any, dict[int, tuple[list[float], list[float]]]]:
    """A linear regression trained with a functional loss and ``hook.record_loss`` (``loss``:
    "functional"), an unregistered ``nn.MSELoss`` ("module"), or a registered one
    ("registered"); an evaluation under ``no_grad`` every 20 steps. Returns the trial and each
    TRAIN step's (prediction, target), by step."""
    torch.manual_seed(0)
    x = torch.randn(2000, 4)
    y = x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]]) + 0.1 * torch.randn(2000, 1)
    y_train = y[:1500][torch.randperm(1500)] if shuffled else y[:1500]
    model = nn.Linear(4, 1)
    criterion = nn.MSELoss()
    every = {tt.modes.EVAL: tt.SaveConfigMode(save_interval=1)}  # every evaluation step
    hook = tt.Hook(
        str(out),
        include_collections=["inputs", "losses"],
        save_config=tt.SaveConfig(save_interval=10, mode_save_configs=every),
    )
    hook.register_module(model)
    if loss == "registered":
        hook.register_loss(criterion)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    seen: dict[int, tuple[list[float], list[float]]] = {}
    for step in range(steps):
        i = (step * 30) % 1500
        xb, yb = x[i : i + 30], y_train[i : i + 30]
        pred = model(xb)
        if loss == "functional":
            value = torch.nn.functional.mse_loss(pred, yb)
            hook.record_loss(value)
        else:
            value = criterion(pred, yb)
        seen[step] = (pred.detach().ravel().tolist(), yb.ravel().tolist())
        opt.zero_grad()
        value.backward()
        opt.step()
        if step % 20 == 19:
            with torch.no_grad():
                for j in range(1500, 2000, 250):
                    xv, yv = x[j : j + 250], y[j : j + 250]
                    if loss == "functional":
                        torch.nn.functional.mse_loss(model(xv), yv)
                    else:
                        criterion(model(xv), yv)
    hook.close()
    return tt.create_trial(str(out)), seen


@pytest.mark.parametrize("loss", ["functional", "module"])
def test_a_functional_regression_loss_saves_its_prediction_and_target_as_a_modules_are(
    tmp_path: Path, loss: str
) -> None:
    """F.mse_loss (and an unregistered nn.MSELoss, which calls it) gives the regression's
    outcome at the steps where ``inputs`` is due, in training and in evaluation under
    ``no_grad`` alike: the prediction as ``mse_loss_input_0``, the target as
    ``mse_loss_input_1``, exactly."""
    trial, seen = _regression_run(tmp_path, loss)
    pred, target = trial.tensor("mse_loss_input_0"), trial.tensor("mse_loss_input_1")
    train = target.steps(mode=tt.modes.TRAIN)
    assert train == [0, 10, 20, 30, 40, 50]  # the hook's schedule
    for step in train:
        got = pred.value(step, mode=tt.modes.TRAIN).ravel().tolist()
        assert got == pytest.approx(seen[step][0], abs=1e-6)
        assert target.value(step, mode=tt.modes.TRAIN).ravel().tolist() == seen[step][1]
    assert len(target.steps(mode=tt.modes.EVAL)) == 6  # 3 passes of 2 batches, each saved
    assert "mse_loss_input_1" in trial.tensor_names(collection="inputs")


def test_a_registered_regression_loss_saves_its_own_inputs_only(tmp_path: Path) -> None:
    trial, _ = _regression_run(tmp_path, "registered")
    names = trial.tensor_names()
    assert "MSELoss_input_1" in names and not any(n.startswith("mse_loss") for n in names)


@pytest.mark.parametrize("shuffled", [False, True])
def test_a_functional_regression_is_judged_against_chance(tmp_path: Path, shuffled: bool) -> None:
    """Before, a regression trained with F.mse_loss saved no targets and AccuracyAtChance had
    nothing to judge (NoData): shuffled targets ended "healthy". Now its evaluation passes are
    judged: at chance with the training targets shuffled, above it without."""
    from tensortap.rules import AccuracyAtChance, invoke_rule
    from tensortap.rules._finding import Severity

    trial, _ = _regression_run(tmp_path, "functional", shuffled=shuffled, steps=120)
    summary = invoke_rule(AccuracyAtChance(trial))
    if shuffled:
        gravest = summary.gravest
        assert gravest is not None and gravest.severity is Severity.PROBLEM, summary
        assert gravest.details["cause"] == "no_learnable_signal", gravest.message
    else:
        assert summary.status.value == "NoIssuesFound", summary


def test_a_functional_loss_over_a_large_tensor_saves_nothing(tmp_path: Path) -> None:
    from tensortap.core._outcome import MAX_REGRESSION_VALUES

    hook = tt.Hook(str(tmp_path), include_collections=["inputs"])
    model = nn.Identity()
    hook.register_module(model)
    big = torch.zeros(MAX_REGRESSION_VALUES + 1)
    torch.nn.functional.l1_loss(model(big), big)
    torch.nn.functional.l1_loss(model(big[:8]), big[:8] + 1)
    hook.close()
    trial = tt.create_trial(str(tmp_path))
    assert trial.tensor("l1_loss_input_1").value(0).tolist() == [1.0] * 8
