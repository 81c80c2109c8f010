"""Rollback and branch: a planted loss spike is rolled back to the last checkpoint before it,
the bad batches are skipped, training converges, and the trial shows the resumed run as a
branch of the first (issue 35, item 2)."""

from __future__ import annotations

import html
import json
import re
import statistics
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import tensortap
import tensortap.pytorch as tt
from tensortap.core._rollback_request import REQUEST_FILE, RollbackRequests, request_rollback
from tensortap.exceptions import InvalidConfigError
from tensortap.jobs._actions import ActionContext, RollbackTraining, action_from_dict
from tests.conftest import helper_cmd
from tests.helpers.optimizer_state import in_memory
from tests.helpers.ranks import run_ranks

HELPERS = Path(__file__).parents[1] / "helpers"
SRC = str(Path(tensortap.__file__).parents[1])  # this tensortap, for the ranks
BAD = (12, 13)  # the planted bad batches: their labels are 1000 times too large
STEPS = 50
BATCH = 8


def dataset(bad: tuple[int, ...] = BAD) -> TensorDataset:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(64 * BATCH, 8, generator=generator)
    y = torch.sin(x[:, :1]) + 0.5 * x[:, 1:2]
    for batch in bad:
        y[batch * BATCH : (batch + 1) * BATCH] *= 1000.0
    return TensorDataset(x, y)


def model_and_optimizer() -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))
    return model, torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)


class SpikeCheck:
    """The loop's own trigger: a loss above 10x the median of the last healthy ones, twice in
    a row, asks for a rollback from the first of them, naming their batches."""

    def __init__(self, rollback: tt.Rollback) -> None:
        self.rollback = rollback
        self.healthy: list[Any] = []
        self.bad: list[Any] = []

    def __call__(self, step: int, batch_id: object, loss: float) -> None:
        if len(self.healthy) >= 5 and loss > 10 * statistics.median(self.healthy[-10:]):
            self.bad.append((step, batch_id))
            if len(self.bad) == 2:
                self.rollback.request(self.bad[0][0], [b for _, b in self.bad], "loss spike")
                self.bad = []
        else:
            self.healthy.append(loss)
            self.bad = []


def train(tmp_path: Path, bad: tuple[int, ...] = BAD, rollback_on: bool = True):
    """Train with checkpoints every 5 steps; returns the rollback and the last 5 losses."""
    model, optimizer = model_and_optimizer()
    save, load = in_memory(model, optimizer)

    def make_hook() -> tt.Hook:
        hook = tt.Hook(tmp_path / "run", save_config=tt.SaveConfig(save_interval=1))
        hook.register_module(model)
        return hook

    batches = tt.SkipBatches(DataLoader(dataset(bad), batch_size=BATCH, shuffle=False))
    rollback = tt.Rollback(
        tt.FunctionCheckpoints(save, load), every=5, batches=batches, make_hook=make_hook
    )
    check = SpikeCheck(rollback)
    losses = []
    for step, batch_id, (x, y) in rollback.steps(STEPS):
        loss = nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if rollback_on:
            check(step, batch_id, losses[-1])
    rollback.close()
    return rollback, losses[-5:]


def test_a_planted_spike_is_rolled_back_skipped_and_the_trial_shows_the_branch(
    tmp_path: Path,
) -> None:
    _, healthy = train(tmp_path / "healthy", bad=())
    threshold = 2 * max(healthy)  # what the healthy run reaches, with room for noise
    _, broken = train(tmp_path / "broken", rollback_on=False)
    assert not any(loss < threshold for loss in broken)  # left alone, the spike spoils it (NaN)

    rollback, last = train(tmp_path / "rolled")
    assert max(last) < threshold  # rolled back, the bad batches skipped: it converges
    (event,) = rollback.events
    assert (event.kind, event.step, event.restored_step, event.batches) == (
        "rollback",
        12,
        10,  # the newest checkpoint at or before step 12 minus the margin of 1
        BAD,
    )
    assert rollback.batches.skip == set(BAD) and rollback.batches.skipped == 2

    trial = tt.create_trial(tmp_path / "rolled" / "run")
    first, second = trial.sessions()
    assert not first.branched and first.branch_of is None
    assert second.branched and second.branch_of == first.id == event.parent
    assert (second.id, second.branch_step, second.branch_mode) == (event.session, 10, "TRAIN")
    assert second.branch_global_step == 10  # where the first session trained step 10
    assert "rollback to the checkpoint of step 10" in (second.branch_reason or "")
    assert second.rolled_back == (("TRAIN", 10, 13),)  # steps 10-13 counted again
    # by TRAIN step the trial gives the branch's values; every step to the end is there
    steps = trial.steps(mode=tt.modes.TRAIN)
    assert steps == list(range(STEPS))
    loss = trial.tensor("loss")  # the loss .backward() was called on, saved every step
    branch, abandoned = float(loss.value(12, mode=tt.modes.TRAIN)), float(loss.value(12))
    assert abandoned > 1000 * branch  # step 12 of the branch, and of the first session
    assert first.last_step is not None
    assert second.first_step == first.last_step + 1  # global steps never repeat


