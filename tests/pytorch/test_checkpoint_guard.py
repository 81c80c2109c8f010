"""Checkpoints never poisoned in a plain loop (issue 46, item 2): ``GuardedCheckpoints`` over
``DistributedCheckpoints`` refuses a save of NaN weights or one taken while the guard trips,
keeps the last good checkpoint from its ``keep_last_n`` rotation, and a rollback passes over a
NaN or truncated checkpoint to the older good one; each refusal, pin and fallback an event."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import tensortap
import tensortap.pytorch as tt
from tensortap.exceptions import InvalidConfigError
from tensortap.hook._config import JOB_ENV
from tests.conftest import helper_cmd
from tests.helpers.ranks import run_ranks

SRC = str(Path(tensortap.__file__).parents[1])  # this tensortap, for the ranks


def model_and_optimizer() -> tuple[nn.Sequential, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))
    return model, torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)


def data() -> TensorDataset:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(64 * 8, 8, generator=generator)
    return TensorDataset(x, torch.sin(x[:, :1]) + 0.5 * x[:, 1:2])


def finite(model: nn.Module) -> bool:
    return all(bool(torch.isfinite(p).all()) for p in model.parameters())


def test_a_plain_loop_refuses_a_nan_save_keeps_the_last_good_one_and_rolls_back_to_it(
    tmp_path: Path,
) -> None:
    model, optimizer = model_and_optimizer()
    guard = tt.CheckpointGuard(model)
    store = tt.DistributedCheckpoints(tmp_path / "ckpt", model, optimizer)
    checkpoints = tt.GuardedCheckpoints(store, guard, keep_last_n=1)
    batches = tt.SkipBatches(DataLoader(data(), batch_size=8))
    rollback = tt.Rollback(checkpoints, every=2, batches=batches)
    losses: list[tuple[int, float]] = []
    for step, _, (x, y) in rollback.steps(20):
        out = model(x)
        if step == 7 and not losses[7:]:  # a fault: this update makes every weight NaN
            out = out * math.nan
        loss = nn.functional.mse_loss(out, y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append((step, loss.item()))
        # the loop's own check lags two steps (as a rule in another process would)
        bad = [s for s, v in losses[-3:] if not math.isfinite(v)]
        if len(bad) == 3:
            rollback.request(bad[0], [], "loss nan for 3 steps")
    # step 7 poisoned the weights; the save of step 8 was refused, the one of step 6 pinned
    # (keep_last_n=1 would have deleted it), and the rollback restored it
    assert [(e.kind, e.step) for e in guard.events] == [
        ("refused", 8),
        ("pinned", 6),
        ("released", 6),
    ]
    assert "not finite" in guard.events[0].reason
    assert [(e.kind, e.step, e.restored_step) for e in rollback.events] == [("rollback", 7, 6)]
    assert [s for s, _ in losses] == [*range(10), *range(6, 20)]
    assert finite(model) and all(math.isfinite(v) for _, v in losses[10:])
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == ["step-18"]
    assert checkpoints.steps() == [18]


def test_a_save_while_the_guard_trips_is_refused_until_it_clears(tmp_path: Path) -> None:
    model, optimizer = model_and_optimizer()
    guard = tt.Guard(optimizer, model)  # "skip": the NaN step's update is undone
    saved: list[int] = []
    checkpoint_guard = tt.CheckpointGuard(model, guard=guard, clear_after=3)
    checkpoints = tt.GuardedCheckpoints(
        tt.FunctionCheckpoints(saved.append, lambda step: None), checkpoint_guard
    )
    loader = iter(DataLoader(data(), batch_size=8))
    try:
        for step in range(12):
            if step % 2 == 0:
                checkpoints.save(step, {})
            x, y = next(loader)
            loss = nn.functional.mse_loss(model(x), y)
            if step == 5:
                loss = loss * math.nan
            guard.observe(loss, batch=step, step=step)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        guard.settle()
    finally:
        guard.remove()
    assert [e.step for e in guard.events] == [5] and finite(model)  # the weights stayed good
    # at 6 and 8 the trip at 5 is among the last 3 steps read (the weights are finite)
    assert saved == [0, 2, 4, 10]
    assert [(e.kind, e.step) for e in checkpoint_guard.events] == [
        ("refused", 6),
        ("pinned", 4),
        ("refused", 8),
        ("released", 4),
    ]
    assert "the guard is tripping (a trip at step 5" in checkpoint_guard.events[0].reason


def test_a_rollback_passes_over_a_nan_checkpoint_with_an_event(tmp_path: Path) -> None:
    """Saved without a guard, the checkpoint of step 5 holds NaN weights: it is not loaded
    (nothing of it reaches the model), and the rollback restores step 0's."""
    model, optimizer = model_and_optimizer()
    store = tt.DistributedCheckpoints(tmp_path / "ckpt", model, optimizer)
    store.save(0, {})
    good = {k: v.clone() for k, v in model.state_dict().items()}
    with torch.no_grad():
        model.get_parameter("0.weight")[0, 0] = math.nan
    store.save(5, {})
    with torch.no_grad():
        model.get_parameter("2.bias").fill_(7.0)
    rollback = tt.Rollback(store)
    rollback.request(8, [], "loss nan")
    assert rollback.restore() == 0
    assert [(e.kind, e.restored_step) for e in rollback.events] == [
        ("damaged", 5),
        ("rollback", 0),
    ]
    assert "not finite (model.0.weight)" in rollback.events[0].reason
    assert all(torch.equal(good[k], v) for k, v in model.state_dict().items())


