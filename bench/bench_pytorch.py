"""Overhead of the PyTorch hook on real training steps (issue: PyTorch hook).

Trains an MLP of about 2.4M parameters and a CNN of about 0.8M (batch 64, synthetic data,
1 torch thread) with and without the hook, in one process, configurations interleaved round by
round so that machine noise hits them alike. Reports the median step time of each configuration
as a ratio to training without the hook, and for "every tensor every step" also the floor: the
same training step plus copying the same number of bytes and writing them to this disk.

    .venv/bin/python bench/bench_pytorch.py [--rounds 5] [--steps 30] [--model mlp|cnn|both]
        [--compile]

With ``--compile`` every model is ``torch.compile``d (inductor) and the hook is given the compiled
module; the graph breaks Dynamo counted are reported with the ratios.

Interleaving hides a background writer's cost: while one configuration's writer works, the other
configurations' steps run (and pay for it). ``--sustained N`` measures "every tensor every step"
as a training script pays it: each run is a fresh process that trains N steps in a row and
closes the hook (everything written), runs of each configuration alternating; it reports the
median wall time and process CPU time per step (closing included) and their ratios to training
without the hook. ``--smdebug-python`` names an interpreter with smdebug installed, to run
smdebug's hook (``include_collections=["all"]``, every step) the same way in the same rounds:

    .venv/bin/python bench/bench_pytorch.py --sustained 50 --rounds 5 [--model mlp]
        [--smdebug-python /path/to/venv-with-smdebug/bin/python]

``--pace-ms P`` paces ``--sustained`` runs as real training is paced (issue 48: a step every
50-500 ms): each step is followed by a sleep to the next multiple of P ms, so the writer
publishes a segment every ``flush_secs`` with what came in meanwhile; CPU time is then what
to compare (a sleep costs none), beside the extra CPU over no hook and the CPU of opening the
trial afterwards (each tool's own ``create_trial`` and its steps, in the same process):

    .venv/bin/python bench/bench_pytorch.py --sustained 300 --rounds 3 --model small \
        --pace-ms 50 --smdebug-python /path/to/venv-with-smdebug/bin/python

``--configs`` picks the configurations of ``--sustained`` (the CPU time of every thread, fresh
processes: steadier than the interleaved wall times on a shared machine), e.g. the default hook
(losses and the vital signs of every step) against no hook:

    .venv/bin/python bench/bench_pytorch.py --sustained 300 --rounds 5 --model mlp \
        --configs "no hook,default (losses)"
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

import tensortap.pytorch as tt


def mlp() -> nn.Module:
    return nn.Sequential(
        nn.Linear(1024, 1536), nn.ReLU(), nn.Linear(1536, 512), nn.ReLU(), nn.Linear(512, 10)
    )


def small() -> nn.Module:
    """Eight 32x32 layers: about 50 tensors of 4 kB a step under ``all`` (the issue-48 paced
    workload: 300 steps x 50 tensors of 32x32)."""
    layers: list[nn.Module] = []
    for _ in range(8):
        layers += [nn.Linear(32, 32), nn.ReLU()]
    return nn.Sequential(*layers[:-1], nn.Linear(32, 10))


def cnn() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(64, 128, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(128 * 4 * 4, 384),
        nn.ReLU(),
        nn.Linear(384, 10),
    )


MODELS: dict[str, tuple[Callable[[], nn.Module], tuple[int, ...]]] = {
    "mlp": (mlp, (64, 1024)),
    "cnn": (cnn, (64, 3, 32, 32)),
    "small": (small, (32, 32)),
}

CONFIGS: dict[str, dict[str, Any] | None] = {
    "no hook": None,
    "default (losses)": {},
    "training loop facts + losses every 10 steps": {
        "save_config": tt.SaveConfig(save_interval=10),
        "include_collections": ["losses", "training_loop"],
    },
    "weights+gradients every 10 steps": {
        "save_config": tt.SaveConfig(save_interval=10),
        "include_collections": ["weights", "biases", "gradients", "losses"],
    },
    "gradient reductions every step": {
        "save_config": tt.SaveConfig(save_interval=1),
        "reduction_config": tt.ReductionConfig(
            reductions=["min", "max", "mean"], norms=["l1", "l2"]
        ),
        "include_collections": ["gradients", "losses"],
    },
    "every tensor every step": {
        "save_config": tt.SaveConfig(save_interval=1),
        "include_collections": ["all"],
    },
}
FLOOR = "floor: copy + write the same bytes"
COPY_ONLY = "copy the same bytes only"


class Runner:
    """One model, one optimizer, optionally one hook: runs timed training steps."""

    def __init__(
        self, model_name: str, config: dict[str, Any] | None, out: Path, compiled: bool = False
    ) -> None:
        factory, shape = MODELS[model_name]
        torch.manual_seed(0)
        self.model = factory()
        self.runner: nn.Module = torch.compile(self.model) if compiled else self.model
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.01)
        self.x = torch.randn(shape)
        self.y = torch.randint(0, 10, (shape[0],))
        self.hook = None
        self.out = out
        self.copy_bytes = 0
        self.write = False
        self.sink: Any = None
        if config is not None:
            self.hook = tt.Hook(out, **config)
            self.hook.register_module(self.runner)

    def step(self) -> None:
        self.opt.zero_grad()
        F.cross_entropy(self.runner(self.x), self.y).backward()
        self.opt.step()
        if self.copy_bytes:
            self._copy_and_write()

    def _copy_and_write(self) -> None:
        """The floor: copy params, grads and activation-sized bytes once, write them to disk."""
        assert self.sink is not None
        left = self.copy_bytes
        for p in self.model.parameters():
            for t in (p.detach(), p.grad):
                if t is not None:
                    data = t.clone().numpy()
                    if self.write:
                        self.sink.write(memoryview(data).cast("B"))
                    left -= data.nbytes
        if left > 0:
            data = self.activations[: left // 4].clone().numpy()
            if self.write:
                self.sink.write(memoryview(data).cast("B"))

    def enable_floor(self, bytes_per_step: int, write: bool) -> None:
        self.copy_bytes = bytes_per_step
        self.write = write
        self.activations = torch.randn(max(bytes_per_step // 4, 1))
        self.out.mkdir(parents=True, exist_ok=True)
        self.sink = open(self.out / "floor.bin", "wb", buffering=1 << 20)  # noqa: SIM115

    def round(self, steps: int) -> list[float]:
        times = []
        for _ in range(steps):
            t0 = time.perf_counter()
            self.step()
            times.append(time.perf_counter() - t0)
        return times

    def settle(self) -> None:
        """Between rounds: let the hook publish, and the floor's file reach the disk."""
        if self.hook is not None:
            self.hook.flush()
        if self.sink is not None:
            self.sink.flush()
            os.fsync(self.sink.fileno())
            self.sink.seek(0)
            self.sink.truncate()

    def written(self, steps: int) -> tuple[float, float]:
        """Bytes and files written per training step so far."""
        assert self.hook is not None
        self.hook.flush()
        status = self.hook.status.writer
        files = sum(1 for p in Path(self.hook.out_dir).rglob("*") if p.is_file())
        return status.bytes_written / steps, files / steps

    def close(self) -> None:
        if self.hook is not None:
            self.hook.close()
        if self.sink is not None:
            self.sink.close()


