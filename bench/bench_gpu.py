"""Overhead of the PyTorch hook on large-model GPU training (issue 21).

A GPT-2-small shape (12 layers, d=768, 12 heads, untied head: 163M parameters; batch 8 x 1024
tokens; AdamW) and a ResNet-50 (batch 128 x 3x224x224; SGD), bf16 autocast, in one process. Each
configuration trains its own copy of the model; configurations take turns one step at a time
(so the machine's drift hits them alike), each step ended by a CUDA synchronize; the figure is
the median step time as a ratio to training without the hook in the same run.

Each hook configuration is also set against its *floor*: plain PyTorch doing the same work the
cheapest way. For statistics of every gradient that is multi-tensor kernels over all gradients
(``torch._foreach_norm``, ``torch._foreach_max``), stacked, one non-blocking copy to pinned host
memory per step; for raw saves, one copy of the same tensors to the host and a write to disk.

    python bench/bench_gpu.py [--model gpt|resnet|both] [--rounds 5] [--steps 20]
    python bench/bench_gpu.py --device cpu --small --rounds 1 --steps 2   # a smoke run

``--suite issue35`` measures the GPT-2-small shape (bf16 autocast, AdamW) eagerly and under
``torch.compile(fullgraph=True)``: no hook (the floor), the default hook, fixed-slot statistics
of weights and gradients every step, the same plus activations and their gradients (forward and
backward), the foreach floor (the slot kernels over every weight and gradient and one
non-blocking copy, no hook), the guard and rollback. Each row is one function in ``ROWS35``
that sets a run up; a row not built yet says so in the table.

    python bench/bench_gpu.py --suite issue35 [--compile off|on|both] [--rows 'no hook,slots']

Targets of issue 35 (GPT-2-small shape): statistics every step <= 1.03x, guard <= 1.01x.
Targets on an H200 (issue 21): l2 of every gradient every step <= 1.03x; min/max/mean/l1/l2 every
step <= 1.08x (within ~1% of the floor); default <= 1.005x; numerics every step <= 1.05x; guard
<= 1.01x.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import os
import platform
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

import tensortap.pytorch as tt


class Block(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.act = nn.GELU()  # a module, so that relu_activations (and their slots) see it

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, d // self.heads).unbind(2)
        a = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True
        )
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.out(self.act(self.fc(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, layers: int, d: int, heads: int, vocab: int, context: int) -> None:
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(context, d)
        self.blocks = nn.Sequential(*(Block(d, heads) for _ in range(layers)))
        self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(idx.shape[1], device=idx.device)
        return self.head(self.ln(self.blocks(self.tok(idx) + self.pos(pos))))


class Bottleneck(nn.Module):
    def __init__(self, cin: int, width: int, stride: int) -> None:
        super().__init__()
        cout = width * 4
        self.body = nn.Sequential(
            nn.Conv2d(cin, width, 1, bias=False),
            nn.BatchNorm2d(width),
            nn.ReLU(inplace=True),
            nn.Conv2d(width, width, 3, stride, 1, bias=False),
            nn.BatchNorm2d(width),
            nn.ReLU(inplace=True),
            nn.Conv2d(width, cout, 1, bias=False),
            nn.BatchNorm2d(cout),
        )
        self.skip: nn.Module = nn.Identity()
        if stride != 1 or cin != cout:
            self.skip = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.body(x) + self.skip(x))


def resnet(
    blocks: tuple[int, ...] = (3, 4, 6, 3), base: int = 64, classes: int = 1000
) -> nn.Module:
    """ResNet-50 (torchvision's layout, written out: no torchvision needed)."""
    layers: list[nn.Module] = [
        nn.Conv2d(3, base, 7, 2, 3, bias=False),
        nn.BatchNorm2d(base),
        nn.ReLU(inplace=True),
        nn.MaxPool2d(3, 2, 1),
    ]
    cin = base
    for i, n in enumerate(blocks):
        width = base * 2**i
        for j in range(n):
            layers.append(Bottleneck(cin, width, 2 if j == 0 and i > 0 else 1))
            cin = width * 4
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, classes)]
    return nn.Sequential(*layers)


