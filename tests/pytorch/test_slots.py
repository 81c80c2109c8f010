"""Fixed-slot statistics (``Hook(statistics="slots")``): one row of mergeable sufficient
statistics per saved tensor, turned into the saved reductions by the writer thread.

The rows give the core's reductions (hypothesis, every float dtype, NaN and infinities); a
training run saves what the per-tensor statistics save, plus the gradients of activations,
equal to those backward computes; two gloo ranks merge with one SUM and one MAX all-reduce per
saving step into the statistics of the union of their data (replicated and FSDP2); a model
compiled with ``fullgraph=True`` (inductor) trains with them and no graph break; what the slots
cannot give is refused at setup; nothing on the training thread reads a value.
"""

from __future__ import annotations

import os
import re
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tensortap.core._recorder import SavePlan
from tensortap.core._reductions import compute_reduction
from tensortap.exceptions import InvalidConfigError, TensortapError

pytest.importorskip("torch")
import torch
from torch import nn

import tensortap.pytorch as tt
from tensortap.pytorch import _slot_kernels as kernels
from tensortap.pytorch._convert import TorchConverter
from tensortap.pytorch._slot_layout import DERIVABLE
from tensortap.pytorch._slots import SlotStatistics
from tests.conftest import helper_cmd
from tests.helpers.ranks import run_ranks
from tests.helpers.reduction_checks import check_records, converted, tensor_lists
from tests.helpers.torch_models import Net, batches, make

SPECS = tuple(sorted(DERIVABLE))
STATS = tt.ReductionConfig(
    reductions=["min", "max", "mean", "std", "variance", "sum", "nonfinite"],
    abs_reductions=["max", "mean", "std", "variance", "sum"],
    norms=["l1", "l2"],
)
STAT_SPECS = STATS.reduction_specs
MERGED = tt.ReductionConfig(
    reductions=["min", "max", "mean", "std", "variance", "sum", "nonfinite"],
    abs_reductions=["max", "mean", "sum"],
    norms=["l1", "l2"],
).reduction_specs  # what tests/helpers/slots_train.py saves
COLLECTIONS = ["weights", "biases", "gradients", "relu_activations", "activation_gradients"]


def _check(records, tensor: torch.Tensor) -> None:
    check_records(records, tensor, rel=1e-9, slack=_from_sums)


def _from_sums(reduction: str, scale: float) -> float:
    # From sums: E[x^2] - E[x]^2 keeps the rounding of E[x^2] (float64 here), which
    # the square root of std magnifies: about sqrt(eps) of the largest |x|.
    return {"variance": 1e-15 * scale**2, "std": 3e-8 * scale}.get(reduction, 0.0)


@settings(max_examples=150, deadline=None)
@given(tensor_lists(0), st.booleans())
def test_slots_give_the_cores_reductions(tensors, grouped: bool) -> None:
    converter = TorchConverter(SlotStatistics())
    plan = SavePlan(raw=False, shape=False, reductions=SPECS)
    saved = converted(converter, tensors, plan, grouped)
    for records, _ in saved:  # what the writer thread does before it writes the step
        for rec in records:
            if rec.deferred is not None:
                rec.deferred.resolve()
    for records, t in saved:
        _check(records, t)


def test_the_compiled_kernel_gives_the_same_rows(dynamo) -> None:
    """``kernel="compiled"`` (the default on CUDA: one fused pass per tensor, one graph for
    every size) gives the foreach kernels' rows, and through them the core's reductions."""
    from tensortap.pytorch._slot_kernels import slot_rows

    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    specials = [0.0, float("nan"), float("inf"), -float("inf"), -2.5]
    for dtype in (torch.float32, torch.bfloat16):
        tensors = [torch.from_numpy(rng.normal(size=(n,))).to(dtype) for n in (1, 7, 300)]
        tensors += [torch.tensor(specials, dtype=dtype), torch.zeros(3, 4, dtype=dtype)]
        want = slot_rows(tensors, kernel="foreach")
        got = slot_rows(tensors, kernel="compiled")
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12, equal_nan=True)
    assert sum(dynamo["graph_break"].values()) == 0
    assert dynamo["stats"]["unique_graphs"] >= 1 and not kernels._compiled_failed  # it compiled
    converter = TorchConverter(SlotStatistics(kernel="compiled"))
    plan = SavePlan(raw=False, shape=False, reductions=SPECS)
    with converter.together():
        records = [converter.records(f"t{i}", t, plan) for i, t in enumerate(tensors)]
    converter.resolve()
    for recs, t in zip(records, tensors, strict=True):
        for rec in recs:
            if rec.deferred is not None:
                rec.deferred.resolve()
        _check(recs, t)


