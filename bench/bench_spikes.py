"""How early the spike forecast warns (issue 46 item 3): injected spikes in small GPTs on the CPU.

A 2-layer GPT (vocabulary 64, context 32, width 32, 4 heads, ``F.scaled_dot_product_attention``,
about 30k parameters) learns sequences whose second half copies the first (the first half drawn
from a random Markov chain of the seed), so attention matters; AdamW, a 100-step warm-up then a
cosine decay to 10 % over ``--healthy-steps``. A :class:`tensortap.pytorch.SpikeWatch` gathers
the indicators at every step (and the per-sample loss through ``observe_loss``).

Each seed is trained once, healthy, for ``--healthy-steps`` steps; at its onset (drawn per seed
in steps 1000-2499) the model, optimizer and data generator are copied, and each injected
scenario is trained from that copy until its spike (at most ``--branch-steps`` steps):

- ``lr_burst``: the learning rate is multiplied by ``x1.02`` each step (a burst building up over
  a few hundred steps: a schedule gone wrong);
- ``data_burst``: a growing share of each batch (0 to 100 % over 1,500 steps) is noise tokens;
- ``logit_growth``: the query and key weights' learning rate grows ``x1.02`` a step (max
  attention logits grow until the softmax saturates).

So every healthy step is trained once: the injected runs share their history up to the onset
with the healthy run (it is their pre-onset history), and a false warning is counted once.

A *spike* is the first step after the onset whose loss exceeds 1.5 x the median loss of the
100 steps before the onset. A spike is *caught* when the first warning after the onset comes at
least ``--lead`` (50) steps before it. Every warning of a healthy run is a false one.

Two stages: ``record`` trains and writes each run's indicator series (``.npz``: the values per
step, NaN where an indicator had none, and the loss) under ``--dir``; ``score`` replays the
recorded series through :class:`SpikeForecast` (exactly what the watch does online, so the
score is the watch's) and prints the table. Recording is the slow part (about 15 ms a step);
scoring takes seconds, so the forecast was developed by scoring recordings of the dev seeds
(0-29) again and again and scored once on held-out seeds: 300-319 scored the fitted warm-up of
2026-11-30, 400-419 the relapsing one (seeds 100-105, 200-205 and 300-319 scored earlier
versions and are not used again).

    .venv/bin/python bench/bench_spikes.py record --seeds heldout2 --dir bench/out/spikes
    .venv/bin/python bench/bench_spikes.py score --seeds heldout2 --dir bench/out/spikes
    .venv/bin/python bench/bench_spikes.py cost      # the watch's cost per step (CPU time)
    python bench/bench_spikes.py cost --device cuda  # on a GPU (wall time, synchronized steps)
"""

from __future__ import annotations

import argparse
import copy
import math
import os
import statistics
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

SCENARIOS = ("healthy", "lr_burst", "data_burst", "logit_growth")
INJECTED = SCENARIOS[1:]
VOCAB, CONTEXT, WIDTH, HEADS, LAYERS, BATCH = 64, 32, 32, 4, 2, 8
BASE_LR, WARMUP = 3e-3, 100
DATA_RAMP, LR_GROWTH = 1500, 1.02
SEEDS = {
    "dev": list(range(30)),
    "heldout": list(range(300, 320)),  # scored the forecast of 2026-11-30; not used again
    "heldout2": list(range(400, 420)),  # scored once, the relapsing warm-up (2026-12-04)
}
#: indicator families: what a user gets from the model alone, and from the loss as well
LOSS_SIGNALS = ("loss", "loss_tail")


def onset_of(seed: int) -> int:
    return 1000 + (seed * 7919) % 1500


