"""Attribution by replay: a step the guard tripped on is run again from the same weights, RNG
state and batch. A planted transient fault (a flipped bit) is attributed "transient", a bad
batch "data" with the first bad layer named, an overflow from finite inputs "numerics";
healthy steps are never attributed; and a replay leaves the model, the optimizer and the RNGs
bitwise as they were, so training ends exactly as without it."""

from __future__ import annotations

import math
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("torch")
import torch
from torch import nn

import tensortap as tt
import tensortap.pytorch as ttp
from tensortap.exceptions import InvalidConfigError, ReplayError
from tensortap.pytorch import _replay as replay
from tensortap.testing import flip_bit, inject_bitflip


class Net(nn.Module):
    def __init__(self, dtype: torch.dtype = torch.float32, normalize: bool = False) -> None:
        super().__init__()
        self.norm = Normalize() if normalize else None
        self.fc1 = nn.Linear(8, 16, dtype=dtype)
        self.act = nn.ReLU()
        self.fc2 = nn.Linear(16, 1, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x if self.norm is None else self.norm(x)
        return self.fc2(self.act(self.fc1(x)))


class Normalize(nn.Module):
    """Each row divided by its spread, with no epsilon: a constant row divides 0 by 0."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        centred = x - x.mean(dim=1, keepdim=True)
        return centred / centred.abs().amax(dim=1, keepdim=True)


class Noisy(nn.Module):
    """BatchNorm (running statistics) and Dropout (the RNG): what a replay must put back."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.bn = nn.BatchNorm1d(16)
        self.drop = nn.Dropout(0.3)
        self.fc2 = nn.Linear(16, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.drop(torch.relu(self.bn(self.fc1(x)))))


def step_fn(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    x, y = batch
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    return loss


def make_batches(count: int, dtype: torch.dtype = torch.float32, poison: dict | None = None):
    generator = torch.Generator().manual_seed(1)
    out = []
    for i in range(count):
        x = torch.randn(16, 8, generator=generator).to(dtype)
        y = torch.randn(16, 1, generator=generator).to(dtype)
        kind = (poison or {}).get(i)
        if kind == "nan":
            x[3, 5] = math.nan
        elif kind == "huge":
            x = x * 1e30
        elif kind == "constant":
            x = torch.ones_like(x)
        out.append((x, y))
    return out


def train(
    model: nn.Module,
    batches: list,
    replayer: replay.Replayer | None = None,
    before: dict[int, Any] | None = None,
) -> ttp.Guard:
    """A loop with the guard (action "skip") and a replayer wired as the guard's on_trip
    (this guard has no on_trip yet: its new events are handed over after each step)."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    guard = ttp.Guard(optimizer, model, warmup=100)  # non-finite trips only
    for i, batch in enumerate(batches):
        if before is not None and i in before:
            before[i](model)
        if replayer is not None:
            replayer.capture(batch, batch_id=i)
        optimizer.zero_grad()
        loss = step_fn(model, batch)
        if replayer is not None:
            replayer.after_backward(loss)
        guard.observe(loss, batch=i)
        seen = len(guard.events)
        optimizer.step()
        if replayer is not None:
            for event in guard.events[seen:]:
                replayer.on_trip(event)
    if replayer is not None:
        replayer.before_step()  # the last step's trip
    return guard


def test_a_flipped_bit_is_attributed_transient() -> None:
    torch.manual_seed(0)
    model = Net()
    flip = inject_bitflip(model.fc2, step=3)
    replayer = ttp.Replayer(model, step_fn)
    guard = train(model, make_batches(6), replayer)
    assert [e.step for e in guard.events] == [3] and flip.flips == 1
    (found,) = replayer.attributions
    assert found.kind == replay.TRANSIENT and found.step == 3 and found.batch == 3
    assert not math.isfinite(found.evidence["loss"])  # the first run overflowed
    assert math.isfinite(found.evidence["replay_loss"])  # the replay did not
    assert found.evidence["fingerprints_differing"] > 0
    assert "transient" in found.message and found.reason == guard.events[0].reason
    assert replayer.status.replayed == 1 and replayer.status.requested == 1
    assert all(torch.isfinite(p).all() for p in model.parameters())


def test_a_persistent_fault_reproduces_and_is_not_transient() -> None:
    torch.manual_seed(0)
    model = Net()
    inject_bitflip(model.fc2, step=3, once=False)  # every call from step 3 on
    replayer = ttp.Replayer(model, step_fn, max_replays=1)
    train(model, make_batches(5), replayer)
    first = replayer.attributions[0]  # the same result again: not transient
    assert (first.kind, first.first_bad_layer) == (replay.NUMERICS, None)
    assert "Every layer's output was finite: the loss" in first.message  # fc2's 1e38, squared
    assert replayer.status.over_budget == 1  # step 4 tripped too: past max_replays


def test_a_nan_in_the_batch_is_attributed_data_with_the_first_bad_layer() -> None:
    torch.manual_seed(0)
    model = Net()
    replayer = ttp.Replayer(model, step_fn)
    train(model, make_batches(6, poison={2: "nan"}), replayer)
    (found,) = replayer.attributions
    assert (found.kind, found.step, found.first_bad_layer) == (replay.DATA, 2, "fc1")
    assert found.evidence["batch_nonfinite"] == 1
    assert math.isnan(found.evidence["loss"]) and math.isnan(found.evidence["replay_loss"])
    assert found.evidence["fingerprints_differing"] == 0  # NaN where NaN was: the same
    assert "the data" in found.message and "fc1" in found.message


def test_huge_values_in_the_batch_are_data() -> None:
    torch.manual_seed(0)
    model = Net()
    replayer = ttp.Replayer(model, step_fn)
    train(model, make_batches(4, poison={1: "huge"}), replayer)
    (found,) = replayer.attributions
    assert found.kind == replay.DATA and found.evidence["batch_max_abs"] > 1e29
    assert found.evidence["batch_nonfinite"] == 0 and "magnitude" in found.message


@pytest.mark.parametrize("case", ["float16 overflow", "division by zero"])
def test_finite_inputs_that_go_non_finite_are_numerics(case: str) -> None:
    torch.manual_seed(0)
    if case == "float16 overflow":
        model = Net(dtype=torch.float16)
        batches = make_batches(5, torch.float16)

        def scale(m: Net) -> None:  # weights large enough that fc1 overflows in fp16
            with torch.no_grad():
                m.fc1.weight.mul_(1e5)

        before, bad_layer = {2: scale}, "fc1"
    else:
        model, bad_layer = Net(normalize=True), "norm"
        batches, before = make_batches(5, poison={2: "constant"}), {}
    replayer = ttp.Replayer(model, step_fn)
    train(model, batches, replayer, before)
    found = replayer.attributions[0]
    assert (found.kind, found.step, found.first_bad_layer) == (replay.NUMERICS, 2, bad_layer)
    assert found.evidence["batch_nonfinite"] == 0 and found.evidence["layer_input_nonfinite"] == 0
    assert found.evidence["layer_output_nonfinite"] > 0
    assert "the numerics" in found.message and "its inputs were finite" in found.message


def test_healthy_steps_are_never_attributed_and_replay_the_same() -> None:
    torch.manual_seed(0)
    model = Noisy()
    replayer = ttp.Replayer(model, step_fn)
    guard = train(model, make_batches(8), replayer)
    assert guard.events == [] and replayer.attributions == []
    assert replayer.status == replay.ReplayStatus(8, 0, 0, 0, 0, 0, 0.0)
    # asked anyway, a healthy step replays bitwise the same (dropout included): no fault
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    batch = make_batches(1)[0]
    replayer.capture(batch)
    optimizer.zero_grad()
    replayer.after_backward(step_fn(model, batch))
    found = replayer.replay()
    assert found.kind == replay.REPRODUCIBLE and found.first_bad_layer is None
    assert found.evidence["fingerprints_differing"] == 0


def _state(model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    return {
        "model": {k: v.clone() for k, v in model.state_dict().items()},
        "grads": [None if p.grad is None else p.grad.clone() for p in model.parameters()],
        "optimizer": optimizer.state_dict(),
        "torch_rng": torch.get_rng_state(),
        "python_rng": random.getstate(),
        "numpy_rng": np.random.get_state(),
        "training": [m.training for m in model.modules()],
    }


def _assert_bitwise_equal(a: Any, b: Any) -> None:
    if isinstance(a, torch.Tensor):  # every bit, NaN included
        assert isinstance(b, torch.Tensor) and (a.dtype, a.shape) == (b.dtype, b.shape)
        assert torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8))
    elif isinstance(a, dict):
        assert a.keys() == b.keys()
        for key in a:
            _assert_bitwise_equal(a[key], b[key])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            _assert_bitwise_equal(x, y)
    elif isinstance(a, np.ndarray):
        assert np.array_equal(a, b)
    else:
        assert a == b


def test_a_replay_leaves_model_optimizer_and_rngs_bitwise_as_they_were() -> None:
    torch.manual_seed(0)
    random.seed(0)
    model = Noisy()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)

    def drawing_step(m: nn.Module, batch: Any) -> torch.Tensor:
        random.random()  # the step draws from Python's and NumPy's generators too
        np.random.rand()
        return step_fn(m, batch)

    replayer = ttp.Replayer(model, drawing_step, python_rng=True, numpy_rng=True)
    for batch in make_batches(3):
        replayer.capture(batch)
        optimizer.zero_grad()
        replayer.after_backward(drawing_step(model, batch))
        optimizer.step()
    batch = make_batches(4)[3]
    replayer.capture(batch)
    optimizer.zero_grad()
    replayer.after_backward(drawing_step(model, batch))
    assert model.fc1.weight.grad is not None
    model.fc1.weight.grad.mul_(2.0)  # gradients held at replay time are put back as they are
    model.eval()  # a mode step_fn does not use: restored too
    torch.rand(3), random.random(), np.random.rand()  # the RNGs moved on since the step
    before, tensors = _state(model, optimizer), [*model.parameters(), *model.buffers()]
    found = replayer.replay()
    _assert_bitwise_equal(before, _state(model, optimizer))
    assert all(a is b for a, b in zip(tensors, [*model.parameters(), *model.buffers()]))
    assert found.kind == replay.REPRODUCIBLE  # in the step's train mode, not eval's


def test_replays_do_not_change_the_outcome_of_training() -> None:
    """The same run with and without replays (dropout draws from the RNG every step, BatchNorm
    updates its statistics) ends with bitwise the same weights and optimizer state."""
    poison = {2: "nan", 5: "nan"}
    ends: list[Any] = []
    for with_replays in (False, True):
        torch.manual_seed(0)
        model = Noisy()
        replayer = ttp.Replayer(model, step_fn) if with_replays else None
        guard = train(model, make_batches(8, poison=poison), replayer)
        assert [e.step for e in guard.events] == [2, 5]
        ends.append({k: v.clone() for k, v in model.state_dict().items()})
        ends.append(torch.get_rng_state())
    assert replayer is not None  # the last run's, with replays
    assert [a.kind for a in replayer.attributions] == [replay.DATA, replay.DATA]
    _assert_bitwise_equal(ends[0], ends[2])
    _assert_bitwise_equal(ends[1], ends[3])


def test_the_attribution_is_recorded_in_the_trial_and_the_hook_ignores_the_replay(
    tmp_path: Path,
) -> None:
    def run(out: Path, with_replays: bool) -> None:
        torch.manual_seed(0)
        model = Net()
        hook = ttp.Hook(
            out,
            save_config=tt.SaveConfig(save_interval=1),
            include_collections=["losses", "outputs", "gradients"],
        )
        hook.register_module(model)
        inject_bitflip(model.fc2, step=3)
        replayer = ttp.Replayer(model, step_fn, hook=hook) if with_replays else None
        train(model, make_batches(6), replayer)
        hook.close()

    run(tmp_path / "plain", False)
    run(tmp_path / "replayed", True)
    plain, replayed = tt.create_trial(tmp_path / "plain"), tt.create_trial(tmp_path / "replayed")
    assert replayed.steps() == plain.steps() == list(range(6))
    for name in ("fc2_output_0", "gradient/fc1.weight"):  # the replay's values not saved
        for step in plain.steps():
            a, b = plain.tensor(name).value(step), replayed.tensor(name).value(step)
            assert np.array_equal(a, b, equal_nan=True), (name, step)
    (session,) = replayed.sessions()
    (event,) = [e for e in session.events if e["kind"] != "guard_trip"]  # the trip: its own
    assert event["kind"] == "attribution" and event["fields"]["kind"] == "transient"
    assert event["fields"]["step"] == 3 and event["fields"]["evidence"]["loss"] == "inf"
    assert [e["kind"] for e in plain.sessions()[0].events] == ["guard_trip"]  # no attribution
    from tensortap.report._training import training_report

    page = training_report(replayed, rules=[])  # the report marks it on the loss curve
    assert ">replay: transient (step 3)</text>" in page and event["global_step"] == 3
    assert "replay:" not in training_report(plain, rules=[])


def test_the_weights_must_be_those_before_the_update() -> None:
    torch.manual_seed(0)
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    replayer = ttp.Replayer(model, step_fn)
    batch = make_batches(1)[0]
    replayer.capture(batch)
    optimizer.zero_grad()
    replayer.after_backward(step_fn(model, batch))
    optimizer.step()  # the update went ahead: the step's weights are gone
    with pytest.raises(ReplayError, match="weights changed since step 0"):
        replayer.replay(0)
    assert replayer.status.refused == 1
    # an update that changes nothing (a 0 factor) bumps the version counters but is accepted
    replayer.capture(batch)
    optimizer.zero_grad()
    replayer.after_backward(step_fn(model, batch))
    with torch.no_grad():
        for p in model.parameters():
            assert p.grad is not None
            p.add_(p.grad, alpha=0.0)
    assert replayer.replay(1).kind == replay.REPRODUCIBLE
    with pytest.raises(ReplayError, match="step 7 is not held"):
        replayer.replay(7)


def test_step_fn_must_not_update_the_weights() -> None:
    torch.manual_seed(0)
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

    def stepping(m: nn.Module, batch: Any) -> torch.Tensor:
        loss = step_fn(m, batch)
        optimizer.step()
        return loss

    replayer = ttp.Replayer(model, stepping)
    batch = make_batches(1)[0]
    replayer.capture(batch)
    replayer.after_backward(step_fn(model, batch))
    with pytest.raises(ReplayError, match="step_fn changed the model's weights"):
        replayer.replay()


def test_the_budget_and_a_batch_loaded_again() -> None:
    torch.manual_seed(0)
    model = Net()
    batches = make_batches(6, poison={1: "nan", 2: "nan", 4: "nan"})
    loaded: list[int] = []

    def load(i: int) -> Any:
        loaded.append(i)
        return batches[i]

    replayer = ttp.Replayer(model, step_fn, load_batch=load, max_replays=2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    guard = ttp.Guard(optimizer, model)
    for i in range(6):
        replayer.capture(batch_id=i)  # no reference to the batch is kept
        optimizer.zero_grad()
        loss = step_fn(model, batches[i])
        replayer.after_backward(loss)
        guard.observe(loss, batch=i)
        seen = len(guard.events)
        optimizer.step()
        for event in guard.events[seen:]:
            replayer.on_trip(event)
    replayer.before_step()
    assert loaded == [1, 2] and [a.step for a in replayer.attributions] == [1, 2]
    status = replayer.status
    assert (status.requested, status.replayed, status.over_budget) == (3, 2, 1)
    assert status.seconds > 0


def test_flip_bit() -> None:
    x = torch.tensor([0.5, 1.0], requires_grad=True)
    y = flip_bit(x, index=0)
    assert y[0].item() == 0.5 * 2.0**128 or y[0].item() > 1e38
    assert y[1].item() == 1.0
    y.sum().backward()
    assert x.grad is not None
    assert x.grad.tolist() == [0.0, 1.0]  # the flipped element no longer depends on x
    assert flip_bit(torch.tensor([1.0]), bit=31).item() == -1.0  # the sign bit
    for dtype in (torch.float16, torch.bfloat16, torch.float64):
        assert flip_bit(torch.ones(3, dtype=dtype), index=2, bit=0)[2].item() != 1.0
    with pytest.raises(InvalidConfigError, match="bits 0-15"):
        flip_bit(torch.ones(1, dtype=torch.float16), bit=16)
    with pytest.raises(InvalidConfigError, match="float16, bfloat16"):
        flip_bit(torch.ones(1, dtype=torch.int32))


def test_bad_arguments_say_what_is_expected() -> None:
    model = Net()
    with pytest.raises(InvalidConfigError, match="torch.nn.Module"):
        ttp.Replayer("model", step_fn)  # type: ignore[arg-type]
    with pytest.raises(InvalidConfigError, match="step_fn"):
        ttp.Replayer(model, None)  # type: ignore[arg-type]
    with pytest.raises(InvalidConfigError, match="keep must be an int >= 1"):
        ttp.Replayer(model, step_fn, keep=0)
    with pytest.raises(InvalidConfigError, match="Hook"):
        ttp.Replayer(model, step_fn, hook=object())
    replayer = ttp.Replayer(model, step_fn)
    with pytest.raises(InvalidConfigError, match="batch_id with the replayer's load_batch"):
        replayer.capture(batch_id=3)
    with pytest.raises(ReplayError, match="no step was captured"):
        replayer.replay()
    replayer.capture(make_batches(1)[0])
    with pytest.raises(ReplayError, match="call replayer.after_backward"):
        replayer.replay()
    with pytest.raises(InvalidConfigError, match="int >= 0"):
        inject_bitflip(model.fc1, step=-1)


def _ddp_rank(rank: int, port: int, out: str) -> None:
    torch.distributed.init_process_group(
        # a FileStore: no store server thread in rank 0 that a rank's exit could race
        "gloo",
        init_method=f"file://{out}/store",
        rank=rank,
        world_size=2,
    )
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(Net())
    replayer = ttp.Replayer(model, step_fn)
    poison = {2: "nan"} if rank == 1 else {}  # only rank 1 sees the bad batch
    guard = train(model, make_batches(4, poison=poison), replayer)
    (found,) = replayer.attributions
    rows = [e.step for e in guard.events], found.kind, found.first_bad_layer, found.message
    np.save(f"{out}/rank{rank}.npy", np.array(rows, dtype=object), allow_pickle=True)
    guard.remove()  # its reader thread ends before the process group does
    # rank 0 hosts the store: nobody leaves while another still uses it (leaving
    # early aborted the other rank at exit, "terminate called without an active exception")
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()


def test_under_ddp_every_rank_names_the_rank_with_the_bad_batch(tmp_path: Path) -> None:
    """Gradients are all-reduced: rank 0's own batch and forward pass are sound, yet its
    gradients are NaN. Its replay (every rank replays the same step) says rank 1's batch."""
    import socket

    from torch.multiprocessing.spawn import start_processes

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    start_processes(_ddp_rank, args=(port, str(tmp_path)), nprocs=2, start_method="spawn")
    steps0, kind0, layer0, message0 = np.load(tmp_path / "rank0.npy", allow_pickle=True)
    steps1, kind1, layer1, _ = np.load(tmp_path / "rank1.npy", allow_pickle=True)
    assert steps0 == steps1 == [2]
    assert (kind1, layer1) == (replay.DATA, "fc1")  # its own batch
    assert (kind0, layer0) == (replay.DATA, "fc1") and "rank 1's batch" in message0


def test_gradients_clipped_before_after_backward_are_the_same_step(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """clip_grad_norm_ between backward and after_backward: the first run's gradients are the
    replay's times one factor, the loss the same: a batch with targets 1000 times too large
    reproduces its spike, it is not transient."""
    torch.manual_seed(0)
    model = Net()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    guard = ttp.Guard(optimizer, model, warmup=3)
    replayer = ttp.Replayer(model, step_fn)
    replayer.follow(guard)
    batches = make_batches(7)
    batches[6] = (batches[6][0], batches[6][1] * 1000)
    with caplog.at_level("WARNING", logger="tensortap.pytorch._replay"):
        for i, batch in enumerate(batches):
            replayer.capture(batch, batch_id=i)
            optimizer.zero_grad()
            loss = step_fn(model, batch)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            replayer.after_backward(loss)
            guard.observe(loss, batch=i)
            optimizer.step()
        replayer.before_step()
    (found,) = replayer.attributions
    assert found.kind == replay.REPRODUCIBLE and found.step == 6
    assert found.evidence["fingerprints_differing"] == 0
    assert 0 < found.evidence["grad_clip_factor"] < 1
    assert found.evidence["loss"] == found.evidence["replay_loss"]
    assert "times the replay's" in found.message
    told = [r for r in caplog.records if "before clip_grad_norm_" in r.getMessage()]
    assert len(told) == 1


def test_a_replay_whose_step_fn_fails_is_counted_failed() -> None:
    """step_fn returning None or raising: the replay ran and failed; the status adds up."""
    torch.manual_seed(0)
    model = Net()
    broken = {"how": "none"}

    def flaky(model: nn.Module, batch: Any) -> Any:
        if broken["how"] == "raise":
            raise RuntimeError("out of memory in the replay")
        loss = step_fn(model, batch)
        return None if broken["how"] == "none" else loss

    replayer = ttp.Replayer(model, flaky)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    batches = make_batches(3)
    for i, batch in enumerate(batches):
        replayer.capture(batch, batch_id=i)
        optimizer.zero_grad()
        replayer.after_backward(step_fn(model, batch))
        replayer.request(i, "asked")
        replayer.before_step()  # before the update: the weights are the step's
        broken["how"] = ("raise", "fine", "fine")[i]
        optimizer.step()
    status = replayer.status
    assert (status.requested, status.replayed, status.failed) == (3, 1, 2)
    assert status.requested == status.replayed + status.refused + status.over_budget + status.failed