GROUPS = (
    (
        "no hook",
        "default (losses)",
        "training loop facts + losses every 10 steps",
        "weights+gradients every 10 steps",
        "gradient reductions every step",
    ),
    ("no hook", "every tensor every step", FLOOR, COPY_ONLY),
)


def bench(
    model_name: str, rounds: int, steps: int, root: Path, compiled: bool = False
) -> dict[str, Any]:
    """Per group, configurations take turns one step at a time (noise hits them alike)."""
    groups = GROUPS[:1] if compiled else GROUPS
    wanted = {name for group in groups for name in group}
    runners = {
        name: Runner(model_name, config, root / f"{model_name}-{i}", compiled)
        for i, (name, config) in enumerate(CONFIGS.items())
        if name in wanted
    }
    for runner in runners.values():  # warm up (and compile); tells the floor what to copy
        runner.round(3)
    if not compiled:
        per_step = runners["every tensor every step"].written(3)[0]
        runners[FLOOR] = Runner(model_name, None, root / f"{model_name}-floor")
        runners[FLOOR].enable_floor(int(per_step), write=True)
        runners[COPY_ONLY] = Runner(model_name, None, root / f"{model_name}-copy")
        runners[COPY_ONLY].enable_floor(int(per_step), write=False)
    medians: dict[tuple[int, str], float] = {}
    for g, group in enumerate(groups):
        times: dict[str, list[float]] = {name: [] for name in group}
        for _ in range(rounds):
            for _ in range(steps):
                for name in group:
                    times[name].extend(runners[name].round(1))
            for name in group:
                runners[name].settle()
        for name in group:
            medians[(g, name)] = statistics.median(times[name])
    total_steps = 3 + 2 * rounds * steps
    result: dict[str, Any] = {
        "params": sum(p.numel() for p in runners["no hook"].model.parameters()),
        "rows": [],
    }
    for g, group in enumerate(groups):
        base = medians[(g, "no hook")]
        for name in group:
            if g == 1 and name == "no hook":
                continue
            runner = runners[name]
            if runner.hook is not None:
                written = runner.written(total_steps if g == 0 else 3 + rounds * steps)
            else:
                written = (float(runner.copy_bytes if runner.write else 0), 0.0)
            ratio = f"{medians[(g, name)] / base:.3f}x"
            if name == "every tensor every step":
                ratio += f" (vs floor {medians[(g, name)] / medians[(g, FLOOR)]:.3f}x)"
            result["rows"].append((name, medians[(g, name)] * 1e3, ratio, *written))
    for runner in runners.values():
        runner.close()
    return result


