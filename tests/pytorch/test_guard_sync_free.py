"""The guard decides on the device: no host read inside the step (counted on the CPU with the
accelerator's path forced, refused by CUDA's sync debug mode on a GPU; on the CPU by default one
read of the decision, which is no sync there, so a kept step skips the undo), the update undone by a 0/1 factor whatever the optimizer
(weights and optimizer state exactly as before), one all-reduce so every rank skips alike, a
skip budget that stops or asks for a rollback, a window a NaN cannot poison, and the decision
read afterwards on the guard's reader thread."""

from __future__ import annotations

import collections
import math
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("torch")
import torch
from torch.multiprocessing.spawn import start_processes

import tensortap as tt
import tensortap.pytorch as ttp
from tensortap.exceptions import InvalidConfigError
from tensortap.healing._budget import SkipBudget
from tensortap.pytorch._guard_flight import MAX_LAG
from tests.conftest import free_port

HOST_READS = ("item", "tolist", "__bool__", "__float__", "__int__")
OPTIMIZERS = {
    "sgd": lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9),
    "adam": lambda ps: torch.optim.Adam(ps, lr=1e-2),
    "adamw": lambda ps: torch.optim.AdamW(ps, lr=1e-2, weight_decay=0.1),
    # fused: the guard hands its flag to the optimizer's own skip (found_inf), copying nothing
    "adamw fused": lambda ps: torch.optim.AdamW(ps, lr=1e-2, weight_decay=0.1, fused=True),
    "sgd fused": lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9, fused=True),
}


def setup(optimizer: str = "sgd", seed: int = 0):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
    return model, OPTIMIZERS[optimizer](model.parameters())


def batch(i: int, kind: str | None = None):
    generator = torch.Generator().manual_seed(100 + i)
    x = torch.randn(16, 8, generator=generator)
    y = torch.randint(0, 3, (16,), generator=generator)
    if kind == "nan":
        x[0, 0] = math.nan
    elif kind == "huge":
        x = x * 1e4
    return x, y


