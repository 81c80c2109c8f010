"""A Hugging Face Trainer's rollback decides from a replay's evidence (issue 46), as a plain
PyTorch loop does: real ``Trainer.train()`` runs of a tiny model on the CPU, a guard with a skip
budget on the optimizer the Trainer builds, the trips replayed from the model's own loss."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

transformers: Any = pytest.importorskip("transformers")
import torch  # noqa: E402
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402
from torch.utils.data import BatchSampler, SequentialSampler  # noqa: E402

import tensortap.pytorch as tt  # noqa: E402
from tensortap.core._rollback_decision import (  # noqa: E402
    DATA,
    GO_ON,
    LOWER_LR,
    NUMERICS,
    REMEDY,
    RESTORE,
    STOP,
    TIGHTER_CLIP,
    TRANSIENT,
)
from tensortap.huggingface import (  # noqa: E402
    BatchStream,
    HuggingFaceCheckpoints,
    RollbackCallback,
    TensortapCallback,
    train_with_rollback,
)
from tensortap.testing import inject_bitflip  # noqa: E402
from tests.helpers.tiny_gpt import LayerFault  # noqa: E402

BATCH, STEPS = 8, 30


@pytest.fixture(autouse=True)
def _one_thread() -> Any:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


class Regression(nn.Module):
    """A tiny model with its own loss from the batch's labels, as a transformers model has."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))
        self.trained: list[int] = []  # each training forward's batch (its first sample's id)

    def forward(self, x: torch.Tensor, labels: torch.Tensor, ids: torch.Tensor) -> Any:
        if self.training and torch.is_grad_enabled():
            self.trained.append(int(ids[0]) // BATCH)
        return {"loss": F.mse_loss(self.net(x), labels)}


class FaultStep(transformers.TrainerCallback):
    """The loop's step, for a fault that strikes at given steps whatever the batch."""

    def __init__(self, fault: LayerFault) -> None:
        self.fault = fault

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.fault.step = state.global_step


class RequestAt(transformers.TrainerCallback):
    """The loop's own check: a rollback requested once, during the batch of its first forward
    pass ``at`` (counted over the ``train()``s), naming ``batches``."""

    def __init__(self, model: Regression, at: int, batches: list[object]) -> None:
        self.model, self.at, self.batches = model, at, batches
        self.rollback: tt.Rollback | None = None

    def on_substep_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._ask(state)

    def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._ask(state)

    def _ask(self, state: Any) -> None:
        if self.rollback is not None and len(self.model.trained) == self.at + 1:
            rollback, self.rollback = self.rollback, None
            rollback.request(state.global_step, self.batches, "the loop's loss check")


def _train(
    tmp_path: Path,
    *,
    nan_batches: tuple[int, ...] = (),
    n_batches: int = 64,
    request: tuple[int, list[object]] | None = None,
    budget: bool = True,
    tap: bool = False,
    steps: int = STEPS,
    save_steps: int = 5,
    flip_at: int | None = None,
    fault_steps: frozenset[int] = frozenset(),
    skips: int = 1,
    accumulate: int = 1,
) -> dict[str, Any]:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n_batches * BATCH, 8, generator=g)
    y = torch.sin(x[:, :1]) + 0.5 * x[:, 1:2]
    for batch in nan_batches:
        x[batch * BATCH : (batch + 1) * BATCH] = float("nan")
    samples = [{"x": x[i], "labels": y[i], "ids": torch.tensor(i)} for i in range(len(x))]
    batches = tt.SkipBatches(BatchSampler(SequentialSampler(samples), BATCH, drop_last=True))
    rollback = tt.Rollback(HuggingFaceCheckpoints(tmp_path / "out"), batches=batches)
    model = Regression()
    if flip_at is not None:
        inject_bitflip(model.net[2], step=flip_at)  # its flip_at-th training call, once
    fault = LayerFault(model.net[2], set(fault_steps))
    callback = (
        RollbackCallback(
            rollback,
            budget=tt.SkipBudget(skips, 10, then="rollback"),
            remedies={"lr_factor": 0.1, "clip_norm": 0.5, "steps": 20},
        )
        if budget
        else RollbackCallback(rollback)
    )
    callbacks: list[Any] = [FaultStep(fault), callback]
    if request is not None:
        asker = RequestAt(model, *request)
        asker.rollback = rollback
        callbacks.append(asker)
    if tap:
        callbacks.insert(0, TensortapCallback(out_dir=str(tmp_path / "run")))

    def make_trainer() -> Any:
        args = transformers.TrainingArguments(
            str(tmp_path / "out"),
            max_steps=steps,
            per_device_train_batch_size=BATCH,
            learning_rate=0.01,
            lr_scheduler_type="constant",
            optim="adamw_torch",
            save_strategy="steps",
            save_steps=save_steps,
            report_to=[],
            use_cpu=True,
            disable_tqdm=True,
            max_grad_norm=0.0,
            seed=0,
            gradient_accumulation_steps=accumulate,
            logging_steps=1,
        )
        return transformers.Trainer(
            model,
            args,
            train_dataset=BatchStream(samples, batches),
            callbacks=callbacks,
        )

    trainers: list[Any] = []

    def each_trainer() -> Any:
        trainers.append(make_trainer())
        return trainers[-1]

    trainer = train_with_rollback(rollback, each_trainer)
    return {
        "rollback": rollback,
        "trainer": trainer,
        "trainers": trainers,
        "model": model,
        "callback": callback,
    }