def _train(out: Path, statistics: str, runner=None, model=None, steps: int = 3) -> tt.Hook:
    model = make(Net) if model is None else model
    hook = tt.Hook(
        out,
        statistics=statistics,
        save_config=tt.SaveConfig(save_interval=1),
        reduction_config=STATS,
        include_collections=COLLECTIONS,
    )
    runner = model if runner is None else runner
    hook.register_module(runner)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in batches(32, steps):
        opt.zero_grad()
        nn.functional.cross_entropy(runner(x), y).backward()
        opt.step()
    hook.close()
    assert hook.status.internal_errors == 0, hook.status.last_internal_error
    return hook


def _same_statistics(
    want, got, rel: float = 1e-5, worker: str | None = None, specs=STAT_SPECS
) -> int:
    """Every statistic of ``want`` in ``got``, within float32 rounding (the per-tensor path
    reduces float32 tensors in float32): relative to the sum of magnitudes for sums, to the
    largest magnitude for the others."""
    compared = 0
    for name in sorted(set(got.tensor_names()) & set(want.tensor_names())):
        for step in want.tensor(name).steps():
            scale = want.tensor(name).reduction_value(step, "max", abs=True)
            magnitude = want.tensor(name).reduction_value(step, "l1")
            for stat, on_abs in specs:
                a = want.tensor(name).reduction_value(step, stat, abs=on_abs)
                b = got.tensor(name).reduction_value(step, stat, abs=on_abs, worker=worker)
                size = {"sum": magnitude, "l1": magnitude, "variance": scale**2}.get(stat, scale)
                slack = rel * size
                assert b == pytest.approx(a, rel=rel, abs=slack), (name, step, stat, on_abs)
                compared += 1
    return compared


def test_a_training_run_saves_what_per_tensor_statistics_save(tmp_path: Path) -> None:
    _train(tmp_path / "per_tensor", "per_tensor")
    _train(tmp_path / "slots", "slots")
    want, got = tt.create_trial(tmp_path / "per_tensor"), tt.create_trial(tmp_path / "slots")
    extra = sorted(set(got.tensor_names()) - set(want.tensor_names()))
    assert extra == ["gradient/relu1/relu_output_0", "gradient/tanh/tanh_output_0"]
    assert "relu1/relu_output_0" in want.tensor_names()
    assert "gradient/fc1.weight" in want.tensor_names()
    assert _same_statistics(want, got) > 700


def test_activation_gradients_are_those_backward_computes(tmp_path: Path) -> None:
    model = make(Net)
    kept: list[torch.Tensor] = []

    def keep(module: nn.Module, args: object, output: torch.Tensor) -> None:
        output.retain_grad()
        kept.append(output)

    model.relu1.register_forward_hook(keep)
    _train(tmp_path, "slots", model=model)
    grad = tt.create_trial(tmp_path).tensor("gradient/relu1/relu_output_0")
    assert grad.steps() == [0, 1, 2]
    for step, output in enumerate(kept):
        assert output.grad is not None
        g = output.grad.double().numpy()
        assert abs(g).sum() > 0
        for stat, on_abs in STAT_SPECS:
            assert grad.reduction_value(step, stat, abs=on_abs) == pytest.approx(
                compute_reduction(g, stat, on_abs), rel=1e-9, abs=1e-15
            ), (step, stat, on_abs)