def test_branch_global_step_is_the_fork_in_the_parents_numbering_after_3_rollbacks(
    tmp_path: Path,
) -> None:
    """Issue 46: three rollbacks to the checkpoint of one step. Each branch's
    ``branch_global_step`` is the global step at which its parent trained the restored step
    (the parent's first step, for a parent that began there), never more than the trial's
    last step (it was the parent's first global step plus ``branch_step``: 106, 112)."""
    torch.manual_seed(0)
    model = nn.Linear(4, 1)  # registered: the hook follows model.training (TRAIN steps)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    save, load = in_memory(model, optimizer)

    def make_hook() -> tt.Hook:
        hook = tt.Hook(tmp_path / "run", save_config=tt.SaveConfig(save_interval=1))
        hook.register_module(model)
        return hook

    rollback = tt.Rollback(
        tt.FunctionCheckpoints(save, load),
        every=10,
        batches=tt.SkipBatches(list(range(100))),
        make_hook=make_hook,
    )
    for step, _, _ in rollback.steps(60):
        loss = model(torch.randn(8, 4)).pow(2).mean()
        if step == 55 and rollback.rollbacks < 3:
            loss = loss * float("nan")  # the same step goes bad in three sessions
        assert rollback.hook is not None
        rollback.hook.save_scalar("loss", loss.item())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step == 55 and rollback.rollbacks < 3:
            rollback.request(55, [], "NaN loss")
    rollback.close()
    assert [e.restored_step for e in rollback.events] == [50, 50, 50]
    trial = tt.create_trial(tmp_path / "run")
    sessions = trial.sessions()
    assert len(sessions) == 4
    assert [s.branch_step for s in sessions[1:]] == [50, 50, 50]
    # the first session trained step 50 at global step 50; each later one began at step 50
    assert [s.branch_global_step for s in sessions[1:]] == [
        50,
        sessions[1].first_step,
        sessions[2].first_step,
    ]
    assert [s.branch_of for s in sessions[1:]] == [s.id for s in sessions[:3]]
    last = trial.steps()[-1]
    assert all((s.branch_global_step or 0) <= last for s in sessions[1:])


def test_a_hook_that_counts_global_steps_only_forks_at_its_parents_step(tmp_path: Path) -> None:
    """A plain hook the loop steps itself (no module, no mode: GLOBAL steps), rolled back
    three times to the checkpoint of step 50: each branch forks where its parent trained step
    50 (the parent's first global step), and the reader leaves those values as written."""
    rollback = tt.Rollback(
        tt.FunctionCheckpoints(lambda step: None, lambda step: None),
        every=10,
        batches=tt.SkipBatches(list(range(100))),
        make_hook=lambda: tt.Hook(tmp_path / "run", save_config=tt.SaveConfig(save_interval=1)),
    )
    for step, _, _ in rollback.steps(60):
        assert rollback.hook is not None
        bad = step == 55 and rollback.rollbacks < 3
        rollback.hook.save_scalar("loss", float("nan") if bad else 1.0)
        rollback.hook.next_step()
        if bad:
            rollback.request(55, [], "NaN loss")
    rollback.close()
    sessions = tt.create_trial(tmp_path / "run").sessions()
    assert [s.branch_global_step for s in sessions[1:]] == [
        50,
        sessions[1].first_step,
        sessions[2].first_step,
    ]


