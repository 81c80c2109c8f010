"""Faults of the training loop itself: the PyTorch hook records what the loop does
(``training_loop``) and the TrainingLoop rule names the fault. Real training on the CPU: each
fault fires with its cause, and healthy loops in many styles stay quiet."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import tensortap.pytorch as tt
from tensortap.pytorch import _loop_facts as loop_facts
from tensortap.rules import TrainingLoop, invoke_rule
from tensortap.rules._finding import Finding, Severity
from tensortap.rules._invoker import RuleStatus, RuleSummary

Loop = Callable[[tt.Hook], None]
STEPS = 40


def data(n: int = 64, features: int = 8, classes: int = 3) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    return torch.randn(n, features, generator=gen), torch.randint(0, classes, (n,), generator=gen)


X, Y = data()


def batches(steps: int = STEPS, size: int = 16) -> list[tuple[torch.Tensor, torch.Tensor]]:
    per_epoch = len(X) // size
    return [
        (X[(i % per_epoch) * size : (i % per_epoch + 1) * size], Y[(i % per_epoch) * size :][:size])
        for i in range(steps)
    ]


def mlp(*extra: nn.Module) -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), *extra, nn.ReLU(), nn.Linear(16, 3))


def run(
    tmp_path: Path, loop: Loop, save_interval: int = 5, start: int = 0, **params: Any
) -> RuleSummary:
    out = str(tmp_path / "trial")
    hook = tt.Hook(
        out,
        save_config=tt.SaveConfig(save_interval=save_interval, start_step=start),
        include_collections=["losses", "training_loop"],
    )
    loop(hook)
    status = hook.close()
    assert status.internal_errors == 0, status.last_internal_error
    return invoke_rule(TrainingLoop(tt.create_trial(out), **params))


def causes(summary: RuleSummary) -> list[str]:
    return [f.details["cause"] for f in summary.findings if f.triggered]


def only_finding(summary: RuleSummary, cause: str) -> Finding:
    """The one triggered finding of ``summary``, which must name ``cause``."""
    assert causes(summary) == [cause], [f.message for f in summary.findings]
    [finding] = [f for f in summary.findings if f.triggered]
    return finding


def facts(tmp_path: Path) -> dict[str, Any]:
    """The last saved value of every fact of the trial at tmp_path/trial."""
    trial = tt.create_trial(str(tmp_path / "trial"))
    out = {}
    for name in trial.tensor_names(collection="training_loop"):
        tensor = trial.tensor(name)
        out[name.split("/", 1)[1]] = tensor.value(tensor.steps()[-1])
    return out


# -- healthy loops --
def zero_grad_first(hook: tt.Hook) -> None:
    model = mlp()
    hook.register_module(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in batches():
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()


def zero_grad_after_forward_to_zeros(hook: tt.Hook) -> None:
    model = mlp()
    hook.register_module(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    hook.register_loss(loss_fn)
    for x, y in batches():
        loss = loss_fn(model(x), y)
        opt.zero_grad(set_to_none=False)
        loss.backward()
        opt.step()


def accumulation(hook: tt.Hook) -> None:
    """Four micro-batches per step, the loss divided; zero_grad after the step."""
    model = mlp()
    hook.register_module(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for i, (x, y) in enumerate(batches(STEPS * 4, 4)):
        (F.cross_entropy(model(x), y) / 4).backward()
        if i % 4 == 3:
            opt.step()
            opt.zero_grad(set_to_none=i % 8 == 3)  # both ways


def huggingface_like(hook: tt.Hook) -> None:
    """Warm-up then linear decay per step (get_linear_schedule_with_warmup), the gradients
    clipped, zero_grad after the step."""
    model = mlp()
    hook.register_module(model)
    opt = torch.optim.AdamW(model.parameters(), lr=5e-4)
    warmup, total = 5, STEPS

    def factor(step: int) -> float:
        if step < warmup:
            return step / warmup
        return max(0.0, (total - step) / (total - warmup))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, factor)
    for x, y in batches():
        F.cross_entropy(model(x), y).backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad()


def frozen_backbone(hook: tt.Hook) -> None:
    model = mlp()
    for p in model[0].parameters():
        p.requires_grad_(False)
    hook.register_module(model)
    opt = torch.optim.SGD(model[2].parameters(), lr=0.1)
    for x, y in batches():
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()


class Generator(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 8))

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.net(z)


def gan(register_discriminator: bool, critic_steps: int = 1) -> Loop:
    """DCGAN-style (fake.detach() for D, G.zero_grad() just before G's backward, so D's
    gradients from G's backward stay until D.zero_grad()), or WGAN-style: several critic steps
    per generator step, the fakes made under torch.no_grad() with G in train mode."""

    def loop(hook: tt.Hook) -> None:
        torch.manual_seed(0)
        gen, disc = (
            Generator(),
            nn.Sequential(nn.Linear(8, 16), nn.LeakyReLU(0.2), nn.Linear(16, 1)),
        )
        hook.register_module(gen)
        if register_discriminator:
            hook.register_module(disc)
        opt_g = torch.optim.Adam(gen.parameters(), lr=2e-4, betas=(0.5, 0.999))
        opt_d = torch.optim.Adam(disc.parameters(), lr=2e-4, betas=(0.5, 0.999))
        bce = nn.BCEWithLogitsLoss()
        for real, _ in batches(STEPS):
            for _ in range(critic_steps):
                disc.zero_grad()
                if critic_steps > 1:
                    with torch.no_grad():
                        fake = gen(torch.randn(16, 4))
                else:
                    fake = gen(torch.randn(16, 4)).detach()
                loss_d = bce(disc(real), torch.ones(16, 1)) + bce(disc(fake), torch.zeros(16, 1))
                loss_d.backward()
                opt_d.step()
            gen.zero_grad()
            bce(disc(gen(torch.randn(16, 4))), torch.ones(16, 1)).backward()
            opt_g.step()

    return loop


def evaluated_properly(hook: tt.Hook) -> None:
    model = mlp(nn.BatchNorm1d(16), nn.Dropout(0.3))
    hook.register_module(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for i, (x, y) in enumerate(batches()):
        if i and i % 10 == 0:
            model.eval()
            with torch.no_grad():
                for xv, _ in batches(3):
                    model(xv)
            model.train()
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()


def batchnorm_cnn(hook: tt.Hook) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.AdaptiveAvgPool2d(2),
        nn.Flatten(), nn.Linear(32, 3),
    )  # fmt: skip
    hook.register_module(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    images = torch.randn(64, 1, 6, 6, generator=torch.Generator().manual_seed(1))
    for i, (_, y) in enumerate(batches()):
        x = images[(i % 4) * 16 : (i % 4 + 1) * 16]
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()


def swa_batchnorm_update(hook: tt.Hook) -> None:
    """torch.optim.swa_utils.update_bn recomputes BatchNorm statistics in train mode under
    no_grad (momentum None): that is not an evaluation."""
    model = mlp(nn.BatchNorm1d(16))
    hook.register_module(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for x, y in batches():
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
    torch.optim.swa_utils.update_bn([x for x, _ in batches(4)], model)


def per_epoch(schedule: str) -> Loop:
    """Six epochs of four batches from a DataLoader, the scheduler stepped once per epoch."""

    def loop(hook: tt.Hook) -> None:
        model = mlp()
        hook.register_module(model)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        if schedule == "step":
            sched: Any = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.1)
        else:
            sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=6)
        loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(X, Y), batch_size=16)
        for _ in range(6):
            for x, y in loader:
                opt.zero_grad()
                F.cross_entropy(model(x), y).backward()
                opt.step()
            sched.step()

    return loop


def per_step(schedule: str) -> Loop:
    """Schedules meant for per-batch steps: a cosine over all the steps, a linear warm-up."""

    def loop(hook: tt.Hook) -> None:
        model = mlp()
        hook.register_module(model)
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        if schedule == "cosine":
            sched: Any = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=STEPS)
        elif schedule == "warmup":
            sched = torch.optim.lr_scheduler.LinearLR(opt, start_factor=0.01, total_iters=10)
        else:  # one-cycle
            sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=1e-2, total_steps=STEPS)
        for x, y in batches():
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            opt.step()
            sched.step()

    return loop


def lbfgs(hook: tt.Hook) -> None:
    """LBFGS: zero_grad and backward run inside step(closure)."""
    model = mlp()
    hook.register_module(model)
    opt = torch.optim.LBFGS(model.parameters(), lr=0.5, max_iter=3)
    for x, y in batches(15):

        def closure(x: torch.Tensor = x, y: torch.Tensor = y) -> torch.Tensor:
            opt.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            return loss

        opt.step(closure)


def manual_sgd(hook: tt.Hook) -> None:
    """No optimizer object: the weights are updated by hand."""
    model = mlp()
    hook.register_module(model)
    for x, y in batches():
        model.zero_grad()
        F.cross_entropy(model(x), y).backward()
        with torch.no_grad():
            for p in model.parameters():
                assert p.grad is not None
                p -= 0.1 * p.grad  # type: ignore[misc]  # in place: still a Parameter


def parameters_replaced(hook: tt.Hook) -> None:
    """The parameters are replaced by new ones after a first forward (as FSDP2's fully_shard
    does), and the optimizer is built over the new ones."""
    model = mlp()
    hook.register_module(model)
    model(X[:2])  # a forward before training (a summary, a shape check)
    for layer in (model[0], model[2]):
        layer.weight = nn.Parameter(layer.weight.detach().clone())  # type: ignore[operator]
        layer.bias = nn.Parameter(layer.bias.detach().clone())  # type: ignore[operator]
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in batches():
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()


def eval_left_on(*extra: nn.Module, at: int = 12) -> Loop:
    """An evaluation pass at step ``at`` that calls model.eval() and never model.train()."""

    def loop(hook: tt.Hook) -> None:
        model = mlp(*extra)
        hook.register_module(model)
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        for i, (x, y) in enumerate(batches()):
            if i == at:
                model.eval()
                with torch.no_grad():
                    for xv, _ in batches(3):
                        model(xv)
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            opt.step()

    return loop


def batchnorm_frozen_on_purpose(hook: tt.Hook) -> None:
    """Fine-tuning with BatchNorm kept in eval mode: model.train(), then each BatchNorm's
    eval() (the model itself trains in train mode)."""
    model = mlp(nn.BatchNorm1d(16), nn.Dropout(0.2))
    hook.register_module(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for x, y in batches():
        model.train()
        model[1].eval()
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()


def teacher_in_eval_mode(hook: tt.Hook) -> None:
    """Distillation: a registered teacher in eval mode runs with gradients enabled (its
    outputs detached), the student in train mode."""
    teacher, student = mlp(nn.Dropout(0.5)).eval(), mlp(nn.Dropout(0.5))
    for p in teacher.parameters():
        p.requires_grad_(False)
    hook.register_module(teacher)
    hook.register_module(student)
    opt = torch.optim.SGD(student.parameters(), lr=0.05)
    for x, _ in batches():
        opt.zero_grad()
        target = teacher(x).softmax(1)
        F.cross_entropy(student(x), target).backward()
        opt.step()


def functional(loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], out: int = 3,
               regression: bool = False) -> Loop:  # fmt: skip
    """A loss computed by ``loss(model output, target)`` from torch.nn.functional (no loss
    module), recorded with ``hook.record_loss``."""

    def loop(hook: tt.Hook) -> None:
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, out))
        hook.register_module(model)
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        for x, y in batches():
            target = x[:, 0] * 2 if regression else y
            opt.zero_grad()
            value = loss(model(x), target)
            hook.record_loss(value)
            value.backward()
            opt.step()

    return loop


HEALTHY: dict[str, Loop] = {
    "functional_cross_entropy": functional(F.cross_entropy),
    "functional_nll_of_log_softmax": functional(lambda o, y: F.nll_loss(o.log_softmax(1), y)),
    "functional_nll_of_log_of_softmax": functional(
        lambda o, y: F.nll_loss(torch.log(F.softmax(o, dim=1)), y)
    ),
    "functional_mse_same_shapes": functional(
        lambda o, y: F.mse_loss(o.squeeze(-1), y), out=1, regression=True
    ),
    "zero_grad_first": zero_grad_first,
    "zero_grad_after_forward_to_zeros": zero_grad_after_forward_to_zeros,
    "accumulation": accumulation,
    "huggingface_like": huggingface_like,
    "frozen_backbone": frozen_backbone,
    "gan_both_registered": gan(True),
    "gan_generator_only": gan(False),
    "wgan_generator_only": gan(False, critic_steps=5),
    "evaluated_properly": evaluated_properly,
    "batchnorm_cnn": batchnorm_cnn,
    "swa_batchnorm_update": swa_batchnorm_update,
    "per_epoch_steplr": per_epoch("step"),
    "per_epoch_cosine": per_epoch("cosine"),
    "per_step_cosine": per_step("cosine"),
    "per_step_warmup": per_step("warmup"),
    "per_step_onecycle": per_step("onecycle"),
    "lbfgs": lbfgs,
    "manual_sgd": manual_sgd,
    "parameters_replaced": parameters_replaced,
    "eval_left_on_without_dropout_or_batchnorm": eval_left_on(),
    "batchnorm_frozen_on_purpose": batchnorm_frozen_on_purpose,
    "teacher_in_eval_mode": teacher_in_eval_mode,
}


@pytest.mark.parametrize("name", sorted(HEALTHY))
def test_healthy_loops_raise_nothing(tmp_path: Path, name: str) -> None:
    summary = run(tmp_path, HEALTHY[name])
    assert causes(summary) == [], summary.findings[0].message
    assert summary.status is RuleStatus.NO_ISSUES_FOUND and summary.judged > 0


# -- faults --
def not_in_optimizer(hook: tt.Hook) -> None:
    """A head added after the optimizer was created."""
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model.append(nn.Linear(3, 3))
    hook.register_module(model)
    for x, y in batches():
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()


def optimizer_of_a_copy(hook: tt.Hook) -> None:
    model = mlp()
    opt = torch.optim.SGD(copy.deepcopy(model).parameters(), lr=0.1)
    hook.register_module(model)
    for x, y in batches():
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()


def no_step(hook: tt.Hook) -> None:
    model = mlp()
    hook.register_module(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in batches():
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()


def pretrained_then_step_never_called(hook: tt.Hook) -> None:
    """A backbone trained first (its optimizer stepped), frozen, a fresh head put on; the
    head's optimizer.step is never called (``opt.step`` without parentheses)."""
    model = mlp()
    first = torch.optim.Adam(model.parameters(), lr=2e-3)
    for x, y in batches()[:10]:
        first.zero_grad()
        F.cross_entropy(model(x), y).backward()
        first.step()
    for p in model.parameters():
        p.requires_grad_(False)
    top = model[-1]
    assert isinstance(top, nn.Linear)
    top.reset_parameters()
    top.requires_grad_(True)
    hook.register_module(model)
    opt = torch.optim.SGD(top.parameters(), lr=0.1)
    for x, y in batches():
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step  # noqa: B018 - the fault: the step is never called


def zeroed_before_step(hook: tt.Hook) -> None:
    model = mlp()
    hook.register_module(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in batches():
        F.cross_entropy(model(x), y).backward()
        opt.zero_grad()
        opt.step()


def never_zeroed(set_to_none: bool) -> Loop:
    """zero_grad called once, before the loop, and never again."""

    def loop(hook: tt.Hook) -> None:
        model = mlp()
        hook.register_module(model)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        opt.zero_grad(set_to_none=set_to_none)
        for x, y in batches():
            F.cross_entropy(model(x), y).backward()
            opt.step()

    return loop


def never_zeroed_in_a_closure(hook: tt.Hook) -> None:
    """The backward pass runs inside ``step(closure)`` (as Lightning's automatic optimization
    runs it), and nothing clears the gradients: a ``optimizer_zero_grad`` that does nothing."""
    model = mlp()
    hook.register_module(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    for x, y in batches():

        def closure(x: torch.Tensor = x, y: torch.Tensor = y) -> torch.Tensor:
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            return loss

        opt.step(closure)


def eval_in_train_mode(hook: tt.Hook) -> None:
    model = mlp(nn.Dropout(0.5))
    hook.register_module(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for i, (x, y) in enumerate(batches()):
        if i == 12:
            with torch.no_grad():  # model.eval() forgotten
                for xv, _ in batches(3):
                    model(xv)
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()


def eval_with_dropout_switched_back_on(hook: tt.Hook) -> None:
    """model.eval() for validation, then every Dropout back to training (a Monte Carlo dropout
    helper left in, as dev2's eval_mode_forgotten does): the model's flag says eval."""
    model = mlp(nn.Dropout(0.5))
    hook.register_module(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for i, (x, y) in enumerate(batches()):
        if i == 12:
            model.eval()
            for m in model.modules():
                if isinstance(m, nn.Dropout):
                    m.train()
            with torch.no_grad():
                for xv, _ in batches(3):
                    model(xv)
            model.train()
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()


def per_batch(schedule: str) -> Loop:
    def loop(hook: tt.Hook) -> None:
        model = mlp()
        hook.register_module(model)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        if schedule == "step":  # "every 2 epochs", stepped per batch
            sched: Any = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.1)
        elif schedule == "exponential":  # "0.75 a epoch", stepped per batch: at 1% from 17
            sched = torch.optim.lr_scheduler.ExponentialLR(opt, gamma=0.75)
        else:  # "T_max = 6 epochs", stepped per batch
            sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=6)
        for x, y in batches():
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            opt.step()
            sched.step()

    return loop


def huge_lr(hook: tt.Hook) -> None:
    model = mlp()
    hook.register_module(model)
    opt = torch.optim.Adam(model.parameters(), lr=1.0)
    for x, y in batches():
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()


def softmax_then(loss: nn.Module, log: bool = False) -> Loop:
    def loop(hook: tt.Hook) -> None:
        model = mlp(nn.Identity())
        model.append(nn.Softmax(dim=1))
        hook.register_module(model)
        hook.register_loss(loss)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for x, y in batches():
            opt.zero_grad()
            loss(model(x), y).backward()
            opt.step()

    return loop


def regression_shapes(hook: tt.Hook) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    hook.register_module(model)
    loss_fn = nn.MSELoss()
    hook.register_loss(loss_fn)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    target = X[:, 0] * 2
    for i, (x, _) in enumerate(batches()):
        opt.zero_grad()
        with pytest.warns(UserWarning, match="target size"):
            loss_fn(model(x), target[(i % 4) * 16 : (i % 4 + 1) * 16]).backward()  # (16,1), (16,)
        opt.step()


def group_at_rate(rates: Callable[[int], tuple[float, float]]) -> Loop:
    """The body and the head in two param groups; ``rates(step)``: their learning rates."""

    def loop(hook: tt.Hook) -> None:
        model = mlp()
        hook.register_module(model)
        body, head = list(model[0].parameters()), list(model[2].parameters())
        opt = torch.optim.SGD([{"params": body}, {"params": head}], lr=0.1)
        for i, (x, y) in enumerate(batches()):
            for group, lr in zip(opt.param_groups, rates(i), strict=True):
                group["lr"] = lr
            opt.zero_grad()
            loss = F.cross_entropy(model(x), y)
            hook.record_loss(loss)
            loss.backward()
            opt.step()

    return loop


def test_a_param_group_at_rate_zero_is_named_as_evidence_that_needs_harm(tmp_path: Path) -> None:
    """A group whose learning rate is 0 at every check while another trains: frozen_layer,
    marked ``needs_harm`` (a rate of 0 may freeze a layer on purpose); a group unfrozen
    before the first check, or every group at 0 (the learning rate, not a layer), is not."""
    summary = run(tmp_path / "a", group_at_rate(lambda i: (0.0, 0.1)))
    finding = only_finding(summary, "frozen_layer")
    assert finding.details["needs_harm"] is True
    assert finding.message.startswith(
        "2 parameters sit in a param group whose learning rate is 0 while the other groups "
        "train, so they never move from where they started: 0.bias, 0.weight;"
    )
    assert int(facts(tmp_path / "a")["zero_lr/0.weight"]) == 8 * 16
    assert causes(run(tmp_path / "b", group_at_rate(lambda i: (0.0 if i < 5 else 0.1, 0.1)))) == []
    assert causes(run(tmp_path / "c", group_at_rate(lambda i: (0.0, 0.0)))) == []
    # the frozen group's weights do not move: they say nothing of the rate the others train at
    found = facts(tmp_path / "a")
    assert float(found["lr/SGD"]) == 0.1
    assert "first_update_ratio/0.weight" not in found and "first_update_ratio/2.weight" in found
    assert causes(run(tmp_path / "d", group_at_rate(lambda i: (0.05, 0.1)))) == []


@pytest.mark.parametrize("body", ["random", "pretrained"])
def test_a_param_group_at_rate_zero_still_at_its_initialisation_is_a_fault(
    tmp_path: Path, body: str
) -> None:
    """Issue 44: a group at rate 0 whose weights still hold their default uniform
    initialisation was never trained nor loaded: a layer frozen by mistake, a problem on its
    own; a body trained first (pre-trained, then frozen by a rate of 0) stays evidence."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 3))
    x, y = torch.randn(256, 32), torch.randint(0, 3, (256,))
    if body == "pretrained":
        warm = torch.optim.Adam(model.parameters(), lr=0.01)
        for _ in range(200):
            warm.zero_grad()
            F.cross_entropy(model(x), y).backward()
            warm.step()
    out = str(tmp_path / "trial")
    hook = tt.Hook(out, save_config=tt.SaveConfig(save_interval=5),
                   include_collections=["losses", "training_loop", "weights"])  # fmt: skip
    hook.register_module(model)
    groups: list[dict[str, Any]] = [
        {"params": model[0].parameters(), "lr": 0.0},
        {"params": model[2].parameters()},
    ]
    opt = torch.optim.SGD(groups, lr=0.1)
    for i in range(STEPS):
        opt.zero_grad()
        loss = F.cross_entropy(model(x[i % 8 * 32 : (i % 8 + 1) * 32]), y[i % 8 * 32 :][:32])
        hook.record_loss(loss)
        loss.backward()
        opt.step()
    assert hook.close().internal_errors == 0
    summary = invoke_rule(TrainingLoop(tt.create_trial(out)))
    finding = only_finding(summary, "frozen_layer")
    if body == "random":
        assert "needs_harm" not in finding.details, finding.message
        assert "they still hold a random initialisation (2048 of their values" in finding.message
    else:
        assert finding.details["needs_harm"] is True, finding.message


def detached(part: str) -> Loop:
    """A graph cut: the loss on ``out.detach()`` made to backward with ``requires_grad_()``
    (``part`` "all"), or the head fed the body's output detached (``part`` "body"); the body
    run under ``torch.no_grad()`` (a feature extractor left trainable: "body_no_grad"); the
    body's output detached with only the head in the optimizer (a teacher, "teacher")."""

    def loop(hook: tt.Hook) -> None:
        model = mlp()
        hook.register_module(model)
        trained = model[2].parameters() if part == "teacher" else model.parameters()
        opt = torch.optim.SGD(trained, lr=0.1)
        for x, y in batches():
            opt.zero_grad()
            if part == "all":
                loss = F.cross_entropy(model(x).detach(), y).requires_grad_()
            elif part == "body_no_grad":
                with torch.no_grad():
                    features = model[1](model[0](x))
                loss = F.cross_entropy(model[2](features), y)
            else:
                loss = F.cross_entropy(model[2](model[1](model[0](x)).detach()), y)
            hook.record_loss(loss)
            loss.backward()
            opt.step()

    return loop


class WithUnused(nn.Module):
    """An MLP with a small parameter its forward never uses (a pooler, an unrouted expert)."""

    def __init__(self) -> None:
        super().__init__()
        self.body = mlp()
        self.unused = nn.Parameter(torch.zeros(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


def unused_parameter(hook: tt.Hook) -> None:
    model = WithUnused()
    hook.register_module(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in batches():
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        hook.record_loss(loss)
        loss.backward()
        opt.step()


def climbing(how: str) -> Loop:
    """Updates that climb the loss: a linear decay written ``(step - total) / total`` (a
    negative learning rate), or an optimizer built with ``maximize=True``."""

    def loop(hook: tt.Hook) -> None:
        model = mlp()
        hook.register_module(model)
        opt = torch.optim.SGD(model.parameters(), lr=0.05, maximize=how == "maximize")
        decay = None
        if how == "decay":
            decay = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: (s - STEPS) / STEPS)
        for x, y in batches():
            opt.zero_grad()
            loss = F.cross_entropy(model(x), y)
            hook.record_loss(loss)
            loss.backward()
            opt.step()
            if decay is not None:
                decay.step()

    return loop


def test_updates_that_climb_the_loss_are_named_wrong_sign(tmp_path: Path) -> None:
    """A negative learning rate is certain; maximize=True is evidence that needs harm (a
    reward maximised on purpose)."""
    summary = run(tmp_path / "a", climbing("decay"))
    finding = only_finding(summary, "wrong_sign")
    assert "needs_harm" not in finding.details
    assert finding.message.startswith("the learning rate of SGD is negative (")
    summary = run(tmp_path / "b", climbing("maximize"))
    finding = only_finding(summary, "wrong_sign")
    assert finding.details["needs_harm"] is True
    assert finding.message.startswith("SGD is built with maximize=True")


def negated_loss(how: str) -> Loop:
    """Backward on the loss with its sign flipped: a loss module's output (``(-loss)``), a
    functional loss's (``-F.nll_loss(...)``: NLL already carries its minus), one divided first
    (``-(loss / k)``) or times -1, or one plus a regulariser; ``two_optimizers``: a second optimizer climbs its loss on purpose (an
    adversary), which is not judged."""

    def loop(hook: tt.Hook) -> None:
        model = mlp()
        hook.register_module(model)
        criterion = nn.CrossEntropyLoss()
        if how == "module":
            hook.register_loss(criterion)
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        adversary = nn.Linear(3, 3)
        opt_adv = torch.optim.SGD(adversary.parameters(), lr=0.05)
        for x, y in batches():
            opt.zero_grad()
            out = model(x)
            if how == "module":
                (-criterion(out, y)).backward()
            elif how == "functional":
                value = F.nll_loss(F.log_softmax(out, dim=1), y)
                hook.record_loss(value)
                (-value).backward()
            elif how == "scaled":  # a divided loss negated, and one times -1
                value = F.cross_entropy(out, y)
                hook.record_loss(value)
                (-(value / 2) if x.shape[0] % 2 == 0 else value * -1).backward()
            elif how == "times_minus_one":
                value = F.cross_entropy(out, y)
                hook.record_loss(value)
                (value * -1.0).backward()
            elif how == "regularised":
                value = F.cross_entropy(out, y)
                hook.record_loss(value)
                l2 = sum((p**2).sum() for p in model.parameters())
                (-value + 1e-4 * l2).backward()
            else:  # two optimizers: the model descends, the adversary climbs its own loss
                value = F.cross_entropy(out, y)
                hook.record_loss(value)
                value.backward()
                opt.step()
                opt_adv.zero_grad()
                adv = F.cross_entropy(adversary(out.detach()), y)
                hook.record_loss(adv)
                (-adv).backward()
                opt_adv.step()
                continue
            opt.step()

    return loop


@pytest.mark.parametrize(
    "how", ["module", "functional", "scaled", "times_minus_one", "regularised", "two_optimizers"]
)
def test_backward_on_a_negated_loss_is_named_wrong_sign(tmp_path: Path, how: str) -> None:
    """Dev's gradient ascent (``(-(loss / k)).backward()``) was named lr_too_high three times
    in 11 (the loss diverging), and dev2's ``-F.nll_loss`` is a mistake of the same kind: backward
    on the loss negated is a certain fault in a loop with one optimizer."""
    summary = run(tmp_path, negated_loss(how))
    if how == "two_optimizers":
        assert causes(summary) == [], [f.message for f in summary.findings]
        return
    finding = only_finding(summary, "wrong_sign")
    assert "needs_harm" not in finding.details
    assert "backward passes ran on the loss with its sign flipped" in finding.message


def test_a_graph_cut_is_named_as_gradient_blocked(tmp_path: Path) -> None:
    """No parameter ever gets a gradient: certain; most of the values cut off behind a
    ``.detach()`` (their module ran in the graph, the optimizer holds them): certain; some
    (10% of the values or more) got none otherwise: evidence that needs harm; a small unused
    parameter: nothing."""
    summary = run(tmp_path / "a", detached("all"))
    finding = only_finding(summary, "gradient_blocked")
    assert "needs_harm" not in finding.details
    assert finding.message.startswith("no trainable parameter receives a gradient: after every")
    summary = run(tmp_path / "b", detached("body"))
    finding = only_finding(summary, "gradient_blocked")
    assert "needs_harm" not in finding.details
    assert finding.message.startswith("2 trainable parameters (74% of the trainable values)")
    assert "0.bias, 0.weight;" in finding.message and "the graph is cut" in finding.message
    assert float(facts(tmp_path / "b")["no_grad_cut_share"]) == 1.0
    # run outside the graph, or held by no optimizer: unused, maybe on purpose
    for part in ("body_no_grad", "teacher"):
        summary = run(tmp_path / part, detached(part))
        finding = only_finding(summary, "gradient_blocked")
        assert finding.details["needs_harm"] is True, part
        assert finding.message.startswith("2 trainable parameters (74% of the trainable")
        assert float(facts(tmp_path / part)["no_grad_cut_share"]) == 0.0, part
    assert causes(run(tmp_path / "c", unused_parameter)) == []
    assert int(facts(tmp_path / "c")["no_grad/unused"]) == 4
    assert "no_grad_cut_share" not in facts(tmp_path / "c")  # 4 values of 1,000 or so


def critic_five_times(hook: tt.Hook) -> None:
    """A WGAN's loop: the critic steps five times per generator step on the generator's output
    detached, so the first backward passes leave the generator (most of the values) without a
    gradient although it trains."""
    torch.manual_seed(0)
    gen = nn.Sequential(nn.Linear(4, 32), nn.ReLU(), nn.Linear(32, 8))
    critic = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 1))
    hook.register_module(gen)
    hook.register_module(critic)
    opt_g = torch.optim.Adam(gen.parameters(), lr=1e-3)
    opt_c = torch.optim.Adam(critic.parameters(), lr=1e-3)
    for i, (x, _) in enumerate(batches()):
        z = torch.randn(len(x), 4)
        loss_c = critic(gen(z).detach()).mean() - critic(x).mean()
        hook.record_loss(loss_c)
        loss_c.backward()
        opt_c.step()
        opt_c.zero_grad()
        if i % 5 == 4:
            (-critic(gen(z)).mean()).backward()
            opt_g.step()
            opt_g.zero_grad()  # the generator's gradients are None again at every check


def test_a_generator_its_critic_steps_without_is_not_blocked(tmp_path: Path) -> None:
    """The generator gets no gradient in the critic's steps, its output detached there, and
    its own in its step, every fifth, never a due one (every 10th): it is not named
    gradient_blocked (every backward pass drops what got a gradient from those found without;
    before, 84% of the values were reported without a gradient)."""
    summary = run(tmp_path, critic_five_times, save_interval=10)
    blocked = [
        f for f in summary.findings if f.triggered and f.details["cause"] == "gradient_blocked"
    ]
    assert blocked == [], [f.message for f in blocked]
    assert float(facts(tmp_path)["no_grad_share"]) == 0.0


def test_the_cut_probe_leaves_no_hook_behind(tmp_path: Path) -> None:
    """The modules holding parameters without a gradient are watched for PROBE_FORWARDS
    forward passes only: then their forward hooks are as before the probe."""
    from tensortap.pytorch._cut_probe import PROBE_FORWARDS

    model = mlp()
    hook = tt.Hook(str(tmp_path / "trial"), include_collections=["training_loop"])
    hook.register_module(model)
    before = [len(m._forward_hooks) for m in model]
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    counts = []
    for x, y in list(batches())[: 3 + PROBE_FORWARDS + 2]:
        opt.zero_grad()
        F.cross_entropy(model[2](model[1](model[0](x)).detach()), y).backward()
        opt.step()
        counts.append(len(model[0]._forward_hooks))
    assert counts[2] == before[0] + 1  # watched once 3 backward passes were checked
    assert counts[-1] == before[0]
    assert [len(m._forward_hooks) for m in model] == before
    assert hook.close().internal_errors == 0


FAULTS: dict[str, tuple[Loop, str]] = {
    "head_added_after_the_optimizer": (not_in_optimizer, "params_not_in_optimizer"),
    "optimizer_over_a_copy": (optimizer_of_a_copy, "params_not_in_optimizer"),
    "step_never_called": (no_step, "optimizer_not_stepping"),
    "step_never_called_after_a_pretrained_backbone": (
        pretrained_then_step_never_called,
        "optimizer_not_stepping",
    ),
    "zero_grad_between_backward_and_step": (zeroed_before_step, "optimizer_not_stepping"),
    "zero_grad_never_called": (never_zeroed(True), "grads_not_cleared"),
    "zero_grad_never_called_set_to_none_false": (never_zeroed(False), "grads_not_cleared"),
    "zero_grad_never_called_in_a_closure": (never_zeroed_in_a_closure, "grads_not_cleared"),
    "eval_without_model_eval": (eval_in_train_mode, "eval_in_train_mode"),
    "eval_with_dropout_switched_back_on": (
        eval_with_dropout_switched_back_on,
        "eval_in_train_mode",
    ),
    "model_eval_left_on_dropout": (eval_left_on(nn.Dropout(0.5)), "train_in_eval_mode"),
    "model_eval_left_on_batchnorm": (eval_left_on(nn.BatchNorm1d(16)), "train_in_eval_mode"),
    "model_eval_left_on_instancenorm": (
        eval_left_on(
            nn.Unflatten(1, (1, 16)), nn.InstanceNorm1d(1, track_running_stats=True), nn.Flatten()
        ),
        "train_in_eval_mode",
    ),
    "steplr_stepped_per_batch": (per_batch("step"), "scheduler_per_batch"),
    "cosine_stepped_per_batch": (per_batch("cosine"), "scheduler_per_batch"),
    # at 1% of its peak for 60% of the run (dev2's per-epoch decay stepped per batch: 72%)
    "exponential_stepped_per_batch": (per_batch("exponential"), "scheduler_per_batch"),
    "adam_lr_1": (huge_lr, "lr_too_high"),
    "softmax_before_cross_entropy": (softmax_then(nn.CrossEntropyLoss()), "softmax_before_loss"),
    "softmax_before_nll": (softmax_then(nn.NLLLoss()), "softmax_before_loss"),
    "mse_on_n1_against_n": (regression_shapes, "loss_shape_mismatch"),
    "softmax_before_functional_cross_entropy": (
        functional(lambda o, y: F.cross_entropy(F.softmax(o, dim=1), y)),
        "softmax_before_loss",
    ),
    "softmax_before_functional_nll": (
        functional(lambda o, y: F.nll_loss(o.softmax(dim=-1), y)),
        "softmax_before_loss",
    ),
    "functional_mse_on_n1_against_n": (
        functional(lambda o, y: F.mse_loss(o, y), out=1, regression=True),
        "loss_shape_mismatch",
    ),
    "functional_huber_on_n_against_n1": (
        functional(lambda o, y: F.huber_loss(o.squeeze(-1), y[:, None]), out=1, regression=True),
        "loss_shape_mismatch",
    ),
}


@pytest.mark.parametrize("name", sorted(FAULTS))
def test_each_fault_fires_with_its_cause(tmp_path: Path, name: str) -> None:
    loop, cause = FAULTS[name]
    summary = run(tmp_path, loop)
    assert causes(summary) == [cause], [f.message for f in summary.findings]
    finding = summary.findings[0]
    assert finding.severity is not None and finding.severity.value == "problem"
    assert summary.status is RuleStatus.ISSUES_FOUND


def test_messages_say_what_was_seen_and_what_to_do(tmp_path: Path) -> None:
    message = run(tmp_path / "a", never_zeroed(True)).findings[0].message
    assert "at step 1 the gradients of SGD still held the previous step's (norm" in message
    assert "call optimizer.zero_grad() once per optimizer step" in message
    message = run(tmp_path / "b", not_in_optimizer).findings[0].message
    assert "2 trainable parameters" in message and "never change: 3.bias, 3.weight;" in message
    message = run(tmp_path / "b2", optimizer_of_a_copy).findings[0].message
    assert "4 trainable parameters" in message and "a copy?" in message
    message = run(tmp_path / "c", regression_shapes).findings[0].message
    assert "MSELoss compares a prediction of shape (16, 1) with a target of shape (16,)" in message
    loop = functional(lambda o, y: F.mse_loss(o, y), out=1, regression=True)
    message = run(tmp_path / "c2", loop).findings[0].message
    assert "mse_loss compares a prediction of shape (16, 1) with a target of shape (16,)" in message
    loop = functional(lambda o, y: F.cross_entropy(F.softmax(o, dim=1), y))
    message = run(tmp_path / "c3", loop).findings[0].message
    assert message.startswith("cross_entropy is fed probabilities")
    message = run(tmp_path / "d", huge_lr).findings[0].message
    assert "the learning rate (SGD" not in message and "Adam 1" in message
    message = run(tmp_path / "e", per_batch("step")).findings[0].message
    assert message.startswith("StepLR (period 2) is stepped once per batch")
    message = run(tmp_path / "f", eval_in_train_mode).findings[0].message
    assert "3 forward passes ran under torch.no_grad()" in message and "1 Dropout" in message
    assert "while model.training was True" in message
    message = run(tmp_path / "f2", eval_with_dropout_switched_back_on).findings[0].message
    assert "with the model in eval mode but its Dropout switched back to training" in message
    loop = eval_left_on(nn.BatchNorm1d(16), nn.Dropout(0.3))
    message = run(tmp_path / "g", loop, save_interval=1).findings[0].message
    assert message.startswith("2 of the 14 optimizer steps so far, from step 15, were taken on")
    assert "the model's 1 BatchNorm1d, 1 Dropout behave as in evaluation" in message
    assert "call model.train() before the training steps" in message


def test_steps_in_eval_mode_are_counted_and_harmless_ones_mentioned(tmp_path: Path) -> None:
    """Every optimizer step after the forgotten model.train() is counted, from its step; a
    model without Dropout or BatchNorm is the same in both modes: said, not a fault."""
    run(tmp_path / "a", eval_left_on(nn.Dropout(0.3), at=10))
    found = facts(tmp_path / "a")
    assert int(found["eval_mode_steps"]) == STEPS - 10
    assert int(found["eval_mode_steps/step"]) == 13  # the evaluation pass is steps 10-12
    assert int(found["eval_mode_modules/Dropout"]) == 1
    summary = run(tmp_path / "b", eval_left_on(at=10))
    assert causes(summary) == [] and int(facts(tmp_path / "b")["eval_mode_steps"]) == STEPS - 10
    seen: list[Finding] = []
    invoke_rule(
        TrainingLoop(tt.create_trial(str(tmp_path / "b" / "trial"))), on_finding=seen.append
    )
    message = [f.message for f in seen if f.message.startswith("no fault")][-1]
    assert "(30 optimizer steps, from step 13, ran with the model in eval mode" in message
    assert "no Dropout or BatchNorm module in eval mode: that changes nothing)" in message


def test_several_faults_are_reported_one_per_saved_step(tmp_path: Path) -> None:
    def both(hook: tt.Hook) -> None:  # no zero_grad, and a softmax before the loss
        model = mlp()
        model.append(nn.Softmax(dim=1))
        hook.register_module(model)
        loss_fn = nn.CrossEntropyLoss()
        hook.register_loss(loss_fn)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        for x, y in batches():
            loss_fn(model(x), y).backward()
            opt.step()

    summary = run(tmp_path, both, start=3)  # both seen before the first due step, 5
    assert causes(summary) == ["grads_not_cleared", "softmax_before_loss"]
    first, second = summary.findings
    assert first.details["other_causes"] == ["softmax_before_loss"]
    assert (first.step, second.step) == (5, 10)


# -- first update: healthy optimizers and the thresholds --
class GRUNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(20, 8)
        self.gru = nn.GRU(8, 16, batch_first=True)
        self.fc = nn.Linear(16, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.gru(self.emb(x))[0][:, -1])


MODELS: dict[str, tuple[Callable[[], nn.Module], Callable[[torch.Tensor], torch.Tensor]]] = {
    "mlp": (lambda: nn.Sequential(nn.Linear(8, 64), nn.ReLU(), nn.Linear(64, 3)), lambda x: x),
    "cnn": (
        lambda: nn.Sequential(
            nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 8 * 8, 3)
        ),
        lambda x: x.repeat(1, 8).reshape(-1, 1, 8, 8),
    ),
    "gru": (GRUNet, lambda x: (x.abs() * 5).long().clamp(max=19)),
}
OPTIMIZERS: dict[str, Callable[[Any], torch.optim.Optimizer]] = {
    "SGD 0.1 momentum": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),
    "Adam 1e-3": lambda p: torch.optim.Adam(p, lr=1e-3),
    "AdamW 3e-3": lambda p: torch.optim.AdamW(p, lr=3e-3),
    "RMSprop 1e-3": lambda p: torch.optim.RMSprop(p, lr=1e-3),
}


def first_update_loop(model_name: str, make_opt: Callable[[Any], torch.optim.Optimizer]) -> Loop:
    def loop(hook: tt.Hook) -> None:
        torch.manual_seed(0)
        make_model, shape = MODELS[model_name]
        model = make_model()
        hook.register_module(model)
        opt = make_opt(model.parameters())
        for x, y in batches(25):
            opt.zero_grad()
            F.cross_entropy(model(shape(x)), y).backward()
            opt.step()

    return loop


@pytest.mark.parametrize("model", sorted(MODELS))
@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
def test_healthy_first_updates_are_far_below_the_threshold(
    tmp_path: Path, model: str, optimizer: str
) -> None:
    summary = run(tmp_path, first_update_loop(model, OPTIMIZERS[optimizer]))
    assert causes(summary) == []
    ratio = float(facts(tmp_path)["first_update_ratio"])
    assert 1e-4 < ratio < 0.5, ratio  # the threshold (5) is 10x and more above


@pytest.mark.parametrize("model", sorted(MODELS))
def test_a_learning_rate_100x_too_high_fires_on_every_model(tmp_path: Path, model: str) -> None:
    summary = run(tmp_path, first_update_loop(model, lambda p: torch.optim.Adam(p, lr=1.0)))
    assert causes(summary)[:1] == ["lr_too_high"]


def test_an_adam_first_step_near_the_weights_scale_is_evidence_that_needs_harm(
    tmp_path: Path,
) -> None:
    """Adam's first step moves each weight by its learning rate: at 0.09 it moves this MLP's
    weights by about 0.8 of their norm, past every healthy run of the generated development
    split (0.23 at most) but under the certain limit (1.0). A transformer at 100x its rate
    started at 0.84 and was named "gradients vanish"; it is now evidence, a problem only where
    the run is harmed in a way a learning rate too high explains."""
    summary = run(tmp_path, first_update_loop("mlp", lambda p: torch.optim.Adam(p, lr=0.09)))
    finding = only_finding(summary, "lr_too_high")
    assert finding.details["needs_harm"] is True and finding.severity is Severity.WARNING
    assert finding.value is not None and 0.6 <= finding.value < 1.0
    assert "far too high" not in finding.message and "too high for this model" in finding.message


# -- bookkeeping: what is saved, when, at what cost --
def test_no_data_without_the_collection(tmp_path: Path) -> None:
    out = str(tmp_path / "trial")
    hook = tt.Hook(out, save_config=tt.SaveConfig(save_interval=5))
    never_zeroed(True)(hook)
    hook.close()
    trial = tt.create_trial(out)
    assert "training_loop" not in trial.collections() or not trial.tensor_names(
        collection="training_loop"
    )
    summary = invoke_rule(TrainingLoop(trial))
    assert summary.status is RuleStatus.NO_DATA
    assert "training_loop" in summary.details


def test_a_fact_seen_on_a_step_not_due_is_saved_later_and_at_close(tmp_path: Path) -> None:
    def late_eval(hook: tt.Hook) -> None:
        eval_in_train_mode(hook)
        model = hook._models[0]
        with torch.no_grad():  # after the last due step
            for xv, _ in batches(2):
                model(xv)

    summary = run(tmp_path, late_eval, save_interval=7)
    assert causes(summary) == ["eval_in_train_mode"]
    trial = tt.create_trial(str(tmp_path / "trial"))
    steps = trial.tensor("training_loop/eval_in_train_mode").steps()
    assert steps[-1] == trial.steps()[-1]  # the last step, not due: saved at close
    assert int(trial.tensor("training_loop/eval_in_train_mode").value(steps[-1])) == 5


def test_values_are_read_only_on_due_steps_and_the_first_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reading tensor values waits for the device: never on a step where nothing is saved
    but the first few (and the first update's copy, once)."""
    reads: list[tuple[int, bool]] = []
    hook_ref: list[tt.Hook] = []
    norms = loop_facts._norms  # type: ignore[attr-defined]

    def counting(tensors: Any) -> list[float]:
        hook = hook_ref[0]
        reads.append((hook.step, hook.is_collection_due("training_loop")))
        return norms(tensors)

    monkeypatch.setattr(loop_facts, "_norms", counting)

    def loop(hook: tt.Hook) -> None:
        hook_ref.append(hook)
        zero_grad_after_forward_to_zeros(hook)

    run(tmp_path, loop, save_interval=10)
    late = [(step, due) for step, due in reads if step > loop_facts.FIRST_STEPS]
    assert late and all(due for _, due in late), reads


def test_a_failure_inside_the_checks_never_stops_training(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: Any) -> None:
        raise RuntimeError("injected")

    monkeypatch.setattr(loop_facts.LoopFacts, "before_backward", broken)
    monkeypatch.setattr(loop_facts.LoopFacts, "on_loss", broken)
    hook = tt.Hook(str(tmp_path), include_collections=["training_loop"])
    zero_grad_after_forward_to_zeros(hook)
    status = hook.close()
    assert status.internal_errors >= STEPS and "injected" in (status.last_internal_error or "")


def test_nothing_is_collected_unless_included(tmp_path: Path) -> None:
    hook = tt.Hook(str(tmp_path), save_config=tt.SaveConfig(save_interval=1))
    zero_grad_first(hook)
    hook.close()
    assert hook._loop._backward_passes == 0 and not hook._loop._values


def test_rules_that_read_every_tensor_leave_the_facts_out(tmp_path: Path) -> None:
    """The facts hold zeros (other_optimizer_steps) and are no tensors of the model: AllZero,
    which reads every tensor by default, must not take them for all-zero tensors."""
    from tensortap.rules import AllZero, ExplodingTensor

    run(tmp_path, zero_grad_first)
    trial = tt.create_trial(str(tmp_path / "trial"))
    assert float(trial.tensor("training_loop/other_optimizer_steps").value(0)) == 0
    for rule in (AllZero(trial), ExplodingTensor(trial)):
        summary = invoke_rule(rule)
        assert summary.triggered == 0 and summary.judged > 0, summary.findings[:1]


@pytest.mark.parametrize(
    "loop",
    [
        "divided",
        "undivided",
        "gan",
        "two_losses",
        "running_total",
        "shared_trunk",
        "summed_once",
        "summed_divided",
        "multi_task",
        "time_steps",
    ],
)
def test_accumulation_that_sums_micro_batches_is_named(tmp_path: Path, loop: str) -> None:
    """Four micro-batches per optimizer step: each loss divided by 4 is healthy; each whole
    loss module output summed into the gradients is accumulation_undivided; a GAN's two
    optimizers and two different loss modules back-propagate several losses by design.
    Issue 44 (dev2): backward() on the running total of the step's divided losses, kept with
    retain_graph=True, runs through the earlier micro-batches' graphs again (their gradients
    counted 4, 3, 2 times): accumulation_undivided; two losses of one forward pass, the first
    backward with retain_graph=True (multi-task), run through one trunk but not through each
    other's loss: healthy. Twenty-first session (dev m/01): the micro-batches' losses summed
    into one total, backward once on it (4 forwards, 4 losses apart, added whole): named;
    the total of the divided losses is healthy, and so are 4 losses of one forward
    (multi-task) and 4 steps of a sequence chained through their outputs."""
    import tensortap as tt_core

    torch.manual_seed(0)
    hook = tt.Hook(tmp_path / "t", save_config=tt.SaveConfig(save_interval=5),
                   include_collections=["training_loop", "losses"])  # fmt: skip
    model, gen = nn.Linear(4, 2), nn.Linear(3, 4)
    hook.register_module(model)
    first, second = nn.CrossEntropyLoss(), nn.CrossEntropyLoss()
    hook.register_loss(first)
    hook.register_loss(second)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    opt_gen = torch.optim.SGD(gen.parameters(), lr=0.01)
    for _ in range(20):
        opt.zero_grad()
        total: torch.Tensor | None = None
        if loop in ("multi_task", "time_steps"):
            out, losses = model(torch.randn(8, 4)), []
            for _k in range(4):
                losses.append(first(out, torch.randint(0, 2, (8,))))
                if loop == "time_steps":  # the next step's input comes from this output
                    out = model(torch.tanh(torch.cat([out, out], 1) + torch.randn(8, 4)))
            sum(losses, torch.zeros(())).backward()
            opt.step()
            continue
        for k in range(4):
            x = gen(torch.randn(8, 3)).detach() if loop == "gan" and k % 2 else torch.randn(8, 4)
            loss_fn = second if loop == "two_losses" and k % 2 else first
            out = model(x)
            loss = loss_fn(out, torch.randint(0, 2, (8,)))
            if loop in ("summed_once", "summed_divided"):
                term = loss if loop == "summed_once" else loss / 4
                total = term if total is None else total + term
                if k == 3:
                    total.backward()
            elif loop == "running_total":
                total = loss / 4 if total is None else total + loss / 4
                total.backward(retain_graph=k < 3)
            elif loop == "shared_trunk":
                (loss / 4).backward(retain_graph=True)
                (second(out, torch.randint(0, 2, (8,))) / 4).backward()
            else:
                (loss / 4 if loop == "divided" else loss).backward()
        opt.step()
        if loop == "gan":
            opt_gen.zero_grad()
            gen(torch.randn(8, 3)).sum().backward()
            opt_gen.step()
    hook.close()
    summary = invoke_rule(TrainingLoop(tt_core.create_trial(tmp_path / "t")))
    causes = [f.details.get("cause") for f in summary.findings]
    if loop == "undivided":
        assert causes == ["accumulation_undivided"]
        assert "divide the loss by 4 before backward()" in summary.findings[0].message
    elif loop == "running_total":
        assert causes == ["accumulation_undivided"], [f.message for f in summary.findings]
        assert "backward() on a running total" in summary.findings[0].message
    elif loop == "summed_once":
        assert causes == ["accumulation_undivided"], [f.message for f in summary.findings]
        assert "one backward pass ran on the sum of 4 losses" in summary.findings[0].message
    else:
        assert summary.status.value == "NoIssuesFound", causes


@pytest.mark.parametrize(("optimizer", "lr", "cause"), [
    ("adam", 1e-7, "lr_too_low"), ("adam", 1e-3, None), ("sgd", 1e-5, None),
])  # fmt: skip
def test_an_adaptive_optimizers_tiny_first_step_is_a_learning_rate_too_low(
    tmp_path: Path, optimizer: str, lr: float, cause: str | None
) -> None:
    """Adam's first step moves each weight by about its learning rate: 1e-7 against weights of
    ~0.3 is far below any healthy start; plain SGD's first step follows the gradient's size,
    so a small one says nothing about its learning rate."""
    import tensortap as tt_core

    torch.manual_seed(0)
    hook = tt.Hook(tmp_path / "t", save_config=tt.SaveConfig(save_interval=5),
                   include_collections=["training_loop"])  # fmt: skip
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
    hook.register_module(model)
    loss_fn = nn.CrossEntropyLoss()
    hook.register_loss(loss_fn)
    kind = torch.optim.Adam if optimizer == "adam" else torch.optim.SGD
    opt = kind(model.parameters(), lr=lr)
    for _ in range(24):
        opt.zero_grad()
        loss_fn(model(torch.randn(16, 8)), torch.randint(0, 3, (16,))).backward()
        opt.step()
    hook.close()
    summary = invoke_rule(TrainingLoop(tt_core.create_trial(tmp_path / "t")))
    assert [f.details.get("cause") for f in summary.findings] == ([cause] if cause else [])


def _dead_below() -> nn.Sequential:
    """Three Linear layers whose units never fire (a bias of -100 before each ReLU): the
    weights of the first three layers get gradients of exactly 0, the head's do not."""
    torch.manual_seed(0)
    layers: list[nn.Module] = []
    for fan_in in (8, 16, 16):
        linear = nn.Linear(fan_in, 16)
        with torch.no_grad():
            linear.bias.fill_(-100.0)
        layers += [linear, nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 3))


def _dropout_of_one() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Dropout(p=1.0), nn.Linear(16, 3))


@pytest.mark.parametrize("make", [_dead_below, _dropout_of_one], ids=["dead_units", "dropout_1"])
def test_zero_gradients_are_never_a_learning_rate_too_low(
    tmp_path: Path, make: Callable[[], nn.Sequential]
) -> None:
    """Adam at its default rate on a model where most weights get no gradient (units dead
    below them, a dropout of 1): those weights do not move at the first step, whatever the
    rate, so the median first update of 0 is not a learning rate too low (it was: "the first
    optimizer step moved the weights by a median 0 times their norm ... raise it")."""
    import tensortap as tt_core

    hook = tt.Hook(tmp_path / "t", save_config=tt.SaveConfig(save_interval=5),
                   include_collections=["training_loop"])  # fmt: skip
    model = make()
    hook.register_module(model)
    loss_fn = nn.CrossEntropyLoss()
    hook.register_loss(loss_fn)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for x, y in batches(24):
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()
    hook.close()
    summary = invoke_rule(TrainingLoop(tt_core.create_trial(tmp_path / "t")))
    assert "lr_too_low" not in [f.details.get("cause") for f in summary.findings], [
        f.message for f in summary.findings
    ]
