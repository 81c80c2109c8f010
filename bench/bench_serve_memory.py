"""The dashboard's memory (issue 48, item 4): peak and final resident size of a ``tensortap
serve`` process after every chart of several long runs was asked for (the page painted, its
charts 50 to a request; one curves request per series, as a page scrolled through them; then
zoomed windows of all of them), with the server-wide cache budget (``--cache-mb``) at a few
sizes and, for comparison, the dashboard of another source tree (``--before-src``, with its
own defaults: the code before a change, say main's ``src``).

Each arm is a fresh server process (``tensortap.serve.start``, no read ahead) over the same
runs, written once through the public hook under ``--out``; arms are interleaved round by
round and the medians printed. The server's CPU seconds (user + system, from /proc) and the
bytes its caches account (where it has a budget) are printed beside.

    PYTHONPATH=$PWD/src .venv/bin/python bench/bench_serve_memory.py \\
        --steps 20000 --series 100 --runs 2 --cache-mb 16,256 --before-src /path/to/main/src
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SRC = HERE.parent / "src"

CHILD = r"""
import json, os, sys
from tensortap.serve import start
cache_mb = int(sys.argv[2])
kwargs = {"cache_mb": cache_mb} if cache_mb else {}
dashboard = start([sys.argv[1]], port=0, warm=False, **kwargs)
print(dashboard.url, flush=True)
for line in sys.stdin:  # one line asks for the process's figures
    status = dict(
        l.split(":", 1) for l in open("/proc/self/status").read().splitlines() if ":" in l
    )
    fields = open("/proc/self/stat").read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    budget = getattr(dashboard.catalog, "budget", None)
    print(json.dumps({
        "hwm": int(status["VmHWM"].split()[0]) * 1024,
        "rss": int(status["VmRSS"].split()[0]) * 1024,
        "cpu_s": (int(fields[11]) + int(fields[12])) / ticks,
        "accounted": None if budget is None else budget.size,
        "accounted_peak": None if budget is None else budget.peak,
    }), flush=True)
"""


def get(url: str) -> Any:
    return json.loads(get_text(url))


def get_text(url: str) -> str:
    with urllib.request.urlopen(url, timeout=600) as response:
        return str(response.read().decode("utf-8"))


#: Charts a page asks for in one curves request, as the dashboard's page does (its BATCH).
PAGE_BATCH = 50


def exercise(url: str, zooms: int, pages: bool) -> int:
    """Every run's page painted (its charts asked :data:`PAGE_BATCH` at a time, whole, as the
    page opens), then every chart again one curves request each (no longer cached, under a
    small budget), then (with ``pages``) its layer health and its report page, then ``zooms``
    windows of all of them; how many requests."""
    count = 0
    for run in get(url + "api/runs")["runs"]:
        base = f"{url}api/run/{run['id']}/"
        listed = get(base + "series?limit=200")
        names = [c["name"] for c in listed["charts"] if c["statistic"] == "value"]
        for at in range(0, len(names), PAGE_BATCH):
            asked = "&".join(
                f"name={urllib.request.quote(name)}&stat=value"
                for name in names[at : at + PAGE_BATCH]
            )
            get(base + f"curves?limit=200&{asked}")
            count += 1
        for name in names:
            get(base + f"curves?name={urllib.request.quote(name)}&stat=value")
            count += 1
        last = run["last_step"] or 0
        if pages:  # the other pages that read many series: layer health, the report
            get_text(base + "health")
            get_text(f"{url}report/{run['id']}")
            count += 2
        for z in range(zooms):
            lo = last * z // (zooms + 1)
            get(base + f"curves?match=series&limit=200&x0={lo}&x1={lo + last // 3}")
            count += 1
    return count


def one(runs: Path, cache_mb: int, src: Path, zooms: int, pages: bool) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(src)}
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(runs), str(cache_mb)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
        text=True,
    )
    assert child.stdin is not None and child.stdout is not None
    try:
        url = child.stdout.readline().strip()
        requests = exercise(url, zooms, pages)
        child.stdin.write("stat\n")
        child.stdin.flush()
        found = dict(json.loads(child.stdout.readline()))
        found["requests"] = requests
        return found
    finally:
        child.kill()
        child.wait()


def write_runs(out: Path, runs: int, steps: int, series: int) -> None:
    from bench.bench_series_reads import write_run

    for i in range(runs):
        run = out / f"run{i}"
        if not (run / "workers").exists():
            print(f"writing {run} ({steps:,} steps x {series} series) ...", file=sys.stderr)
            write_run(run, steps, series, 0.0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=20_000)
    parser.add_argument("--series", type=int, default=100)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--zooms", type=int, default=4, help="zoomed windows asked per run")
    parser.add_argument("--cache-mb", default="16,256", help="budgets to measure (MB)")
    parser.add_argument("--before-src", type=Path, help="another tree's src: its dashboard too")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--pages", action="store_true", help="ask each run's layer health and report page too"
    )
    parser.add_argument("--out", type=Path, help="where the runs are kept (default: a temp dir)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-serve-memory-") as tmp:
        out = args.out or Path(tmp)
        write_runs(out, args.runs, args.steps, args.series)
        arms: list[tuple[str, int, Path]] = [
            (f"budget {mb} MB", int(mb), SRC) for mb in args.cache_mb.split(",")
        ]
        if args.before_src is not None:
            arms.insert(0, ("before (--before-src, its defaults)", 0, args.before_src))
        results: dict[str, list[dict[str, Any]]] = {name: [] for name, _, _ in arms}
        for _ in range(args.rounds):  # interleaved: each round runs every arm once
            for name, mb, src in arms:
                results[name].append(one(out, mb, src, args.zooms, args.pages))
    load = os.getloadavg()
    print(
        f"{args.runs} runs x {args.steps:,} steps x {args.series} series, {args.zooms} zooms a "
        f"run{', health and report pages' if args.pages else ''}; medians of {args.rounds} "
        "interleaved rounds; load average "
        f"{load[0]:.1f} {load[1]:.1f} {load[2]:.1f}"
    )
    print("| server | requests | peak RSS | RSS after | server CPU | accounted (peak) |")
    print("|---|---|---|---|---|---|")
    for name, rows in results.items():

        def med(key: str, rows: list[dict[str, Any]] = rows) -> float:
            return statistics.median(r[key] for r in rows)

        accounted = (
            "-"
            if rows[0]["accounted"] is None
            else f"{med('accounted') / 2**20:.1f} MB ({med('accounted_peak') / 2**20:.1f} MB)"
        )
        print(
            f"| {name} | {rows[0]['requests']} | {med('hwm') / 2**20:.0f} MB | "
            f"{med('rss') / 2**20:.0f} MB | {med('cpu_s'):.1f} s | {accounted} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
