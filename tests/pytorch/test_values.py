"""The PyTorch hook saves exactly what torch computed: weights after the step, gradients after
backward, activations of the forward, losses; reductions equal torch's."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import tensortap.pytorch as tt
from tensortap.format._layout import DATA_SUFFIX
from tensortap.storage import LocalStore
from tests.helpers.torch_models import ConvNet, Net, batches, make

ALL_COLLECTIONS = ["weights", "biases", "gradients", "losses", "relu_activations", "outputs"]


def train(hook, model, steps, loss_fn=None, lr=0.1, optimizer_cls=torch.optim.SGD, watch=None):
    """Train for real; return what torch computed per step (copied at the right moments)."""
    loss_fn = loss_fn or nn.CrossEntropyLoss()
    opt = optimizer_cls(model.parameters(), lr=lr)
    expected: list[dict[str, np.ndarray]] = []
    handles = []
    current: dict[str, np.ndarray] = {}
    for name, module in (watch or {}).items():
        handles.append(
            module.register_forward_hook(
                lambda m, i, o, name=name: current.__setitem__(name, o.detach().numpy().copy())
            )
        )
    for xb, yb in batches(32, steps):
        current = {}
        opt.zero_grad()
        loss = loss_fn(model(xb), yb)
        loss.backward()
        current["loss"] = loss.detach().numpy().copy()
        for n, p in model.named_parameters():
            current["gradient/" + n] = p.grad.numpy().copy()
        opt.step()
        for n, p in model.named_parameters():
            current[n] = p.detach().numpy().copy()
        expected.append(current)
    for h in handles:
        h.remove()
    return expected


def test_saved_values_equal_what_torch_computed(tmp_path: Path) -> None:
    model = make(Net)
    loss_fn = nn.CrossEntropyLoss()
    hook = tt.Hook(
        tmp_path / "run",
        save_config=tt.SaveConfig(save_interval=3),
        include_collections=ALL_COLLECTIONS,
    )
    hook.register_module(model)
    hook.register_loss(loss_fn)
    watch = {"relu1/relu_output_0": model.relu1, "fc2_output_0": model.fc2}
    expected = train(hook, model, 10, loss_fn, watch=watch)
    hook.close()

    trial = tt.create_trial(tmp_path / "run")
    assert trial.steps() == list(range(10))  # the vital signs of every step
    saved = trial.tensor("fc1.weight").steps(mode=tt.modes.TRAIN)
    assert saved == [0, 3, 6, 9]
    np.testing.assert_array_equal(
        list(trial.tensor("vitals/loss").values(mode=tt.modes.TRAIN).values()),
        [float(e["loss"]) for e in expected],
    )
    for step in saved:
        want = expected[step]
        for name in ("fc1.weight", "fc1.bias", "fc3.weight", "gradient/fc1.weight"):
            np.testing.assert_array_equal(trial.tensor(name).value(step), want[name])
        np.testing.assert_array_equal(
            trial.tensor("CrossEntropyLoss_output_0").value(step), want["loss"]
        )
        np.testing.assert_array_equal(
            trial.tensor("relu1/relu_output_0").value(step), want["relu1/relu_output_0"]
        )
        np.testing.assert_array_equal(
            trial.tensor("fc2_output_0").value(step), want["fc2_output_0"]
        )
    # The ReLU's input is the output of fc1; tanh's input is saved for SaturatedActivation.
    assert trial.has_tensor("relu1/relu_input_0") and trial.has_tensor("tanh/tanh_input_0")
    assert trial.tensor("Net_output_0").value(0).shape == (32, 10)


def test_collections_hold_the_documented_names(tmp_path: Path) -> None:
    model = make(Net)
    hook = tt.Hook(
        tmp_path / "run", save_config=tt.SaveConfig(save_steps=[0]), include_collections=["all"]
    )
    hook.register_module(model)
    train(hook, model, 2)  # no loss module registered
    hook.close()
    trial = tt.create_trial(tmp_path / "run")
    weights = set(trial.tensor_names(collection="weights"))
    assert weights == {"fc1.weight", "fc2.weight", "fc3.weight"}
    assert set(trial.tensor_names(collection="biases")) == {"fc1.bias", "fc2.bias", "fc3.bias"}
    assert set(trial.tensor_names(collection="gradients")) == {
        f"gradient/{n}"
        for n in ("fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias", "fc3.weight", "fc3.bias")
    }
    relu = set(trial.tensor_names(collection="relu_activations"))
    assert relu == {
        "relu1/relu_input_0",
        "relu1/relu_output_0",
        "tanh/tanh_input_0",
        "tanh/tanh_output_0",
    }
    assert "fc1_input_0" in trial.tensor_names(collection="inputs")
    assert "Net_output_0" in trial.tensor_names(collection="outputs")
    assert trial.tensor_names(regex=".*relu_input") == ["relu1/relu_input_0"]
    # the functional-loss path: nothing registered the loss module used, backward's loss is saved
    assert "loss" in trial.tensor_names(collection="losses")


def test_sequential_activations_are_named_by_kind(tmp_path: Path) -> None:
    model = make(ConvNet)
    hook = tt.Hook(
        tmp_path / "run",
        save_config=tt.SaveConfig(save_steps=[1]),
        include_collections=["relu_activations", "weights"],
    )
    hook.register_module(model)
    train(hook, model, 3)
    hook.close()
    trial = tt.create_trial(tmp_path / "run")
    assert set(trial.tensor_names(collection="relu_activations")) == {
        "features.1/relu_input_0",
        "features.1/relu_output_0",
        "head.1/sigmoid_input_0",
        "head.1/sigmoid_output_0",
    }
    assert trial.tensor("features.1/relu_output_0").value(1).shape == (32, 8, 8, 8)
    assert set(trial.tensor_names(collection="weights")) == {
        "features.0.weight",
        "features.3.weight",
        "head.2.weight",
    }


def test_functional_loss_is_saved_from_backward_or_record_loss(tmp_path: Path) -> None:
    model = make(Net)
    hook = tt.Hook(tmp_path / "run", save_config=tt.SaveConfig(save_interval=1))
    hook.register_module(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for i, (xb, yb) in enumerate(batches(32, 4)):
        opt.zero_grad()
        loss = F.cross_entropy(model(xb), yb)
        if i >= 2:
            hook.record_loss(loss, name="ce")
        loss.backward()
        opt.step()
        losses.append(loss.item())
    hook.close()
    trial = tt.create_trial(tmp_path / "run")
    assert trial.tensor("loss").steps() == [0, 1]
    assert trial.tensor("ce").steps() == [2, 3]
    assert trial.tensor("loss").value(1) == pytest.approx(losses[1])
    assert trial.tensor("ce").value(3) == pytest.approx(losses[3])
    assert set(trial.tensor_names(collection="losses")) == {"loss", "ce"}


def test_reductions_equal_torch(tmp_path: Path) -> None:
    model = make(Net)
    config = tt.ReductionConfig(
        reductions=["min", "max", "mean", "std", "variance", "sum", "prod"],
        abs_reductions=["min", "max", "mean"],
        norms=["l1", "l2"],
        abs_norms=["l2"],
    )
    hook = tt.Hook(
        tmp_path / "run",
        save_config=tt.SaveConfig(save_interval=1),
        reduction_config=config,
        include_collections=["gradients", "weights"],
    )
    hook.register_module(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    grads = []
    for xb, yb in batches(32, 3):
        opt.zero_grad()
        F.cross_entropy(model(xb), yb).backward()
        assert model.fc2.weight.grad is not None
        grads.append(model.fc2.weight.grad.clone())
        opt.step()
    hook.close()
    trial = tt.create_trial(tmp_path / "run")
    tensor = trial.tensor("gradient/fc2.weight")
    for step, g in enumerate(grads):
        want = {
            "min": g.min(),
            "max": g.max(),
            "mean": g.mean(),
            "std": g.std(correction=0),
            "variance": g.var(correction=0),
            "sum": g.sum(),
            "prod": g.prod(),
            "l1": torch.linalg.vector_norm(g, 1),
            "l2": torch.linalg.vector_norm(g, 2),
        }
        for name, value in want.items():
            assert tensor.reduction_value(step, name) == pytest.approx(
                value.item(), rel=1e-6, abs=1e-12
            )
        for name, value in {
            "min": g.abs().min(),
            "max": g.abs().max(),
            "mean": g.abs().mean(),
        }.items():
            assert tensor.reduction_value(step, name, abs=True) == pytest.approx(
                value.item(), rel=1e-6
            )
        assert tensor.reduction_value(step, "l2", abs=True) == pytest.approx(
            torch.linalg.vector_norm(g, 2).item(), rel=1e-6
        )
    # only reductions were saved, never the raw gradient
    with pytest.raises(tt.exceptions.TensorUnavailableForStep):
        tensor.value(0)


def test_dtypes_from_torch_round_trip(tmp_path: Path) -> None:
    hook = tt.Hook(tmp_path / "run", save_config=tt.SaveConfig(save_interval=1))
    values = {
        "f16": torch.tensor([1.5, -2.25], dtype=torch.float16),
        "bf16": torch.tensor([1.5, -3.0, 1e30], dtype=torch.bfloat16),
        "f64": torch.linspace(0, 1, 5, dtype=torch.float64),
        "i64": torch.arange(6).view(2, 3),
        "u8": torch.tensor([0, 255], dtype=torch.uint8),
        "bool": torch.tensor([True, False]),
        "c64": torch.tensor([1 + 2j], dtype=torch.complex64),
        "strided": torch.arange(12.0).view(3, 4).t(),
        "needs_grad": torch.ones(3, requires_grad=True) * 2,
        "conj": torch.tensor([1 + 1j]).conj(),
    }
    for name, value in values.items():
        assert hook.save_tensor(name, value)
    hook.close()
    trial = tt.create_trial(tmp_path / "run")
    for name, value in values.items():
        got = trial.tensor(name).value(0)
        want = value.detach().resolve_conj()
        as_numpy = want.float().numpy() if want.dtype == torch.bfloat16 else want.numpy()
        np.testing.assert_array_equal(got, as_numpy, err_msg=name)
    assert trial.tensor("bf16").value(0).dtype == np.float32


@pytest.mark.filterwarnings("ignore:ComplexHalf support is experimental")
def test_unsupported_dtype_in_save_tensor_raises_at_the_call(tmp_path: Path) -> None:
    hook = tt.Hook(tmp_path / "run", save_config=tt.SaveConfig(save_interval=1))
    with pytest.raises(tt.exceptions.InvalidTensorError, match="complex32"):
        hook.save_tensor("c32", torch.zeros(2, dtype=torch.complex32))
    hook.close()


def test_optimizer_variables(tmp_path: Path) -> None:
    model = make(Net)
    hook = tt.Hook(
        tmp_path / "run",
        save_config=tt.SaveConfig(save_interval=2),
        include_collections=["optimizer_variables"],
    )
    hook.register_module(model)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    hook.register_optimizer(opt)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    for xb, yb in batches(32, 4):
        opt.zero_grad()
        F.cross_entropy(model(xb), yb).backward()
        opt.step()
        sched.step()
    state = opt.state[model.fc1.weight]["exp_avg"].numpy().copy()
    hook.close()
    trial = tt.create_trial(tmp_path / "run")
    lr = trial.tensor("optimizer/group_0/lr")
    assert lr.steps() == [0, 2]
    assert lr.value(0) == pytest.approx(0.005) and lr.value(2) == pytest.approx(0.00125)
    np.testing.assert_array_equal(trial.tensor("optimizer/group_0/betas").value(0), [0.9, 0.999])
    assert trial.has_tensor("optimizer/state/fc1.weight/exp_avg")
    assert trial.tensor("optimizer/state/fc1.weight/exp_avg").value(2).shape == state.shape


@pytest.mark.parametrize(
    ("clip", "scalar", "threshold"),
    [
        (lambda params: torch.nn.utils.clip_grad_norm_(params, 0.05), "max_norm", 0.05),
        (lambda params: torch.nn.utils.clip_grad_value_(params, 0.001), "max_value", 0.001),
    ],
)
def test_gradients_are_saved_before_the_clip_and_the_clip_with_them(
    tmp_path: Path, clip, scalar: str, threshold: float
) -> None:
    """A loop that clips before ``opt.step()``: the gradients saved are the ones backward
    computed (what GradientNormSpike and VanishingGradient must see), not the clipped ones the
    optimizer gets; the clip's threshold is saved in ``gradient_clip`` at the same steps."""
    model = make(Net)
    hook = tt.Hook(
        tmp_path / "run",
        save_config=tt.SaveConfig(save_interval=2),
        include_collections=["gradients", "losses"],
    )
    hook.register_module(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    before: list[np.ndarray] = []
    after: list[np.ndarray] = []
    for xb, yb in batches(32, 5):
        opt.zero_grad()
        F.cross_entropy(model(xb), yb).backward()
        assert model.fc1.weight.grad is not None
        before.append(model.fc1.weight.grad.numpy().copy())
        clip(model.parameters())  # a generator: the hook must not consume it
        assert model.fc1.weight.grad is not None
        after.append(model.fc1.weight.grad.numpy().copy())
        opt.step()
    hook.close()
    trial = tt.create_trial(tmp_path / "run")
    grad = trial.tensor("gradient/fc1.weight")
    assert grad.steps() == [0, 2, 4]
    for step in grad.steps():
        assert not np.array_equal(before[step], after[step])  # the clip did clip
        np.testing.assert_array_equal(grad.value(step), before[step])
    name = f"gradient_clip/{scalar}"
    assert trial.tensor_names(collection="gradient_clip") == [name]
    assert name not in trial.tensor_names(collection="gradients")
    clip_values = trial.tensor(name)
    assert clip_values.steps() == [0, 2, 4]
    assert clip_values.value(0) == pytest.approx(threshold)


class _GatedStore(LocalStore):
    """A real local store whose data objects wait for ``gate``: the writer stalls at the first
    step while training goes on, so several steps wait in the queue."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.gate = threading.Event()

    def open_writer(self, key: str):
        if key.endswith(DATA_SUFFIX):
            self.gate.wait(timeout=60)
        return super().open_writer(key)


def test_raw_copies_are_reused_only_once_written(tmp_path: Path) -> None:
    """Raw copies of CPU tensors come from reused buffers (no page faults every step), but a
    buffer is never reused while its step waits to be written: every step keeps its values."""
    store = _GatedStore(tmp_path / "run")
    model = make(Net)
    hook = tt.Hook(
        store,
        save_config=tt.SaveConfig(save_interval=1),
        include_collections=["weights", "biases", "gradients", "relu_activations"],
    )
    hook.register_module(model)
    watch = {"relu1/relu_output_0": model.relu1}
    stalled = train(hook, model, 6, watch=watch)  # all six steps wait for the writer
    store.gate.set()
    hook.flush()
    pool = hook._converter._raw_pool
    after_stall = pool._bytes
    flushed = []
    for _ in range(8):  # now each step is written before the next: its buffers come back
        flushed += train(hook, model, 1, watch=watch)
        hook.flush()
    hook.close()
    assert pool._bytes == after_stall  # the buffers of the first steps were reused
    # each buffer went back to its free queue when its array died: none is lent any more, and
    # the queues hold every buffer the pool keeps (a copy takes one without a scan)
    assert pool.lent() == 0
    kept = sum(b.numel() * b.element_size() for q in pool._free.values() for b in q)
    assert kept == pool._bytes
    trial = tt.create_trial(tmp_path / "run")
    assert trial.steps() == list(range(14))
    for step, want in enumerate(stalled + flushed):
        for name in ("fc1.weight", "fc3.bias", "gradient/fc1.weight", "relu1/relu_output_0"):
            np.testing.assert_array_equal(trial.tensor(name).value(step), want[name])


def test_a_tensor_saved_again_unchanged_shares_its_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A module's output is the next module's input: saved twice, copied once; a tensor changed
    in place between its saves (an in-place ReLU) is copied again, each save its own value."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(inplace=True), nn.Linear(4, 2), nn.Tanh())
    hook = tt.Hook(
        tmp_path / "run",
        save_config=tt.SaveConfig(save_interval=1),
        include_collections=["inputs", "outputs"],
    )
    hook.register_module(model)
    copies: list[int] = []
    take = hook._converter._host_copy

    def counted(*args: Any, **kwargs: Any) -> Any:
        copies.append(1)
        return take(*args, **kwargs)

    monkeypatch.setattr(hook._converter, "_host_copy", counted)
    x = torch.randn(3, 4)
    with torch.no_grad():
        want_linear = model[0](x)
        want_relu = torch.relu(want_linear)
        want_out = model[2](want_relu)
    out = model(x)
    out.sum().backward()
    hook.close()
    trial = tt.create_trial(tmp_path / "run")
    value = lambda name: trial.tensor(name).value(0)  # noqa: E731
    np.testing.assert_array_equal(value("0_input_0"), x.numpy())
    np.testing.assert_array_equal(value("Sequential_input_0"), x.numpy())
    np.testing.assert_array_equal(value("0_output_0"), want_linear.numpy())  # before the ReLU
    np.testing.assert_array_equal(value("1/relu_input_0"), want_relu.numpy())  # changed in place
    np.testing.assert_array_equal(value("2_input_0"), want_relu.numpy())
    np.testing.assert_array_equal(value("2_output_0"), want_out.numpy())
    np.testing.assert_array_equal(value("3/tanh_input_0"), want_out.numpy())
    np.testing.assert_array_equal(value("Sequential_output_0"), torch.tanh(want_out).numpy())
    io = [n for n in trial.tensor_names() if n.endswith(("input_0", "output_0"))]
    assert len(io) == 10
    # x, the linear's output, it changed in place (the ReLU's input, output and the next
    # input), the second linear's output, the tanh's (the Sequential's): 5 copies, 10 saves
    assert len(copies) == 5


def test_inference_tensors_are_saved(tmp_path: Path) -> None:
    hook = tt.Hook(tmp_path / "run", save_config=tt.SaveConfig(save_interval=1))
    with torch.inference_mode():
        t = torch.arange(6.0).reshape(2, 3)
    hook.save_tensor("t", t)
    hook.save_tensor("u", t)
    hook.close()
    trial = tt.create_trial(tmp_path / "run")
    np.testing.assert_array_equal(trial.tensor("u").value(0), t.numpy())