def test_old_session_records_without_branch_fields_read_as_before(tmp_path: Path) -> None:
    hook = tt.Hook(tmp_path / "run", save_config=tt.SaveConfig(save_interval=1))
    hook.save_scalar("x", 1.0)
    hook.next_step()
    hook.close()
    (session,) = tt.create_trial(tmp_path / "run").sessions()
    assert not session.branched
    assert (session.branch_step, session.branch_global_step, session.branch_reason) == (
        None,
        None,
        None,
    )
    assert session.to_dict()["branch_of"] is None


def test_the_budget_stops_an_endless_loop_with_a_clear_event(tmp_path: Path) -> None:
    batches = tt.SkipBatches(list(range(40)))
    rollback = tt.Rollback(
        tt.FunctionCheckpoints(lambda s: None, lambda s: None),
        every=5,
        batches=batches,
        max_rollbacks=5,
    )
    seen = []
    for step, _, _ in rollback.steps(30):
        seen.append(step)
        if step == 12:  # a fault that is not in the data: it comes back whatever is skipped
            rollback.request(12, [], "spike at step 12")
    kinds = [e.kind for e in rollback.events]
    # each replay trains the next batch at step 12 (the one before was skipped): a new batch
    # each time, so only the budget of rollbacks ends it
    assert kinds == ["rollback"] * 5 + ["refused"]
    assert "budget of 5 rollback(s)" in rollback.events[-1].message
    assert rollback.should_stop and seen[-1] == 12  # training ended there
    assert batches.skip == {12, 13, 14, 15, 16}


def test_the_same_checkpoint_without_a_new_batch_is_refused(tmp_path: Path) -> None:
    rollback = tt.Rollback(
        tt.FunctionCheckpoints(lambda s: None, lambda s: None),
        every=5,
        batches=tt.SkipBatches(list(range(40))),
    )
    for step, _, _ in rollback.steps(30):
        if step == 12:
            rollback.request(12, ["the same"], "a fault the data does not explain")
    assert [e.kind for e in rollback.events] == ["rollback", "refused"]
    assert "again with no new batch to skip" in rollback.events[-1].message


def test_no_checkpoint_old_enough_is_refused() -> None:
    rollback = tt.Rollback(
        tt.FunctionCheckpoints(lambda s: None, lambda s: None),
        every=5,
        batches=tt.SkipBatches(list(range(10))),
        margin=1,
    )
    for step, _, _ in rollback.steps(10):
        if step == 0:
            rollback.request(0, [0], "bad from the start")
    (event,) = rollback.events
    assert event.kind == "refused" and "no checkpoint at or before step -1" in event.message


def test_skip_batches_resume_where_the_checkpoint_took_the_stream() -> None:
    batches = tt.SkipBatches([10, 11, 12, 13, 14], skip={2})
    stream = iter(batches)
    assert [next(stream), next(stream)] == [10, 11]
    state = batches.state_dict()
    assert state == {"position": 2, "offset": 2}
    assert list(stream) == [13, 14] and batches.last_id == 4
    assert list(batches) == [10, 11, 12, 13, 14]  # the next pass: ids 5-9, none skipped
    assert batches.last_id == 9  # type: ignore[comparison-overlap]  # (mypy kept the 4 above)
    batches.load_state_dict(state)
    batches.skip.add(3)
    assert list(batches) == [14] and batches.last_id == 4  # resumed mid-pass, 3 now skipped
    with pytest.raises(InvalidConfigError, match="what state_dict returned"):
        batches.load_state_dict({"position": "x"})
    with pytest.raises(InvalidConfigError, match="read again each pass"):
        tt.SkipBatches(iter([1, 2]))


def test_bad_arguments_say_what_was_expected() -> None:
    checkpoints = tt.FunctionCheckpoints(lambda s: None, lambda s: None)
    with pytest.raises(InvalidConfigError, match="every must be an int >= 1"):
        tt.Rollback(checkpoints, every=0)
    with pytest.raises(InvalidConfigError, match="save, load, steps and forget"):
        tt.Rollback(object(), every=5)  # type: ignore[arg-type]
    with pytest.raises(InvalidConfigError, match="batches must be a SkipBatches"):
        tt.Rollback(checkpoints, every=5, batches=[1, 2])  # type: ignore[arg-type]
    with pytest.raises(InvalidConfigError, match="make_hook must be a function"):
        tt.Rollback(checkpoints, every=5, make_hook=3)  # type: ignore[arg-type]
    rollback = tt.Rollback(checkpoints, every=5)
    with pytest.raises(InvalidConfigError, match="step must be an int >= 0"):
        rollback.request(-1, [], "x")
    with pytest.raises(InvalidConfigError, match="list of batch ids"):
        rollback.request(1, "12", "x")  # type: ignore[arg-type]
    rollback = tt.Rollback(checkpoints, every=5, batches=tt.SkipBatches([1, 2]))
    with pytest.raises(InvalidConfigError, match="total_steps must be an int >= 0.*got str '10'"):
        rollback.steps("10")  # type: ignore[arg-type]  # refused when called, not when iterated
    with pytest.raises(InvalidConfigError, match="start must be an int >= 0"):
        rollback.steps(10, start=-1)


