"""The training loop every generated run goes through: ``train(case, hook)``.

It is written the way a person writes a PyTorch script (epochs over shuffled mini-batches,
forward, loss, backward, optimizer step, a scheduler, a validation pass now and then in
``model.eval()`` under ``torch.no_grad()``), with the hook attached the way a user attaches it.
A fault changes the script only at the places :class:`~.faults.Fault` names. Along the way the
run records its own numbers (:class:`~.record.RunRecord`); the generator's measurements
(before training, and after it on a copy of the model) never pass through the hook.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import torch
from torch import nn
from torch.nn import functional as F

from bench.detection.generated.data import Data, load
from bench.detection.generated.faults import NO_FAULT, Fault
from bench.detection.generated.faults_family import implementation
from bench.detection.generated.models import build, head
from bench.detection.generated.record import Evaluation, Metrics, RunRecord
from bench.detection.generated.space import Draw

if TYPE_CHECKING:
    import tensortap.pytorch as tt
    from bench.detection.generated.suite import Case

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
EVAL_BATCH = 256
PRETRAIN_STEPS = 150


def fault_of(case: Case) -> Fault:
    """The case's fault, in its split's implementation (the family split has its own)."""
    return implementation(case.fault, case.split) if case.fault else NO_FAULT


def make_optimizer(d: Draw, params: Any, lr: float, **extra: Any) -> torch.optim.Optimizer:
    wd = d.weight_decay
    if d.optimizer == "sgd":
        return torch.optim.SGD(params, lr=lr, weight_decay=wd, **extra)
    if d.optimizer == "sgd_momentum":
        return torch.optim.SGD(params, lr=lr, momentum=0.9, weight_decay=wd, **extra)
    if d.optimizer == "adam":
        return torch.optim.Adam(params, lr=lr, weight_decay=wd, **extra)
    if d.optimizer == "adamw":
        return torch.optim.AdamW(params, lr=lr, weight_decay=wd, **extra)
    if d.optimizer == "rmsprop":
        return torch.optim.RMSprop(params, lr=lr, weight_decay=wd, **extra)
    raise ValueError(f"unknown optimizer {d.optimizer}")


def make_scheduler(
    d: Draw, optimizer: torch.optim.Optimizer, total_steps: int
) -> tuple[torch.optim.lr_scheduler.LRScheduler | None, bool]:
    """The draw's schedule and whether it steps per optimizer step (else per epoch)."""
    sched = torch.optim.lr_scheduler
    if d.schedule == "step":
        return sched.StepLR(optimizer, step_size=max(1, d.epochs // 3), gamma=0.1), False
    if d.schedule == "cosine_epoch":
        return sched.CosineAnnealingLR(optimizer, T_max=d.epochs), False
    if d.schedule == "cosine_step":
        return sched.CosineAnnealingLR(optimizer, T_max=total_steps), True
    if d.schedule == "warmup":
        warm = max(1, total_steps // 10)
        return sched.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / warm)), True
    if d.schedule == "exp_epoch":  # to 10% of the learning rate over the run
        return sched.ExponentialLR(optimizer, gamma=0.1 ** (1.0 / d.epochs)), False
    return None, False


def make_loss(d: Draw, data: Data) -> tuple[nn.Module | None, LossFn]:
    """The loss as a module (when the draw writes it so) and as the function the loop calls."""
    if d.classify:
        kwargs: dict[str, Any] = {
            "weight": data.class_weights,
            "label_smoothing": d.label_smoothing,
        }
        if d.loss_style == "module":
            module = nn.CrossEntropyLoss(**kwargs)
            return module, module
        return None, lambda out, y: F.cross_entropy(out, y, **kwargs)
    if d.loss_style == "module":
        module = nn.MSELoss()
        return module, module
    return None, F.mse_loss


@contextmanager
def quiet_rng() -> Iterator[None]:
    """The generator's own work leaves the run's random state as it was."""
    with torch.random.fork_rng(devices=[]):
        yield


def pretrain(model: nn.Module, data: Data, d: Draw, loss_fn: LossFn) -> None:
    """The pre-training a frozen backbone had (before the hook watches): Adam on the same data,
    then the backbone is frozen and a fresh head put on."""
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    gen = torch.Generator().manual_seed(d.seed + 7)
    for _ in range(PRETRAIN_STEPS):
        idx = torch.randint(0, len(data.y), (min(64, len(data.y)),), generator=gen)
        opt.zero_grad()
        loss_fn(model(data.x[idx]), data.y[idx]).backward()
        opt.step()
    top = head(model)
    for p in model.parameters():
        p.requires_grad_(False)
    for p in top.parameters():
        p.requires_grad_(True)
    top.reset_parameters()  # type: ignore[operator]


def _saturation(model: nn.Module, x: torch.Tensor) -> float:
    """How saturated the model's tanh/sigmoid units are on ``x``: the fraction of nn.Tanh
    outputs beyond ±0.99, and of a GRU's/LSTM's gate pre-activations from its input beyond ±3
    (sigmoid and tanh are flat there). NaN for models with neither."""
    seen: list[torch.Tensor] = []
    handles = []
    for m in model.modules():
        if isinstance(m, nn.Tanh):
            handles.append(m.register_forward_hook(lambda _m, _i, o: seen.append(o.abs() > 0.99)))
        elif isinstance(m, nn.GRU | nn.LSTM):

            def gates(m: nn.Module, inputs: Any, _o: Any) -> None:
                pre = inputs[0] @ m.weight_ih_l0.T + m.bias_ih_l0
                seen.append(pre.abs() > 3.0)

            handles.append(m.register_forward_hook(gates))
    try:
        model(x)
    finally:
        for h in handles:
            h.remove()
    if not seen:
        return math.nan
    return float(torch.cat([s.reshape(-1) for s in seen]).float().mean())


def measure(model: nn.Module, data: Data, d: Draw) -> Metrics:
    """A proper evaluation of ``model`` on the validation set (eval mode, no grad, shapes
    checked), restoring the model's mode afterwards."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad(), quiet_rng():
            out = model(data.x_val)
            saturation = _saturation(model, data.x_val[:EVAL_BATCH])
    finally:
        model.train(was_training)
    if d.classify:
        y = data.y_val
        loss = float(F.cross_entropy(out, y))
        pred = out.argmax(dim=1)
        recall = [
            float((pred[y == c] == c).float().mean()) if bool((y == c).any()) else math.nan
            for c in range(data.n_classes)
        ]
        present = [r for r in recall if not math.isnan(r)]
        quality = sum(present) / len(present) if present else math.nan
        if not torch.isfinite(out).all():
            loss = quality = math.nan
        accuracy = float((pred == y).float().mean())
        return Metrics(loss, quality, accuracy, recall, saturation)
    target = data.y_val.reshape(out.shape[0], -1)
    pred = out.reshape(out.shape[0], -1)
    loss = float(F.mse_loss(pred, target))
    # R² for a regression; an autoencoder against predicting all zeros (its inputs' centre)
    centre = target.mean(dim=0) if d.regression else torch.zeros_like(target[0])
    baseline = float(((target - centre) ** 2).mean())
    return Metrics(loss, 1.0 - loss / baseline, saturation=saturation)


def validation_pass(
    forward: Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]],
    data: Data,
    d: Draw,
    step: int,
) -> Evaluation:
    """The loop's pass over the validation set in batches: mean loss and accuracy."""
    total, correct, seen = 0.0, 0, 0
    for i in range(0, len(data.y_val), EVAL_BATCH):
        xb, yb = data.x_val[i : i + EVAL_BATCH], data.y_val[i : i + EVAL_BATCH]
        out, loss = forward(xb, yb)
        total += float(loss) * len(yb)
        seen += len(yb)
        if d.classify:
            correct += int((out.argmax(dim=1) == yb).sum())
    return Evaluation(step, total / seen, correct / seen if d.classify else math.nan)


def train(case: Case, hook: tt.Hook | None) -> RunRecord:
    """Train ``case`` (its draw, with its fault), with ``hook`` attached as a user attaches it
    (``hook`` None: no tensortap at all). Returns what the run recorded."""
    started = time.perf_counter()
    fault = fault_of(case)
    d = fault.adjust(case.draw)
    torch.set_num_threads(1)
    torch.manual_seed(d.seed)
    rec = RunRecord()

    data = load(d, fault)
    rec.n_train = len(data.y)
    model = build(d, data, softmax_output=fault.softmax_output, recurrence=fault.recurrence)
    loss_module, loss_fn = make_loss(d, data)
    loss_module, loss_fn = fault.loss(d, data, loss_module, loss_fn)
    if d.frozen_backbone:
        with quiet_rng():
            pretrain(model, data, d, make_loss(d, data)[1])
    fault.mutate_model(model, d)
    rec.chance = 1.0 / data.n_classes if data.n_classes else 0.0
    rec.initial = measure(model, data, d)
    rec.frozen = [n for n, p in model.named_parameters() if not p.requires_grad]
    params = fault.optimizer_params(model, d)
    if params is None:
        if d.frozen_backbone:  # fine-tuning: only what trains goes to the optimizer
            params = [p for p in model.parameters() if p.requires_grad]
        else:
            params = model.parameters()
    optimizer = make_optimizer(d, params, d.lr, **fault.optimizer_options(d))

    k = d.accum_steps
    n = len(data.y)
    batch = min(d.batch_size, n)
    micro_per_epoch = (n // batch) // k * k or k
    total_steps = d.epochs * (micro_per_epoch // k)
    scheduler, per_step = fault.schedule(d, optimizer, *make_scheduler(d, optimizer, total_steps))
    start = {name: p.detach().clone() for name, p in model.named_parameters()}
    gen = torch.Generator().manual_seed(d.seed)

    if hook is not None:
        hook.register_module(model)
        if loss_module is not None:
            hook.register_loss(loss_module)

    def forward(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = model(x)
        loss = loss_fn(out, y)
        if hook is not None:
            if loss_module is None:
                hook.record_loss(loss)
            if d.classify:
                hook.save_tensor("labels", y, "labels")
                hook.save_tensor("predictions", out.detach().argmax(dim=1), "predictions")
        return out, loss

    def evaluate(step: int) -> None:
        if fault.eval_mode:
            fault.eval_module(model).eval()
        with torch.no_grad():
            rec.evaluations.append(validation_pass(forward, data, d, step))
        if fault.eval_mode:
            fault.eval_module(model).train()

    def signed(loss: torch.Tensor) -> torch.Tensor:
        return -loss if fault.loss_sign < 0 else loss

    step = 0
    model.train()
    optimizer.zero_grad()
    for epoch in range(d.epochs):
        perm = torch.randperm(n, generator=gen)
        batches = [perm[i * batch : (i + 1) * batch] for i in range(micro_per_epoch)]
        targets = fault.epoch_targets(data.y, epoch, d)
        window: list[float] = []
        pending: torch.Tensor | None = None
        for i, idx in enumerate(batches):
            _, loss = forward(data.x[idx], targets[idx])
            window.append(float(loss))
            if fault.sum_micro_batches:  # one backward over the K losses' sum
                pending = loss if pending is None else pending + loss
                if (i + 1) % k == 0:
                    signed(pending).backward()
                    pending = None
            else:
                scaled = signed(loss / k if fault.divide_accumulated else loss)
                fault.backward(scaled, loss, i, d)
            if (i + 1) % k:
                continue
            grads = [p.grad for p in model.parameters() if p.requires_grad and p.grad is not None]
            norm = torch.stack([g.norm() for g in grads]).norm() if grads else torch.zeros(())
            rec.grad_norms.append(float(norm))
            rec.losses.append(sum(window) / len(window))
            rec.lrs.append(optimizer.param_groups[0]["lr"])
            window = []
            if rec.nonfinite_step is None and not (
                math.isfinite(rec.losses[-1]) and math.isfinite(rec.grad_norms[-1])
            ):
                rec.nonfinite_step = step
            fault.take_step(optimizer, d)
            fault.clear_grads(model, optimizer)
            if step == 0:
                rec.first_update = _relative_change(model, start)
            step += 1
            if scheduler is not None and (per_step or fault.scheduler_per_batch):
                scheduler.step()
            if d.eval_every and step % d.eval_every == 0:
                evaluate(step)
        if scheduler is not None and not per_step and not fault.scheduler_per_batch:
            scheduler.step()
        if not d.eval_every:
            evaluate(step)
    if not rec.evaluations or rec.evaluations[-1].step != step:
        evaluate(step)

    rec.unchanged = [
        name
        for name, p in model.named_parameters()
        if p.requires_grad and torch.equal(p.detach(), start[name])
    ]
    rec.identical = [
        name
        for name, p in model.named_parameters()
        if p.dim() >= 2 and p.shape[0] > 1 and bool((p == p[:1]).all())
    ]
    copy = _copy(model, d, data, fault)
    rec.final = measure(copy, data, d)
    rec.final_eval_mode = _eval_mode_pass(copy, data, d, loss_fn, step)
    rec.seconds = time.perf_counter() - started
    return rec


def _relative_change(model: nn.Module, start: dict[str, torch.Tensor]) -> float:
    moved = sum(float((p.detach() - start[n]).pow(2).sum()) for n, p in model.named_parameters())
    size = sum(float(v.pow(2).sum()) for v in start.values())
    return math.sqrt(moved) / math.sqrt(size) if size > 0 else math.nan


def _copy(model: nn.Module, d: Draw, data: Data, fault: Fault) -> nn.Module:
    """The trained model's twin, built afresh (the hook is not on it) with its weights."""
    with quiet_rng():
        copy = build(d, data, softmax_output=fault.softmax_output, recurrence=fault.recurrence)
    copy.load_state_dict(model.state_dict())
    return copy


def _eval_mode_pass(
    model: nn.Module, data: Data, d: Draw, loss_fn: LossFn, step: int
) -> Evaluation:
    """The loop's validation pass as it should be: eval mode, no grad, same loss function."""

    def forward(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = model(x)
        return out, loss_fn(out, y)

    model.eval()
    with torch.no_grad(), quiet_rng():
        return validation_pass(forward, data, d, step)


__all__ = ["measure", "train"]
