"""The rollback decides from the replay's evidence (issue 46, item 1): a recurring fault in one
layer drops no healthy batch, tries the remedies and stops naming the layer; a transient trip
drops nothing; a NaN batch is still left out and training goes on to the end. Each decision is
an event of the session, shown by the report. Also (item 7): a batch refilled in place is not
replayed as another batch and blamed on the hardware."""

from __future__ import annotations

import os
from collections.abc import Hashable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import tensortap as tt
import tensortap.pytorch as ttp
from tensortap.core._rollback_decision import (
    DATA,
    GO_ON,
    LOWER_LR,
    NUMERICS,
    REMEDY,
    REPRODUCIBLE,
    RESTORE,
    STOP,
    TIGHTER_CLIP,
    TRANSIENT,
    Evidence,
    decide,
)
from tensortap.exceptions import InvalidConfigError
from tensortap.testing import inject_bitflip
from tests.helpers.optimizer_state import in_memory
from tests.helpers.tiny_gpt import BATCH, GPT, LayerFault, gpt_step, tokens


@pytest.fixture(autouse=True)
def _one_thread() -> Any:
    """One thread: a tiny model's ops are slower with two on a shared 2-core machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# -- a small GPT (tests/helpers/tiny_gpt.py) --
def _train_gpt(out: Path, *, remedies: bool = True) -> dict[str, Any]:
    torch.manual_seed(0)
    model = GPT()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    fault = LayerFault(model.blocks[2], {60, 61})
    save, load = in_memory(model, optimizer)

    def make_hook() -> tt.Hook:
        hook = ttp.Hook(out / "run", save_config=tt.SaveConfig(save_interval=1))
        hook.register_module(model)
        return hook

    batches = ttp.SkipBatches(DataLoader(tokens(130), batch_size=BATCH))
    rollback = ttp.Rollback(
        ttp.FunctionCheckpoints(save, load),
        every=10,
        batches=batches,
        make_hook=make_hook,
        remedies=ttp.Remedies(optimizer, lr_factor=0.1, clip_norm=0.5, steps=20)
        if remedies
        else None,
    )
    guard = ttp.Guard(
        optimizer, model, budget=ttp.SkipBudget(2, 10, then="rollback"), rollback=rollback
    )
    replayer = ttp.Replayer(model, gpt_step)
    replayer.follow(guard, rollback=rollback)
    trained: list[tuple[int, Any]] = []
    for step, batch_id, batch in rollback.steps(120):
        replayer.capture(batch, batch_id=batch_id, step=step)
        fault.step = step
        optimizer.zero_grad()
        loss = gpt_step(model, batch)
        replayer.after_backward(loss)
        guard.observe(loss, batch=batch_id, step=step)
        optimizer.step()
        trained.append((step, batch_id))
    assert guard.flush()
    rollback.close()
    guard.remove()
    return {"rollback": rollback, "replayer": replayer, "trained": trained, "model": model}


def test_a_recurring_layer_fault_drops_no_batch_tries_the_remedies_and_stops_naming_it(
    tmp_path: Path,
) -> None:
    run = _train_gpt(tmp_path)
    rollback, trained = run["rollback"], run["trained"]
    assert rollback.batches.skip == set()  # no healthy batch left out (before: six)
    kinds = [(e.kind, e.restored_step) for e in rollback.events]
    assert kinds == [("rollback", 50), ("rollback", 50), ("stopped", None)]
    remedies = [e.decision.remedy for e in rollback.events]
    assert remedies == [LOWER_LR, TIGHTER_CLIP, None]
    stopped = rollback.events[-1]
    assert stopped.decision is not None and stopped.decision.action == STOP
    assert stopped.decision.evidence == NUMERICS and stopped.decision.layer == "blocks.2"
    assert "blocks.2" in stopped.message and rollback.should_stop
    # every batch trained once per branch, each branch from 50 trains batches 50, 51, ...
    assert [b for s, b in trained if s == 60] == [60, 60, 60]
    assert trained[-1] == (61, 61)
    assert all(torch.isfinite(p).all() for p in run["model"].parameters())
    # the decisions are events of the sessions they were made in, and the report marks them
    sessions = tt.create_trial(tmp_path / "run").sessions()
    decided = [
        (e["fields"]["action"], e["fields"]["layer"])
        for s in sessions
        for e in s.events
        if e["kind"] == "rollback_decision"
    ]
    assert decided == [("remedy", "blocks.2")] * 2 + [("stop", "blocks.2")]
    from tensortap.report._training import training_report

    page = training_report(tt.create_trial(tmp_path / "run"), rules=[])
    assert "rollback: remedy lower_lr (numerics in blocks.2, step 60)" in page
    assert "rollback: stop (numerics in blocks.2, step 60)" in page


def test_without_remedies_a_layer_fault_stops_at_once_and_restores_nothing(
    tmp_path: Path,
) -> None:
    run = _train_gpt(tmp_path, remedies=False)
    rollback = run["rollback"]
    assert [e.kind for e in rollback.events] == ["stopped"]
    assert rollback.batches.skip == set() and run["trained"][-1] == (61, 61)
    assert "no remedy given" in rollback.events[0].message


def test_the_remedies_lower_the_rate_then_clip_and_end_after_their_steps() -> None:
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    remedies = ttp.Remedies(optimizer, lr_factor=0.5, clip_norm=1e-3, steps=2)
    assert "learning rate times 0.5" in remedies.apply(LOWER_LR)
    assert "clipped to a total norm of 0.001" in remedies.apply(TIGHTER_CLIP)
    seen: list[tuple[float, float]] = []  # what the step uses: after the remedies' hook

    def look(opt: Any, args: Any, kwargs: Any) -> None:
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        seen.append(
            (opt.param_groups[0]["lr"], float(torch.stack([g.norm() for g in grads]).norm()))
        )

    optimizer.register_step_pre_hook(look)
    for _ in range(3):
        optimizer.zero_grad()
        model(torch.ones(2, 4)).sum().mul(100).backward()
        optimizer.step()
        assert optimizer.param_groups[0]["lr"] == 1.0  # a scheduler's value is kept
    assert [lr for lr, _ in seen] == [0.5, 0.5, 1.0]  # for 2 steps, then over
    assert seen[0][1] == pytest.approx(1e-3, rel=1e-4) and seen[2][1] > 100
    assert remedies.active == set() and remedies.left == 0
    remedies.remove()
    with pytest.raises(InvalidConfigError, match="within"):
        ttp.Remedies(optimizer, lr_factor=2.0)
    with pytest.raises(InvalidConfigError, match="order"):
        ttp.Remedies(optimizer, order=("warmup",))


# -- the small MLP of test_healing, with a budget of one skip --
MLP_STEPS = 40


def _data(bad: tuple[int, ...]) -> TensorDataset:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64 * BATCH, 8, generator=g)
    y = torch.sin(x[:, :1]) + 0.5 * x[:, 1:2]
    for batch in bad:
        x[batch * BATCH : (batch + 1) * BATCH] = float("nan")
    return TensorDataset(x, y)


def _mlp_step(model: nn.Module, batch: Any) -> torch.Tensor:
    x, y = batch
    loss = F.mse_loss(model(x), y)
    loss.backward()
    return loss


def _train_mlp(bad: tuple[int, ...], flips: tuple[int, ...]) -> dict[str, Any]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for at in flips:
        inject_bitflip(model[2], step=at)  # one bit of the last GEMM's output, once
    save, load = in_memory(model, optimizer)
    batches = ttp.SkipBatches(DataLoader(_data(bad), batch_size=BATCH))
    rollback = ttp.Rollback(ttp.FunctionCheckpoints(save, load), every=5, batches=batches)
    guard = ttp.Guard(
        optimizer, model, budget=ttp.SkipBudget(1, 10, then="rollback"), rollback=rollback
    )
    replayer = ttp.Replayer(model, _mlp_step)
    replayer.follow(guard, rollback=rollback)
    trained: list[Hashable] = []
    for step, batch_id, batch in rollback.steps(MLP_STEPS):
        replayer.capture(batch, batch_id=batch_id, step=step)
        optimizer.zero_grad()
        loss = _mlp_step(model, batch)
        replayer.after_backward(loss)
        guard.observe(loss, batch=batch_id, step=step)
        optimizer.step()
        trained.append(batch_id)
    assert guard.flush()
    rollback.restore()  # a request of the last step is decided here
    guard.remove()
    return {"rollback": rollback, "trained": trained, "guard": guard}


def test_a_transient_trip_drops_nothing_and_restores_nothing() -> None:
    run = _train_mlp(bad=(), flips=(12,))
    rollback, guard = run["rollback"], run["guard"]
    assert guard.status.rollbacks_requested == 1  # the budget of one skip was spent
    (event,) = rollback.events
    assert (event.kind, event.restored_step, event.decision.action) == ("went_on", None, GO_ON)
    assert rollback.batches.skip == set() and rollback.rollbacks == 0
    assert run["trained"] == list(range(MLP_STEPS))  # every batch once, no step trained twice
    assert rollback.transients == {0: 1}


def test_a_rank_with_transient_faults_is_named_after_the_limit() -> None:
    run = _train_mlp(bad=(), flips=(5, 16, 27))  # each replay is one more call
    rollback = run["rollback"]
    assert [e.kind for e in rollback.events] == ["went_on", "went_on", "suspect_rank", "went_on"]
    suspect = rollback.events[2]
    assert suspect.step == 25 and "rank 0 had 3 transient faults" in suspect.message
    assert rollback.batches.skip == set() and run["trained"] == list(range(MLP_STEPS))


def test_a_nan_batch_is_still_left_out_and_training_goes_on_to_the_end() -> None:
    run = _train_mlp(bad=(12,), flips=())
    rollback = run["rollback"]
    (event,) = rollback.events
    assert (event.kind, event.restored_step, event.batches) == ("rollback", 10, (12,))
    assert event.decision.action == RESTORE and event.decision.evidence == DATA
    assert rollback.batches.skip == {12}
    assert run["trained"].count(12) == 1  # trained once, before the restore
    assert len(run["trained"]) == MLP_STEPS + 3  # steps 10, 11 and 12 trained again
    assert run["trained"][-1] == MLP_STEPS  # one batch later: batch 12 was left out


# -- the decision alone --
def _seen(kind: str, batch: int, layer: str | None = None) -> Evidence:  # batch = step
    return Evidence(kind, batch, batch, layer)


def test_the_gravest_evidence_decides_and_only_data_or_unknown_batches_are_dropped() -> None:
    both: dict[Hashable, Evidence] = {1: _seen(DATA, 1), 2: _seen(TRANSIENT, 2)}
    mixed = decide([1, 2, 3], both)
    assert (mixed.action, mixed.evidence, mixed.drop, mixed.keep) == (RESTORE, DATA, (1, 3), (2,))
    assert decide([1, 2], {}).drop == (1, 2)  # no evidence: as before
    numerics = decide([1, 2], {1: _seen(NUMERICS, 1, "fc"), 2: _seen(DATA, 2)})
    assert (numerics.action, numerics.drop, numerics.layer) == (STOP, (), "fc")
    tried = decide([1], {1: _seen(NUMERICS, 1)}, remedies=(LOWER_LR,), tried=())
    assert (tried.action, tried.remedy) == (REMEDY, LOWER_LR)
    spent = decide([1], {1: _seen(NUMERICS, 1)}, remedies=(LOWER_LR,), tried=(LOWER_LR,))
    assert spent.action == STOP and "after the remedies lower_lr" in spent.reason
    assert decide([1, 2], {1: _seen(REPRODUCIBLE, 1), 2: _seen(DATA, 2)}).action == STOP
    assert decide([1], {1: _seen(TRANSIENT, 1)}).to_dict()["action"] == GO_ON


# -- item 7: a reused input buffer --
def _train_with_one_buffer(load: bool, fresh: bool = False) -> list[Any]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    data = _data((5,))
    x_buffer, y_buffer = torch.empty(BATCH, 8), torch.empty(BATCH, 1)

    def load_batch(i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return data.tensors[0][i * BATCH : (i + 1) * BATCH], data.tensors[1][
            i * BATCH : (i + 1) * BATCH
        ]

    replayer = ttp.Replayer(model, _mlp_step, load_batch=load_batch if load else None)
    guard = ttp.Guard(optimizer, model)
    replayer.follow(guard)
    for step in range(8):
        x, y = load_batch(step)
        if fresh:  # new tensors each step, which the step changes in place itself
            batch = (x.clone(), y.clone())
        else:
            x_buffer.copy_(x)  # the script refills the same tensors each step
            y_buffer.copy_(y)
            batch = (x_buffer, y_buffer)
        replayer.capture(batch, batch_id=step, step=step)
        optimizer.zero_grad()
        if fresh:
            batch[1].clamp_(-1e6, 1e6)  # as a loop masks its labels
        loss = _mlp_step(model, batch)
        replayer.after_backward(loss)
        guard.observe(loss, batch=step, step=step)
        optimizer.step()
    assert guard.flush()
    replayer.before_step()
    guard.remove()
    return [replayer.attributions, replayer.status]


def test_a_batch_refilled_in_place_is_not_blamed_on_the_hardware(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level("WARNING", logger="tensortap.pytorch._replay"):
        attributions, status = _train_with_one_buffer(load=False)
    assert attributions == [] and status.refused == 1  # before: "transient" at step 5
    (said,) = [r.getMessage() for r in caplog.records if "not run" in r.getMessage()]
    assert "changed in place" in said and "load_batch" in said
    attributions, status = _train_with_one_buffer(load=True)
    assert [(a.step, a.kind) for a in attributions] == [(5, DATA)]  # replayed from load_batch
    # a step that changes its own batch in place (labels masked) is still replayed
    attributions, status = _train_with_one_buffer(load=False, fresh=True)
    assert [(a.step, a.kind) for a in attributions] == [(5, DATA)] and status.refused == 0


# -- in a job, zero code change for the job (tensortap run), the decisions shown --
def test_a_jobs_live_view_events_and_report_show_each_decision(tmp_path: Path) -> None:
    import json
    import subprocess
    import sys

    import tensortap

    script = Path(__file__).parents[1] / "helpers" / "decide_job_train.py"
    src = str(Path(tensortap.__file__).parents[1])

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "tensortap.cli", *args],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
            env={**os.environ, "PYTHONPATH": src},
        )

    done = cli("run", "--", sys.executable, str(script))
    assert done.returncode in (0, 3), done.stdout + done.stderr  # 3: a rule saw the NaN loss
    (job,) = (tmp_path / "runs").iterdir()
    result = json.loads((job / "logs" / "training.log").read_text().splitlines()[-1])
    assert result["skipped"] == []  # no healthy batch left out
    assert [(kind, restored) for kind, restored, _ in result["events"]] == [
        ("rollback", 50),
        ("rollback", 50),
        ("stopped", None),
    ]
    events = [json.loads(line) for line in (job / "events.jsonl").read_text().splitlines()]
    decided = [
        (e["action"], e["remedy"], e["layer"]) for e in events if e["event"] == "rollback_decision"
    ]
    assert decided == [
        ("remedy", "lower_lr", "blocks.2"),
        ("remedy", "tighter_clip", "blocks.2"),
        ("stop", None, "blocks.2"),
    ]
    assert (
        "rollback: step 60: step(s) 60, 61 went non-finite from finite data in blocks.2"
        in done.stdout
    )
    page = tmp_path / "report.html"
    assert cli("report", str(job), "-o", str(page)).returncode == 0
    shown = page.read_text()
    assert "rollback: remedy lower_lr (numerics in blocks.2, step 60)" in shown  # on the curve
    stop = "<td class='text'>stop</td><td class='text'>numerics</td><td class='text'>blocks.2</td>"
    assert stop in shown  # in the decisions' table (the stop comes after the last saved step)


@pytest.mark.parametrize("data", [False, True])
def test_two_gloo_ranks_decide_alike_from_every_ranks_evidence(
    tmp_path: Path, helper_env: dict[str, str], data: bool
) -> None:
    import json

    import tensortap
    from tests.conftest import helper_cmd
    from tests.helpers.ranks import run_ranks

    src = str(Path(tensortap.__file__).parents[1])
    cmd = helper_cmd("ddp_decide.py", *(["--data"] if data else []))
    done = run_ranks(cmd, 2, dict(helper_env, PYTHONPATH=src), timeout=200)
    for p in done:
        assert p.returncode == 0, p.stderr
    results = [json.loads(p.stdout.strip().splitlines()[-1]) for p in done]
    # rank 1 asked, rank 0 alone held the evidence: both go on (or, with rank 1's data
    # evidence, the graver, both restore and leave batch 6 out)
    expected = (
        {"events": [["rollback", "restore", "data"]], "skip": [6]}
        if data
        else {"events": [["went_on", "go_on", "transient"]], "skip": []}
    )
    assert results == [expected, expected]


def test_under_accumulation_a_transient_trip_drops_no_micro_batch() -> None:
    """The guard names a step's micro-batches together (MicroBatches); the replay's verdict
    on the step holds for each of them."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    inject_bitflip(model[2], step=4)  # step 2's first micro-batch, once
    data = _data(())
    micro = [
        (data.tensors[0][i * BATCH : (i + 1) * BATCH], data.tensors[1][i * BATCH : (i + 1) * BATCH])
        for i in range(20)
    ]

    def step_fn(model: nn.Module, batches: Any) -> torch.Tensor:
        losses = []
        for x, y in batches:
            loss = F.mse_loss(model(x), y) / len(batches)
            loss.backward()
            losses.append(loss.detach())
        return torch.stack(losses).sum()

    save, load = in_memory(model, optimizer)
    rollback = ttp.Rollback(ttp.FunctionCheckpoints(save, load))
    guard = ttp.Guard(
        optimizer, model, budget=ttp.SkipBudget(1, 10, then="rollback"), rollback=rollback
    )
    replayer = ttp.Replayer(model, step_fn)
    replayer.follow(guard, rollback=rollback)
    rollback.checkpoint(0)
    step = 0
    while step < 8:
        if (restored := rollback.restore()) is not None:
            step = restored
        pair = micro[2 * step : 2 * step + 2]
        replayer.capture(pair, batch_id=step, step=step)
        optimizer.zero_grad()
        losses = []
        for m, (x, y) in enumerate(pair):
            loss = F.mse_loss(model(x), y) / 2
            loss.backward()
            losses.append(loss.detach())
            guard.observe(loss, batch=2 * step + m, step=step)
        replayer.after_backward(torch.stack(losses).sum())  # as step_fn returns it
        optimizer.step()
        step += 1
    assert guard.flush()
    rollback.restore()
    guard.remove()
    assert [(e.step, tuple(e.batch)) for e in guard.events] == [(2, (4, 5))]
    assert [a.kind for a in replayer.attributions] == [TRANSIENT]
    assert [e.kind for e in rollback.events] == ["went_on"]  # before: a rollback dropping 4, 5