def nothing_due_overhead(calls: int = 5000) -> float:
    """Microseconds the hook adds to a step when nothing is due (a tiny model, so the hook's
    cost is not lost in the model's)."""
    model, x = nn.Linear(4, 2), torch.randn(1, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    twin = nn.Linear(4, 2)
    twin_opt = torch.optim.SGD(twin.parameters(), lr=0.0)
    root = Path(tempfile.mkdtemp(prefix="tensortap-bench-"))
    hook = tt.Hook(root / "t", save_config=tt.SaveConfig(save_interval=10**9, start_step=1))
    hook.register_module(model)

    def loop(m: nn.Module, o: torch.optim.Optimizer) -> float:
        t0 = time.perf_counter()
        for _ in range(calls):
            o.zero_grad()
            m(x).sum().backward()
            o.step()
        return (time.perf_counter() - t0) / calls

    with_hook, without = [], []
    for _ in range(7):  # alternate, then compare medians: single loops vary by more than this
        with_hook.append(loop(model, opt))
        without.append(loop(twin, twin_opt))
    hook.close()
    shutil.rmtree(root, ignore_errors=True)
    return (statistics.median(with_hook) - statistics.median(without)) * 1e6


SUSTAINED = ("no hook", "every tensor every step")
SMDEBUG = "smdebug: every tensor every step"


def _smdebug_runner(model_name: str, out: Path) -> Runner:
    """A runner with smdebug's PyTorch hook saving its ``all`` collection every step."""
    import smdebug.pytorch as smd  # only in the interpreter given by --smdebug-python

    runner = Runner(model_name, None, out)
    hook = smd.Hook(
        out_dir=str(out), save_config=smd.SaveConfig(save_interval=1), include_collections=["all"]
    )
    hook.register_module(runner.model)
    runner.smdebug = hook  # type: ignore[attr-defined]
    return runner


def _paced(runner: Runner, steps: int, pace_s: float) -> None:
    """``steps`` steps, each followed by a sleep to the next multiple of ``pace_s``."""
    due = time.monotonic()
    for _ in range(steps):
        runner.step()
        due += pace_s
        delay = due - time.monotonic()
        if delay > 0:
            time.sleep(delay)


def _open_cpu_ms(config: str, path: Path) -> float | None:
    """The CPU of opening the written trial with its tool's own reader and listing its steps
    (smdebug's ``create_trial`` for smdebug's), or None when nothing was written."""
    if not path.exists():
        return None
    began = time.process_time()
    if config == SMDEBUG:
        from smdebug.trials import create_trial as smdebug_trial

        smdebug_trial(str(path)).steps()
    else:
        tt.create_trial(path).steps()
    return 1e3 * (time.process_time() - began)


def one_run(config: str, model_name: str, steps: int, pace_s: float = 0.0) -> dict[str, Any]:
    """In a fresh process: warm up 3 steps, then ``steps`` steps in a row and close (all
    written). Wall and process CPU per step, closing included; bytes on disk and files per
    step; with ``pace_s``, each step padded with a sleep to the pace."""
    root = Path(tempfile.mkdtemp(prefix="tensortap-sustained-", dir=os.environ.get("BENCH_DIR")))
    try:
        if config == SMDEBUG:
            runner = _smdebug_runner(model_name, root / "t")
        else:
            runner = Runner(model_name, CONFIGS[config], root / "t")
        runner.round(3)
        if runner.hook is not None:
            runner.hook.flush()
        wall0, cpu0 = time.perf_counter(), time.process_time()
        if pace_s:
            _paced(runner, steps, pace_s)
        else:
            runner.round(steps)
        loop = time.perf_counter() - wall0
        runner.close()
        smdebug = getattr(runner, "smdebug", None)
        if smdebug is not None:
            smdebug.close()
        wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
        files = [p for p in root.rglob("*") if p.is_file()]
        size = sum(p.stat().st_size for p in files)
        return {
            "wall_ms": 1e3 * wall / steps,
            "loop_ms": 1e3 * loop / steps,
            "cpu_ms": 1e3 * cpu / steps,
            "mb_per_step": size / (steps + 3) / 1e6,
            "files": len(files),
            "open_cpu_ms": _open_cpu_ms(config, root / "t"),
        }
    finally:
        shutil.rmtree(root, ignore_errors=True)


def sustained(
    model_name: str,
    steps: int,
    rounds: int,
    smdebug_python: str | None,
    chosen: tuple[str, ...] = SUSTAINED,
    pace_ms: float = 0.0,
) -> None:
    """Fresh processes, ``steps`` steps in a row each, the configurations alternating."""
    configs = [(c, sys.executable) for c in chosen]
    if smdebug_python:
        configs.append((SMDEBUG, smdebug_python))
    runs: dict[str, list[dict[str, float]]] = {c: [] for c, _ in configs}
    for r in range(rounds):
        for config, python in configs:
            command = [python, __file__, "--one", config, "--model", model_name]
            command += ["--steps", str(steps), "--pace-ms", str(pace_ms)]
            done = subprocess.run(command, capture_output=True, text=True)
            if done.returncode != 0:
                raise SystemExit(f"{config} failed:\n{done.stderr[-3000:]}")
            result = json.loads(done.stdout.strip().splitlines()[-1])
            runs[config].append(result)
            print(
                f"# round {r} {config}: {result['wall_ms']:.2f} ms/step wall "
                f"({result['loop_ms']:.2f} before closing), {result['cpu_ms']:.2f} ms/step CPU, "
                f"{result['mb_per_step']:.2f} MB/step, {result['files']} files, "
                f"open {result['open_cpu_ms']} ms CPU",
                flush=True,
            )
    medians = {
        c: {
            k: statistics.median(run[k] for run in v)
            for k in v[0]
            if all(run[k] is not None for run in v)
        }
        for c, v in runs.items()
    }
    base = medians["no hook"]
    paced = f", paced at a step every {pace_ms:g} ms" if pace_ms else ""
    print(
        f"\n## {model_name}: {steps} steps in a row per fresh process{paced}, median of "
        f"{rounds} runs"
    )
    print(
        "| configuration | wall/step | ratio | CPU/step | CPU ratio | extra CPU/step | MB/step "
        "| files | open (CPU) |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for config, m in medians.items():
        extra = m["cpu_ms"] - base["cpu_ms"]
        opened = f"{m['open_cpu_ms']:.1f} ms" if "open_cpu_ms" in m else "-"
        print(
            f"| {config} | {m['wall_ms']:.2f} ms | {m['wall_ms'] / base['wall_ms']:.2f}x "
            f"| {m['cpu_ms']:.2f} ms | {m['cpu_ms'] / base['cpu_ms']:.2f}x | {extra:.3f} ms "
            f"| {m['mb_per_step']:.3f} | {m['files']:.0f} | {opened} |"
        )
    if SMDEBUG in medians:
        ours = [c for c in medians if c not in ("no hook", SMDEBUG)]
        theirs = medians[SMDEBUG]
        for config in ours:
            m = medians[config]
            extra, their_extra = m["cpu_ms"] - base["cpu_ms"], theirs["cpu_ms"] - base["cpu_ms"]
            ratio = their_extra / extra if extra > 0 else float("inf")
            opened = theirs.get("open_cpu_ms", 0.0) / max(m.get("open_cpu_ms", 0.0), 1e-9)
            print(
                f"\n{config}: smdebug's extra CPU a step / tensortap's = {ratio:.1f}x; "
                f"smdebug's open CPU / tensortap's = {opened:.1f}x"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--model", choices=["mlp", "cnn", "small", "both"], default="both")
    parser.add_argument("--compile", action="store_true", help="torch.compile every model")
    parser.add_argument(
        "--sustained", type=int, metavar="N", help="fresh processes, N steps in a row each"
    )
    parser.add_argument("--smdebug-python", help="an interpreter with smdebug (for --sustained)")
    parser.add_argument(
        "--pace-ms",
        type=float,
        default=0.0,
        help="for --sustained: a step every this many ms (a sleep after each), as real training",
    )
    parser.add_argument(
        "--configs",
        help="for --sustained: the configurations, comma-separated (default: 'no hook,every "
        "tensor every step'); 'no hook,default (losses)' times the default hook",
    )
    parser.add_argument("--one", help=argparse.SUPPRESS)  # a child process of --sustained
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.one:
        print(json.dumps(one_run(args.one, args.model, args.steps, args.pace_ms / 1e3)))
        return
    machine = f"{platform.machine()} {platform.processor() or ''}".strip()
    print(f"# {machine}, cpus={os.cpu_count()}, torch {torch.__version__}, 1 torch thread")
    if args.sustained:
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
        print(f"# {args.rounds} fresh processes per configuration, alternating; load average")
        print(f"# (1 min) at the start: {load:.2f}")
        for model_name in ["mlp", "cnn"] if args.model == "both" else [args.model]:
            chosen = tuple(args.configs.split(",")) if args.configs else SUSTAINED
            unknown = [c for c in chosen if c not in CONFIGS]
            if unknown or "no hook" not in chosen:
                parser.error(f"--configs: 'no hook' and some of {list(CONFIGS)}, got {chosen}")
            sustained(
                model_name, args.sustained, args.rounds, args.smdebug_python, chosen, args.pace_ms
            )
        return
    print(f"# {args.rounds} rounds x {args.steps} steps per configuration; configurations take")
    print("# turns one step at a time within a group; ratios are to 'no hook' of the same group")
    print(f"# hook cost of a step when nothing is due: {nothing_due_overhead():.1f} us")
    root = Path(tempfile.mkdtemp(prefix="tensortap-bench-", dir=os.environ.get("BENCH_DIR")))
    try:
        for model_name in ["mlp", "cnn"] if args.model == "both" else [args.model]:
            result = bench(model_name, args.rounds, args.steps, root, args.compile)
            how = ", torch.compile (inductor)" if args.compile else ""
            print(f"\n## {model_name} ({result['params'] / 1e6:.2f}M parameters, batch 64{how})")
            print("| configuration | median step | ratio | bytes/step | files/step |")
            print("|---|---|---|---|---|")
            for name, ms, ratio, nbytes, files in result["rows"]:
                print(f"| {name} | {ms:.2f} ms | {ratio} | {nbytes / 1e6:.2f} MB | {files:.2f} |")
        if args.compile:
            from torch._dynamo.utils import counters

            print(f"\ngraph breaks counted by Dynamo: {sum(counters['graph_break'].values())}")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
