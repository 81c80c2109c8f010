"""The healing parts together, as a user wires them: the sync-free guard skips bad batches and,
when its skip budget is spent, asks the Rollback to restore the last good checkpoint and skip
them (the resumed run a branch of the first); and a tripped step is replayed to say why it
failed (a flipped bit is "transient", a bad batch "data")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import tensortap as tt
import tensortap.pytorch as ttp
from tensortap.exceptions import InvalidConfigError
from tensortap.testing import inject_bitflip
from tests.helpers.optimizer_state import in_memory

BATCH = 8
STEPS = 40


def _data(bad: tuple[int, ...], value: float) -> TensorDataset:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(64 * BATCH, 8, generator=generator)
    y = torch.sin(x[:, :1]) + 0.5 * x[:, 1:2]
    for batch in bad:
        x[batch * BATCH : (batch + 1) * BATCH] = value
    return TensorDataset(x, y)


def _model() -> tuple[nn.Sequential, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))
    return model, torch.optim.AdamW(model.parameters(), lr=1e-2)


def _healing(
    out: Path, bad: tuple[int, ...]
) -> tuple[nn.Sequential, torch.optim.Optimizer, ttp.Rollback, ttp.Guard]:
    """A model trained on NaN batches at ``bad``, a rollback with checkpoints every 5 steps
    (each resumed run a new session of ``out/run``), and a guard whose budget of 2 skips in
    10 steps asks it to roll back."""
    model, optimizer = _model()
    save, load = in_memory(model, optimizer)

    def make_hook() -> tt.Hook:
        hook = ttp.Hook(out / "run", save_config=tt.SaveConfig(save_interval=1))
        hook.register_module(model)
        return hook

    batches = ttp.SkipBatches(DataLoader(_data(bad, float("nan")), batch_size=BATCH))
    rollback = ttp.Rollback(
        ttp.FunctionCheckpoints(save, load), every=5, batches=batches, make_hook=make_hook
    )
    guard = ttp.Guard(
        optimizer, model, budget=ttp.SkipBudget(2, 10, then="rollback"), rollback=rollback
    )
    return model, optimizer, rollback, guard


def _train_with_guard_and_rollback(out: Path, bad: tuple[int, ...]) -> dict[str, Any]:
    model, optimizer, rollback, guard = _healing(out, bad)
    losses: list[float] = []
    for step, batch_id, (x, y) in rollback.steps(STEPS):
        loss = nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        guard.observe(loss, batch=batch_id, step=step)
        optimizer.step()
        losses.append(float(loss.detach()))
    assert guard.flush()
    rollback.close()
    guard.remove()
    return {"rollback": rollback, "guard": guard, "losses": losses, "model": model}


def test_the_guard_skips_then_its_budget_rolls_back_and_the_run_converges(tmp_path: Path) -> None:
    healthy = _train_with_guard_and_rollback(tmp_path / "healthy", bad=())
    assert healthy["guard"].status.trips == 0 and healthy["rollback"].events == []
    healed = _train_with_guard_and_rollback(tmp_path / "healed", bad=(12, 13))

    guard, rollback = healed["guard"], healed["rollback"]
    assert [e.step for e in guard.events] == [12, 13]  # the loop's steps, both skipped
    assert guard.status.skipped_updates == 2 and guard.status.rollbacks_requested == 1
    (event,) = rollback.events
    assert (event.kind, event.step, event.restored_step, tuple(event.batches)) == (
        "rollback",
        12,
        10,  # the newest checkpoint at or before 12 minus the margin of 1
        (12, 13),
    )
    assert rollback.batches is not None and rollback.batches.skip == {12, 13}
    # converges like the healthy run: the weights are finite and the last losses are close
    assert all(torch.isfinite(p).all() for p in healed["model"].parameters())
    assert max(healed["losses"][-5:]) < 2 * max(healthy["losses"][-5:])

    first, second = tt.create_trial(tmp_path / "healed" / "run").sessions()
    assert (second.branch_of, second.branch_step) == (first.id, 10)
    assert "updates skipped" in (second.branch_reason or "")


def _step_fn(model: nn.Module, batch: Any) -> torch.Tensor:
    x, y = batch
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    return loss


def _replayed(bad_batch: int | None, flip_at: int | None) -> list[Any]:
    """Train 8 steps with the guard handing its trips to a replayer."""
    model, optimizer = _model()
    if flip_at is not None:
        inject_bitflip(model[2], step=flip_at)  # one element of the last GEMM's output, once
    replayer = ttp.Replayer(model, _step_fn)
    guard = ttp.Guard(optimizer, model)
    replayer.follow(guard)  # its trips are replayed before the next step runs
    data = _data(() if bad_batch is None else (bad_batch,), float("nan"))
    loader = DataLoader(data, batch_size=BATCH)
    for step, batch in zip(range(8), loader, strict=False):
        replayer.capture(batch, batch_id=step, step=step)
        optimizer.zero_grad()
        loss = _step_fn(model, batch)
        replayer.after_backward(loss)
        guard.observe(loss, batch=step, step=step)
        optimizer.step()
    assert guard.flush()
    replayer.before_step()  # a replay asked for at the last step runs here
    guard.remove()
    return replayer.attributions


def test_a_tripped_step_is_replayed_and_attributed() -> None:
    (flipped,) = _replayed(bad_batch=None, flip_at=3)
    assert (flipped.kind, flipped.step) == ("transient", 3)
    (data,) = _replayed(bad_batch=5, flip_at=None)
    assert (data.kind, data.step, data.first_bad_layer) == ("data", 5, "0")
    assert _replayed(bad_batch=None, flip_at=None) == []  # a healthy run is never attributed


def test_a_replayer_follows_one_guard_only() -> None:
    model, optimizer = _model()
    replayer = ttp.Replayer(model, _step_fn)
    mine = ttp.Guard(optimizer, model, on_trip=print)
    with pytest.raises(InvalidConfigError, match="without an on_trip of its own"):
        replayer.follow(mine)
    with pytest.raises(InvalidConfigError, match="needs a tensortap Guard"):
        replayer.follow(object())
    mine.remove()


@pytest.mark.parametrize("bad", [-1, 1.5, True, "3"])
def test_observe_refuses_a_step_that_is_not_a_step_number(bad: Any) -> None:
    model, optimizer = _model()
    guard = ttp.Guard(optimizer, model)
    with pytest.raises(InvalidConfigError, match="loop's step number"):
        guard.observe(torch.tensor(1.0), step=bad)
    guard.remove()


def _wired(out: Path, follow_rollback: bool) -> dict[str, Any]:
    """The guard, the rollback and the replayer together: bad batches 12 and 13 spend the
    skip budget (a rollback to step 10), bad batch 20 trips once more in the branch (step 18)."""
    model, optimizer, rollback, guard = _healing(out, (12, 13, 20))
    replayer = ttp.Replayer(model, _step_fn, hook=rollback.hook)
    replayer.follow(guard, rollback=rollback) if follow_rollback else replayer.follow(guard)
    for step, batch_id, batch in rollback.steps(24):
        replayer.capture(batch, batch_id=batch_id, step=step)
        optimizer.zero_grad()
        loss = _step_fn(model, batch)
        replayer.after_backward(loss)
        guard.observe(loss, batch=batch_id, step=step)
        optimizer.step()
    assert guard.flush()
    replayer.before_step()
    rollback.close()
    guard.remove()
    return {"replayer": replayer, "rollback": rollback}


def test_the_trip_that_rolls_back_is_replayed_and_the_branch_records_its_own(
    tmp_path: Path,
) -> None:
    wired = _wired(tmp_path / "followed", follow_rollback=True)
    replayer, rollback = wired["replayer"], wired["rollback"]
    assert [e.kind for e in rollback.events] == ["rollback"]
    assert [(a.step, a.kind) for a in replayer.attributions] == [
        (12, "data"),
        (13, "data"),  # replayed before the restore, not refused after it
        (18, "data"),  # batch 20: two batches fewer after the rollback
    ]
    assert replayer.status.refused == 0
    first, second = tt.create_trial(tmp_path / "followed" / "run").sessions()
    assert [e["fields"]["step"] for e in first.events if e["kind"] == "attribution"] == [12, 13]
    assert [e["fields"]["step"] for e in second.events if e["kind"] == "attribution"] == [18]


def test_a_replay_refused_after_a_restore_says_a_rollback_restored_a_checkpoint(
    caplog: pytest.LogCaptureFixture,
) -> None:
    model, optimizer = _model()
    save, load = in_memory(model, optimizer)
    batches = ttp.SkipBatches(DataLoader(_data((), 0.0), batch_size=BATCH))
    rollback = ttp.Rollback(ttp.FunctionCheckpoints(save, load), every=5, batches=batches)
    guard = ttp.Guard(optimizer, model)
    replayer = ttp.Replayer(model, _step_fn)
    replayer.follow(guard, rollback=rollback)
    trained: list[int] = []
    with caplog.at_level("WARNING", logger="tensortap.pytorch._replay"):
        for step, batch_id, batch in rollback.steps(9):
            if trained[-1:] == [7] and rollback.rollbacks == 1 and not replayer.status.requested:
                replayer.request(7, "asked after the restore")  # too late: step 5's weights
            replayer.capture(batch, batch_id=batch_id, step=step)
            optimizer.zero_grad()
            replayer.after_backward(_step_fn(model, batch))
            trained.append(step)
            if step == 7 and rollback.rollbacks == 0:
                rollback.request(7, [], "a check of the loop's")  # and no update for step 7
            else:
                optimizer.step()
    assert trained[:5] == [0, 1, 2, 3, 4] and trained[7:9] == [7, 5]
    assert replayer.status.refused == 1 and replayer.attributions == []
    (refused,) = [r.getMessage() for r in caplog.records if "not run" in r.getMessage()]
    assert "step 7" in refused and "a rollback restored a checkpoint since" in refused