def test_a_truncated_shard_falls_back_to_the_older_checkpoint_with_job_events(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = tmp_path / "job"
    job.mkdir()
    monkeypatch.setenv(JOB_ENV, str(job))
    model, optimizer = model_and_optimizer()
    guard = tt.CheckpointGuard(model)
    checkpoints = tt.GuardedCheckpoints(
        tt.DistributedCheckpoints(tmp_path / "ckpt", model, optimizer), guard
    )
    checkpoints.save(0, {})
    checkpoints.save(5, {})
    shard = max((tmp_path / "ckpt" / "step-5").glob("*.distcp"), key=lambda p: p.stat().st_size)
    shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])
    with torch.no_grad():
        model.get_parameter("0.weight").fill_(
            math.nan
        )  # the refused save below is an event in the job too
    checkpoints.save(6, {})
    rollback = tt.Rollback(checkpoints)
    rollback.request(8, [], "loss nan")
    assert rollback.restore() == 0 and finite(model)
    events = [json.loads(line) for line in (job / "events.jsonl").read_text().splitlines()]
    kinds = [(e["event"], e.get("step"), e.get("checkpoint")) for e in events]
    assert kinds[:2] == [
        ("checkpoint_refused", 6, None),
        ("checkpoint_pinned", 5, str(tmp_path / "ckpt" / "step-5")),
    ]
    assert kinds[2:] == [
        ("checkpoint_damaged", 8, 5),
        ("rollback_decision", 8, None),  # not replayed: restore and leave the batch out
        ("rollback", 8, None),
    ]
    assert "not finite" in events[0]["reason"] and "damaged" in events[2]["message"]


def test_bad_arguments_say_what_was_expected() -> None:
    model, optimizer = model_and_optimizer()
    with pytest.raises(InvalidConfigError, match="clear_after must be an int >= 1"):
        tt.CheckpointGuard(model, clear_after=0)
    with pytest.raises(InvalidConfigError, match="must be a torch.nn.Module"):
        tt.CheckpointGuard(optimizer)  # type: ignore[arg-type]
    store = tt.FunctionCheckpoints(lambda s: None, lambda s: None)
    with pytest.raises(InvalidConfigError, match="keep_last_n must be None or an int >= 1"):
        tt.GuardedCheckpoints(store, tt.CheckpointGuard(), keep_last_n=0)
    with pytest.raises(InvalidConfigError, match="needs a CheckpointGuard"):
        tt.GuardedCheckpoints(store, model)  # type: ignore[arg-type]


