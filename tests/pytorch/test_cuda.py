"""CUDA tensors through the PyTorch hook (runs where a GPU is present; skipped elsewhere)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import tensortap.pytorch as tt
from tests.helpers.torch_models import Net, batches, make

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device here")


def test_cuda_model_values_and_reductions(tmp_path: Path) -> None:
    model = make(Net).cuda()
    hook = tt.Hook(
        tmp_path / "run",
        save_config=tt.SaveConfig(save_interval=1),
        include_collections=["weights", "gradients", "relu_activations", "losses", "norms"],
    )
    norms = hook.get_collection("norms")
    norms.include("^gradient/")
    norms.reduction_config = tt.ReductionConfig(reductions=["min", "max", "mean"], norms=["l2"])
    hook.register_module(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    want = []
    for xb, yb in batches(32, 3):
        opt.zero_grad()
        F.cross_entropy(model(xb.cuda()), yb.cuda()).backward()
        assert model.fc1.weight.grad is not None
        grad = model.fc1.weight.grad.detach().cpu().numpy().copy()
        opt.step()
        want.append((grad, model.fc1.weight.detach().cpu().numpy().copy()))
    hook.close()
    trial = tt.create_trial(tmp_path / "run")
    for step, (grad, weight) in enumerate(want):
        np.testing.assert_array_equal(trial.tensor("gradient/fc1.weight").value(step), grad)
        np.testing.assert_array_equal(trial.tensor("fc1.weight").value(step), weight)
        g = torch.tensor(grad)
        tensor = trial.tensor("gradient/fc1.weight")
        assert tensor.reduction_value(step, "l2") == pytest.approx(float(g.norm()), rel=1e-5)
        assert tensor.reduction_value(step, "max") == pytest.approx(float(g.max()), rel=1e-6)
    assert trial.has_tensor("relu1/relu_output_0")


def test_cuda_bfloat16_and_async_copies(tmp_path: Path) -> None:
    hook = tt.Hook(tmp_path / "run", save_config=tt.SaveConfig(save_interval=1))
    values = [torch.randn(256, 256, device="cuda", dtype=torch.bfloat16) for _ in range(4)]
    for value in values:
        hook.save_tensor("x", value)
        value.mul_(0)  # changed in place right after: the saved copy must not see it
        hook.next_step()
    hook.close()
    trial = tt.create_trial(tmp_path / "run")
    assert trial.tensor("x").steps() == [0, 1, 2, 3]
    assert all(np.any(trial.tensor("x").value(s) != 0) for s in range(4))


def test_cuda_statistics_every_step_never_wait_on_the_device(tmp_path: Path) -> None:
    """Gradient and weight statistics every step, and raw weights: the training thread makes no
    synchronizing CUDA call (sync debug mode raises on one), and the values are right."""
    model = make(Net).cuda().to(torch.bfloat16)
    hook = tt.Hook(
        tmp_path / "run",
        save_config=tt.SaveConfig(save_interval=1),
        reduction_config=tt.ReductionConfig(
            reductions=["min", "max", "mean", "amax"], abs_reductions=["max"], norms=["l1", "l2"]
        ),
        include_collections=["weights", "gradients"],
    )
    hook.register_module(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = [(x.cuda().to(torch.bfloat16), y.cuda()) for x, y in batches(32, 4)]
    grads = []
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for x, y in data:
            opt.zero_grad(set_to_none=False)  # zeroed in place: the statistics must not see it
            F.cross_entropy(model(x).float(), y).backward()
            assert model.fc1.weight.grad is not None
            grads.append(model.fc1.weight.grad.detach().clone())
            opt.step()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    hook.close()
    trial = tt.create_trial(tmp_path / "run")
    tensor = trial.tensor("gradient/fc1.weight")
    assert tensor.steps() == [0, 1, 2, 3]
    for step, grad in enumerate(grads):
        g = grad.double()
        assert tensor.reduction_value(step, "l2") == pytest.approx(float(g.norm()), rel=1e-3)
        assert tensor.reduction_value(step, "l1") == pytest.approx(float(g.abs().sum()), rel=1e-3)
        assert tensor.reduction_value(step, "max") == float(g.max())
        assert tensor.reduction_value(step, "min") == float(g.min())
        assert tensor.reduction_value(step, "max", abs=True) == float(g.abs().max())
        assert tensor.reduction_value(step, "mean") == pytest.approx(float(g.mean()), rel=1e-3)
    status = hook.status
    assert status.internal_errors == 0 and status.writer.errors == 0, status


def test_cuda_training_loop_facts_wait_on_the_device_only_on_due_steps(tmp_path: Path) -> None:
    """With the training-loop facts on, a step that is not due (nor the first few, nor the one
    before a due step, nor the one after it, whose first forward closes the due step and reads
    its weights) makes no synchronizing CUDA call; the facts are still found. (First run on a
    GPU on 2026-11-30, an H200: the facts of due step 10 were read at step 11's start.)"""
    model = make(Net).cuda()
    hook = tt.Hook(
        tmp_path / "run",
        save_config=tt.SaveConfig(save_interval=10),
        include_collections=["training_loop"],
    )
    hook.register_module(model)
    loss_fn = torch.nn.CrossEntropyLoss()
    hook.register_loss(loss_fn)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = [(x.cuda(), y.cuda()) for x, y in batches(32, 30)]
    torch.cuda.synchronize()
    for step, (x, y) in enumerate(data):
        quiet = step > 4 and step % 10 not in (0, 1, 9)
        torch.cuda.set_sync_debug_mode("error" if quiet else "default")
        try:
            loss_fn(model(x), y).backward()  # zero_grad forgotten: a fault the facts show
            opt.step()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    status = hook.close()
    assert status.internal_errors == 0, status
    facts = tt.create_trial(tmp_path / "run").tensor("training_loop/grads_not_cleared")
    assert facts.value(facts.steps()[-1]) > 0


def test_cuda_vital_signs_never_wait_on_the_device(tmp_path: Path) -> None:
    """The default hook's vital signs of every step (loss, gradient norm, learning rate, step
    time) reach the host without the training thread waiting: a step that saves nothing else
    (not the first few, nor a due step or its neighbours) makes no synchronizing CUDA call,
    and every step's loss and gradient norm are those the step computed."""
    model = make(Net).cuda()
    hook = tt.Hook(tmp_path / "run")
    hook.register_module(model)
    loss_fn = torch.nn.CrossEntropyLoss()
    hook.register_loss(loss_fn)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = [(x.cuda(), y.cuda()) for x, y in batches(32, 15)]
    losses: list[torch.Tensor] = []
    norms: list[torch.Tensor] = []
    torch.cuda.synchronize()
    for step, (x, y) in enumerate(data):
        quiet = step > 4 and step % 10 not in (0, 1, 9)
        torch.cuda.set_sync_debug_mode("error" if quiet else "default")
        try:
            opt.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            grads = [p.grad for p in model.parameters() if p.grad is not None]
            norms.append(torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads, 2.0))))
            losses.append(loss.detach())
            opt.step()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    status = hook.close()
    assert status.internal_errors == 0 and status.writer.errors == 0, status
    trial = tt.create_trial(tmp_path / "run")
    saved_loss, saved_norm = trial.tensor("vitals/loss"), trial.tensor("vitals/grad_norm")
    assert saved_loss.steps() == list(range(15)) == saved_norm.steps()
    for step in range(15):
        assert float(saved_loss.value(step)) == pytest.approx(float(losses[step]), rel=1e-6)
        assert float(saved_norm.value(step)) == pytest.approx(float(norms[step]), rel=1e-6)
    assert trial.tensor("vitals/lr").steps() == list(range(15))


def test_cuda_vital_signs_given_reductions_are_still_saved(tmp_path: Path) -> None:
    """A script that gives the ``vitals`` collection reductions has them read as the step ends
    (the one path that waits): every step is still saved, and nothing fails."""
    model = make(Net).cuda()
    hook = tt.Hook(tmp_path / "run")
    hook.get_collection("vitals").reduction_config = tt.ReductionConfig(reductions=["max"])
    hook.register_module(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    norms = []
    for x, y in batches(32, 4):
        opt.zero_grad()
        loss = F.cross_entropy(model(x.cuda()), y.cuda())
        hook.record_loss(loss)
        loss.backward()
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        norms.append(float(torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))))
        opt.step()
    status = hook.close()
    assert status.internal_errors == 0 and status.writer.errors == 0, status
    saved = tt.create_trial(tmp_path / "run").tensor("vitals/grad_norm")
    assert saved.steps() == [0, 1, 2, 3]
    for step, norm in enumerate(norms):  # the reduction the script asked for, of the number
        assert saved.reduction_value(step, "max") == pytest.approx(norm, rel=1e-6)