def test_a_rules_rollback_action_reaches_the_training_process(tmp_path: Path) -> None:
    action = action_from_dict(RollbackTraining().to_dict())
    context = ActionContext(str(tmp_path), str(tmp_path / "stop"))
    finding = {
        "rule": "LossNotDecreasing",
        "step": 14,
        "mode": "TRAIN",
        "mode_step": 12,
        "message": "the loss jumped",
    }
    assert "roll back" in action.run(finding, context)
    request = json.loads((tmp_path / REQUEST_FILE).read_text())
    assert (request["step"], request["mode_step"]) == (14, 12)  # global and TRAIN step
    assert "LossNotDecreasing" in request["reason"]
    (tmp_path / REQUEST_FILE).unlink()  # written again below, while training runs

    rollback = tt.Rollback(
        tt.FunctionCheckpoints(lambda s: None, lambda s: None),
        every=5,
        batches=tt.SkipBatches(list(range(40))),
        requests=RollbackRequests(tmp_path / REQUEST_FILE, interval=0),
    )
    seen = []
    for step, _, _ in rollback.steps(20):
        seen.append(step)
        if len(seen) == 14:  # the rule's process writes while training runs on (once)
            request_rollback(tmp_path / REQUEST_FILE, request)
    (event,) = rollback.events
    assert (event.step, event.restored_step, event.batches) == (12, 10, (12,))
    assert "LossNotDecreasing" in event.reason
    assert rollback.batches is not None
    assert seen[:16] == [*range(14), 10, 11] and rollback.batches.skip == {12}
    assert not (tmp_path / REQUEST_FILE).exists()  # claimed: acted on once


@pytest.mark.parametrize("damaged", [False, True], ids=["intact", "damaged"])
def test_two_gloo_ranks_restore_the_same_checkpoint_and_skip_the_same_batches(
    tmp_path: Path, helper_env, damaged: bool
) -> None:
    """Damaged: a truncated shard of the newest checkpoint is refused by both ranks alike, and
    both restore the older intact one (issue 45)."""
    out = tmp_path / "run"
    cmd = helper_cmd("ddp_rollback.py", out, tmp_path / "ckpt", *(["--damage"] if damaged else []))
    done = run_ranks(cmd, 2, dict(helper_env, PYTHONPATH=SRC), timeout=200)
    for p in done:
        assert p.returncode == 0, p.stderr
    results = [json.loads(p.stdout.strip().splitlines()[-1]) for p in done]
    restored = 0 if damaged else 4
    for result in results:  # only rank 1 read the bad batch; both rolled back alike
        expected = [["rollback", 6, restored, [6]]]
        assert result["events"] == ([["damaged", 6, 4, []]] if damaged else []) + expected
        assert result["skip"] == [6]
        assert result["final_loss"] < result["first_loss"] / 10  # it converges
    assert results[0]["weights"] == results[1]["weights"]  # DDP kept them equal
    trial = tt.create_trial(out)
    for worker in ("worker_0", "worker_1"):
        first, second = trial.sessions(worker=worker)
        assert second.branch_of == first.id and second.branch_step == restored


