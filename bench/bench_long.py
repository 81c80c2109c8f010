"""Long runs side by side with TensorBoard (issue 33): read every series, first paint, warm
paint, server memory, the runs list while a run is read, ``tensortap report``, and how each
grows with the run's length.

Runs (generated once, cached under ``--out``/runs keyed by size and tensortap's format):

- ``grid-<steps>x<series>``: ``series`` scalar curves of ``steps`` steps each, the same values
  for both tools. tensortap's copy goes through its real background writer
  (``tensortap.writer.TrialWriter``: one ``StepBatch`` of raw one-element records per step, in
  the ``scalars`` collection, what ``Hook.save_scalar`` hands it) rather than through the
  hook, whose per-call bookkeeping (~7-9 us a value here, against ~3-5 us through the writer)
  would take 15 minutes for 10^8 values; TensorBoard's through its own ``EventFileWriter``,
  one event per value as ``SummaryWriter.add_scalar`` writes (~16-27 us a value here: its
  record CRC is pure Python), and only for runs of at most ``--tb-max-values`` values (the
  others are listed in the output).
- ``reference-<steps>``: the issue's run, through ``tensortap.Hook`` (loss, learning rate,
  gradient norm, and 20 gradients saved with their l2 norm) and ``SummaryWriter``-style
  ``add_scalar`` events for TensorBoard: 23 series.
- ``wide-<steps>x<series>``: many series (10^4), few steps: opening it.
- ``paced-<steps>x<series>``: the grid's values written the way a user's job writes them,
  through ``tensortap.Hook.save_scalar`` at a step every ``PACED_STEP_S`` (20 ms), so the
  writer publishes a segment every ``flush_secs`` (issue 48): compare with ``grid-`` of the
  same size, written flat out by the writer alone.

Measures (median of ``--repeat``; a measure that takes longer than ``--repeat-cap-s`` once is
not repeated), each for tensortap and TensorBoard on the same data:

- read: CPU (and wall) of reading every series, in a fresh process (imports not counted):
  ``SeriesReader(path).series()`` and ``trial.series()`` once the series path exists, else
  the column reader ``tensortap export`` uses (``trials.columns.scalar_columns``);
  TensorBoard's ``EventAccumulator`` with ``size_guidance`` 0 (keep everything); ``tbparse``
  when installed.
- paint: wall time from launching the server (``tensortap serve`` / ``tensorboard --logdir``,
  a subprocess) to the first chart drawn with its points in a headless Chromium. The page is
  opened once the server lists the run (TensorBoard: once its scalars list a tag; opened
  before, its page waits for its 30-second reload). tensortap's chart: a plotly chart holding
  points; TensorBoard's: a scalar card of its time-series page with its line chart in place
  and no spinner, after its ``/timeSeries`` answer. Also TensorBoard's launch to its first
  answer of ``/data/plugin/scalars/scalars`` that holds the first tag's points.
- warm: the page loaded again on the warm server, navigation start to the chart drawn; and
  one chart's points asked again (a series in the middle of the run).
- rss: the server's resident memory (its process tree: TensorBoard's data server included)
  right after the first paint.
- runs_list: the slowest answer of the runs list (``/api/runs``; TensorBoard's
  ``/data/runs``), asked every 0.1 s from launch until the first paint (while the run is read).
- report: ``tensortap report`` CPU and wall (a subprocess), HTML size, peak memory.

A server or reader that goes past ``--timeout-s`` or ``--max-rss-gib`` is stopped, and the
figure is shown as a lower bound (">").

    PYTHONPATH=src .venv/bin/python bench/bench_long.py --generate-only  # write the runs first
    PYTHONPATH=src .venv/bin/python bench/bench_long.py            # the default grid (~20 min)
    PYTHONPATH=src .venv/bin/python bench/bench_long.py --small    # a quick check (a few minutes)
    PYTHONPATH=src .venv/bin/python bench/bench_long.py --runs grid-100000x100,reference-100000 \\
        --measures read,paint --repeat 5
    PYTHONPATH=src .venv/bin/python bench/bench_long.py --list     # the runs and their sizes

The runs take about 10 GB (the 10^8 values of grid-1000000x100: 8.5 GB, written in 17
minutes on a loaded 2-core machine). Writes ``<out>/results-<time>.json`` and
``<out>/results-<time>.md`` (the table).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")  # TensorFlow, when installed, speaks at import
HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DEFAULT_OUT = HERE / "out" / "long"
GENERATOR_VERSION = 1  # bump when the generated values or names change
MEASURES = ("read", "paint", "warm", "rss", "runs_list", "report")
CHUNK = 2000  # steps generated at a time


# -- the runs ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunSpec:
    """One generated run: its kind (grid, reference, wide), steps and series."""

    kind: str
    steps: int
    series: int

    @property
    def name(self) -> str:
        if self.kind == "reference":
            return f"reference-{self.steps}"
        return f"{self.kind}-{self.steps}x{self.series}"

    @property
    def values(self) -> int:
        return self.steps * self.series

    @staticmethod
    def parse(text: str) -> RunSpec:
        """``grid-1000x10``, ``wide-100x10000`` or ``reference-1000``."""
        kind, _, size = text.partition("-")
        try:
            if kind == "reference":
                return RunSpec("reference", int(size), REFERENCE_SERIES)
            if kind in ("grid", "wide", "paced"):
                steps, _, series = size.partition("x")
                return RunSpec(kind, int(steps), int(series))
        except ValueError:
            pass
        raise SystemExit(
            f"bench_long: a run is grid-<steps>x<series>, wide-<steps>x<series>, "
            f"paced-<steps>x<series> or reference-<steps>, got {text!r}"
        )


#: A paced run's step (``paced-<steps>x<series>``): what a small model's training step takes;
#: the writer then cuts a segment every ``flush_secs`` (1 s: 50 steps), as in a user's job.
PACED_STEP_S = 0.02
REFERENCE_LAYERS = 20
REFERENCE_SERIES = 3 + REFERENCE_LAYERS  # loss, learning rate, gradient norm, 20 layers' l2


def default_runs() -> list[RunSpec]:
    """Length at 100 series (10^3..10^6 steps), width at 10^3 steps (10..10^3 series), the
    issue's reference run (1k/10k/100k steps), and 10^4 series of 100 steps."""
    runs = [RunSpec("grid", n, 100) for n in (1_000, 10_000, 100_000, 1_000_000)]
    runs += [RunSpec("grid", 1_000, s) for s in (10, 1_000)]
    runs += [RunSpec("reference", n, REFERENCE_SERIES) for n in (1_000, 10_000, 100_000)]
    runs.append(RunSpec("wide", 100, 10_000))
    runs += [RunSpec("paced", n, 100) for n in (1_000, 3_000)]
    return runs