@dataclass
class Recording:
    """One run's indicator series: ``values[step, i]`` for ``names[i]`` (NaN: none that step)."""

    scenario: str
    seed: int
    names: list[str]
    values: np.ndarray
    loss: np.ndarray
    onset: int | None = None
    spike: int | None = None
    step_seconds: float = 0.0
    watch_seconds: float = 0.0

    def save(self, path: Path) -> None:
        np.savez(
            path,
            names=np.array(self.names),
            values=self.values,
            loss=self.loss,
            meta=np.array(
                [
                    self.seed,
                    -1 if self.onset is None else self.onset,
                    -1 if self.spike is None else self.spike,
                ],
            ),
            seconds=np.array([self.step_seconds, self.watch_seconds]),
        )

    @classmethod
    def load(cls, path: Path) -> Recording:
        with np.load(path) as data:  # plain arrays: allow_pickle stays off
            seed, onset, spike = (int(v) for v in data["meta"])
            step_s, watch_s = (float(v) for v in data["seconds"])
            return cls(
                scenario=path.name.split("-")[0],
                seed=seed,
                names=[str(n) for n in data["names"]],
                values=data["values"],
                loss=data["loss"],
                onset=None if onset < 0 else onset,
                spike=None if spike < 0 else spike,
                step_seconds=step_s,
                watch_seconds=watch_s,
            )


@dataclass
class Result:
    scenario: str
    seed: int
    steps: int
    onset: int | None
    spike: int | None
    warnings: list[tuple[int, str]] = field(default_factory=list)
    settled_at: int | None = None
    first_bad_sample: int | None = None  # data_burst: the first step a noisy sample showed
    relapses: list[int] = field(default_factory=list)  # steps it went back into its warm-up


