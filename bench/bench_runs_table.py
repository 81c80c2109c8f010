"""The dashboard's runs table over many runs (issue 47): open, sort and group ``--runs``
(200) jobs in a headless Chromium, beside TensorBoard's runs selector over as many runs.

- The jobs are laid out as ``tensortap run`` leaves them (job.json, summary.json,
  events.jsonl) over real trials a hook wrote: ``--steps`` TRAIN steps of the vital loss,
  an evaluation pass with an accuracy, the run's configuration (learning rate, batch size,
  optimizer, seed); one run in ten has a rule that fired (tests/helpers/job_documents.py).
- tensortap: ``tensortap serve RUNS`` (a subprocess, reading the runs ahead as it does),
  once it lists every run. Measured in the page (``performance.now()``): from navigation
  start to the table drawn with every row, to every row's trial read (no row pending), then
  a click on the last loss's header to the rows drawn in that order, and grouping by seed to
  the group rows drawn. Then ``/api/table`` asked again on the warm server.
- TensorBoard: ``tensorboard --logdir`` over one event file per run (the same losses,
  written by its own ``EventFileWriter``), once ``/data/runs`` lists every run: from
  navigation start to its runs selector showing every run (the time-series page).

    PYTHONPATH=src .venv/bin/python bench/bench_runs_table.py [--runs 200] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.helpers, as a package

from bench.bench_long import browser  # the headless Chromium the long-run paints use
from tests.helpers.job_documents import FIRED, QUIET, make_job

LRS = (0.1, 0.03, 0.01, 0.003)
SEEDS = 5


def write_runs(root: Path, runs: int, steps: int) -> list[list[float]]:
    """``runs`` jobs under ``root``; each one's losses."""
    all_losses = []
    for k in range(runs):
        lr, seed = LRS[k % len(LRS)], k % SEEDS
        rate = 0.2 + lr * 10 + 0.01 * seed
        losses = [2.0 / (1 + rate * s / steps * 10) for s in range(steps)]
        make_job(
            root,
            f"run-{k:03d}-lr{lr}-s{seed}",
            lr=lr,
            batch=32 * (1 + k % 3),
            losses=losses,
            accuracy=[0.5 + 0.4 * (1 - losses[-1] / 2)],
            seed=seed,
            created=1.79e9 + k,
            rules=[FIRED, QUIET] if k % 10 == 0 else None,
        )
        all_losses.append(losses)
    return all_losses


def write_tensorboard(root: Path, all_losses: list[list[float]]) -> None:
    """One run per job, each an event file of its losses (TensorBoard's own writer)."""
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.compat.proto.summary_pb2 import Summary
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    for k, losses in enumerate(all_losses):
        writer = EventFileWriter(str(root / f"run-{k:03d}"))
        for step, loss in enumerate(losses):
            summary = Summary(value=[Summary.Value(tag="loss", simple_value=loss)])
            writer.add_event(Event(wall_time=1.79e9 + step, step=step, summary=summary))
        writer.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=120) as answer:
        return bytes(answer.read())


def wait_for(check: Any, timeout: float = 120.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.01)
    raise TimeoutError(str(check))


def server(command: list[str], base: str, listed: Any) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def ready() -> bool:
        try:
            return bool(listed(base))
        except OSError:
            return False

    wait_for(ready, 300)
    return proc


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


DRAWN = "const r = window.tensortapRuns; return r && r.rows === arguments[0] ? r : null;"