def small_runs() -> list[RunSpec]:
    return [
        RunSpec("grid", 1_000, 10),
        RunSpec("grid", 1_000, 100),
        RunSpec("grid", 10_000, 100),
        RunSpec("reference", 1_000, REFERENCE_SERIES),
        RunSpec("wide", 20, 1_000),
        RunSpec("paced", 300, 100),
    ]


def series_names(spec: RunSpec) -> list[str]:
    width = max(4, len(str(spec.series - 1)))
    return [f"series/{i:0{width}d}" for i in range(spec.series)]


def grid_values(spec: RunSpec, first: int, last: int) -> np.ndarray:
    """Steps ``[first, last)`` of every series, float32 of shape (steps, series): decaying
    curves with noise, the same for both tools (seeded by the chunk)."""
    steps = np.arange(first, last, dtype=np.float64)[:, None]
    scale = 1.0 + (np.arange(spec.series) % 7)[None, :]
    rng = np.random.default_rng([GENERATOR_VERSION, spec.series, first])
    noise = rng.normal(0.0, 0.02, (last - first, spec.series))
    return (scale / (1.0 + steps * (10.0 / spec.steps)) + noise).astype(np.float32)


def reference_values(steps: int, first: int, last: int) -> dict[str, np.ndarray]:
    """The reference run's loss, learning rate, gradient norm and per-layer norms (float64)."""
    rng = np.random.default_rng([GENERATOR_VERSION, 23, first])
    s = np.arange(first, last, dtype=np.float64)
    n = last - first
    layer_norms = np.abs(
        (0.5 + np.arange(REFERENCE_LAYERS))[None, :] / (1 + s[:, None] * (5.0 / steps))
        + rng.normal(0, 0.05, (n, REFERENCE_LAYERS))
    )
    return {
        "loss": 2.3 / (1 + s * (20.0 / steps)) + rng.normal(0, 0.03, n),
        "learning_rate": 1e-3 * 0.5 * (1 + np.cos(np.pi * s / steps)),
        "grad_norm": np.sqrt((layer_norms**2).sum(axis=1)),
        "layers": layer_norms,
    }


def tensortap_tag() -> str:
    """The cache key of tensortap's copies: its format, whether the writer lays out series
    objects and packs its indexes (a copy written before either landed is written again)."""
    from tensortap.format import _index

    series = importlib.util.find_spec("tensortap.format._series") is not None
    packed = f"i{_index.INDEX_PACKED}" if hasattr(_index, "INDEX_PACKED") else ""
    return f"tensortap-f{_index.FORMAT_VERSION}{'s' if series else ''}{packed}-g{GENERATOR_VERSION}"


def write_tensortap(spec: RunSpec, out: Path) -> None:
    if spec.kind == "reference":
        _write_reference_tensortap(spec, out)
        return
    if spec.kind == "paced":
        _write_paced_tensortap(spec, out)
        return
    from tensortap.core._collections import CollectionManager
    from tensortap.core._modes import ModeKeys
    from tensortap.core._records import Record, RecordKind, StepBatch
    from tensortap.storage import open_store
    from tensortap.writer import TrialWriter

    names = series_names(spec)
    manager = CollectionManager()
    for name in names:
        manager.get("scalars").add_tensor_name(name)
    collections: dict[str, Any] | None = manager.to_dict()
    writer = TrialWriter(open_store(str(out)), "worker_0")
    wall = time.time()
    tensor, float32 = RecordKind.TENSOR, "float32"
    for first in range(0, spec.steps, CHUNK):
        last = min(first + CHUNK, spec.steps)
        # one-element views of the block (the writer takes a record's bytes, its shape is ())
        values = list(grid_values(spec, first, last).reshape(-1, 1))
        for row_no in range(last - first):
            step = first + row_no
            row = values[row_no * spec.series : (row_no + 1) * spec.series]
            records = [Record(name, tensor, float32, (), value) for name, value in zip(names, row)]
            writer.submit(StepBatch(step, ModeKeys.TRAIN, step, wall + step, records, collections))
            collections = None
    status = writer.close(
        {
            "last_global_step": spec.steps,
            "last_mode": "TRAIN",
            "last_mode_steps": {"TRAIN": spec.steps},
            "internal_errors": 0,
            "last_internal_error": None,
        }
    )
    if status.steps_written != spec.steps or status.errors:
        raise RuntimeError(f"writing {spec.name}: {status}")


def _write_paced_tensortap(spec: RunSpec, out: Path) -> None:
    """The grid's values the way a user's job writes them: ``Hook.save_scalar`` for each
    value, a step every :data:`PACED_STEP_S` (the training step's own time, slept), so the
    writer publishes a segment every ``flush_secs`` as it does in real training."""
    import tensortap as tt

    hook = tt.Hook(out, save_config=tt.SaveConfig(save_interval=1), include_collections=["scalars"])
    hook.set_mode(tt.modes.TRAIN)
    names = series_names(spec)
    next_at = time.monotonic()
    for first in range(0, spec.steps, CHUNK):
        last = min(first + CHUNK, spec.steps)
        for row in grid_values(spec, first, last).tolist():
            for name, value in zip(names, row):
                hook.save_scalar(name, value)
            hook.next_step()
            next_at += PACED_STEP_S
            delay = next_at - time.monotonic()
            if delay > 0:
                time.sleep(delay)
    status = hook.close()
    if not status.healthy:
        raise RuntimeError(f"writing {spec.name}: {status}")


def _write_reference_tensortap(spec: RunSpec, out: Path) -> None:
    import tensortap as tt

    hook = tt.Hook(
        out,
        save_config=tt.SaveConfig(save_interval=1),
        include_collections=["losses", "scalars", "gradients"],
    )
    hook.get_collection("gradients").reduction_config = tt.ReductionConfig(norms=["l2"])
    layers = [f"gradients/layer{i}.weight" for i in range(REFERENCE_LAYERS)]
    unit = np.full(16, 0.25, dtype=np.float32)  # l2 norm 1
    hook.set_mode(tt.modes.TRAIN)
    for first in range(0, spec.steps, CHUNK):
        last = min(first + CHUNK, spec.steps)
        ref = reference_values(spec.steps, first, last)
        for row in range(last - first):
            hook.save_tensor("loss", np.float32(ref["loss"][row]), collections="losses")
            hook.save_scalar("learning_rate", float(ref["learning_rate"][row]))
            hook.save_scalar("grad_norm", float(ref["grad_norm"][row]))
            for layer, norm in zip(layers, ref["layers"][row]):
                hook.save_tensor(layer, unit * np.float32(norm), collections="gradients")
            hook.next_step()
    status = hook.close()
    if not status.healthy:
        raise RuntimeError(f"writing {spec.name}: {status}")