def _model(torch: Any) -> Any:
    nn, F = torch.nn, torch.nn.functional

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(WIDTH), nn.LayerNorm(WIDTH)
            self.q = nn.Linear(WIDTH, WIDTH)
            self.k = nn.Linear(WIDTH, WIDTH)
            self.v = nn.Linear(WIDTH, WIDTH)
            self.proj = nn.Linear(WIDTH, WIDTH)
            self.mlp = nn.Sequential(
                nn.Linear(WIDTH, 4 * WIDTH), nn.GELU(), nn.Linear(4 * WIDTH, WIDTH)
            )

        def forward(self, x: Any) -> Any:
            b, t, _ = x.shape
            h = self.ln1(x)

            def heads(z: Any) -> Any:
                return z.view(b, t, HEADS, WIDTH // HEADS).transpose(1, 2)

            a = F.scaled_dot_product_attention(
                heads(self.q(h)), heads(self.k(h)), heads(self.v(h)), is_causal=True
            )
            x = x + self.proj(a.transpose(1, 2).reshape(b, t, WIDTH))
            return x + self.mlp(self.ln2(x))

    class GPT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.wte = nn.Embedding(VOCAB, WIDTH)
            self.wpe = nn.Embedding(CONTEXT, WIDTH)
            self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
            self.ln = nn.LayerNorm(WIDTH)
            self.head = nn.Linear(WIDTH, VOCAB, bias=False)

        def forward(self, idx: Any) -> Any:
            x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
            for block in self.blocks:
                x = block(x)
            return self.head(self.ln(x))

    return GPT()


class _Trainer:
    """One seed's model, optimizer, data and watch; ``state()``/``restore()`` branch it."""

    def __init__(self, seed: int, schedule_steps: int) -> None:
        import torch

        import tensortap.pytorch as tt
        from tensortap.core._spike_forecast import ForecastConfig

        self.torch = torch
        torch.manual_seed(seed)
        self.gen = torch.Generator().manual_seed(10_000 + seed)
        transition = torch.distributions.Dirichlet(torch.full((VOCAB,), 0.2)).sample((VOCAB,))
        self.model = _model(torch)
        qk = [p for b in self.model.blocks for p in (b.q.weight, b.k.weight)]
        rest = [p for p in self.model.parameters() if all(p is not q for q in qk)]
        self.opt = torch.optim.AdamW(
            [{"params": rest}, {"params": qk, "qk": True}], lr=BASE_LR, weight_decay=0.01
        )
        # recording only: the forecast is replayed from the recording (it never judges here)
        self.watch = tt.SpikeWatch(self.opt, self.model, config=ForecastConfig(warmup=10**9))
        self.schedule_steps = schedule_steps
        half = CONTEXT // 2
        pool = torch.empty(8192, half + 1, dtype=torch.long)  # sequences drawn once, sampled
        pool[:, 0] = torch.randint(0, VOCAB, (len(pool),), generator=self.gen)
        for i in range(1, half + 1):
            pool[:, i] = torch.multinomial(transition[pool[:, i - 1]], 1, generator=self.gen)[:, 0]
        self.pool = pool
        self.names: list[str] = []
        self.seconds = 0.0

    def state(self) -> Any:
        return copy.deepcopy((self.model.state_dict(), self.opt.state_dict(), self.gen.get_state()))

    def restore(self, state: Any) -> None:
        model, opt, gen = copy.deepcopy(state)
        self.model.load_state_dict(model)
        self.opt.load_state_dict(opt)
        self.gen.set_state(gen)

    def step(self, step: int, scenario: str, onset: int | None) -> tuple[dict[str, float], float]:
        torch = self.torch
        half = CONTEXT // 2
        started = time.thread_time()
        first = self.pool[torch.randint(0, len(self.pool), (BATCH,), generator=self.gen)]
        seq = torch.cat([first[:, :half], first[:, :half], first[:, half:]], dim=1)
        injected = onset is not None and step >= onset
        if scenario == "data_burst" and injected:
            assert onset is not None
            share = min(1.0, (step - onset) / DATA_RAMP)
            noisy = torch.rand(BATCH, generator=self.gen) < share
            seq[noisy] = torch.randint(
                0, VOCAB, (int(noisy.sum()), seq.shape[1]), generator=self.gen
            )
        x, y = seq[:, :CONTEXT], seq[:, 1 : CONTEXT + 1]
        progress = min(1.0, step / self.schedule_steps)
        lr = BASE_LR * (
            step / WARMUP if step < WARMUP else 0.1 + 0.45 * (1 + math.cos(math.pi * progress))
        )
        burst = 1.0
        if injected and scenario in ("lr_burst", "logit_growth"):
            assert onset is not None
            burst = LR_GROWTH ** (step - onset)
        for group in self.opt.param_groups:
            boosted = scenario == "lr_burst" or (scenario == "logit_growth" and "qk" in group)
            group["lr"] = lr * (burst if boosted else 1.0)
        logits = self.model(x)
        per_token = torch.nn.functional.cross_entropy(
            logits.reshape(-1, VOCAB), y.reshape(-1), reduction="none"
        ).view(BATCH, CONTEXT)
        loss = per_token.mean()
        tail = float(per_token.detach().mean(1).max())  # the evidence for data bursts, below
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.opt.step()
        value = float(loss.detach())
        self.seconds += time.thread_time() - started
        judged = {k: v for k, v in self.watch.last_values.items() if "/head" not in k}
        judged.update(loss=value, loss_tail=tail)
        for name in judged:
            if name not in self.names:
                self.names.append(name)
        return judged, value


def _matrix(rows: list[dict[str, float]], names: list[str]) -> np.ndarray:
    out = np.full((len(rows), len(names)), np.nan)
    for i, row in enumerate(rows):
        for j, name in enumerate(names):
            if name in row:
                out[i, j] = row[name]
    return out


def record_seed(seed: int, healthy_steps: int, branch_steps: int, out: Path) -> str:
    """Train seed ``seed`` healthy, then each injected scenario from its onset; write them."""
    import torch

    torch.set_num_threads(1)
    onset = onset_of(seed)
    trainer = _Trainer(seed, healthy_steps)
    rows: list[dict[str, float]] = []
    losses: list[float] = []
    branch_state = None
    for step in range(healthy_steps):
        if step == onset:
            branch_state = trainer.state()
        row, loss = trainer.step(step, "healthy", None)
        rows.append(row)
        losses.append(loss)
    seconds = trainer.seconds / healthy_steps
    watch_seconds = trainer.watch.seconds_per_step
    Recording(
        "healthy",
        seed,
        list(trainer.names),
        _matrix(rows, trainer.names),
        np.array(losses),
        step_seconds=seconds,
        watch_seconds=watch_seconds,
    ).save(out / f"healthy-{seed}.npz")
    threshold = 1.5 * statistics.median(losses[onset - 100 : onset])
    assert branch_state is not None
    for scenario in INJECTED:
        trainer.restore(branch_state)
        trainer.seconds = 0.0
        brows: list[dict[str, float]] = []
        blosses: list[float] = []
        spike = None
        step = onset
        while step < onset + branch_steps:
            row, loss = trainer.step(step, scenario, onset)
            brows.append(row)
            blosses.append(loss)
            if spike is None and (not math.isfinite(loss) or loss > threshold):
                spike = step
            if spike is not None and step >= spike + 5:
                break
            step += 1
        Recording(
            scenario,
            seed,
            list(trainer.names),
            _matrix(brows, trainer.names),
            np.array(blosses),
            onset=onset,
            spike=spike,
            step_seconds=trainer.seconds / max(1, len(brows)),
        ).save(out / f"{scenario}-{seed}.npz")
    return f"seed {seed}: onset {onset}, {seconds * 1e3:.1f} ms a step"


def _record(args: tuple[int, int, int, Path]) -> str:
    return record_seed(*args)


def _series(rec: Recording, names: list[str], keep: Any) -> list[dict[str, float]]:
    cols = [(j, n) for j, n in enumerate(rec.names) if keep(n)]
    out = []
    for row in rec.values:
        out.append({n: float(row[j]) for j, n in cols if not math.isnan(row[j])})
    return out


def score_seed(seed: int, directory: Path, config: Any = None) -> list[Result]:
    """Replay one seed's recordings through a fresh forecast: the healthy run, then each
    injected run as the healthy history up to its onset followed by its branch. The forecast
    sees what a :class:`SpikeWatch` gathers (the loss columns are the bench's own evidence)."""
    from tensortap.core._spike_forecast import ForecastConfig, SpikeForecast

    def keep(name: str) -> bool:
        return name not in LOSS_SIGNALS

    healthy = Recording.load(directory / f"healthy-{seed}.npz")
    onset = onset_of(seed)
    forecast = SpikeForecast(config or ForecastConfig())
    at_onset = None
    rows = _series(healthy, healthy.names, keep)
    for step, row in enumerate(rows):
        if step == onset:
            at_onset = copy.deepcopy(forecast)
        forecast.update(step, row)
    results = [
        Result(
            "healthy",
            seed,
            len(rows),
            None,
            None,
            [(w.step, w.signal) for w in forecast.warnings],
            forecast.settled_at,
            relapses=list(forecast.relapses),
        )
    ]
    tail = healthy.values[:, healthy.names.index("loss_tail")]
    tail_before = float(np.max(tail[onset - 100 : onset]))
    for scenario in INJECTED:
        path = directory / f"{scenario}-{seed}.npz"
        if not path.exists() or at_onset is None:
            continue
        branch = Recording.load(path)
        replay = copy.deepcopy(at_onset)
        replay.warnings.clear()
        for i, row in enumerate(_series(branch, branch.names, keep)):
            replay.update(onset + i, row)
        bad = np.flatnonzero(branch.values[:, branch.names.index("loss_tail")] > tail_before)
        results.append(
            Result(
                scenario,
                seed,
                onset + len(branch.loss),
                onset,
                branch.spike,
                [(w.step, w.signal) for w in replay.warnings],
                replay.settled_at,
                onset + int(bad[0]) if len(bad) else None,
                [step for step in replay.relapses if step >= onset],
            )
        )
    return results


def _score(args: tuple[int, Path]) -> list[Result]:
    return score_seed(*args)


def cost(rounds: int, steps: int, device_name: str = "cpu") -> None:
    """The watch's cost: the same GPT trained with and without a SpikeWatch, a step of each
    in turn; the median CPU time (thread time: one torch thread) of a step of each, or on a
    GPU the median wall time of a step ended by a synchronize. The watch judges every timed
    step: its warm-up is fixed at the shortest (the windows full, 325 steps), and both models
    train that long untimed first."""
    import torch

    import tensortap.pytorch as tt
    from tensortap.core._spike_forecast import ForecastConfig

    config = ForecastConfig(warmup=1)
    settle = config.recent + config.gap + config.baseline

    device = torch.device(device_name)
    on_gpu = device.type == "cuda"
    clock = time.perf_counter if on_gpu else time.thread_time
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(0)
    x = torch.randint(0, VOCAB, (BATCH, CONTEXT), generator=gen).to(device)
    y = torch.randint(0, VOCAB, (BATCH, CONTEXT), generator=gen).to(device)
    runs = {}
    for watched in (False, True):
        torch.manual_seed(0)
        model = _model(torch).to(device)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        runs[watched] = (model, opt, tt.SpikeWatch(opt, model, config=config) if watched else None)
    times: dict[bool, list[float]] = {False: [], True: []}
    for timed in [False] + [True] * rounds:
        # the two models step in turn, one step each: load that comes and goes hits both alike
        for _ in range(steps if timed else settle):
            for watched, (model, opt, _watch) in runs.items():
                started = clock()
                per_token = torch.nn.functional.cross_entropy(
                    model(x).reshape(-1, VOCAB), y.reshape(-1), reduction="none"
                ).view(BATCH, CONTEXT)
                loss = per_token.mean()
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                if on_gpu:
                    torch.cuda.synchronize(device)
                if timed:
                    times[watched].append(clock() - started)
    plain, watched_ms = (statistics.median(times[w]) * 1e3 for w in (False, True))
    watch = runs[True][2]
    own = watch.seconds_per_step * 1e3 if watch is not None else 0.0
    what = f"wall on {torch.cuda.get_device_name(device)}" if on_gpu else "CPU"
    print(
        f"cost: step {plain:.2f} ms {what} without the watch, {watched_ms:.2f} ms with it "
        f"({watched_ms / plain:.2f}x; the watch's own wall time {own:.3f} ms a step), "
        f"median of {rounds} x {steps} steps each, the two in turn; "
        f"load average {os.getloadavg()[0]:.1f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("stage", choices=("record", "score", "cost"))
    parser.add_argument("--seeds", choices=tuple(SEEDS), default="heldout2")
    parser.add_argument("--runs", type=int, default=None, help="seeds to use (the first N)")
    parser.add_argument("--dir", type=Path, default=Path("bench/out/spikes"))
    parser.add_argument("--healthy-steps", type=int, default=5000)
    parser.add_argument("--branch-steps", type=int, default=1200)
    parser.add_argument("--lead", type=int, default=50)
    parser.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--device", default="cpu", help="cost: the device to train on (cuda)")
    args = parser.parse_args()
    if args.stage == "cost":
        cost(rounds=args.rounds, steps=100, device_name=args.device)
        return
    seeds = SEEDS[args.seeds][: args.runs]
    directory = args.dir / args.seeds
    if args.stage == "record":
        directory.mkdir(parents=True, exist_ok=True)
        jobs = [(seed, args.healthy_steps, args.branch_steps, directory) for seed in seeds]
        with ProcessPoolExecutor(args.workers) as pool:
            for line in pool.map(_record, jobs):
                print(line, flush=True)
        return
    seeds = [s for s in seeds if (directory / f"healthy-{s}.npz").exists()]
    started = time.process_time()
    with ProcessPoolExecutor(args.workers) as pool:
        results = [r for rs in pool.map(_score, [(s, directory) for s in seeds]) for r in rs]
    report(results, args.lead, f"{args.seeds} {seeds[0]}-{seeds[-1]}")
    print(f"scored in {time.process_time() - started:.1f} s CPU of this process (workers aside)")
    recs = [Recording.load(directory / f"healthy-{s}.npz") for s in seeds]
    step = statistics.median(r.step_seconds for r in recs) * 1e3
    own = statistics.median(r.watch_seconds for r in recs) * 1e3
    print(f"recording: step {step:.2f} ms CPU (median of runs), the watch's own {own:.3f} ms")


def report(results: list[Result], lead: int, seeds: str) -> None:
    healthy_steps = 0
    false = 0
    print(f"\nseeds: {seeds}; lead wanted: >= {lead} steps")
    print(
        f"{'scenario':<14}{'runs':>5}{'spikes':>7}{'caught':>7}{'recall':>8}"
        f"{'lead median':>12}{'lead min':>9}{'missed (no warning)':>21}"
    )
    caught_all = spikes_all = 0
    caught_model = spikes_model = 0
    for scenario in SCENARIOS:
        rows = [r for r in results if r.scenario == scenario]
        if not rows:
            continue
        leads: list[int] = []
        caught = spikes = unwarned = 0
        for r in rows:
            if r.onset is None:  # the healthy run: every warning is false
                false += len(r.warnings)
                healthy_steps += r.steps
                continue
            if r.spike is None:
                continue
            spikes += 1
            after = [w for w in r.warnings if r.onset <= w[0] <= r.spike]
            if not after:
                unwarned += 1
                continue
            gap = r.spike - after[0][0]
            leads.append(gap)
            caught += gap >= lead
        caught_all += caught
        spikes_all += spikes
        if scenario != "data_burst":
            caught_model += caught
            spikes_model += spikes
        recall = f"{caught / spikes:.0%}" if spikes else "-"
        med = f"{statistics.median(leads):.0f}" if leads else "-"
        low = f"{min(leads)}" if leads else "-"
        print(
            f"{scenario:<14}{len(rows):>5}{spikes:>7}{caught:>7}{recall:>8}{med:>12}"
            f"{low:>9}{unwarned:>21}"
        )
    if spikes_all:
        print(f"all injected: {caught_all}/{spikes_all} caught ({caught_all / spikes_all:.0%})")
    if spikes_model:
        print(
            f"without data bursts: {caught_model}/{spikes_model} caught "
            f"({caught_model / spikes_model:.0%})"
        )
    rate = false / healthy_steps * 100_000 if healthy_steps else float("nan")
    print(f"false warnings: {false} in {healthy_steps} healthy steps = {rate:.2f} per 100k steps")
    for r in results:
        if r.onset is None and r.warnings:
            print(f"  false: seed {r.seed}: {r.warnings[:6]}")
    settled = [r.settled_at for r in results if r.onset is None]
    print(f"fitted warm-up ended at steps {settled}")
    for r in results:
        if r.relapses:
            print(f"  relapsed into its warm-up: {r.scenario} seed {r.seed} at {r.relapses[:6]}")
    bursts = [r for r in results if r.scenario == "data_burst" and r.spike is not None]
    if bursts:
        # the evidence that a data burst cannot be foreseen: its spike comes with its first
        # noisy samples (a batch's largest per-sample loss above any of the 100 steps before)
        gaps = [r.spike - r.first_bad_sample for r in bursts if r.first_bad_sample is not None]
        print(
            "data bursts: spike at onset + "
            f"{sorted(r.spike - r.onset for r in bursts if r.onset is not None)} steps; the "
            f"first noisy sample {sorted(gaps)} steps before the spike (at most "
            f"{max(gaps) if gaps else '-'}): up to then the data were clean samples of the "
            "healthy distribution"
        )
    for r in results:
        if r.onset is not None:
            first = [w for w in r.warnings if w[0] >= r.onset][:2]
            print(
                f"  {r.scenario:<13} seed {r.seed:>3}: onset {r.onset}, spike {r.spike}, "
                f"first warnings {first}"
            )


if __name__ == "__main__":
    main()