def test_lightning_fit_is_rolled_back_to_its_own_checkpoint_and_branches(tmp_path: Path) -> None:
    L: Any = pytest.importorskip("lightning.pytorch")
    from lightning.pytorch.callbacks import ModelCheckpoint

    from tensortap.lightning import (
        LightningCheckpoints,
        RollbackCallback,
        TensortapCallback,
        fit_with_rollback,
    )

    class Regression(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net, _ = model_and_optimizer()
            self.losses: list[tuple[int, float]] = []
            self.firsts: list[float] = []  # each batch's first value: which batch it was

        def training_step(self, batch, index):
            x, y = batch
            self.firsts.append(round(x[0, 0].item(), 6))
            loss = nn.functional.mse_loss(self.net(x), y)
            self.losses.append((self.global_step, loss.item()))
            if loss.item() > 1000:  # the loop's own check: roll back, skip this step's batch
                rollback.request(self.global_step, [], f"loss {loss.item():.3g}")
            return loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)

    checkpoints = tmp_path / "ckpts"
    batches = tt.SkipBatches(DataLoader(dataset(bad=(12,)), batch_size=BATCH, shuffle=False))
    rollback = tt.Rollback(LightningCheckpoints(checkpoints), batches=batches)

    def make_trainer():
        return L.Trainer(
            max_steps=30,
            default_root_dir=str(tmp_path),
            accelerator="cpu",
            logger=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            callbacks=[
                TensortapCallback(out_dir=str(tmp_path / "run")),
                RollbackCallback(rollback),
                ModelCheckpoint(str(checkpoints), every_n_train_steps=5, save_top_k=-1),
            ],
        )

    module = Regression()
    trainer = fit_with_rollback(rollback, make_trainer, module, train_dataloaders=batches)
    assert trainer.global_step == 30
    (event,) = rollback.events
    assert (event.kind, event.step, event.restored_step, event.batches) == (
        "rollback",
        12,
        10,
        (12,),
    )
    # the second fit started at the checkpoint of step 10 and never met batch 12 again
    steps = [step for step, _ in module.losses]
    assert steps == [*range(13), *range(10, 30)]
    data = dataset(bad=(12,))
    position = {round(data[k * BATCH][0][0].item(), 6): k for k in range(64)}
    trained = [position[first] for first in module.firsts]
    assert trained == [*range(13), 10, 11, *range(13, 31)]  # the batches resumed where step 10 was
    assert max(loss for _, loss in module.losses[13:]) < 1000
    trial = tt.create_trial(tmp_path / "run")
    first, second = trial.sessions()
    assert (second.branch_of, second.branch_step) == (first.id, 10)
    assert second.branch_global_step == 10


def test_a_rules_rollback_action_rolls_a_jobs_training_back(tmp_path: Path) -> None:
    from tensortap.jobs import DebuggerHookConfig, Rule, TrainingJob

    job = TrainingJob(
        command=[sys.executable, str(HELPERS / "rollback_job_train.py")],
        output_path=tmp_path / "runs",
        debugger_hook_config=DebuggerHookConfig(hook_parameters={"save_interval": "1"}),
        rules=[
            Rule.custom(
                "LossAbove", str(HELPERS / "rollback_rules.py"), actions=[RollbackTraining()]
            )
        ],
        environment={"PYTHONPATH": SRC},
    )
    job.fit(wait=False)
    summary = job.wait(timeout=240, logs=False)
    assert summary["status"] == "Completed", summary
    result = json.loads(Path(job.record.dir, "logs", "training.log").read_text().splitlines()[-1])
    # the rule fired at step 8 (batch 8's loss); training went back to the checkpoint of step 5
    # (8 minus the margin of 1: 7, the newest checkpoint at or before it) and left batch 8 out
    assert result["events"] == [["rollback", 8, 5, [8]]]
    assert result["trained"] == [*range(13), 5, 6, 7, *range(9, 25)]  # steps 0-12, 5-23
    (action,) = [e for e in job.record.iter_events() if e["event"] == "action"]
    assert action["action"] == "rollback" and "roll back to before step 8" in action["result"]
    (done,) = [e for e in job.record.iter_events() if e["event"] == "rollback"]  # for the view
    assert (
        done["restored_step"] == 5 and "rolled back to the checkpoint of step 5" in done["message"]
    )
    first, second = tt.create_trial(job.debugger_artifacts_path()).sessions()
    assert (second.branch_of, second.branch_step) == (first.id, 5)
    assert "LossAbove" in (second.branch_reason or "")


def test_the_report_lists_the_branch(tmp_path: Path) -> None:
    from tensortap.report._training import training_report
    from tests.helpers.branched_trial import HOSTILE, write_branched_trial

    write_branched_trial(tmp_path / "forked")
    trial = tt.create_trial(tmp_path / "forked")
    first = trial.sessions()[0]
    page = training_report(trial, rules=[])
    row = re.search(r"<tr><td class='text'>session 1</td>.*?</tr>", page)
    assert row and f"a branch of session {first.id} from TRAIN step 10: rollback" in row.group(0)
    assert HOSTILE not in page and html.escape(HOSTILE) in row.group(0)  # escaped