def test_a_one_off_fault_is_transient_nothing_restored_nothing_dropped(tmp_path: Path) -> None:
    run = _train(tmp_path, flip_at=12)
    rollback, model = run["rollback"], run["model"]
    (event,) = rollback.events
    assert (event.kind, event.step, event.restored_step) == ("went_on", 12, None)
    assert event.decision.action == GO_ON and event.decision.evidence == TRANSIENT
    assert rollback.batches.skip == set() and rollback.rollbacks == 0
    assert run["trainer"].state.global_step == STEPS  # one train(), to its end
    assert model.trained == [*range(13), 12, *range(13, STEPS)]  # each once, and the replay
    assert rollback.transients == {0: 1}


def test_a_layer_fault_at_two_steps_is_numerics_drops_no_batch_and_stops_naming_the_layer(
    tmp_path: Path,
) -> None:
    run = _train(tmp_path, fault_steps=frozenset({17, 18}), skips=2)
    rollback, model = run["rollback"], run["model"]
    assert rollback.batches.skip == set()  # no healthy batch left out
    kinds = [(e.kind, e.restored_step) for e in rollback.events]
    assert kinds == [("rollback", 15), ("rollback", 15), ("stopped", None)]
    actions = [(e.decision.action, e.decision.remedy) for e in rollback.events]
    assert actions == [(REMEDY, LOWER_LR), (REMEDY, TIGHTER_CLIP), (STOP, None)]
    stopped = rollback.events[-1].decision
    assert stopped.evidence == NUMERICS and stopped.layer == "net.2"
    assert rollback.should_stop and "net.2" in rollback.events[-1].message
    # each branch from 15 trains batches 15 to 18 again (none left out); the replays follow
    # steps 17 and 18 in the first branch, 17 in the second (the replayer's 3 are spent then)
    assert model.trained == [*range(18), 17, 18, 18, 15, 16, 17, 17, 18, 15, 16, 17, 18]
    assert all(torch.isfinite(p).all() for p in model.parameters())
    remedies = run["callback"].healing.remedies
    assert remedies is not None and remedies.optimizer is run["trainer"].optimizer.optimizer


def test_a_nan_batch_is_still_restored_past_and_left_out(tmp_path: Path) -> None:
    run = _train(tmp_path, nan_batches=(12,))
    rollback, model = run["rollback"], run["model"]
    (event,) = rollback.events
    assert (event.kind, event.step, event.restored_step, event.batches) == (
        "rollback",
        12,
        10,
        (12,),
    )
    assert event.decision.action == RESTORE and event.decision.evidence == DATA
    assert rollback.batches.skip == {12}
    assert run["trainer"].state.global_step == STEPS
    # batch 12, its replay, then from the checkpoint of step 10 without it: one batch later
    assert model.trained == [*range(13), 12, 10, 11, *range(13, STEPS + 1)]


