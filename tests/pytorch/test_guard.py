"""The guard inside the step: a poisoned batch (NaN) or a spike is caught right before
optimizer.step(), the update is skipped and training goes on with finite weights; the flight
recorder holds the steps before the event; every rank decides alike."""

from __future__ import annotations

import math
import socket
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.multiprocessing as mp  # noqa: E402

import tensortap as tt  # noqa: E402
import tensortap.pytorch as ttp  # noqa: E402
from tensortap.exceptions import InvalidConfigError  # noqa: E402


def setup(seed: int = 0):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
    return model, torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)


def batches(count: int, poison: dict[int, str] | None = None):
    generator = torch.Generator().manual_seed(1)
    for i in range(count):
        x = torch.randn(16, 8, generator=generator)
        y = torch.randint(0, 3, (16,), generator=generator)
        kind = (poison or {}).get(i)
        if kind == "nan":
            x[0, 0] = math.nan
        elif kind == "huge":
            x = x * 1e4
        yield i, x, y


def train(model, optimizer, guard, poison, steps: int = 30):
    before = {}
    for i, x, y in batches(steps, poison):
        loss = torch.nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        guard.observe(loss, batch=f"batch-{i}")
        before[i] = [p.detach().clone() for p in model.parameters()]
        optimizer.step()
        if guard.should_stop:
            break
    return before


def test_a_poisoned_batch_is_skipped_and_training_goes_on(tmp_path: Path) -> None:
    model, optimizer = setup()
    guard = ttp.Guard(optimizer, model, flight_recorder=tmp_path / "flight", keep=4)
    before = train(model, optimizer, guard, {20: "nan"})
    (event,) = guard.events
    assert (event.step, event.batch) == (20, "batch-20") and "the loss is nan" in event.reason
    assert guard.skipped == 1 and not guard.should_stop
    assert all(torch.isfinite(p).all() for p in model.parameters())  # the weights survived
    after_20 = before[21]
    assert all(torch.equal(a, b) for a, b in zip(before[20], after_20))  # no update at 20
    assert not all(torch.equal(a, b) for a, b in zip(before[21], before[22]))  # then goes on
    assert guard.flush()  # the recording is written on a background thread
    (where,) = guard.recorded
    trial = tt.create_trial(where)
    steps = trial.tensor("training_step")
    assert [float(steps.value(s)) for s in steps.steps()] == [17.0, 18.0, 19.0, 20.0]
    assert math.isnan(float(trial.tensor("loss").value(3)))  # the step that tripped it
    assert trial.tensor("gradient/0.weight").value(0).shape == (16, 8)


def test_a_hundred_bad_batches_make_at_most_max_recordings_and_status_counts_them(
    tmp_path: Path,
) -> None:
    model, optimizer = setup()
    guard = ttp.Guard(optimizer, model, flight_recorder=tmp_path / "flight", keep=4)
    assert guard.max_recordings == ttp._guard.MAX_RECORDINGS == 3
    train(model, optimizer, guard, {i: "nan" for i in range(5, 105)}, steps=110)
    assert guard.remove()  # waits for the recordings still being written
    assert all(torch.isfinite(p).all() for p in model.parameters())
    status = guard.status
    assert (status.trips, status.skipped_updates) == (100, 100)
    assert (status.recordings, status.recordings_over_budget) == (3, 97)
    assert (status.recordings_pending, status.recordings_failed) == (0, 0)
    on_disk = sorted(p.name for p in (tmp_path / "flight").iterdir())
    assert on_disk == ["trip-5", "trip-6", "trip-7"]  # the first ones: nothing is deleted
    assert sorted(guard.recorded) == [str(tmp_path / "flight" / name) for name in on_disk]
    segments = [f for f in (tmp_path / "flight").rglob("*") if f.parent.name == "data"]
    assert status.recording_bytes == sum(f.stat().st_size for f in segments) > 0
    first = tt.create_trial(tmp_path / "flight" / "trip-5").tensor("training_step")
    assert [float(first.value(s)) for s in first.steps()] == [2.0, 3.0, 4.0, 5.0]  # healthy ones