def test_hugging_face_train_is_rolled_back_to_its_own_checkpoint_and_branches(
    tmp_path: Path,
) -> None:
    transformers: Any = pytest.importorskip("transformers")
    from torch.utils.data import BatchSampler, SequentialSampler

    from tensortap.huggingface import (
        BatchStream,
        HuggingFaceCheckpoints,
        RollbackCallback,
        TensortapCallback,
        train_with_rollback,
    )

    class Regression(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net, _ = model_and_optimizer()
            self.firsts: list[float] = []  # each batch's first value: which batch it was
            self.last_loss = 0.0

        def forward(self, x, labels):
            self.firsts.append(round(x[0, 0].item(), 6))
            loss = nn.functional.mse_loss(self.net(x), labels)
            self.last_loss = loss.item()
            return {"loss": loss}

    class SpikeAtStepEnd(transformers.TrainerCallback):
        def on_step_end(self, args, state, control, model=None, **kwargs):
            if model.last_loss > 1000:  # the step just trained: global_step - 1
                rollback.request(state.global_step - 1, [], f"loss {model.last_loss:.3g}")

    data = dataset(bad=(12,))
    samples = [{"x": x, "labels": y} for x, y in data]  # type: ignore[attr-defined]
    batches = tt.SkipBatches(BatchSampler(SequentialSampler(samples), BATCH, drop_last=True))
    rollback = tt.Rollback(HuggingFaceCheckpoints(tmp_path / "out"), batches=batches)
    model = Regression()

    def make_trainer():
        args = transformers.TrainingArguments(
            str(tmp_path / "out"),
            max_steps=30,
            per_device_train_batch_size=BATCH,
            learning_rate=0.05,
            lr_scheduler_type="constant",
            optim="sgd",
            save_strategy="steps",
            save_steps=5,
            logging_steps=1,
            report_to=[],
            use_cpu=True,
            disable_tqdm=True,
            max_grad_norm=0.0,
            seed=0,
        )
        return transformers.Trainer(
            model,
            args,
            train_dataset=BatchStream(samples, batches),
            callbacks=[
                TensortapCallback(out_dir=str(tmp_path / "run")),
                SpikeAtStepEnd(),
                RollbackCallback(rollback),
            ],
        )

    trainer = train_with_rollback(rollback, make_trainer)
    assert trainer.state.global_step == 30
    (event,) = rollback.events
    assert (event.kind, event.step, event.restored_step, event.batches) == (
        "rollback",
        12,
        10,
        (12,),
    )
    position = {round(data[k * BATCH][0][0].item(), 6): k for k in range(64)}
    trained = [position[first] for first in model.firsts]
    assert trained == [*range(13), 10, 11, *range(13, 31)]  # resumed at 10, batch 12 left out
    trial = tt.create_trial(tmp_path / "run")
    first, second = trial.sessions()
    assert (second.branch_of, second.branch_step) == (first.id, 10)
    assert second.branch_global_step == 10 and second.rolled_back == (("TRAIN", 10, 12),)
    assert trial.steps(mode=tt.modes.TRAIN) == list(range(30))


def test_tensortap_run_rollback_on_gives_the_rule_the_rollback_action(
    tmp_path: Path, capsys
) -> None:
    from tensortap.cli import main
    from tensortap.jobs import TrainingJob

    rule = f"{HELPERS / 'rollback_rules.py'}:LossAbove"
    training = ["--", sys.executable, "-c", "pass"]
    argv = ["run", "--output", str(tmp_path), "--custom-rule", rule, "--rollback-on"]
    assert main([*argv, "Nope", *training]) == 2
    assert "--rollback-on Nope: no such rule in this job" in capsys.readouterr().err
    assert main([*argv, "LossAbove", "--no-wait", *training]) == 0
    (job_dir,) = (tmp_path).iterdir()
    job = TrainingJob.attach(job_dir)
    job.wait(timeout=120, logs=False)
    (spec,) = json.loads((job_dir / "job.json").read_text())["rules"]
    assert [a["kind"] for a in spec["actions"]] == ["rollback"]