def workloads(small: bool) -> dict[str, tuple[Callable[[], nn.Module], Callable[..., Any], Any]]:
    """name -> (model factory, optimizer factory, batch factory(device))."""
    if small:
        gpt = (2, 64, 4, 500, 64, 2)  # layers, d, heads, vocab, context, batch
        res, image, batch = ((1, 1, 1, 1), 8, 10), 32, 4
    else:
        gpt = (12, 768, 12, 50257, 1024, 8)
        res, image, batch = ((3, 4, 6, 3), 64, 1000), 224, 128
    layers, d, heads, vocab, context, gbatch = gpt

    def gpt_batch(device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        idx = torch.randint(0, vocab, (gbatch, context + 1), device=device)
        return idx[:, :-1], idx[:, 1:]

    def res_batch(device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.randn(batch, 3, image, image, device=device)
        return x, torch.randint(0, res[2], (batch,), device=device)

    return {
        "gpt": (
            lambda: GPT(layers, d, heads, vocab, context),
            lambda p: torch.optim.AdamW(p, lr=1e-4),
            gpt_batch,
        ),
        "resnet": (
            lambda: resnet(*res),
            lambda p: torch.optim.SGD(p, lr=0.01, momentum=0.9),
            res_batch,
        ),
    }


EVERY_STEP = tt.SaveConfig(save_interval=1)
GRADS = ["gradients", "losses"]
CONFIGS: dict[str, dict[str, Any] | None] = {
    "no hook": None,
    "default (losses)": {},
    "l2 of every gradient every step": {
        "save_config": EVERY_STEP,
        "reduction_config": tt.ReductionConfig(norms=["l2"]),
        "include_collections": GRADS,
    },
    "min/max/mean/l1/l2 of every gradient every step": {
        "save_config": EVERY_STEP,
        "reduction_config": tt.ReductionConfig(
            reductions=["min", "max", "mean"], norms=["l1", "l2"]
        ),
        "include_collections": GRADS,
    },
    "numerics of every gradient every step": {
        "save_config": EVERY_STEP,
        "reduction_config": tt.ReductionConfig(
            reductions=["amax", "dynamic_range", "nonfinite", "underflow_bf16"]
        ),
        "include_collections": GRADS,
    },
    "weights+gradients every 10 steps": {
        "save_config": tt.SaveConfig(save_interval=10),
        "include_collections": ["weights", "biases", "gradients", "losses"],
    },
    "guard": {},  # a tt.Guard, no hook
}
FLOORS = {
    "l2 of every gradient every step": "floor: foreach l2",
    "min/max/mean/l1/l2 of every gradient every step": "floor: foreach 5 statistics",
    "weights+gradients every 10 steps": "floor: copy + write every 10 steps",
}


class Runner:
    """One model copy, its optimizer, and a hook, a guard or a floor's work."""

    def __init__(self, workload: str, config: str, device: torch.device, out: Path, small: bool):
        factory, make_opt, batch = workloads(small)[workload]
        torch.manual_seed(0)
        self.model = factory().to(device)
        self.opt = make_opt(self.model.parameters())
        self.x, self.y = batch(device)
        self.device = device
        self.config = config
        self.hook: tt.Hook | None = None
        self.guard: tt.Guard | None = None
        self.step_no = 0
        self.out = out
        params = CONFIGS.get(config)
        if config == "guard":
            self.guard = tt.Guard(self.opt, self.model)
        elif params is not None:
            self.hook = tt.Hook(out, **params)
            self.hook.register_module(self.model)
            self.hook.register_optimizer(self.opt)
        self.pinned: torch.Tensor | None = None
        self.sink: Any = None

    def autocast(self) -> Any:
        if self.device.type == "cuda":
            return torch.autocast("cuda", dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def step(self) -> None:
        self.opt.zero_grad(set_to_none=True)
        with self.autocast():
            out = self.model(self.x)
            loss = F.cross_entropy(out.reshape(-1, out.shape[-1]).float(), self.y.reshape(-1))
        loss.backward()
        if self.guard is not None:
            self.guard.observe(loss)
        self.floor_work()
        self.opt.step()
        self.step_no += 1

    def floor_work(self) -> None:
        grads = [p.grad for p in self.model.parameters() if p.grad is not None]
        if self.config == "floor: foreach l2":
            self._to_host(torch.stack(torch._foreach_norm(grads, 2)))
        elif self.config == "floor: foreach 5 statistics":
            parts = [
                torch.stack(torch._foreach_norm(grads, 1)),
                torch.stack(torch._foreach_norm(grads, 2)),
                torch.stack(torch._foreach_max(grads)),
                torch.stack(torch._foreach_max(torch._foreach_neg(grads))),
                torch.stack([g.mean(dtype=torch.float32) for g in grads]),
            ]
            self._to_host(torch.cat([p.float() for p in parts]))
        elif self.config == "floor: copy + write every 10 steps" and self.step_no % 10 == 0:
            if self.sink is None:
                self.out.mkdir(parents=True, exist_ok=True)
                self.sink = open(self.out / "floor.bin", "wb", buffering=1 << 20)  # noqa: SIM115
            for t in [p.detach() for p in self.model.parameters()] + grads:
                self.sink.write(memoryview(t.float().cpu().numpy()).cast("B"))

    def _to_host(self, values: torch.Tensor) -> None:
        if self.pinned is None or self.pinned.shape != values.shape:
            pin = self.device.type == "cuda"
            self.pinned = torch.empty(values.shape, dtype=values.dtype, pin_memory=pin)
        self.pinned.copy_(values, non_blocking=True)

    def timed_step(self) -> float:
        t0 = time.perf_counter()
        self.step()
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return time.perf_counter() - t0

    def close(self) -> None:
        if self.hook is not None:
            self.hook.close()
        if self.sink is not None:
            self.sink.close()


def bench(
    workload: str, device: torch.device, rounds: int, steps: int, root: Path, small: bool
) -> list[tuple[str, float, float, str]]:
    names = [*CONFIGS, *FLOORS.values()]
    runners = {
        n: Runner(workload, n, device, root / f"{workload}-{i}", small) for i, n in enumerate(names)
    }
    for runner in runners.values():  # warm up: allocator, cuDNN autotuning, first saves
        for _ in range(3):
            runner.timed_step()
    times: dict[str, list[float]] = {n: [] for n in names}
    for _ in range(rounds):
        for _ in range(steps):
            for name in names:
                times[name].append(runners[name].timed_step())
        for runner in runners.values():
            if runner.hook is not None:
                runner.hook.flush()
    medians = {n: statistics.median(t) for n, t in times.items()}
    base = medians["no hook"]
    rows = []
    for name in names:
        floor = FLOORS.get(name)
        versus = f"{medians[name] / medians[floor]:.3f}x of the floor" if floor else ""
        rows.append((name, medians[name] * 1e3, medians[name] / base, versus))
    for runner in runners.values():
        runner.close()
    return rows


# -- issue 35: slots, activations forward+backward, guard and rollback, eager and compiled --

SLOT_STATS = tt.ReductionConfig(
    reductions=["min", "max", "mean", "std", "nonfinite"], abs_reductions=["max"], norms=["l2"]
)


class NotBuilt(Exception):
    """A row whose feature is not in this tree yet (the table says so)."""


class Run35:
    """One model copy (eager or compiled), its optimizer, and what its row set up."""

    def __init__(
        self, device: torch.device, out: Path, small: bool, compiled: bool, backend: str
    ) -> None:
        factory, make_opt, batch = workloads(small)["gpt"]
        torch.manual_seed(0)
        self.model = factory().to(device)
        self.opt = make_opt(self.model.parameters())
        self.runner: nn.Module = self.model
        if compiled:
            self.runner = torch.compile(self.model, fullgraph=True, backend=backend)  # type: ignore[assignment]
        self.x, self.y = batch(device)
        self.device = device
        self.out = out
        self.hook: tt.Hook | None = None
        self.guard: Any = None
        self.watch: tt.SpikeWatch | None = None
        self.before_update: Callable[[], None] | None = None  # a row's work after backward
        self.pinned: torch.Tensor | None = None

    def step(self) -> None:
        self.opt.zero_grad(set_to_none=True)
        autocast = (
            torch.autocast("cuda", dtype=torch.bfloat16)
            if self.device.type == "cuda"
            else contextlib.nullcontext()
        )
        with autocast:
            out = self.runner(self.x)
            loss = F.cross_entropy(out.reshape(-1, out.shape[-1]).float(), self.y.reshape(-1))
        loss.backward()
        if self.guard is not None:
            self.guard.observe(loss)
        if self.before_update is not None:
            self.before_update()
        self.opt.step()

    def timed_step(self) -> float:
        t0 = time.perf_counter()
        self.step()
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return time.perf_counter() - t0

    def hooked(self, **options: Any) -> tt.Hook:
        self.hook = tt.Hook(self.out, **options)
        self.hook.register_module(self.runner)
        self.hook.register_optimizer(self.opt)
        return self.hook

    def close(self) -> None:
        if self.hook is not None:
            self.hook.close()
        if self.guard is not None and hasattr(self.guard, "remove"):
            self.guard.remove()
        if self.watch is not None:
            self.watch.remove()


def row_floor(run: Run35) -> None:
    """Training alone."""


def row_default(run: Run35) -> None:
    run.hooked()


def row_slots(run: Run35) -> None:
    run.hooked(
        statistics="slots",
        save_config=EVERY_STEP,
        reduction_config=SLOT_STATS,
        include_collections=["weights", "biases", "gradients", "losses"],
    )


def row_activations(run: Run35) -> None:
    run.hooked(
        statistics="slots",
        save_config=EVERY_STEP,
        reduction_config=SLOT_STATS,
        include_collections=[
            *("weights", "biases", "gradients", "losses"),
            *("relu_activations", "activation_gradients"),
        ],
    )


def row_foreach_floor(run: Run35) -> None:
    """The slot kernels over every weight and gradient, one non-blocking copy: no hook."""
    from tensortap.pytorch._slot_kernels import slot_rows

    numels: dict[Any, torch.Tensor] = {}

    def work() -> None:
        params = [p.detach() for p in run.model.parameters()]
        grads = [p.grad for p in run.model.parameters() if p.grad is not None]
        rows = torch.cat([slot_rows(params, numels), slot_rows(grads, numels)])
        if run.pinned is None:
            run.pinned = torch.empty(rows.shape, dtype=rows.dtype, pin_memory=_pin(run.device))
        run.pinned.copy_(rows, non_blocking=True)

    run.before_update = work


def row_guard(run: Run35) -> None:
    """The sync-free guard with its defaults: AdamW (not fused) is undone from a snapshot of
    the parameters and the optimizer's state, taken before each step."""
    run.guard = tt.Guard(run.opt, run.model)


def _fused(run: Run35) -> None:
    run.opt = torch.optim.AdamW(run.model.parameters(), lr=1e-4, fused=True)


def row_fused_floor(run: Run35) -> None:
    """Training alone, with a fused AdamW (one kernel for the update)."""
    _fused(run)


def row_guard_fused(run: Run35) -> None:
    """The guard over a fused AdamW: the optimizer's own skip (GradScaler's found_inf), no
    snapshot, no update norm."""
    _fused(run)
    run.guard = tt.Guard(run.opt, run.model)


def row_guard_record(run: Run35) -> None:
    """The guard judging loss and gradient norm only, undoing nothing: its decision alone."""
    run.guard = tt.Guard(run.opt, run.model, action="record", signals=("loss", "grad_norm"))


def row_rollback(run: Run35) -> None:
    """A Rollback at every step boundary (no request: the check the ranks agree on) with a
    checkpoint every 100 steps kept on the device: what healing costs while nothing is wrong."""
    saved: dict[int, dict[str, Any]] = {}

    def save(step: int) -> None:
        saved.clear()  # the newest only: memory of one copy of the model and the optimizer
        saved[step] = {
            "model": {k: v.detach().clone() for k, v in run.model.state_dict().items()},
            "optimizer": copy.deepcopy(run.opt.state_dict()),
        }

    def load(step: int) -> None:
        run.model.load_state_dict(saved[step]["model"])
        run.opt.load_state_dict(saved[step]["optimizer"])

    rollback = tt.Rollback(tt.FunctionCheckpoints(save, load))
    step = 0

    def boundary() -> None:
        nonlocal step
        rollback.restore()
        if step % 100 == 0:
            rollback.checkpoint(step)
        rollback.trained(step, step)
        step += 1

    run.before_update = boundary


def row_spikes(run: Run35) -> None:
    """A SpikeWatch with its defaults (update norm per layer group, every attention call's
    largest logit, the output's largest logit and entropy, the forecast judging every step):
    its warm-up fixed at the shortest and trained through before timing, so that every timed
    step is judged. Eager only: it stands in for ``F.scaled_dot_product_attention`` while the
    forward runs, which a ``fullgraph`` compile cannot trace."""
    from tensortap.core._spike_forecast import ForecastConfig

    if run.runner is not run.model:
        raise NotBuilt("eager only (the watch patches F.scaled_dot_product_attention)")
    config = ForecastConfig(warmup=1)
    run.watch = tt.SpikeWatch(run.opt, run.model, config=config)
    for _ in range(config.recent + config.gap + config.baseline):
        run.step()


def _pin(device: torch.device) -> bool:
    return device.type == "cuda"


#: name -> a function that sets a run up (raises NotBuilt for a feature not in this tree).
ROWS35: dict[str, Callable[[Run35], None]] = {
    "no hook (floor)": row_floor,
    "default hook": row_default,
    "slots every step (weights, gradients)": row_slots,
    "slots every step + activations fwd+bwd": row_activations,
    "foreach floor (slot kernels, no hook)": row_foreach_floor,
    "guard (AdamW: snapshot undo)": row_guard,
    "guard, record only (loss, grad norm)": row_guard_record,
    "no hook, fused AdamW (floor)": row_fused_floor,
    "guard (fused AdamW: its own skip)": row_guard_fused,
    "rollback (checkpoint every 100 steps, on the device)": row_rollback,
    "spike watch (forecast judging every step)": row_spikes,
}
#: rows set against another row than the floor: the foreach floor, or the fused optimizer's
VERSUS = {
    "slots every step (weights, gradients)": "foreach floor (slot kernels, no hook)",
    "slots every step + activations fwd+bwd": "foreach floor (slot kernels, no hook)",
    "guard (fused AdamW: its own skip)": "no hook, fused AdamW (floor)",
}


def bench35(
    device: torch.device,
    rounds: int,
    steps: int,
    root: Path,
    small: bool,
    compiled: bool,
    backend: str,
    rows: list[str],
) -> tuple[list[tuple[str, str, str, str]], int]:
    """One table: every row's median step and its ratio to the floor; and Dynamo's graph
    breaks over the whole run (compiled)."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    runs: dict[str, Run35] = {}
    missing: dict[str, str] = {}
    for i, name in enumerate(rows):
        run = Run35(device, root / f"gpt35-{int(compiled)}-{i}", small, compiled, backend)
        try:
            ROWS35[name](run)
        except NotBuilt as exc:
            missing[name] = str(exc)
            continue
        runs[name] = run
    for run in runs.values():  # warm up (and compile)
        for _ in range(3):
            run.timed_step()
    times: dict[str, list[float]] = {n: [] for n in runs}
    for _ in range(rounds):
        for _ in range(steps):
            for name, run in runs.items():
                times[name].append(run.timed_step())
        for run in runs.values():
            if run.hook is not None:
                run.hook.flush()
    breaks = sum(counters["graph_break"].values())
    medians = {n: statistics.median(t) for n, t in times.items()}
    base = medians.get("no hook (floor)")
    table = []
    for name in rows:
        if name in missing:
            table.append((name, "n/a", "n/a", missing[name]))
            continue
        ratio = f"{medians[name] / base:.3f}x" if base else "n/a"
        versus = ""
        if VERSUS.get(name) in medians:
            versus = f"{medians[name] / medians[VERSUS[name]]:.3f}x of {VERSUS[name]}"
        table.append((name, f"{medians[name] * 1e3:.2f} ms", ratio, versus))
    for run in runs.values():
        run.close()
    return table, breaks


def main35(args: argparse.Namespace, device: torch.device, root: Path) -> None:
    rows = [r.strip() for r in args.rows.split(",")] if args.rows else list(ROWS35)
    unknown = [r for r in rows if r not in ROWS35]
    if unknown:
        raise SystemExit(f"unknown rows {unknown}; known: {list(ROWS35)}")
    modes = {"off": [False], "on": [True], "both": [False, True]}[args.compile]
    for compiled in modes:
        table, breaks = bench35(
            device, args.rounds, args.steps, root, args.small, compiled, args.backend, rows
        )
        how = f"torch.compile(fullgraph=True, backend={args.backend!r})" if compiled else "eager"
        print(f"\n## gpt{' (small)' if args.small else ''}, {how}")
        if compiled:
            print(f"# graph breaks over the run: {breaks}")
        print("| configuration | median step | ratio to the floor | vs its own floor |")
        print("|---|---|---|---|")
        for name, ms, ratio, versus in table:
            print(f"| {name} | {ms} | {ratio} | {versus} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", choices=["gpt", "resnet", "both"], default="both")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--small", action="store_true", help="tiny shapes (a smoke run)")
    parser.add_argument("--suite", choices=["issue21", "issue35"], default="issue21")
    parser.add_argument("--compile", choices=["off", "on", "both"], default="both")
    parser.add_argument("--backend", default="inductor", help="torch.compile backend (issue35)")
    parser.add_argument("--rows", default="", help="issue35: comma-separated rows (default all)")
    args = parser.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        torch.backends.cudnn.benchmark = True
    else:
        name = f"{platform.machine()} CPU, {os.cpu_count()} cores"
    print(f"# {name}, torch {torch.__version__}, bf16 autocast on CUDA")
    print(f"# {args.rounds} rounds x {args.steps} steps; configurations interleaved step by step;")
    print("# each step ends with a synchronize; median step time; ratios to 'no hook'")
    root = Path(tempfile.mkdtemp(prefix="tensortap-bench-gpu-", dir=os.environ.get("BENCH_DIR")))
    try:
        if args.suite == "issue35":
            main35(args, device, root)
            return
        for workload in ["gpt", "resnet"] if args.model == "both" else [args.model]:
            rows = bench(workload, device, args.rounds, args.steps, root, args.small)
            print(f"\n## {workload}{' (small)' if args.small else ''}")
            print("| configuration | median step | ratio | vs floor |")
            print("|---|---|---|---|")
            for config, ms, ratio, versus in rows:
                print(f"| {config} | {ms:.2f} ms | {ratio:.3f}x | {versus} |")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