def tensortap(root: Path, runs: int, driver: Any) -> dict[str, float]:
    port = free_port()
    base = f"http://127.0.0.1:{port}/"
    command = [sys.executable, "-m", "tensortap.cli", "serve", str(root), "--port", str(port)]
    proc = server(command, base, lambda b: len(json.loads(get(b + "api/runs"))["runs"]) == runs)
    try:
        driver.get(base)
        drawn = wait_for(lambda: driver.execute_script(DRAWN, runs))
        opened = drawn["drawnAt"] / 1000
        asked = driver.execute_script(  # the first /api/table answer: asked when, how long
            "const r = performance.getEntriesByType('resource')"
            ".find((e) => e.name.includes('/api/table'));"
            "return [r.startTime, r.responseEnd - r.startTime];"
        )
        full = wait_for(
            lambda: driver.execute_script(
                "const r = window.tensortapRuns; return r && r.rows === arguments[0] && "
                "!r.pending ? r.drawnAt : null;",
                runs,
            )
        )
        clicked = driver.execute_script(
            "const t = performance.now(); document.querySelector('th[data-sort=loss]').click();"
            "return t;"
        )
        sorted_at = wait_for(
            lambda: driver.execute_script(
                "const r = window.tensortapRuns; return r && r.sort === 'loss' ? r.drawnAt : null;"
            )
        )
        order = driver.execute_script(
            "return [...document.querySelectorAll('#runs td.c-loss')].map((t) => +t.textContent);"
        )
        assert len(order) == runs and order == sorted(order), order[:5]
        grouped = driver.execute_script(
            "const g = document.getElementById('group'); g.value = 'seed';"
            "const t = performance.now(); g.dispatchEvent(new Event('change')); return t;"
        )
        grouped_at = wait_for(
            lambda: driver.execute_script(
                "const r = window.tensortapRuns; return r && r.groups === arguments[0] ? "
                "r.drawnAt : null;",
                SEEDS,
            )
        )
        answers = []
        for _ in range(10):
            began = time.perf_counter()
            get(base + "api/table?sort=-loss&group=seed")
            answers.append(time.perf_counter() - began)
        return {
            "open_s": opened,
            "first_table_asked_s": asked[0] / 1000,
            "first_table_answer_s": asked[1] / 1000,
            "every_row_read_s": full / 1000,
            "sort_s": (sorted_at - clicked) / 1000,
            "group_s": (grouped_at - grouped) / 1000,
            "api_table_warm_s": statistics.median(answers),
        }
    finally:
        driver.get("about:blank")
        stop(proc)


# TensorBoard 2.21's runs selector (the time-series page's left pane): its rows, one per run
TB_LISTED = """
const rows = document.querySelectorAll('runs-data-table tb-data-table-content-row');
return rows.length >= arguments[0] ? performance.now() : rows.length;
"""


def tensorboard(root: Path, runs: int, driver: Any) -> dict[str, Any]:
    port = free_port()
    base = f"http://127.0.0.1:{port}/"
    command = [
        sys.executable,
        "-m",
        "tensorboard.main",
        "--logdir",
        str(root),
        "--port",
        str(port),
        "--host",
        "127.0.0.1",
    ]
    proc = server(command, base, lambda b: len(json.loads(get(b + "data/runs"))) == runs)
    try:
        driver.get(base + "#timeseries")
        try:
            listed = wait_for(
                lambda: (lambda v: v if isinstance(v, float) and v > 1 else None)(
                    driver.execute_script(TB_LISTED, runs)
                ),
                60,
            )
        except TimeoutError:
            shown = driver.execute_script(TB_LISTED, runs)
            return {"open_s": None, "note": f"its runs selector showed {shown} rows, not {runs}"}
        return {"open_s": listed / 1000}
    finally:
        driver.get("about:blank")
        stop(proc)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-tensorboard", action="store_true")
    args = parser.parse_args(argv)
    driver = browser()
    results: dict[str, list[dict[str, Any]]] = {"tensortap": [], "tensorboard": []}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            began = time.perf_counter()
            losses = write_runs(Path(tmp) / "runs", args.runs, args.steps)
            written = time.perf_counter() - began
            if not args.no_tensorboard:
                write_tensorboard(Path(tmp) / "tb", losses)
            for _ in range(args.repeat):
                results["tensortap"].append(tensortap(Path(tmp) / "runs", args.runs, driver))
                if not args.no_tensorboard:
                    results["tensorboard"].append(tensorboard(Path(tmp) / "tb", args.runs, driver))
    finally:
        driver.quit()

    def medians(found: list[dict[str, Any]]) -> dict[str, Any]:
        if not found:
            return {}
        out: dict[str, Any] = {}
        for key in found[0]:
            values = [f[key] for f in found if isinstance(f.get(key), float)]
            out[key] = round(statistics.median(values), 3) if values else found[0][key]
            if values:
                out[f"{key}_all"] = [round(v, 3) for v in values]
        return out

    print(
        json.dumps(
            {
                "machine": f"{platform.machine()} {platform.python_version()}",
                "runs": args.runs,
                "steps": args.steps,
                "jobs_written_s": round(written, 1),
                "tensortap": medians(results["tensortap"]),
                "tensorboard": medians(results["tensorboard"]),
            },
            indent=1,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
