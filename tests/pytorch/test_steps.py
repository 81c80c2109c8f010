"""Step and mode counting of the PyTorch hook in the loop shapes real training uses."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import tensortap.pytorch as tt
from tensortap.core._step_tracker import StepTracker, Update
from tests.helpers.torch_models import Net, batches, make

EVERY_STEP = tt.SaveConfig(save_interval=1)


def new_hook(path: Path, **kwargs) -> tt.Hook:
    kwargs.setdefault("save_config", EVERY_STEP)
    kwargs.setdefault("include_collections", ["losses", "scalars"])
    return tt.Hook(path, **kwargs)


def test_plain_loop_one_step_per_iteration(tmp_path: Path) -> None:
    model = make(Net)
    hook = new_hook(tmp_path / "run")
    hook.register_module(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for i, (xb, yb) in enumerate(batches(32, 6)):
        hook.save_scalar("before_forward", i)  # belongs to the step that is still open
        opt.zero_grad()
        loss = F.cross_entropy(model(xb), yb)
        loss.backward()
        opt.step()
        hook.save_scalar("iteration", i)  # after the update: still this iteration's step
    hook.close()
    trial = tt.create_trial(tmp_path / "run")
    assert trial.steps(mode=tt.modes.TRAIN) == list(range(6))
    it = trial.tensor("iteration")
    assert [it.value(s) for s in it.steps()] == list(range(6))
    assert trial.tensor("loss").steps() == list(range(6))


def test_gradient_accumulation_is_one_step_per_optimizer_step(tmp_path: Path) -> None:
    model = make(Net)
    hook = new_hook(tmp_path / "run", include_collections=["gradients", "losses"])
    hook.register_module(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    hook.register_optimizer(opt)
    accumulated = []
    for i, (xb, yb) in enumerate(batches(16, 12)):
        (F.cross_entropy(model(xb), yb) / 4).backward()
        if i % 4 == 3:
            assert model.fc1.weight.grad is not None
            accumulated.append(model.fc1.weight.grad.clone().numpy())
            opt.step()
            opt.zero_grad()
    hook.close()
    trial = tt.create_trial(tmp_path / "run")
    assert trial.steps(mode=tt.modes.TRAIN) == [0, 1, 2]
    grad = trial.tensor("gradient/fc1.weight")
    for step, want in enumerate(accumulated):
        np.testing.assert_array_equal(grad.value(step), want)


def test_model_called_twice_per_step(tmp_path: Path) -> None:
    model = make(Net)
    hook = new_hook(tmp_path / "run", include_collections=["outputs", "losses"])
    hook.register_module(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for xb, yb in batches(32, 5):
        opt.zero_grad()
        a, b = model(xb), model(xb.flip(0))  # two forwards, one backward
        (F.cross_entropy(a, yb) + F.cross_entropy(b, yb.flip(0))).backward()
        opt.step()
    hook.close()
    trial = tt.create_trial(tmp_path / "run")
    assert trial.steps(mode=tt.modes.TRAIN) == list(range(5))


def test_eval_interleaved_with_explicit_modes(tmp_path: Path) -> None:
    model = make(Net)
    hook = new_hook(tmp_path / "run")
    hook.register_module(model)
    loss_fn = torch.nn.CrossEntropyLoss()
    hook.register_loss(loss_fn)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = batches(32)
    for _epoch in range(2):
        hook.set_mode(tt.modes.TRAIN)
        model.train()
        for _ in range(4):
            xb, yb = next(data)
            opt.zero_grad()
            loss_fn(model(xb), yb).backward()
            opt.step()
        hook.set_mode(tt.modes.EVAL)
        model.eval()
        with torch.no_grad():
            for _ in range(3):
                xb, yb = next(data)
                loss_fn(model(xb), yb)
    hook.close()
    trial = tt.create_trial(tmp_path / "run")
    assert trial.steps(mode=tt.modes.TRAIN) == list(range(8))
    assert trial.steps(mode=tt.modes.EVAL) == list(range(6))
    assert trial.steps() == list(range(14))
    assert trial.mode(4) == tt.modes.EVAL and trial.mode_step(7) == 4
    assert trial.global_step(tt.modes.TRAIN, 4) == 7
    assert trial.tensor("CrossEntropyLoss_output_0").steps(mode=tt.modes.EVAL) == list(range(6))


def test_modes_follow_model_training_and_no_grad_without_set_mode(tmp_path: Path) -> None:
    model = make(Net)
    hook = new_hook(tmp_path / "run")
    hook.register_module(model)
    loss_fn = torch.nn.CrossEntropyLoss()
    hook.register_loss(loss_fn)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = batches(32)
    for _ in range(3):
        xb, yb = next(data)
        opt.zero_grad()
        loss_fn(model(xb), yb).backward()
        opt.step()
    model.eval()  # eval via model.eval()
    with torch.no_grad():
        for _ in range(2):
            loss_fn(model(next(data)[0]), next(data)[1])
    model.train()
    for _ in range(2):
        xb, yb = next(data)
        opt.zero_grad()
        loss_fn(model(xb), yb).backward()
        opt.step()
    with torch.no_grad():  # eval via no_grad only: the model is still in training mode
        loss_fn(model(next(data)[0]), next(data)[1])
    hook.close()
    trial = tt.create_trial(tmp_path / "run")
    assert trial.steps(mode=tt.modes.TRAIN) == list(range(5))
    assert trial.steps(mode=tt.modes.EVAL) == list(range(3))
    assert [trial.mode(s) for s in trial.steps()] == [tt.modes.TRAIN] * 3 + [tt.modes.EVAL] * 2 + [
        tt.modes.TRAIN
    ] * 2 + [tt.modes.EVAL]


@pytest.mark.parametrize("auto_step", [False, True])
def test_explicit_next_step_replaces_automatic_boundaries(tmp_path: Path, auto_step) -> None:
    model = make(Net)
    hook = new_hook(tmp_path / "run", auto_step=auto_step)
    hook.register_module(model)
    hook.set_mode(tt.modes.TRAIN)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = batches(32)
    for _ in range(3):  # a step of two optimizer updates, as in a GAN
        for _ in range(2):
            xb, yb = next(data)
            opt.zero_grad()
            F.cross_entropy(model(xb), yb).backward()
            opt.step()
        hook.save_scalar("marked", 1.0)
        hook.next_step()
    hook.close()
    trial = tt.create_trial(tmp_path / "run")
    marked = trial.tensor("marked").steps(mode=tt.modes.TRAIN)
    if auto_step:  # the first marked step was split by automatic boundaries before next_step()
        assert marked == [1, 2, 3]
    else:
        assert marked == [0, 1, 2]


def test_grad_scaler_gradients_and_loss_are_saved_unscaled(tmp_path: Path) -> None:
    model, twin = make(Net), make(Net)
    hook = new_hook(tmp_path / "run", include_collections=["gradients", "losses"])
    hook.register_module(model)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    hook.register_grad_scaler(scaler)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    twin_opt = torch.optim.SGD(twin.parameters(), lr=0.1)
    want = []
    for xb, yb in batches(32, 3):
        opt.zero_grad()
        loss = F.cross_entropy(model(xb), yb)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        twin_opt.zero_grad()
        F.cross_entropy(twin(xb), yb).backward()
        assert twin.fc1.weight.grad is not None
        want.append((twin.fc1.weight.grad.clone().numpy(), loss.item()))
        twin_opt.step()
    hook.close()
    trial = tt.create_trial(tmp_path / "run")
    assert trial.steps(mode=tt.modes.TRAIN) == [0, 1, 2]
    for step, (grad, loss_value) in enumerate(want):
        np.testing.assert_allclose(
            trial.tensor("gradient/fc1.weight").value(step), grad, rtol=1e-5, atol=1e-8
        )
        assert trial.tensor("loss").value(step) == pytest.approx(loss_value, rel=1e-6)


def test_scaler_skipped_update_still_ends_the_step(tmp_path: Path) -> None:
    model = make(Net)
    hook = new_hook(tmp_path / "run")
    hook.register_module(model)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**20)
    hook.register_grad_scaler(scaler)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    hook.register_optimizer(opt)
    for i, (xb, yb) in enumerate(batches(32, 4)):
        opt.zero_grad()
        loss = F.cross_entropy(model(xb), yb)
        if i == 1:
            loss = loss * float("inf")  # this update is skipped by the scaler
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
    hook.close()
    assert tt.create_trial(tmp_path / "run").steps(mode=tt.modes.TRAIN) == [0, 1, 2, 3]


def test_step_tracker_rule() -> None:
    tracker = StepTracker()
    train, ev = tt.modes.TRAIN, tt.modes.EVAL
    assert not tracker.forward_starts_step(train)
    tracker.on_forward()
    assert not tracker.forward_starts_step(train)  # second forward, no update yet
    tracker.on_update(Update.BACKWARD)
    assert tracker.forward_starts_step(train)
    tracker.reset()
    tracker.expect(Update.OPTIMIZER_STEP)
    tracker.on_update(Update.BACKWARD)  # accumulation: backward no longer ends the step
    assert not tracker.forward_starts_step(train)
    tracker.on_update(Update.OPTIMIZER_STEP)
    assert tracker.forward_starts_step(train)
    tracker.reset()
    assert not tracker.forward_starts_step(ev)
    tracker.on_forward()
    assert tracker.forward_starts_step(ev)  # each eval forward is a step
    tracker.stop_automatic()
    assert not tracker.forward_starts_step(ev)