def write_tensorboard(spec: RunSpec, out: Path) -> None:
    """One scalar event per value, as ``SummaryWriter.add_scalar`` writes, through
    TensorBoard's own event file writer (torch's SummaryWriter wraps the same)."""
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.compat.proto.summary_pb2 import Summary
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    writer = EventFileWriter(str(out), max_queue_size=1000)
    wall = time.time()

    def add(tag: str, value: float, step: int) -> None:
        summary = Summary(value=[Summary.Value(tag=tag, simple_value=value)])
        writer.add_event(Event(wall_time=wall + step, step=step, summary=summary))

    for first in range(0, spec.steps, CHUNK):
        last = min(first + CHUNK, spec.steps)
        if spec.kind == "reference":
            ref = reference_values(spec.steps, first, last)
            for row in range(last - first):
                step = first + row
                add("loss", float(np.float32(ref["loss"][row])), step)
                add("learning_rate", float(ref["learning_rate"][row]), step)
                add("grad_norm", float(ref["grad_norm"][row]), step)
                for i, norm in enumerate(ref["layers"][row].tolist()):
                    add(f"gradients/layer{i}.weight/l2", norm, step)
            continue
        names = series_names(spec)
        block = grid_values(spec, first, last).tolist()
        for row_no, row in enumerate(block):
            for name, value in zip(names, row):
                add(name, value, first + row_no)
    writer.close()


@dataclass
class Generated:
    """Where a run's copies lie, how long they took to write (None: cached; absent: capped)."""

    spec: RunSpec
    tensortap: Path
    tensorboard: Path | None
    tensortap_write_s: float | None = None
    tensorboard_write_s: float | None = None
    tensortap_mib: float = 0.0
    tensorboard_mib: float = 0.0
    tensorboard_skipped: str | None = None


def _mib(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 2**20


def _cached(final: Path, write: Callable[[Path], None], regenerate: bool) -> float | None:
    """Write into a fresh folder and rename it into place once whole (``final/done.json``
    marks it); None when a whole copy is there already."""
    done = final / "done.json"
    if done.is_file() and not regenerate:
        return None
    target = final
    if final.exists():  # a partial or a stale copy: keep it, write beside it
        target = final.with_name(f"{final.name}.{time.strftime('%Y%m%dT%H%M%S')}")
    work = target.with_name(f"{target.name}.partial-{os.getpid()}")
    began = time.perf_counter()
    write(work / "run")
    seconds = time.perf_counter() - began
    (work / "done.json").write_text(json.dumps({"write_s": seconds}))
    work.rename(target)
    if target != final:
        print(f"  (an earlier copy stays at {final}; this one is {target})", flush=True)
    return seconds


def generate(spec: RunSpec, out: Path, tb_max_values: int, regenerate: bool) -> Generated:
    base = out / "runs" / spec.name
    tt_dir = base / tensortap_tag()
    tb_dir = base / "tensorboard"
    print(f"{spec.name}: {spec.values:,} values", flush=True)
    tt_s = _cached(tt_dir, lambda p: write_tensortap(spec, p), regenerate)
    tt_dir = _newest(tt_dir)
    got = Generated(spec, tt_dir / "run", tb_dir / "run", tensortap_write_s=tt_s)
    if tt_s is not None:
        print(f"  tensortap wrote it in {tt_s:.1f} s", flush=True)
    if spec.values > tb_max_values and not (tb_dir / "done.json").is_file():
        got.tensorboard = None
        got.tensorboard_skipped = (
            f"{spec.values:,} values > --tb-max-values {tb_max_values:,} (TensorBoard's writer "
            f"would take ~{spec.values * 27e-6 / 60:.0f} min)"
        )
        print(f"  TensorBoard: skipped, {got.tensorboard_skipped}", flush=True)
    else:
        tb_s = _cached(tb_dir, lambda p: write_tensorboard(spec, p), regenerate)
        tb_dir = _newest(tb_dir)
        got.tensorboard = tb_dir / "run"
        got.tensorboard_write_s = tb_s
        got.tensorboard_mib = _mib(got.tensorboard)
        if tb_s is not None:
            print(f"  TensorBoard wrote it in {tb_s:.1f} s", flush=True)
    got.tensortap_mib = _mib(got.tensortap)
    return got


def _newest(final: Path) -> Path:
    """The copy to use: the newest whole one (``_cached`` may have written one beside)."""
    whole = [p for p in final.parent.glob(final.name + "*") if (p / "done.json").is_file()]
    whole = [p for p in whole if ".partial-" not in p.name]
    return max(whole, key=lambda p: (p / "done.json").stat().st_mtime) if whole else final


# -- processes ---------------------------------------------------------------------------------


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT / "src"), str(ROOT), *filter(None, [env.get("PYTHONPATH")])]
    )
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    return env