def test_the_flight_recorder_budget_can_be_zero_and_is_checked(tmp_path: Path) -> None:
    model, optimizer = setup()
    guard = ttp.Guard(optimizer, model, flight_recorder=tmp_path / "f", max_recordings=0)
    train(model, optimizer, guard, {3: "nan", 4: "nan"}, steps=6)
    assert guard.flush() and guard.status.recordings_over_budget == 2
    assert guard.recorded == [] and not (tmp_path / "f").exists()
    for bad in (-1, 1.5, True):
        with pytest.raises(InvalidConfigError, match="max_recordings must be an int >= 0"):
            ttp.Guard(optimizer, model, flight_recorder=tmp_path / "f", max_recordings=bad)  # type: ignore[arg-type]


def test_a_spike_is_caught_against_the_running_baseline() -> None:
    model, optimizer = setup()
    guard = ttp.Guard(optimizer, model)
    train(model, optimizer, guard, {25: "huge"})
    assert [e.step for e in guard.events] == [25] and "spike" in guard.events[0].reason
    model, optimizer = setup()
    guard = ttp.Guard(optimizer, model, action="record")
    train(model, optimizer, guard, {25: "huge"})
    assert guard.events[0].step == 25 and guard.skipped == 0  # the update went through


def test_stop_skips_and_asks_to_stop() -> None:
    model, optimizer = setup()
    guard = ttp.Guard(optimizer, model, action="stop")
    before = train(model, optimizer, guard, {5: "nan"})
    assert guard.should_stop and max(before) == 5 and guard.skipped == 1


def test_grad_scaler_norms_are_judged_unscaled_and_bf16_losses_work() -> None:
    model, optimizer = setup()
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10)
    guard = ttp.Guard(optimizer, model)  # scaler.step unscales before optimizer.step
    for _, x, y in batches(3):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        scaler.scale(loss).backward()
        guard.observe(loss)
        norm = (
            torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in model.parameters()]))
            / scaler.get_scale()
        )
        scaler.step(optimizer)
        scaler.update()
        assert guard.last is not None
        assert guard.last[1] == pytest.approx(float(norm), rel=1e-4)
        assert guard.last[0] == pytest.approx(loss.item(), rel=1e-2)
    assert guard.events == []


def test_bad_settings_are_refused() -> None:
    model, optimizer = setup()
    with pytest.raises(InvalidConfigError, match="Optimizer"):
        ttp.Guard(model)
    with pytest.raises(InvalidConfigError, match="action"):
        ttp.Guard(optimizer, action="panic")
    with pytest.raises(InvalidConfigError, match="window"):
        ttp.Guard(optimizer, window=0)
    with pytest.raises(InvalidConfigError, match="needs the model"):
        ttp.Guard(optimizer, flight_recorder="x")
    with pytest.raises(InvalidConfigError, match="names must be a regex"):
        ttp.Guard(optimizer, model, names="(")


def _rank(rank: int, port: int, out: str) -> None:
    torch.distributed.init_process_group(
        # a FileStore: no store server thread in rank 0 that a rank's exit could race
        "gloo",
        init_method=f"file://{out}/store",
        rank=rank,
        world_size=2,
    )
    model, optimizer = setup()
    guard = ttp.Guard(optimizer, model, flight_recorder=f"{out}/flight", keep=3)
    poison = {7: "nan"} if rank == 1 else {}  # only rank 1 sees the bad batch
    train(model, optimizer, guard, poison, steps=10)
    assert guard.remove() and guard.status.recordings == 1, guard.status
    np.save(f"{out}/rank{rank}.npy", np.array([e.step for e in guard.events]))
    # rank 0 hosts the store: nobody leaves while another still uses it (leaving
    # early aborted the other rank at exit, "terminate called without an active exception")
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()


def test_every_rank_reaches_the_same_decision(tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    mp.start_processes(_rank, args=(port, str(tmp_path)), nprocs=2, start_method="spawn")  # type: ignore[attr-defined]
    assert np.load(tmp_path / "rank0.npy").tolist() == [7]  # rank 0 skipped step 7 too
    assert np.load(tmp_path / "rank1.npy").tolist() == [7]
    recording = tt.create_trial(tmp_path / "flight" / "trip-7")  # one worker per rank
    assert recording.workers() == ["worker_0", "worker_1"]