def test_a_reproducible_fault_stops_at_once_without_a_restore() -> None:
    """Everything finite, the batch moderate, the replay the same: a restore would replay it."""
    saved: list[int] = []
    rollback = ttp.Rollback(
        ttp.FunctionCheckpoints(saved.append, lambda step: None),
        every=4,
        batches=ttp.SkipBatches(list(range(40))),
    )
    trained = []
    for step, _, _ in rollback.steps(30):
        trained.append(step)
        if step == 9:
            rollback.attributed(ttp.Attribution(REPRODUCIBLE, 9, None, {}, "the same", batch=9))
            rollback.request(9, [9], "a loss spike")
    (event,) = rollback.events
    assert (event.kind, event.restored_step, rollback.rollbacks) == ("stopped", None, 0)
    assert event.decision is not None and event.decision.evidence == REPRODUCIBLE
    assert rollback.should_stop and trained == list(range(10))  # before: restored step 8
    assert rollback.batches is not None and rollback.batches.skip == set()
    with pytest.raises(InvalidConfigError, match="attribution by replay"):
        rollback.attributed("data")


def test_a_numerics_fault_long_after_a_remedy_starts_again_from_the_first_remedy() -> None:
    model = nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    rollback = ttp.Rollback(
        ttp.FunctionCheckpoints(lambda step: None, lambda step: None),
        every=5,
        batches=ttp.SkipBatches(list(range(100))),
        remedies=ttp.Remedies(optimizer, steps=10),
    )
    faults = {12: "fc", 14: "fc", 60: "head"}  # 14: the same fault again; 60: a new one
    for step, batch_id, _ in rollback.steps(80):
        if faults.pop(step, None) is not None:  # once each (a restore trains the step again)
            rollback.attributed(ttp.Attribution(NUMERICS, step, "layer", {}, "", batch=batch_id))
            rollback.request(step, [batch_id], "nan")
    remedies = [(e.step, e.decision.remedy) for e in rollback.events if e.decision]
    assert remedies == [(12, LOWER_LR), (14, TIGHTER_CLIP), (60, LOWER_LR)]
    assert rollback.batches is not None and rollback.batches.skip == set()