def _tree_rss(pid: int) -> int:
    import psutil

    try:
        proc = psutil.Process(pid)
        procs = [proc, *proc.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0
    total = 0
    for p in procs:
        try:
            total += p.memory_info().rss
        except psutil.NoSuchProcess:
            pass
    return total


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


@dataclass
class ChildResult:
    """A subprocess's outcome: wall, CPU (its whole life), peak memory, why it was stopped."""

    wall_s: float
    cpu_s: float
    peak_rss_mib: float
    stopped: str | None
    stdout: str
    returncode: int | None


def run_child(cmd: list[str], timeout: float, max_rss: int) -> ChildResult:
    """Run ``cmd`` to its end, or stop it past ``timeout`` seconds or ``max_rss`` bytes."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        cpu0, began = _children_cpu(), time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=_env(), cwd=ROOT)
        peak, stopped = 0, None
        while proc.poll() is None:
            peak = max(peak, _tree_rss(proc.pid))
            elapsed = time.perf_counter() - began
            if elapsed > timeout:
                stopped = f"timeout {timeout:.0f} s"
            elif peak > max_rss:
                stopped = f"memory {peak / 2**30:.1f} GiB"
            if stopped:
                _stop(proc)
                break
            time.sleep(0.05)
        wall = time.perf_counter() - began
        proc.wait()
        out.seek(0)
        err.seek(0)
        stdout = out.read().decode(errors="replace")
        if proc.returncode and not stopped:
            tail = err.read().decode(errors="replace")[-2000:]
            raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{tail}")
    return ChildResult(wall, _children_cpu() - cpu0, peak / 2**20, stopped, stdout, proc.returncode)


def _stop(proc: subprocess.Popen[Any]) -> None:
    """Stop ``proc`` and what it started (TensorBoard's data server), by their ids."""
    import psutil

    try:
        children = psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        children = []
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    for child in children:
        try:
            child.kill()
        except psutil.NoSuchProcess:
            pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get(url: str, timeout: float = 600.0) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as answer:
        return bytes(answer.read())


# -- read every series (in a fresh process) ----------------------------------------------------


def child_read(tool: str, path: str) -> dict[str, Any]:
    """Read every series of the run at ``path`` with ``tool``; CPU and wall of the read only."""
    if tool == "tensorboard":
        from tensorboard.backend.event_processing import event_accumulator as ea

        _warm_tensorboard_reader()

        def read() -> int:
            acc = ea.EventAccumulator(path, size_guidance={ea.SCALARS: 0})
            acc.Reload()
            return sum(len(acc.Scalars(tag)) for tag in acc.Tags()["scalars"])

    elif tool == "tbparse":
        from tbparse import SummaryReader

        def read() -> int:
            return len(SummaryReader(path).scalars)

    elif tool == "series_reader":
        from tensortap.trials._series import SeriesReader

        def read() -> int:  # the numbers; the columns naming each row's series come on demand
            columns = SeriesReader(path).series()
            return len(columns["value"]) + 0 * len(columns["global_step"])

    elif tool == "trial_series":
        import tensortap as tt

        def read() -> int:
            columns = tt.create_trial(path).series()
            return len(columns["value"]) + 0 * len(columns["global_step"])

    elif tool == "columns":
        import tensortap as tt
        from tensortap.trials._columns import published_segments, scalar_columns

        def read() -> int:
            trial = tt.create_trial(path)
            return len(scalar_columns(trial, published_segments(trial))["value"])

    else:
        raise SystemExit(f"bench_long: unknown reader {tool!r}")
    cpu0, wall0 = time.process_time(), time.perf_counter()
    rows = read()
    return {
        "cpu_s": time.process_time() - cpu0,
        "wall_s": time.perf_counter() - wall0,
        "rows": rows,
    }


def _warm_tensorboard_reader() -> None:
    """Read a one-event file first: TensorBoard imports TensorFlow (when installed) and its
    record reader on the first read, which is not what is measured."""
    from tensorboard.backend.event_processing import event_accumulator as ea

    with tempfile.TemporaryDirectory() as tmp:
        write_tensorboard(RunSpec("grid", 1, 1), Path(tmp))
        acc = ea.EventAccumulator(tmp, size_guidance={ea.SCALARS: 0})
        acc.Reload()


def tensortap_readers() -> list[str]:
    """The series path's readers once it exists, else the column reader export uses."""
    if importlib.util.find_spec("tensortap.trials._series") is not None:
        return ["series_reader", "trial_series"]
    return ["columns"]


# -- the dashboards ----------------------------------------------------------------------------

TT_PAINTED = """
for (const p of document.querySelectorAll('.js-plotly-plot')) {
  if (p.data && p.data.some(t => t.x && t.x.length)) return performance.now();
}
// drawn before plotly.js loaded: a line of the chart's points as SVG
if (document.querySelector('.plot svg.quick polyline')) return performance.now();
return null;
"""

# TensorBoard 2.21's time-series page: a scalar card whose line chart is in place (its canvas,
# drawn by a worker, or SVG), no spinner left in it, once the page has had an answer of
# /timeSeries (the points; the chart is drawn from that answer on the next frame).
TB_PAINTED = """
const answered = performance.getEntriesByType('resource').some(
  r => r.name.includes('/timeSeries') && r.responseEnd > 0);
if (!answered) return null;
for (const card of document.querySelectorAll('scalar-card')) {
  if (card.querySelector('mat-spinner, mat-progress-spinner')) continue;
  if (card.querySelector('line-chart canvas, line-chart svg')) return performance.now();
}
return null;
"""


class Browser:
    """A headless Chromium (``d``), started again when a stopped server took its tab down."""

    def __init__(self) -> None:
        self.d = browser()

    def blank(self) -> None:
        """Leave the page; start a fresh browser if this one no longer answers."""
        try:
            self.d.get("about:blank")
        except Exception:
            try:
                self.d.quit()
            except Exception:
                pass
            self.d = browser()

    def quit(self) -> None:
        self.d.quit()


def browser(*extra: str) -> Any:
    """Headless Chromium through Selenium, as the tests drive it; ``extra``: more flags
    (``--hide-scrollbars`` for pictures)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    chromium, driver_path = shutil.which("chromium"), shutil.which("chromedriver")
    if not (chromium and driver_path):
        raise SystemExit("the browser measures need chromium and chromedriver")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--window-size=1400,1000",
        "--use-angle=swiftshader",
        "--enable-unsafe-swiftshader",
        *extra,
    ):
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(driver_path), options=options)


@dataclass
class Dashboard:
    """One tool's server: how to start it, where its page is, what says it painted."""

    tool: str
    run: Path

    def command(self, port: int) -> list[str]:
        if self.tool == "tensortap":
            return [
                sys.executable,
                "-m",
                "tensortap.cli",
                "serve",
                str(self.run),
                "--port",
                str(port),
            ]
        return [
            sys.executable,
            "-m",
            "tensorboard.main",
            "--logdir",
            str(self.run),
            "--port",
            str(port),
            "--host",
            "127.0.0.1",
        ]

    def runs_url(self, base: str) -> str:
        return base + ("api/runs" if self.tool == "tensortap" else "data/runs")

    def page(self, base: str) -> str | None:
        """The page that shows the run's charts (None while the server lists no run)."""
        if self.tool == "tensorboard":  # once its scalars list a tag (else the page waits
            # for its 30-second reload to show them)
            tags = json.loads(get(base + "data/plugin/scalars/tags"))
            return base + "#timeseries" if any(tags.values()) else None
        runs = json.loads(get(base + "api/runs"))["runs"]
        return f"{base}run/{runs[0]['id']}" if runs else None

    def chart_url(self, base: str, page: str, tag: str) -> str:
        """The request for one chart's points (``page`` is the run's page)."""
        if self.tool == "tensortap":
            run = page.rsplit("/", 1)[1]
            return f"{base}api/run/{run}/curves?" + urllib.parse.urlencode({"name": tag})
        query = urllib.parse.urlencode({"tag": tag, "run": "."})
        return f"{base}data/plugin/scalars/scalars?{query}"

    @property
    def painted(self) -> str:
        return TT_PAINTED if self.tool == "tensortap" else TB_PAINTED


@dataclass
class PaintResult:
    first_paint_s: float | None = None
    first_data_s: float | None = None  # TensorBoard: the first tag's points answered
    warm_paint_s: list[float] = field(default_factory=list)
    warm_chart_s: list[float] = field(default_factory=list)  # one chart's points, asked again
    rss_mib: float | None = None
    runs_list_max_s: float | None = None
    runs_list_median_s: float | None = None
    runs_list_answers: int = 0
    stopped: str | None = None


class RunsListProbe(threading.Thread):
    """Asks for the runs list every 0.1 s and keeps each answer's latency (a request still
    waiting when stopped counts for as long as it waited)."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url, self.latencies = url, []  # type: list[float]
        self.halt = threading.Event()
        self._waiting_since: float | None = None

    def run(self) -> None:
        while not self.halt.is_set():
            began = self._waiting_since = time.perf_counter()
            try:
                get(self.url, timeout=600)
            except (urllib.error.URLError, OSError):
                self._waiting_since = None
                if time.perf_counter() - began > 1.0 and not self.halt.is_set():
                    self.latencies.append(time.perf_counter() - began)  # stopped while it waited
                self.halt.wait(0.05)  # not listening yet
                continue
            self._waiting_since = None
            if not self.halt.is_set():
                self.latencies.append(time.perf_counter() - began)
            self.halt.wait(0.1)

    def stop(self) -> None:
        if self.halt.is_set():
            return
        waiting = self._waiting_since
        self.halt.set()
        if waiting is not None:
            self.latencies.append(time.perf_counter() - waiting)


def paint(
    dash: Dashboard,
    driver: Browser,
    timeout: float,
    max_rss: int,
    warm_repeat: int,
    first_tag: str | None,
    chart_tag: str | None,
) -> PaintResult:
    """Launch the server, wait for the first chart drawn, then warm paints and memory."""
    port = free_port()
    base = f"http://127.0.0.1:{port}/"
    result = PaintResult()
    with tempfile.TemporaryFile() as log:
        began = time.perf_counter()
        proc = subprocess.Popen(
            dash.command(port), stdout=log, stderr=subprocess.STDOUT, env=_env(), cwd=ROOT
        )
        watchdog = Watchdog(proc, began, timeout, max_rss)
        watchdog.start()
        probe = RunsListProbe(dash.runs_url(base))
        probe.start()
        data_probe = None
        if dash.tool == "tensorboard" and first_tag is not None:
            data_probe = TbDataProbe(base, first_tag, began)
            data_probe.start()

        def check() -> None:
            if watchdog.reason is not None:
                raise _Stopped(watchdog.reason)
            if proc.poll() is not None:
                log.seek(0)
                tail = log.read().decode(errors="replace")[-2000:]
                raise RuntimeError(f"{dash.tool} stopped: {tail}")

        def wait_painted() -> float:
            while True:
                check()
                try:
                    painted = driver.d.execute_script(f"return (() => {{{dash.painted}}})()")
                except Exception:  # the page went with a stopped server
                    check()
                    raise
                if painted:
                    return float(painted)
                time.sleep(0.01)

        try:
            page = None
            while page is None:  # the server listens, and lists the run
                check()
                try:
                    page = dash.page(base)
                except (urllib.error.URLError, OSError, ValueError, KeyError):
                    time.sleep(0.02)
            driver.d.get(page)
            wait_painted()
            result.first_paint_s = time.perf_counter() - began
            result.rss_mib = _tree_rss(proc.pid) / 2**20
            probe.stop()
            if data_probe is not None:
                data_probe.join(timeout=max(1.0, began + timeout - time.perf_counter()))
                result.first_data_s = data_probe.answered
            for _ in range(warm_repeat):
                driver.d.get("about:blank")
                driver.d.get(page)
                result.warm_paint_s.append(wait_painted() / 1000)
            if chart_tag is not None:
                url = dash.chart_url(base, page, chart_tag)
                for _ in range(warm_repeat):
                    check()
                    began_chart = time.perf_counter()
                    get(url)
                    result.warm_chart_s.append(time.perf_counter() - began_chart)
        except (_Stopped, urllib.error.URLError, OSError):
            if watchdog.reason is None:
                raise
            result.stopped = watchdog.reason
            result.rss_mib = watchdog.peak / 2**20
            if result.first_paint_s is None:  # a lower bound: it had not painted by then
                result.first_paint_s = time.perf_counter() - began
        finally:
            probe.stop()
            watchdog.halt.set()
            if data_probe is not None:
                data_probe.halt.set()
            _stop(proc)
            driver.blank()
            probe.join(timeout=5)
            watchdog.join(timeout=5)
    if probe.latencies:
        result.runs_list_max_s = max(probe.latencies)
        result.runs_list_median_s = statistics.median(probe.latencies)
        result.runs_list_answers = len(probe.latencies)
    return result


class Watchdog(threading.Thread):
    """Stops a server past its deadline or its memory limit, and says why."""

    def __init__(
        self, proc: subprocess.Popen[Any], began: float, timeout: float, max_rss: int
    ) -> None:
        super().__init__(daemon=True)
        self.proc, self.timeout, self.max_rss = proc, timeout, max_rss
        self.deadline = began + timeout
        self.reason: str | None = None
        self.peak = 0
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.wait(0.1) and self.proc.poll() is None:
            rss = _tree_rss(self.proc.pid)
            self.peak = max(self.peak, rss)
            if rss > self.max_rss:
                self.reason = f"memory {rss / 2**30:.1f} GiB"
            elif time.perf_counter() > self.deadline:
                self.reason = f"timeout {self.timeout:.0f} s"
            if self.reason is not None:
                _stop(self.proc)
                return


class _Stopped(Exception):
    pass


class TbDataProbe(threading.Thread):
    """Asks TensorBoard for the first tag's points until it has them; keeps when (since
    launch) the first answer with points came."""

    def __init__(self, base: str, tag: str, began: float) -> None:
        super().__init__(daemon=True)
        query = urllib.parse.urlencode({"tag": tag, "run": "."})
        self.url = f"{base}data/plugin/scalars/scalars?{query}"
        self.began, self.answered = began, None  # type: float, float | None
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.is_set():
            try:
                points = json.loads(get(self.url, timeout=300))
            except (urllib.error.URLError, OSError, ValueError):
                points = None
            if points:
                self.answered = time.perf_counter() - self.began
                return
            self.halt.wait(0.05)


# -- report ------------------------------------------------------------------------------------


def report(run: Path, timeout: float, max_rss: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        html = Path(tmp) / "report.html"
        cmd = [sys.executable, "-m", "tensortap.cli", "report", str(run), "-o", str(html)]
        child = run_child(cmd, timeout, max_rss)
        size = html.stat().st_size / 2**20 if html.is_file() and not child.stopped else None
    return {
        "cpu_s": child.cpu_s,
        "wall_s": child.wall_s,
        "html_mib": size,
        "peak_rss_mib": child.peak_rss_mib,
        "stopped": child.stopped,
    }


# -- measuring a run ---------------------------------------------------------------------------


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def repeated(
    fn: Callable[[], dict[str, Any]], repeat: int, cap: float, key: str
) -> list[dict[str, Any]]:
    """``fn`` up to ``repeat`` times; once only when a try takes longer than ``cap`` seconds
    (by its ``key``) or was stopped."""
    tries = []
    for _ in range(repeat):
        one = fn()
        tries.append(one)
        if one.get("stopped") or (one.get(key) or 0) > cap:
            break
    return tries


def measure(got: Generated, args: argparse.Namespace, driver: Browser | None) -> dict[str, Any]:
    spec = got.spec
    max_rss = int(args.max_rss_gib * 2**30)
    tools: dict[str, Path] = {"tensortap": got.tensortap}
    if got.tensorboard is not None:
        tools["tensorboard"] = got.tensorboard
    out: dict[str, Any] = {
        "run": spec.name,
        **asdict(spec),
        "values": spec.values,
        "generate": {
            "tensortap_s": got.tensortap_write_s,
            "tensorboard_s": got.tensorboard_write_s,
            "tensortap_mib": round(got.tensortap_mib, 2),
            "tensorboard_mib": round(got.tensorboard_mib, 2),
            "tensorboard_skipped": got.tensorboard_skipped,
            # what a value costs on disk, everything the tool keeps counted (issue 48)
            "tensortap_bytes_per_value": round(got.tensortap_mib * 2**20 / spec.values, 1),
            "tensorboard_bytes_per_value": (
                round(got.tensorboard_mib * 2**20 / spec.values, 1)
                if got.tensorboard is not None
                else None
            ),
        },
    }
    began = time.perf_counter()
    if "read" in args.measures:
        readers = [("tensortap", r) for r in tensortap_readers()]
        if "tensorboard" in tools:
            readers.append(("tensorboard", "tensorboard"))
            if importlib.util.find_spec("tbparse") is not None:
                readers.append(("tensorboard", "tbparse"))
        reads: dict[str, Any] = {}
        for tool, reader in readers:
            cmd = [sys.executable, str(Path(__file__)), "--child-read", reader, str(tools[tool])]

            def once(cmd: list[str] = cmd) -> dict[str, Any]:
                child = run_child(cmd, args.timeout_s, max_rss)
                if child.stopped:
                    return {"stopped": child.stopped, "cpu_s": None, "wall_s": child.wall_s}
                return {**json.loads(child.stdout), "peak_rss_mib": child.peak_rss_mib}

            tries = repeated(once, args.repeat, args.repeat_cap_s, "wall_s")
            reads[reader] = _summary(tries, ("cpu_s", "wall_s", "peak_rss_mib"))
            reads[reader]["rows"] = tries[0].get("rows")
            print(f"  read {reader}: {_fmt(reads[reader])}", flush=True)
        counts = {r: v["rows"] for r, v in reads.items() if v.get("rows") is not None}
        if len(set(counts.values())) > 1:
            reads["rows_differ"] = counts
            print(f"  the readers found different numbers of values: {counts}", flush=True)
        out["read"] = reads
    if driver is not None and {"paint", "warm", "rss", "runs_list"} & set(args.measures):
        paints: dict[str, Any] = {}
        for tool, path in tools.items():
            dash = Dashboard(tool, path)
            first_tag, chart_tag = _chart_tags(spec, tool)

            def once(
                dash: Dashboard = dash, first_tag: str = first_tag, chart_tag: str = chart_tag
            ) -> dict[str, Any]:
                return asdict(
                    paint(
                        dash,
                        driver,
                        args.timeout_s,
                        max_rss,
                        args.warm_repeat,
                        first_tag,
                        chart_tag,
                    )
                )

            tries = repeated(once, args.repeat, args.repeat_cap_s, "first_paint_s")
            summary = _summary(
                tries,
                (
                    "first_paint_s",
                    "first_data_s",
                    "rss_mib",
                    "runs_list_max_s",
                    "runs_list_median_s",
                ),
            )
            warm = [w for t in tries for w in t["warm_paint_s"]]
            summary["warm_paint_s"] = _median(warm)
            summary["warm_paint_all"] = [round(w, 3) for w in warm]
            charts = [w for t in tries for w in t["warm_chart_s"]]
            summary["warm_chart_s"] = _median(charts)
            summary["warm_chart_all"] = [round(w, 4) for w in charts]
            paints[tool] = summary
            print(f"  paint {tool}: {_fmt(summary)}", flush=True)
        out["paint"] = paints
    if "report" in args.measures and (spec.values <= args.report_max_values):
        tries = repeated(
            lambda: report(got.tensortap, args.timeout_s, max_rss),
            args.repeat,
            args.repeat_cap_s,
            "wall_s",
        )
        out["report"] = _summary(tries, ("cpu_s", "wall_s", "html_mib", "peak_rss_mib"))
        print(f"  report: {_fmt(out['report'])}", flush=True)
    elif "report" in args.measures:
        out["report"] = {"skipped": f"{spec.values:,} values > --report-max-values"}
    out["measure_s"] = round(time.perf_counter() - began, 1)
    print(f"  measured in {out['measure_s']} s", flush=True)
    return out


def _chart_tags(spec: RunSpec, tool: str) -> tuple[str, str]:
    """The first series (TensorBoard's first answer is timed for it) and one in the middle
    (asked again on the warm server): tensortap's name, or TensorBoard's tag."""
    if spec.kind == "reference":  # (today's dashboard draws no gradient norm as a curve)
        return "loss", "learning_rate"
    names = series_names(spec)
    return names[0], names[len(names) // 2]


def _summary(tries: list[dict[str, Any]], keys: tuple[str, ...]) -> dict[str, Any]:
    """Medians of ``keys`` over the tries, every try's figure, and why a try was stopped."""
    out: dict[str, Any] = {"tries": len(tries)}
    finished = [t for t in tries if not t.get("stopped")] or tries
    for key in keys:
        values = [t[key] for t in finished if t.get(key) is not None]
        out[key] = round(statistics.median(values), 4) if values else None
        out[f"{key}_all"] = [round(v, 4) for v in values]
    stopped = [t["stopped"] for t in tries if t.get("stopped")]
    if stopped:
        out["stopped"] = stopped[0]
        if not [t for t in tries if not t.get("stopped")]:
            # nothing finished: the figure is a lower bound (the time or memory it was stopped at)
            out["lower_bound"] = True
    return out


def _fmt(summary: dict[str, Any]) -> str:
    parts = [
        f"{k} {v:.3f}" for k, v in summary.items() if isinstance(v, float) and not k.endswith("all")
    ]
    if summary.get("stopped"):
        parts.append(f"stopped: {summary['stopped']}")
    return ", ".join(parts)


# -- the table ---------------------------------------------------------------------------------

# (label, section, tensortap key path, TensorBoard key path, unit)
ROWS: list[tuple[str, str, str | None, str | None, str]] = [
    (
        "bytes on disk per value",
        "generate",
        "tensortap_bytes_per_value",
        "tensorboard_bytes_per_value",
        "B",
    ),
    ("read every series (CPU)", "read", "{reader}.cpu_s", "tensorboard.cpu_s", "s"),
    ("read every series (wall)", "read", "{reader}.wall_s", "tensorboard.wall_s", "s"),
    (
        "read every series, peak memory of the process",
        "read",
        "{reader}.peak_rss_mib",
        "tensorboard.peak_rss_mib",
        "MB",
    ),
    ("read every series via `trial.series()` (CPU)", "read", "trial_series.cpu_s", None, "s"),
    ("read every series, `tbparse` (CPU)", "read", None, "tbparse.cpu_s", "s"),
    (
        "launch -> first chart painted (wall)",
        "paint",
        "tensortap.first_paint_s",
        "tensorboard.first_paint_s",
        "s",
    ),
    (
        "TensorBoard: launch -> first tag's points answered",
        "paint",
        None,
        "tensorboard.first_data_s",
        "s",
    ),
    (
        "warm paint (page again, wall)",
        "paint",
        "tensortap.warm_paint_s",
        "tensorboard.warm_paint_s",
        "s",
    ),
    (
        "one chart's points asked again, warm (wall)",
        "paint",
        "tensortap.warm_chart_s",
        "tensorboard.warm_chart_s",
        "s",
    ),
    ("server memory after first paint", "paint", "tensortap.rss_mib", "tensorboard.rss_mib", "MB"),
    (
        "runs list, slowest answer until first paint",
        "paint",
        "tensortap.runs_list_max_s",
        "tensorboard.runs_list_max_s",
        "s",
    ),
    ("`tensortap report` (CPU)", "report", "cpu_s", None, "s"),
    ("`tensortap report` HTML size", "report", "html_mib", None, "MB"),
    ("`tensortap report` peak memory", "report", "peak_rss_mib", None, "MB"),
]


def _lookup(result: dict[str, Any], section: str, path: str | None) -> tuple[float | None, bool]:
    """A figure and whether it is a lower bound (the try was stopped)."""
    if path is None:
        return None, False
    node: Any = result.get(section)
    parts = path.split(".")
    for part in parts:
        if not isinstance(node, dict):
            return None, False
        if part == parts[-1]:
            value = node.get(part)
            bound = bool(node.get("lower_bound"))
            if value is None and bound:  # stopped before it answered: the limit is the bound
                return None, True
            return value, bound
        node = node.get(part)
    return None, False


def _cell(value: float | None, bound: bool, unit: str) -> str:
    if value is None:
        return "stopped" if bound else "-"
    if unit == "MB":
        mb = value * 2**20 / 1e6
        text = f"{mb:.0f} MB" if mb >= 10 else f"{mb:.1f} MB" if mb >= 0.1 else f"{mb * 1e3:.0f} kB"
    elif unit == "B":
        text = f"{value:.1f} B"
    else:
        text = f"{value:.3g} s" if value < 100 else f"{value:.0f} s"
    return ("> " if bound else "") + text


def table(results: list[dict[str, Any]], reader: str) -> str:
    """One column per run: tensortap's figure, TensorBoard's, and how many times better."""
    head = "| | " + " | ".join(_label(r) for r in results) + " | growth (tt / TB) |"
    lines = [head, "|---" * (len(results) + 2) + "|"]
    for label, section, tt_path, tb_path, unit in ROWS:
        tt_path = tt_path.format(reader=reader) if tt_path else None
        cells, any_value = [], False
        for r in results:
            tt, tt_bound = _lookup(r, section, tt_path)
            tb, tb_bound = _lookup(r, section, tb_path)
            any_value = any_value or tt is not None or tb is not None or tt_bound or tb_bound
            text = _cell(tt, tt_bound, unit) if tt_path else ""
            if tb_path:
                tb_text = _cell(tb, tb_bound, unit)
                if tt_path is None:
                    text = tb_text
                elif tb is not None or tb_bound:
                    ratio = (
                        f" ({tb / tt:.2g}x)" if tt and tb and not tt_bound and not tb_bound else ""
                    )
                    text = f"{text} / {tb_text}{ratio}"
            cells.append(text or "-")
        if not any_value:
            continue
        growth = " / ".join(
            _exponent_text(results, section, p) for p in (tt_path, tb_path) if p is not None
        )
        lines.append(f"| {label} | " + " | ".join(cells) + f" | {growth} |")
    return "\n".join(lines)


def _label(result: dict[str, Any]) -> str:
    steps, series = result["steps"], result["series"]
    kind = {"grid": "", "reference": "ref. ", "wide": "wide ", "paced": "paced "}[result["kind"]]
    return f"{kind}{_si(steps)} steps x {_si(series)}"


def _si(n: int) -> str:
    for div, suffix in ((10**6, "M"), (10**3, "k")):
        if n >= div and n % div == 0:
            return f"{n // div}{suffix}"
    return str(n)


def exponents(results: list[dict[str, Any]], section: str, path: str) -> dict[str, float]:
    """The slope of log(figure) against log(steps), per family of runs with the same kind and
    number of series and at least two lengths (figures stopped early left out)."""
    families: dict[tuple[str, int], list[tuple[int, float]]] = {}
    for r in results:
        value, bound = _lookup(r, section, path)
        if value and value > 0 and not bound:
            families.setdefault((r["kind"], r["series"]), []).append((r["steps"], value))
    out = {}
    for (kind, series), points in families.items():
        if len({s for s, _ in points}) >= 2:
            x = np.log([s for s, _ in points])
            y = np.log([v for _, v in points])
            out[f"{kind}-{series}"] = float(np.polyfit(x, y, 1)[0])
    return out


def _exponent_text(results: list[dict[str, Any]], section: str, path: str) -> str:
    """The exponent over the family with the most lengths (its name after it)."""
    found = exponents(results, section, path)
    if not found:
        return "-"
    family = max(found, key=lambda f: (_lengths(results, f), f.startswith("grid")))
    return f"{found[family]:.2f} ({family})"


def _lengths(results: list[dict[str, Any]], family: str) -> int:
    return sum(1 for r in results if f"{r['kind']}-{r['series']}" == family)


# -- main --------------------------------------------------------------------------------------


def machine() -> str:
    import tensorboard

    load = os.getloadavg()
    tf = importlib.util.find_spec("tensorflow") is not None
    return (
        f"{platform.node()} {platform.machine()} {os.cpu_count()} CPUs, python "
        f"{platform.python_version()}, numpy {np.__version__}, tensorboard "
        f"{tensorboard.__version__}{' (TensorFlow installed)' if tf else ''}, load average "
        f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
    )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    doc = __doc__ or ""
    parser = argparse.ArgumentParser(
        description=doc.split("\n\n")[0],
        epilog=doc.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--runs",
        help="comma-separated runs, e.g. grid-1000x100,reference-100000,wide-100x10000 "
        "(default: the default grid; see --list)",
    )
    parser.add_argument("--steps", help="with --series: a grid of these lengths (e.g. 1000,10000)")
    parser.add_argument("--series", help="with --steps: ... and these widths (e.g. 10,100)")
    parser.add_argument(
        "--small", action="store_true", help="a quick grid (1k-10k steps, <= 1,000 series)"
    )
    parser.add_argument("--list", action="store_true", help="list the runs and stop")
    parser.add_argument(
        "--measures",
        default=",".join(MEASURES),
        help=f"comma-separated, of {','.join(MEASURES)} (paint, warm, rss and runs_list come "
        "from the same server launches)",
    )
    parser.add_argument(
        "--repeat", type=int, default=3, help="tries per measure, the median is shown (default 3)"
    )
    parser.add_argument(
        "--warm-repeat",
        type=int,
        default=1,
        help="warm paints (and chart requests) after each first paint (default 1)",
    )
    parser.add_argument(
        "--repeat-cap-s",
        type=float,
        default=30.0,
        help="a measure whose try took longer than this is not tried again (default 30)",
    )
    parser.add_argument(
        "--timeout-s",
        type=float,
        default=300.0,
        help="a server, reader or report is stopped past this many seconds (default 300)",
    )
    parser.add_argument(
        "--max-rss-gib",
        type=float,
        default=4.0,
        help="a server or reader is stopped past this much memory (default 4 GiB)",
    )
    parser.add_argument(
        "--tb-max-values",
        type=int,
        default=3_000_000,
        help="TensorBoard copies are written for runs of at most this many values (its "
        "writer does ~40,000 a second here; default 3,000,000: ~75 s)",
    )
    parser.add_argument(
        "--report-max-values",
        type=int,
        default=10_000_000,
        help="tensortap report is measured on runs of at most this many values (default 10^7)",
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"default {DEFAULT_OUT}")
    parser.add_argument(
        "--generate-only", action="store_true", help="write the runs (cached) and stop"
    )
    parser.add_argument(
        "--regenerate", action="store_true", help="write the runs again even when cached"
    )
    parser.add_argument("--child-read", nargs=2, metavar=("READER", "PATH"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.measures = [m.strip() for m in args.measures.split(",") if m.strip()]
    unknown = set(args.measures) - set(MEASURES)
    if unknown:
        parser.error(f"--measures: unknown {sorted(unknown)}; expected some of {MEASURES}")
    return args


def chosen_runs(args: argparse.Namespace) -> list[RunSpec]:
    if args.runs:
        return [RunSpec.parse(r.strip()) for r in args.runs.split(",") if r.strip()]
    if args.steps or args.series:
        steps = [int(s) for s in (args.steps or "1000").split(",")]
        series = [int(s) for s in (args.series or "100").split(",")]
        return [RunSpec("grid", n, s) for n in steps for s in series]
    return small_runs() if args.small else default_runs()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child_read:
        print(json.dumps(child_read(*args.child_read)))
        return 0
    runs = chosen_runs(args)
    if args.list:
        for spec in runs:
            tb = "" if spec.values <= args.tb_max_values else "  (no TensorBoard copy: too big)"
            print(f"{spec.name:24s} {spec.values:>13,} values{tb}")
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    print(machine(), flush=True)
    generated = [generate(s, args.out, args.tb_max_values, args.regenerate) for s in runs]
    if args.generate_only:
        return 0
    paints = {"paint", "warm", "rss", "runs_list"} & set(args.measures)
    driver = Browser() if paints else None
    results = []
    try:
        for got in generated:
            print(f"measuring {got.spec.name}", flush=True)
            results.append(measure(got, args, driver))
    finally:
        if driver is not None:
            driver.quit()
    reader = tensortap_readers()[0]
    stamp = time.strftime("%Y%m%dT%H%M%S")
    doc = {
        "machine": machine(),
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "command": " ".join(
            [Path(sys.argv[0]).name, *(argv if argv is not None else sys.argv[1:])]
        ),
        "tensortap_reader": reader,
        "settings": {k: v for k, v in vars(args).items() if k != "child_read"},
        "runs": results,
        "exponents": {
            f"{label} [{tool}]": exponents(results, section, path.format(reader=reader))
            for label, section, tt_path, tb_path, _ in ROWS
            for tool, path in (("tensortap", tt_path), ("tensorboard", tb_path))
            if path is not None
        },
    }
    md = (
        f"{doc['machine']}\n\n`{doc['command']}` ({doc['date']}; tensortap reads with "
        f"`{reader}`; cells: tensortap / TensorBoard (TensorBoard's figure / tensortap's); "
        f"growth: the exponent of steps, per family of runs)\n\n{table(results, reader)}\n"
    )
    skipped = [r["run"] for r in results if r["generate"]["tensorboard_skipped"]]
    if skipped:
        md += f"\nNo TensorBoard copy (over --tb-max-values): {', '.join(skipped)}.\n"
    json_path = args.out / f"results-{stamp}.json"
    json_path.write_text(json.dumps(doc, indent=1, default=str))
    (args.out / f"results-{stamp}.md").write_text(md)
    print("\n" + md)
    print(f"wrote {json_path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