class HostReads:
    """Counts calls of the tensor methods that read a value on the host, made by one thread
    while ``inside`` is on (the guard's reader thread is another thread, not counted)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.counts: collections.Counter[str] = collections.Counter()
        self.thread = threading.get_ident()
        self.on = False
        for name in HOST_READS:
            monkeypatch.setattr(
                torch.Tensor, name, self._counting(name, getattr(torch.Tensor, name))
            )

    def _counting(self, name: str, original: Any) -> Any:
        def counted(tensor: Any, *args: Any, **kwargs: Any) -> Any:
            if self.on and threading.get_ident() == self.thread:
                self.counts[name] += 1
            return original(tensor, *args, **kwargs)

        return counted

    @contextmanager
    def inside(self) -> Iterator[None]:
        self.on = True
        try:
            yield
        finally:
            self.on = False


def train(model, optimizer, guard, poison: dict[int, str], steps: int, reads=None, states=None):
    """Train ``steps`` steps; returns each step's weights before its update (and, with
    ``states``, the optimizer state too)."""
    before: dict[int, list[torch.Tensor]] = {}
    for i in range(steps):
        x, y = batch(i, poison.get(i))
        loss = torch.nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        guard.observe(loss, batch=f"batch-{i}")
        before[i] = [p.detach().clone() for p in model.parameters()]
        if states is not None:
            states[i] = optimizer_state(optimizer)
        if reads is None:
            optimizer.step()
        else:
            with reads.inside():
                optimizer.step()
    return before


def optimizer_state(optimizer) -> list[torch.Tensor]:
    return [
        value.clone()
        for state in optimizer.state_dict()["state"].values()
        for _, value in sorted(state.items())
        if isinstance(value, torch.Tensor)
    ]


def same(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


def device_path(guard: Any) -> Any:
    """The guard as it runs on an accelerator: the decision never read on the host."""
    guard._device.read_on_host = False
    return guard


def test_no_host_read_inside_the_step_on_the_cpu(monkeypatch, tmp_path: Path) -> None:
    poison = {12: "nan", 20: "huge", 21: "nan", 22: "nan"}
    reads = HostReads(monkeypatch)
    model, optimizer = setup("sgd")
    guard = ttp.Guard(
        optimizer,
        model,
        flight_recorder=tmp_path / "flight",
        keep=3,
        budget=SkipBudget(skips=3, steps=5),
    )
    train(model, optimizer, device_path(guard), poison, steps=26, reads=reads)
    assert reads.counts == {}  # SGD reads nothing on the host, and neither does the guard
    assert [e.step for e in guard.events] == [12, 20, 21, 22]  # read on the reader thread
    assert guard.should_stop and guard.flush() and len(guard.recorded) == 3
    # Adam reads its own step counter (a CPU tensor) with .item(); the guard adds nothing
    counts = []
    for guarded in (False, True):
        reads.counts.clear()
        model, optimizer = setup("adam")
        observer = device_path(ttp.Guard(optimizer, model)) if guarded else _NoGuard()
        train(model, optimizer, observer, poison, steps=26, reads=reads)
        counts.append(dict(reads.counts))
    assert counts[0] == counts[1] == {"item": 26 * 4}


def test_on_the_cpu_the_snapshot_undo_reads_its_decision_once_a_step(monkeypatch) -> None:
    """A read on the CPU is no sync: the default reads the decision (one ``__bool__`` a step)
    and puts parameters and state back only on a step that tripped."""
    reads = HostReads(monkeypatch)
    model, optimizer = setup("sgd")
    guard = ttp.Guard(optimizer, model)
    copies = collections.Counter[str]()
    original = torch._foreach_copy_

    def counting(targets: Any, sources: Any, *args: Any, **kwargs: Any) -> Any:
        copies[str(len(targets))] += 1
        return original(targets, sources, *args, **kwargs)

    monkeypatch.setattr(torch, "_foreach_copy_", counting)
    train(model, optimizer, guard, {12: "nan"}, steps=20, reads=reads)
    assert reads.counts == {"__bool__": 20}
    assert [e.step for e in guard.events] == [12]
    # before each of 20 steps the 4 parameters, and from the second step on their 4 momentum
    # buffers; at step 12 the one undo, of both (8 tensors); no pass on the 19 kept steps
    assert copies == {"4": 20 + 19, "8": 1}


class _NoGuard:
    def observe(self, loss: Any, batch: Any = None) -> None:
        pass


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("undo", ["snapshot", "optimizer"])
def test_no_sync_inside_the_step_on_cuda(undo: str, tmp_path: Path) -> None:
    torch.manual_seed(0)
    device = torch.device("cuda")
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
    model = model.to(device)
    # the step counter on the device: capturable (restored by the snapshot) or fused (own skip)
    kind: dict[str, Any] = {"capturable": True} if undo == "snapshot" else {"fused": True}
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, **kind)
    guard = ttp.Guard(optimizer, model, undo=undo, flight_recorder=tmp_path / "flight")
    before = {}
    for i in range(30):
        x, y = batch(i, {12: "nan", 25: "huge"}.get(i))
        x, y = x.to(device), y.to(device)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        guard.observe(loss, batch=i)
        before[i] = [p.detach().clone() for p in model.parameters()]
        torch.cuda.set_sync_debug_mode("error")
        try:
            optimizer.step()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    assert guard.flush()
    assert [e.step for e in guard.events] == [12, 25] and guard.status.undo == undo
    assert same(before[12], before[13]) and same(before[25], before[26])
    assert len(guard.recorded) == 2  # raw copies came off the device without a sync too


@pytest.mark.parametrize(
    ("name", "compiled", "on_host"),
    [
        ("adam", False, False),
        ("adam", False, True),
        ("adamw", False, False),
        ("adamw", False, True),
        ("sgd", False, False),
        ("sgd", False, True),
        ("adamw", True, False),
        ("adamw", True, True),
        ("adamw fused", False, False),
        ("sgd fused", False, False),
    ],
)
def test_a_skipped_step_leaves_weights_and_optimizer_state_as_they_were(
    name: str, compiled: bool, on_host: bool, monkeypatch
) -> None:
    model, optimizer = setup(name)
    guard = ttp.Guard(optimizer, model, compile=compiled)  # the undo compiled, or plain
    if not on_host:
        device_path(guard)  # torch.where of every tensor, as on an accelerator
    states: dict[int, list[torch.Tensor]] = {}
    reads = HostReads(monkeypatch)
    poison = {14: "nan", 22: "huge"}
    before = train(model, optimizer, guard, poison, steps=26, states=states, reads=reads)
    # Adam's own .item() of its CPU step counter; on the host path the decision's one read
    assert set(reads.counts) <= ({"item", "__bool__"} if on_host else {"item"})
    assert [e.step for e in guard.events] == [14, 22] and guard.skipped == 2
    for skipped in (14, 22):
        assert same(before[skipped], before[skipped + 1])  # the weights
        assert same(states[skipped], states[skipped + 1])  # momentum, moments, step counts
        assert not same(before[skipped + 1], before[skipped + 2])  # then training goes on
    assert "spike" in guard.events[1].reason
    fused = name.endswith("fused")
    assert guard.status.undo == ("optimizer" if fused else "snapshot")
    assert (guard.status.snapshot_bytes == 0) == fused  # the fused optimizer's own skip
    assert (guard.events[1].update_norm is None) == fused  # its update norm is not measured


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_a_skip_at_the_first_step_is_as_if_the_batch_never_came(name: str) -> None:
    """The optimizer had no state before its first step; the guard puts back zeros, which is
    how these optimizers start theirs."""
    model, optimizer = setup(name)
    guard = ttp.Guard(optimizer, model)
    train(model, optimizer, guard, {0: "nan"}, steps=6)
    assert [e.step for e in guard.events] == [0]
    clean, clean_optimizer = setup(name)
    for i in range(1, 6):
        x, y = batch(i)
        loss = torch.nn.functional.cross_entropy(clean(x), y)
        clean_optimizer.zero_grad()
        loss.backward()
        clean_optimizer.step()
    assert same(list(model.parameters()), list(clean.parameters()))
    assert same(optimizer_state(optimizer), optimizer_state(clean_optimizer))


@pytest.mark.parametrize("name", ["adamw", "adamw fused"])
def test_a_grad_scalers_overflow_is_its_skip_and_norms_are_judged_unscaled(name: str) -> None:
    """A GradScaler skips a step whose gradients overflowed: around a plain optimizer it never
    calls step(); a fused one is called with the scaler's found_inf (and unscales inside). The
    guard counts neither as its trip, and judges unscaled norms either way."""
    model, optimizer = setup(name)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10)
    guard = ttp.Guard(optimizer, model)
    before = {}
    for i in range(6):
        x, y = batch(i, {3: "nan"}.get(i))
        loss = torch.nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        scaler.scale(loss).backward()
        guard.observe(loss)
        norm = float(
            torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in model.parameters()]))
        ) / float(scaler.get_scale())
        before[i] = [p.detach().clone() for p in model.parameters()]
        scaler.step(optimizer)
        scaler.update()
        if i != 3:
            assert guard.last is not None and guard.last[1] == pytest.approx(norm, rel=1e-4)
    assert guard.flush() and guard.events == [] and guard.skipped == 0
    assert same(before[3], before[4]) and not same(before[4], before[5])


def test_the_budget_stops_after_n_skips_within_m_steps() -> None:
    model, optimizer = setup()
    guard = ttp.Guard(optimizer, model, budget=SkipBudget(skips=3, steps=10))
    # three skips far apart: the budget holds
    train(model, optimizer, guard, {11: "nan", 22: "nan", 33: "nan"}, steps=40)
    assert guard.skipped == 3 and not guard.should_stop
    assert guard.status.budget_exhausted == 0 and guard.status.skips_in_budget_window == 1
    model, optimizer = setup()
    guard = ttp.Guard(optimizer, model, budget=SkipBudget(skips=3, steps=10))
    stopped_at = None
    for i in range(30):
        x, y = batch(i, {12: "nan", 15: "nan", 19: "nan", 20: "nan"}.get(i))
        loss = torch.nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        guard.observe(loss, batch=i)
        optimizer.step()
        if guard.should_stop:  # on the CPU the decision is read right away
            stopped_at = i
            break
    assert stopped_at == 19
    status = guard.status
    assert (status.skipped_updates, status.budget_exhausted, status.rollbacks_requested) == (
        3,
        1,
        0,
    )
    assert (status.decisions, status.decisions_pending) == (20, 0)


class RecordingRollback:
    """A stand-in for the real rollback (i35-rollback's): records what it was asked."""

    def __init__(self) -> None:
        self.requests: list[tuple[int, list[object], str, str]] = []

    def request(self, step: int, batches: list[object], reason: str) -> None:
        self.requests.append((step, batches, reason, threading.current_thread().name))


def test_the_budget_asks_the_rollback_target() -> None:
    model, optimizer = setup()
    rollback = RecordingRollback()
    assert isinstance(rollback, ttp.RollbackTarget)
    guard = ttp.Guard(optimizer, model, budget=SkipBudget(2, 5, then="rollback"), rollback=rollback)
    train(model, optimizer, guard, {12: "nan", 14: "nan", 20: "nan"}, steps=24)
    assert guard.flush() and not guard.should_stop
    ((step, batches, reason, thread),) = rollback.requests
    assert (step, batches, thread) == (12, ["batch-12", "batch-14"], "tensortap-guard-reader")
    assert "2 updates skipped within 5 steps" in reason and "the loss is nan" in reason
    assert guard.status.rollbacks_requested == 1 and guard.status.skips_in_budget_window == 1


def test_a_nan_in_the_window_never_silences_the_guard() -> None:
    """OLMo-core's bug: one NaN in the window made its statistics NaN, and every spike after
    went unseen (and every step was skipped). Here the loss is observed on even steps only (the
    others leave NaN in the window), a NaN batch trips, and a later spike still trips while the
    healthy steps around it go through."""
    model, optimizer = setup()
    guard = ttp.Guard(optimizer, model, window=20, warmup=5)
    poison = {9: "nan", 17: "huge", 24: "huge"}
    for i in range(32):
        x, y = batch(i, poison.get(i))
        loss = torch.nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        if i % 2 == 0:
            guard.observe(loss, batch=i)
        optimizer.step()
    assert [e.step for e in guard.events] == [9, 17, 24]
    assert guard.events[0].reason == "the gradient norm is nan"  # its loss was not observed
    assert (
        guard.events[1].reason.startswith("the gradient norm") and "spike" in guard.events[1].reason
    )
    assert guard.events[2].reason.startswith("the loss") and "spike" in guard.events[2].reason
    records = guard.history()
    assert [r.step for r in records if r.skipped] == [9, 17, 24]
    assert all(math.isfinite(r.grad_norm) for r in records if not r.tripped)


def test_the_warm_up_trips_on_non_finite_values_but_not_on_spikes() -> None:
    model, optimizer = setup()
    guard = ttp.Guard(optimizer, model, warmup=10)
    train(model, optimizer, guard, {1: "nan", 3: "huge", 14: "huge"}, steps=16)
    assert [e.step for e in guard.events] == [1, 14]


def test_an_update_norm_spike_is_caught_and_undone() -> None:
    """A normal batch, a normal gradient, but a learning rate gone wrong for one step: only the
    update norm says so (a leading indicator: Marin 32B saw update-norm spikes before loss
    spikes)."""
    model, optimizer = setup()
    guard = ttp.Guard(optimizer, model)
    before = {}
    for i in range(24):
        x, y = batch(i)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        guard.observe(loss, batch=i)
        before[i] = [p.detach().clone() for p in model.parameters()]
        optimizer.param_groups[0]["lr"] = 50.0 if i == 20 else 0.05
        optimizer.step()
    (event,) = guard.events
    assert event.step == 20 and event.reason.startswith("the update norm") and event.skipped
    assert same(before[20], before[21])
    ungated = ttp.Guard(*reversed(setup()), signals=("loss", "grad_norm"))
    assert ungated._device.judged == (True, True, False)


def test_a_compiled_model_trains_with_the_guard() -> None:
    model, optimizer = setup("adamw")
    compiled = torch.compile(model)
    guard = ttp.Guard(optimizer, model)
    before = {}
    for i in range(14):
        x, y = batch(i, {10: "nan"}.get(i))
        loss = torch.nn.functional.cross_entropy(compiled(x), y)
        optimizer.zero_grad()
        loss.backward()
        guard.observe(loss, batch=i)
        before[i] = [p.detach().clone() for p in model.parameters()]
        optimizer.step()
    assert [e.step for e in guard.events] == [10]
    assert same(before[10], before[11]) and not same(before[11], before[12])
    assert all(torch.isfinite(p).all() for p in model.parameters())


def test_on_trip_gets_the_event_with_the_batch_and_the_rng_state_to_replay_it() -> None:
    model = torch.nn.Sequential(
        torch.nn.Linear(8, 16), torch.nn.Dropout(0.5), torch.nn.Linear(16, 3)
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    seen: list[tuple[ttp.GuardEvent, str]] = []
    guard = ttp.Guard(
        optimizer, model, on_trip=lambda e: seen.append((e, threading.current_thread().name))
    )
    for i in range(8):
        x, y = batch(i, {6: "nan"}.get(i))
        if i == 6:
            rng_before = torch.get_rng_state()
        loss = torch.nn.functional.cross_entropy(model(x), y)  # dropout draws from the generator
        optimizer.zero_grad()
        loss.backward()
        guard.observe(loss, batch=("shard-3", i))
        optimizer.step()
    assert guard.flush()
    ((event, thread),) = seen
    assert thread == "tensortap-guard-reader" and event.batch == ("shard-3", 6)
    assert event.rng_state is not None
    assert torch.equal(event.rng_state["cpu"], rng_before)  # the state before its forward pass


class LateEvent:
    """Stands for the CUDA event after a step's row: the device has not reached it yet."""

    def __init__(self) -> None:
        self.reached = threading.Event()

    def query(self) -> bool:
        return self.reached.is_set()

    def synchronize(self) -> None:
        self.reached.wait(60)


def test_reading_the_guard_never_waits_for_a_decision_still_on_the_device(monkeypatch) -> None:
    """As on a GPU, where a step's row arrives on the host when the device gets there: the
    training thread goes on, reading the guard takes what has arrived, flush waits for all."""
    model, optimizer = setup()
    guard = ttp.Guard(optimizer, model)
    late: list[LateEvent] = []
    to_host = guard._to_host

    def arriving_late(row: torch.Tensor, slot: int) -> tuple[torch.Tensor, LateEvent]:
        host, _ = to_host(row, slot)
        late.append(LateEvent())
        return host.clone(), late[-1]

    monkeypatch.setattr(guard, "_to_host", arriving_late)
    train(model, optimizer, guard, {1: "nan"}, steps=3)  # the training thread did not wait
    assert guard.events == [] and not guard.should_stop
    assert (guard.status.decisions, guard.status.decisions_pending) == (0, 3)
    late[0].reached.set()
    late[1].reached.set()
    assert [e.step for e in guard.events] == [1] and guard.skipped == 1
    assert (guard.status.decisions, guard.status.decisions_pending) == (2, 1)
    late[2].reached.set()
    assert guard.flush() and guard.status.decisions == 3


def test_the_flight_recorder_keeps_raw_tensors_only_within_its_budget(tmp_path: Path) -> None:
    model, optimizer = setup()
    step_bytes = 2 * sum(p.numel() * p.element_size() for p in model.parameters())
    budget = (2 + MAX_LAG + 1) * step_bytes  # room for two steps of raw tensors
    guard = ttp.Guard(
        optimizer, model, flight_recorder=tmp_path / "f", keep=4, flight_budget_bytes=budget
    )
    train(model, optimizer, guard, {20: "nan"}, steps=22)
    assert guard.flush() and guard.status.flight_bytes <= budget
    trial = tt.create_trial(tmp_path / "f" / "trip-20")
    steps = trial.tensor("training_step")
    assert [float(steps.value(s)) for s in steps.steps()] == [17.0, 18.0, 19.0, 20.0]
    assert trial.tensor("0.weight").steps() == [2, 3]  # raw only for the last two
    assert trial.tensor("grad_norm").steps() == [0, 1, 2, 3]  # statistics for all four
    assert math.isnan(float(trial.tensor("loss").value(3)))
    model, optimizer = setup()
    guard = ttp.Guard(optimizer, model, flight_recorder=tmp_path / "g", flight_budget_bytes=0)
    train(model, optimizer, guard, {8: "nan"}, steps=9)
    assert guard.flush() and guard.status.flight_bytes == 0
    trial = tt.create_trial(tmp_path / "g" / "trip-8")
    assert "0.weight" not in trial.tensor_names() and "update_norm" in trial.tensor_names()


def test_bad_settings_are_refused() -> None:
    _, optimizer = setup()
    with pytest.raises(InvalidConfigError, match="skips must be an int >= 1"):
        SkipBudget(0, 5)
    with pytest.raises(InvalidConfigError, match="steps >= skips"):
        SkipBudget(5, 2)
    with pytest.raises(InvalidConfigError, match="then must be one of"):
        SkipBudget(2, 5, then="panic")
    with pytest.raises(InvalidConfigError, match="needs rollback="):
        ttp.Guard(optimizer, budget=SkipBudget(2, 5, then="rollback"))
    with pytest.raises(InvalidConfigError, match="must be a SkipBudget"):
        ttp.Guard(optimizer, budget=(2, 5))  # type: ignore[arg-type]
    with pytest.raises(InvalidConfigError, match="request"):
        ttp.Guard(optimizer, rollback=object())  # type: ignore[arg-type]
    with pytest.raises(InvalidConfigError, match="signals must be"):
        ttp.Guard(optimizer, signals=("loss", "weights"))
    with pytest.raises(InvalidConfigError, match="flight_budget_bytes must be an int >= 0"):
        ttp.Guard(optimizer, flight_budget_bytes=-1)
    with pytest.raises(InvalidConfigError, match="on_trip must be callable"):
        ttp.Guard(optimizer, on_trip="print")  # type: ignore[arg-type]
    with pytest.raises(InvalidConfigError, match="model must be the torch.nn.Module.*got str"):
        ttp.Guard(optimizer, "model")  # type: ignore[arg-type]


def _rank(rank: int, port: int, out: str, name: str) -> None:
    torch.distributed.init_process_group(
        # a FileStore: no store server thread in rank 0 that a rank's exit could race
        "gloo",
        init_method=f"file://{out}/store-{name}",
        rank=rank,
        world_size=2,
    )
    reduces: collections.Counter[int] = collections.Counter()
    all_reduce = torch.distributed.all_reduce

    def counted(*args: Any, **kwargs: Any) -> Any:
        reduces[guard.step] += 1
        return all_reduce(*args, **kwargs)

    torch.distributed.all_reduce = counted
    reads = HostReads(pytest.MonkeyPatch())
    model, optimizer = setup(name)
    guard = device_path(ttp.Guard(optimizer, model))  # as under NCCL: no read on the host
    poison = {7: "nan"} if rank == 1 else {}  # only rank 1 sees the bad batch
    states: dict[int, list[torch.Tensor]] = {}
    before = train(model, optimizer, guard, poison, steps=10, states=states, reads=reads)
    assert guard.remove()
    np.savez(
        f"{out}/rank{rank}.npz",
        events=np.array([e.step for e in guard.events]),
        reasons=np.array([e.reason for e in guard.events]),
        before=np.concatenate([t.flatten().numpy() for t in before[7]]),
        after=np.concatenate([t.flatten().numpy() for t in before[8]]),
        state_before=np.concatenate([t.flatten().numpy() for t in states[7]]),
        state_after=np.concatenate([t.flatten().numpy() for t in states[8]]),
        final=np.concatenate([p.detach().flatten().numpy() for p in model.parameters()]),
        reduces=np.array([reduces[s] for s in range(10)]),
        reads=np.array(sum(reads.counts.values()) - reads.counts["item"]),
    )
    # rank 0 hosts the store: nobody leaves while another still uses it (leaving
    # early aborted the other rank at exit, "terminate called without an active exception")
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()


@pytest.mark.parametrize("name", ["adamw", "adamw fused"])  # snapshot, the optimizer's skip
def test_a_nan_on_one_rank_is_skipped_on_every_rank_with_one_all_reduce(
    tmp_path: Path, name: str
) -> None:
    args = (free_port(), str(tmp_path), name)
    start_processes(_rank, args=args, nprocs=2, start_method="spawn")
    ranks = [np.load(tmp_path / f"rank{r}.npz") for r in range(2)]
    for got in ranks:
        assert got["events"].tolist() == [7]
        np.testing.assert_array_equal(got["before"], got["after"])  # the update undone
        np.testing.assert_array_equal(got["state_before"], got["state_after"])
        assert got["reduces"].tolist() == [1] * 10  # one all-reduce a step
        assert int(got["reads"]) == 0  # no host read but AdamW's own .item() of its counter
    assert ranks[0]["reasons"].tolist() == ["the loss is not finite on another rank"]
    assert ranks[1]["reasons"].tolist() == ["the loss is nan"]
    np.testing.assert_array_equal(ranks[0]["final"], ranks[1]["final"])  # the ranks agree
    np.testing.assert_array_equal(ranks[0]["after"], ranks[1]["after"])


def _accumulate(model, optimizer, guard, poison: dict[int, str], steps: int, micro: int = 3):
    """Gradient accumulation with clipping: ``micro`` micro-batches a step, each observed; the
    loop hands the guard the norm before clipping."""
    norms = []
    for step in range(steps):
        optimizer.zero_grad()
        for m in range(micro):
            i = step * micro + m
            x, y = batch(i, poison.get(i))
            loss = torch.nn.functional.cross_entropy(model(x), y) / micro
            loss.backward()
            guard.observe(loss, batch=i)
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        norms.append(norm)
        guard.observe(loss, grad_norm=norm)  # the loss again: the worst stays the worst
        optimizer.step()
    return norms


def test_accumulated_micro_batches_are_judged_on_the_worst_and_named_each() -> None:
    model, optimizer = setup("adamw")
    rollback = RecordingRollback()
    guard = ttp.Guard(optimizer, model, budget=SkipBudget(2, 5, then="rollback"), rollback=rollback)
    _accumulate(model, optimizer, guard, {4: "nan", 9: "nan"}, steps=5)  # steps 1 and 3
    assert guard.flush()
    assert [(e.step, e.batch, e.reason) for e in guard.events] == [
        (1, (3, 4, 5), "the loss is nan"),  # micro-batch 4, not the last one, is NaN
        (3, (9, 10, 11), "the loss is nan"),
    ]
    ((step, batches, _, _),) = rollback.requests
    assert (step, batches) == (1, [3, 4, 5, 9, 10, 11])  # each micro-batch, flattened
    assert all(torch.isfinite(p).all() for p in model.parameters())


def test_the_worst_micro_batch_loss_is_the_maximum_and_nan_wins() -> None:
    model, optimizer = setup()
    guard = ttp.Guard(optimizer, model)
    for losses, expected in (([1.0, 3.0, 2.0], 3.0), ([1.0, math.nan, 2.0], math.nan)):
        for mixed in (False, True):
            optimizer.zero_grad()
            model(batch(0)[0]).sum().backward()
            for j, value in enumerate(losses):
                guard.observe(torch.tensor(value) if mixed and j % 2 else value, batch=j)
            optimizer.step()
            loss = guard.history()[-1].loss
            assert loss is not None
            assert loss == expected or (math.isnan(expected) and math.isnan(loss))


def test_the_clipped_norm_given_to_observe_is_judged_not_the_clipped_one() -> None:
    model, optimizer = setup("adamw")
    guard = ttp.Guard(optimizer, model, signals=("grad_norm",), warmup=3)
    norms = _accumulate(model, optimizer, guard, {13: "huge"}, steps=6)
    assert guard.flush()
    records = guard.history()
    assert [r.grad_norm for r in records] == pytest.approx([float(n) for n in norms])
    assert records[4].grad_norm > 1.0  # not the clipped norm, which is at most max_norm
    assert [e.step for e in guard.events] == [4] and "gradient norm" in guard.events[0].reason


def test_observe_checks_what_it_is_given() -> None:
    model, optimizer = setup()
    guard = ttp.Guard(optimizer, model)
    with pytest.raises(InvalidConfigError, match="loss must be a tensor or a real number"):
        guard.observe("loss")  # type: ignore[arg-type]
    with pytest.raises(InvalidConfigError, match="shape \\(3,\\)"):
        guard.observe(torch.ones(3))
    with pytest.raises(InvalidConfigError, match="grad_norm must be .*clip_grad_norm_"):
        guard.observe(torch.tensor(1.0), grad_norm="big")  # type: ignore[arg-type]


def test_observe_after_the_optimizer_step_is_told_once(caplog: pytest.LogCaptureFixture) -> None:
    model, optimizer = setup()
    guard = ttp.Guard(optimizer, model)
    with caplog.at_level("WARNING", logger="tensortap.pytorch._guard"):
        for i in range(4):
            x, y = batch(i)
            optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            guard.observe(loss, batch=i)  # too late: judged with the next step
    told = [r for r in caplog.records if "before optimizer.step()" in r.getMessage()]
    assert len(told) == 1 and guard.status.late_observes == 1
    # in time, and observing only some steps, is not told
    model, optimizer = setup()
    guard = ttp.Guard(optimizer, model)
    caplog.clear()
    with caplog.at_level("WARNING", logger="tensortap.pytorch._guard"):
        for i in range(4):
            x, y = batch(i)
            optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            if i != 1:
                guard.observe(loss, batch=i)
            optimizer.step()
    assert guard.status.late_observes == 0 and not caplog.records