def test_a_module_called_once_per_micro_batch_saves_the_union(tmp_path: Path) -> None:
    """Gradient accumulation: two forward and backward passes per optimizer step. An
    activation's statistics, and its gradient's, are those of both micro-batches together;
    the parameters' gradients are taken once, before the update."""
    model = make(Net)
    outputs: list[torch.Tensor] = []

    def keep(module: nn.Module, args: object, output: torch.Tensor) -> None:
        output.retain_grad()
        outputs.append(output)

    model.relu1.register_forward_hook(keep)
    hook = tt.Hook(
        tmp_path,
        statistics="slots",
        save_config=tt.SaveConfig(save_interval=1),
        reduction_config=STATS,
        include_collections=COLLECTIONS,
    )
    hook.register_module(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    hook.register_optimizer(opt)
    data = list(batches(16, 4))
    grads = []
    for i in (0, 2):
        opt.zero_grad()
        for x, y in data[i : i + 2]:
            nn.functional.cross_entropy(model(x), y).backward()
        assert model.fc1.weight.grad is not None
        grads.append(model.fc1.weight.grad.clone())
        opt.step()
    hook.close()
    trial = tt.create_trial(tmp_path)
    act, act_grad = (
        trial.tensor("relu1/relu_output_0"),
        trial.tensor("gradient/relu1/relu_output_0"),
    )
    weight_grad = trial.tensor("gradient/fc1.weight")
    assert act.steps() == act_grad.steps() == weight_grad.steps() == [0, 1]
    for step in (0, 1):
        both = outputs[2 * step : 2 * step + 2]
        values = np.concatenate([o.detach().double().numpy().ravel() for o in both])
        gradients = np.concatenate(
            [o.grad.double().numpy().ravel() for o in both if o.grad is not None]
        )
        for got, want in ((act, values), (act_grad, gradients), (weight_grad, grads[step])):
            want = np.asarray(want, dtype=np.float64)
            for stat, on_abs in STAT_SPECS:
                assert got.reduction_value(step, stat, abs=on_abs) == pytest.approx(
                    compute_reduction(want, stat, on_abs), rel=1e-9, abs=1e-12
                ), (got.name, step, stat, on_abs)


def test_gradients_of_activations_are_only_saved_with_their_collection(tmp_path: Path) -> None:
    model = make(Net)
    hook = tt.Hook(
        tmp_path,
        statistics="slots",
        save_config=tt.SaveConfig(save_interval=1),
        reduction_config=STATS,
        include_collections=["relu_activations"],
    )
    hook.register_module(model)
    for x, y in batches(16, 2):
        nn.functional.cross_entropy(model(x), y).backward()
    hook.close()
    names = tt.create_trial(tmp_path).tensor_names()
    assert "relu1/relu_output_0" in names
    assert not [n for n in names if n.startswith("gradient/")]


def test_no_value_is_read_on_the_training_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A saving step calls no ``.item()`` or ``.tolist()`` (on a GPU: a synchronisation) on
    the training thread: the writer thread derives every value."""
    training = threading.get_ident()
    calls = {"training": 0, "writer": 0}

    def counting(original):
        def read(self, *args, **kwargs):
            caller = sys._getframe(1).f_globals.get("__name__", "")
            if caller.startswith("tensortap"):
                thread = "training" if threading.get_ident() == training else "writer"
                calls[thread] += 1
            return original(self, *args, **kwargs)

        return read

    monkeypatch.setattr(torch.Tensor, "item", counting(torch.Tensor.item))
    monkeypatch.setattr(torch.Tensor, "tolist", counting(torch.Tensor.tolist))
    model = make(Net)
    hook = tt.Hook(
        tmp_path,
        statistics="slots",
        save_config=tt.SaveConfig(save_interval=1),
        reduction_config=STATS,
        include_collections=COLLECTIONS,
    )
    hook.register_module(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in batches(32, 4):
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    assert calls["training"] == 0, calls
    hook.close()
    assert calls["training"] == 0, calls
    trial = tt.create_trial(tmp_path)
    assert trial.tensor("gradient/fc1.weight").reduction_value(2, "l2") > 0
    assert trial.tensor("gradient/relu1/relu_output_0").reduction_value(2, "l2") > 0
    # The same counting sees the per-tensor path read values on the training thread? No:
    # it reads them on the writer's, with .item(): the counter does count there.
    per_tensor = tt.Hook(
        tmp_path / "per_tensor",
        save_config=tt.SaveConfig(save_interval=1),
        reduction_config=STATS,
        include_collections=["gradients"],
    )
    per_tensor.register_module(model)
    for x, y in batches(32, 2):
        nn.functional.cross_entropy(model(x), y).backward()
    per_tensor.close()
    assert calls["writer"] > 0 and calls["training"] == 0, calls


def test_what_the_slots_cannot_give_is_refused_at_setup(tmp_path: Path) -> None:
    with pytest.raises(InvalidConfigError, match="statistics must be one of") as err:
        tt.Hook(tmp_path / "a", statistics="fast")
    assert "'slots'" in str(err.value)
    with pytest.raises(InvalidConfigError, match=r"cannot compute \['prod', 'amax', 'abs_min'\]"):
        tt.Hook(
            tmp_path / "b",
            statistics="slots",
            reduction_config=tt.ReductionConfig(
                reductions=["mean", "prod", "amax"], abs_reductions=["min"]
            ),
        )
    assert not (tmp_path / "b").exists()  # refused before anything was written
    hook = tt.Hook(tmp_path / "c", statistics="slots", include_collections=["gradients"])
    hook.get_collection("gradients").reduction_config = tt.ReductionConfig(
        reductions=["prod"], norms=["l2"]
    )
    with pytest.raises(
        InvalidConfigError, match=r"\['prod'\] \(asked for by collection 'gradients'"
    ):
        hook.register_module(make(Net))
    hook.get_collection("gradients").reduction_config = tt.ReductionConfig(norms=["l2"])
    hook.register_module(make(Net))
    hook.close()
    assert issubclass(InvalidConfigError, TensortapError)


@pytest.fixture
def dynamo():
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    yield counters
    torch._dynamo.reset()


def test_compiled_activations_need_statistics_only(tmp_path: Path, dynamo) -> None:
    compiled = torch.compile(make(Net), fullgraph=True)
    raw = tt.Hook(tmp_path / "raw", statistics="slots", include_collections=["relu_activations"])
    with pytest.raises(InvalidConfigError, match="only their statistics can be captured") as err:
        raw.register_module(compiled)  # type: ignore[arg-type]  # (an OptimizedModule)
    assert "reduction_config = ReductionConfig(" in str(err.value)  # what to do
    raw.close()
    outputs = tt.Hook(
        tmp_path / "outputs",
        statistics="slots",
        reduction_config=STATS,
        include_collections=["outputs"],
    )
    with pytest.raises(InvalidConfigError, match="inputs and outputs of every layer are not"):
        outputs.register_module(compiled)  # type: ignore[arg-type]  # (an OptimizedModule)
    outputs.close()


def test_a_compiled_model_trains_with_slots_in_one_graph(tmp_path: Path, dynamo) -> None:
    """``torch.compile(fullgraph=True)`` with inductor: weights, gradients, activations and
    their gradients every step, no graph break, one graph, the eager run's values."""
    torch.set_num_threads(1)
    model = make(Net)
    runner = torch.compile(model, fullgraph=True, backend="inductor")
    _train(tmp_path / "compiled", "slots", runner=runner, model=model)
    counters = dynamo
    assert sum(counters["graph_break"].values()) == 0, dict(counters["graph_break"])
    assert counters["stats"]["unique_graphs"] == 1
    _train(tmp_path / "eager", "slots")
    want, got = tt.create_trial(tmp_path / "eager"), tt.create_trial(tmp_path / "compiled")
    assert sorted(got.tensor_names()) == sorted(want.tensor_names())
    assert "gradient/tanh/tanh_output_0" in got.tensor_names()
    assert got.tensor("relu1/relu_output_0").shape(0) == (32 * 32,)  # the size, flattened
    assert _same_statistics(want, got) > 700


def _run_ranks(out: Path, ranks: int, helper_env) -> list[str]:
    paths = [Path(__file__).parents[2] / "src"]
    env = dict(helper_env, PYTHONPATH=os.pathsep.join(map(str, paths)))  # this tree's
    done = run_ranks(helper_cmd("slots_train.py", out, 5), ranks, env, timeout=240)
    outputs = [p.stdout for p in done]
    assert [p.returncode for p in done] == [0] * ranks, (outputs, [p.stderr for p in done])
    return outputs


def test_two_ranks_merge_with_one_sum_and_one_max_per_saving_step(
    tmp_path: Path, helper_env
) -> None:
    _run_ranks(tmp_path, 1, helper_env)
    outputs = _run_ranks(tmp_path, 2, helper_env)
    for rank, output in enumerate(outputs):
        for kind in ("replicated", "fsdp"):
            counts = re.search(rf"rank {rank} {kind}: SUM (\d+) MAX (\d+) saved (\d+)", output)
            assert counts is not None, output
            assert counts.groups() == ("3", "3", "3"), (kind, output)  # one of each per step
    ref = tt.create_trial(tmp_path / "single")
    names = sorted(ref.tensor_names())
    assert "gradient/1/relu_output_0" in names and "gradient/0.weight" in names
    for kind in ("replicated", "fsdp"):
        trial = tt.create_trial(tmp_path / kind)
        wanted = [n for n in names if kind == "replicated" or "_output_" not in n]
        wanted = [n for n in wanted if "_input_" not in n or kind == "replicated"]
        assert sorted(trial.tensor_names()) == wanted, kind
        for worker in ("worker_0", "worker_1"):
            status = trial.worker_status(worker)
            assert status is not None and status["internal_errors"] == 0, (kind, status)
        for name in wanted:
            assert trial.tensor(name).steps() == ref.tensor(name).steps(), name
        assert ref.tensor("gradient/1/relu_output_0").steps() == [0, 2, 4]
        for worker in ("worker_0", "worker_1"):
            # float32 training summed in another order: within float32 rounding of the run
            assert _same_statistics(ref, trial, rel=1e-4, worker=worker, specs=MERGED) > 300


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device here")
def test_cuda_slots_every_step_never_wait_on_the_device(tmp_path: Path) -> None:
    """On a GPU: slots of weights, gradients, activations and their gradients every step (the
    compiled fused kernel), and the training thread makes no synchronizing call once the first
    step has compiled it (sync debug mode raises on one); the values are right."""
    model = make(Net).cuda().to(torch.bfloat16)
    hook = tt.Hook(
        tmp_path / "run",
        statistics="slots",
        save_config=tt.SaveConfig(save_interval=1),
        reduction_config=STATS,
        include_collections=COLLECTIONS,
    )
    hook.register_module(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = [(x.cuda().to(torch.bfloat16), y.cuda()) for x, y in batches(32, 5)]
    grads = []
    for i, (x, y) in enumerate(data):
        if i == 1:  # step 0 compiled the kernel and allocated the buffers
            torch.cuda.synchronize()
            torch.cuda.set_sync_debug_mode("error")
        try:
            opt.zero_grad(set_to_none=False)  # zeroed in place: the statistics must not see it
            nn.functional.cross_entropy(model(x).float(), y).backward()
            assert model.fc1.weight.grad is not None
            grads.append(model.fc1.weight.grad.detach().clone())
            opt.step()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    hook.close()
    assert hook.status.internal_errors == 0, hook.status.last_internal_error
    assert not kernels._compiled_failed
    tensor = tt.create_trial(tmp_path / "run").tensor("gradient/fc1.weight")
    for step, grad in enumerate(grads):
        g = grad.double().cpu().numpy()
        for stat, on_abs in STAT_SPECS:
            assert tensor.reduction_value(step, stat, abs=on_abs) == pytest.approx(
                compute_reduction(g, stat, on_abs), rel=1e-3, abs=1e-3 * float(abs(g).max())
            ), (step, stat, on_abs)