def test_a_nan_micro_batch_restores_to_a_step_boundary_and_skips_the_steps_batches(
    tmp_path: Path,
) -> None:
    # two micro-batches a step: step s trains batches 2s and 2s+1; batch 25 is step 12's second
    run = _train(tmp_path, nan_batches=(25,), accumulate=2)
    rollback, model = run["rollback"], run["model"]
    (event,) = rollback.events
    assert (event.kind, event.step, event.restored_step) == ("rollback", 12, 10)
    assert event.batches == (24, 25)  # the step was judged whole: each of its micro-batches
    assert event.decision.action == RESTORE and event.decision.evidence == DATA
    assert rollback.batches.skip == {24, 25}
    assert run["trainer"].state.global_step == STEPS
    # steps 0-12, the replay of step 12's whole window, then from checkpoint-10 (20 batches
    # passed over): steps 10 and 11 again, and step 12 on without 24 and 25
    assert model.trained == [*range(26), 24, 25, *range(20, 24), *range(26, 2 * STEPS + 2)]
    assert all(torch.isfinite(p).all() for p in model.parameters())


def test_a_budget_that_does_not_roll_back_or_remedies_given_twice_are_refused(
    tmp_path: Path,
) -> None:
    from tensortap.exceptions import InvalidConfigError

    batches = tt.SkipBatches(list(range(4)))
    rollback = tt.Rollback(HuggingFaceCheckpoints(tmp_path), batches=batches)
    with pytest.raises(InvalidConfigError, match="a SkipBudget that rolls back"):
        RollbackCallback(rollback, budget=tt.SkipBudget(2, 10))
    with pytest.raises(InvalidConfigError, match="keyword arguments of tt.Remedies"):
        RollbackCallback(rollback, budget=tt.SkipBudget(2, 10, then="rollback"), remedies=0.1)  # type: ignore[arg-type]
    optimizer = torch.optim.SGD(nn.Linear(2, 1).parameters(), lr=0.1)
    rollback.remedies = tt.Remedies(optimizer)
    with pytest.raises(InvalidConfigError, match="already has remedies="):
        RollbackCallback(rollback, budget=tt.SkipBudget(2, 10, then="rollback"), remedies={})


def test_remedies_move_to_a_new_optimizer_with_the_steps_they_have_left() -> None:
    old = torch.optim.SGD(nn.Linear(2, 1).parameters(), lr=0.1)
    remedies = tt.Remedies(old, lr_factor=0.5, steps=3)
    remedies.apply(LOWER_LR)
    old.step()  # one of its 3 steps, on the old optimizer
    assert remedies.left == 2
    model = nn.Linear(2, 1)
    new = torch.optim.SGD(model.parameters(), lr=0.1)
    remedies.use(new)
    seen: list[float] = []  # the rate during the step (this hook runs after the remedy's)
    new.register_step_pre_hook(lambda opt, *_: seen.append(opt.param_groups[0]["lr"]))
    old.step()  # no longer remedied
    assert remedies.left == 2 and old.param_groups[0]["lr"] == 0.1
    model(torch.ones(1, 2)).sum().backward()
    new.step()  # the rate was halved for the step, and put back after it
    assert seen == [0.05] and new.param_groups[0]["lr"] == 0.1 and remedies.left == 1


def _logged_steps(trainer: Any) -> list[int]:
    """The steps of a ``train()``'s logged losses (``state.log_history``)."""
    return [entry["step"] for entry in trainer.state.log_history if "loss" in entry]