@pytest.mark.parametrize("sharding", ["replicated", "fsdp"])
def test_two_gloo_ranks_refuse_a_save_alike_when_one_ranks_weights_are_nan(
    tmp_path: Path, helper_env: dict[str, str], sharding: str
) -> None:
    """Replicated weights, or FSDP2 shards (the NaN in rank 1's shard only, which rank 0 never
    holds): both ranks refuse the save of step 2 alike (neither enters DCP's collective save
    alone), save step 4, and under FSDP load it back into their shards."""
    extra = ["fsdp"] if sharding == "fsdp" else []
    cmd = helper_cmd("checkpoint_guard_ranks.py", tmp_path / "ckpt", *extra)
    done = run_ranks(cmd, 2, dict(helper_env, PYTHONPATH=SRC), timeout=200)
    for p in done:
        assert p.returncode == 0, p.stderr
    results = [json.loads(p.stdout.strip().splitlines()[-1]) for p in done]
    for rank, result in enumerate(results):
        assert result["steps"] == [0, 4]
        kinds = [(kind, step) for kind, step, _ in result["events"]]
        assert kinds == [("refused", 2), ("pinned", 0), ("released", 0)]
        reason = result["events"][0][2]
        assert "not finite (0.weight)" in reason
        assert ("on rank 1" in reason) == (rank == 0)
        assert result["restored"] is (True if extra else None)
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == ["step-0", "step-4"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_the_finite_check_names_the_first_bad_tensor(dtype: torch.dtype, bad: float) -> None:
    from tensortap.pytorch._nonfinite import nonfinite_name

    poisoned = torch.ones(4, 5, dtype=dtype)
    poisoned[2, 3] = bad
    state = {"a": torch.ones(3, dtype=dtype), "opt": {"state": [torch.zeros(0), poisoned]}}
    assert nonfinite_name(state) == "opt.state.1"
    # large finite values, integers, an empty tensor and complex numbers are judged right
    fine = {
        "big": torch.full((3,), 6e4, dtype=torch.float16),
        "huge": torch.full((3,), 1e300, dtype=torch.float64),
        "count": torch.tensor([2**62]),
        "none": torch.empty(0),
        "z": torch.tensor([1 + 2j]),
    }
    assert nonfinite_name(fine) is None
    assert nonfinite_name({"z": torch.tensor([complex(0.0, bad)])}) == "z"


def test_save_in_a_plain_loop_refuses_nan_weights_and_leaves_the_last_file_whole(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The loop's own ``torch.save(model.state_dict(), "latest.pt")`` every 2 steps, written as
    ``checkpoint_guard.save(...)``: the NaN step 7 would have overwritten the file of step 6;
    the refused saves leave it byte for byte, and a finite save writes torch.save's bytes."""
    model, optimizer = model_and_optimizer()
    checkpoint_guard = tt.CheckpointGuard(model)
    latest, plain = tmp_path / "run" / "latest.pt", tmp_path / "plain" / "latest.pt"
    latest.parent.mkdir()
    plain.parent.mkdir()
    written: dict[int, bool] = {}
    loader = DataLoader(data(), batch_size=8)
    with caplog.at_level("WARNING", logger="tensortap"):
        for step, (x, y) in zip(range(12), loader, strict=False):
            out = model(x)
            if step == 7:  # a fault: this update makes every weight NaN
                out = out * math.nan
            loss = nn.functional.mse_loss(out, y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if step % 2 == 0:
                written[step] = checkpoint_guard.save(model.state_dict(), latest, step=step)
                if step == 6:
                    torch.save(model.state_dict(), plain)  # what the loop wrote without it
    assert written == {0: True, 2: True, 4: True, 6: True, 8: False, 10: False}
    assert latest.read_bytes() == plain.read_bytes()  # step 6's, as torch.save wrote it
    assert sorted(p.name for p in latest.parent.iterdir()) == ["latest.pt"]  # no staging left
    assert [(e.kind, e.step) for e in checkpoint_guard.events] == [
        ("refused", 8),
        ("pinned", 6),
        ("refused", 10),
    ]
    refused = checkpoint_guard.events[0]
    assert refused.reason == "the weights are not finite (0.weight)"
    assert refused.message.startswith(f"the save to {latest} at step 8 was refused")
    assert f"the last good one is the checkpoint of step 6 ({latest})" in refused.message
    assert refused.message in caplog.text
    assert checkpoint_guard.last_good == (6, str(latest))
    assert not checkpoint_guard.is_good() and not checkpoint_guard.is_good(model)
    assert checkpoint_guard.is_good({"weights": [torch.ones(3)]})


def test_save_refuses_while_the_guard_trips_and_takes_only_file_paths(tmp_path: Path) -> None:
    """A guard that undid a NaN step keeps the weights finite, yet a save within
    ``clear_after`` steps of its trip is refused; a buffer is not a path: a clear error."""
    model, optimizer = model_and_optimizer()
    guard = tt.Guard(optimizer, model)
    checkpoint_guard = tt.CheckpointGuard(model, guard=guard, clear_after=3)
    loader = DataLoader(data(), batch_size=8)
    saved: dict[int, bool] = {}
    try:
        for step, (x, y) in zip(range(9), loader, strict=False):
            out = model(x)
            loss = nn.functional.mse_loss(out * math.nan if step == 4 else out, y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            saved[step] = checkpoint_guard.save(
                {"model": model.state_dict(), "step": step}, tmp_path / "latest.pt", step=step
            )
    finally:
        guard.remove()
    assert finite(model)
    assert [s for s, ok in saved.items() if not ok] == [4, 5, 6]
    assert "the guard is tripping (a trip at step 4" in checkpoint_guard.events[0].reason
    assert torch.load(tmp_path / "latest.pt", weights_only=True)["step"] == 8
    with pytest.raises(InvalidConfigError, match="must be a file path.*got BytesIO"):
        checkpoint_guard.save(model.state_dict(), io.BytesIO())  # type: ignore[arg-type]