def test_the_steps_after_a_restart_continue_from_the_checkpoints_step(tmp_path: Path) -> None:
    run = _train(tmp_path, nan_batches=(12,), tap=True)
    rollback, (first, second) = run["rollback"], run["trainers"]
    (event,) = rollback.events
    assert (event.kind, event.step, event.restored_step) == ("rollback", 12, 10)
    # global_step: the first train() stopped after step 12 (13 steps done), the branch
    # resumed at checkpoint-10 and ran to max_steps
    assert (first.state.global_step, second.state.global_step) == (13, STEPS)
    # the logged steps (1-based: after n optimizer steps), each once, in order: the branch's
    # history is checkpoint-10's (steps 1-10), then its own from step 11, the abandoned
    # steps 11-13 not among them
    assert _logged_steps(first) == list(range(1, 14))
    assert _logged_steps(second) == list(range(1, STEPS + 1))
    # the trial: the branch counts TRAIN steps again from the checkpoint's (10-29, steps 10-12
    # counted again), on global steps after the parent's last (13-32): one each, no gap
    trial = tt.create_trial(tmp_path / "run")
    parent, branch = trial.sessions()
    assert (branch.branch_of, branch.branch_step) == (parent.id, 10)
    assert (parent.first_step, parent.last_step) == (0, 12)
    assert (branch.first_step, branch.last_step) == (13, STEPS + 2)
    assert branch.mode_steps == {"TRAIN": 10} and branch.rolled_back == (("TRAIN", 10, 12),)
    assert trial.steps() == list(range(STEPS + 3))
    loss = trial.tensor("loss")
    assert loss.steps(mode=tt.modes.TRAIN) == list(range(STEPS))


def test_a_nan_batch_in_a_passes_short_last_window_is_judged_with_the_step_it_joins(
    tmp_path: Path,
) -> None:
    # 11 batches a pass, two micro-batches a step: steps 0-4 train 0-9, and the pass's short
    # last window (batch 10) joins the next pass's first two: step 5 trains 10, 0, 1
    run = _train(tmp_path, nan_batches=(10,), n_batches=11, accumulate=2, steps=10, save_steps=2)
    rollback, model = run["rollback"], run["model"]
    (event,) = rollback.events
    # judged and replayed whole (not the next pass's part alone, which looked healthy)
    assert (event.kind, event.step, event.restored_step) == ("rollback", 5, 4)
    assert event.batches == (10, 0, 1)
    assert event.decision.action == RESTORE and event.decision.evidence == DATA
    first, second = run["trainers"]
    assert (first.state.global_step, second.state.global_step) == (6, 10)
    # the replay of step 5 runs its three micro-batches again; the branch resumes at
    # checkpoint-4 without 0, 1 and 10: the Trainer passes over 8 kept batches, the whole
    # pass, and starts the next at batch 2 (the callback names what it trains)
    assert model.trained == [*range(11), 0, 1, 10, 0, 1, *range(2, 10), *range(2, 6)]
    assert all(torch.isfinite(p).all() for p in model.parameters())


def test_a_request_in_a_passes_short_last_window_restores_at_the_end_of_its_step(
    tmp_path: Path,
) -> None:
    # the loop's check asks during batch 10, the pass's short last window (step 5's first
    # micro-batch): the step goes on with the next pass's 0 and 1, then the restore
    run = _train(
        tmp_path,
        n_batches=11,
        accumulate=2,
        steps=10,
        save_steps=2,
        budget=False,
        request=(10, [10]),
        tap=True,
    )
    rollback, model = run["rollback"], run["model"]
    (event,) = rollback.events
    assert (event.kind, event.step, event.restored_step, event.batches) == ("rollback", 5, 4, (10,))
    first, second = run["trainers"]
    assert (first.state.global_step, second.state.global_step) == (6, 10)
    assert _logged_steps(first) == list(range(1, 7))
    assert _logged_steps(second) == list(range(1, 11))
    # from checkpoint-4 without batch 10: step 4 trains 8 and 9, the pass ends at a step's
    # end, steps 5-9 train the next pass's 0-9
    assert model.trained == [*range(11), 0, 1, 8, 9, *range(10)]
    parent, branch = tt.create_trial(tmp_path / "run").sessions()
    assert (branch.branch_of, branch.branch_step) == (parent.id, 4)
    assert branch.mode_steps == {"TRAIN": 4} and branch.rolled_back == (("TRAIN", 4, 5),)
