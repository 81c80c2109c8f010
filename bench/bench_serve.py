"""The dashboard (``tensortap serve``): time to first paint of a 100,000-step run, and the
server's CPU while a page follows a live run.

- first paint: a fresh server each time; a headless Chromium opens the run's page once the
  server has read the run ahead (it does as soon as it finds a run), and, "cold", at once on a
  server that has read nothing. The time is from navigation start to the loss chart drawn with
  its data (the page's own ``performance.now()``); then one curves request on the warm server.
- following: a training process saves a loss and an accuracy 50 times a second for
  ``--follow-secs``; the page stays open, polling; the server (in this process) uses CPU for
  what it reads and sends. CPU seconds per second of wall time, idle server as a baseline.
- waits (``--waits``, no browser; the figures tests/serve/ asserted before tests stopped timing):
  how long the runs list takes while a 20,000-step run's first curves request is being read
  (median and slowest, each on a fresh server), a chart of a run while a read of its trial
  holds the trial's lock, and one curves request of a run of 20,000 scalar names.

    .venv/bin/python bench/bench_serve.py [--steps 100000] [--repeat 3] [--follow-secs 20]
    .venv/bin/python bench/bench_serve.py --waits
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np

import tensortap as tt
from tensortap.serve import start

WRITER = """
import sys, time
import numpy as np
import tensortap as tt
hook = tt.Hook(sys.argv[1], save_config=tt.SaveConfig(save_interval=1),
               include_collections=["losses", "metrics"])
end = time.monotonic() + float(sys.argv[2])
step = 0
while time.monotonic() < end:
    hook.save_tensor("loss", np.float32(1 / (1 + step * 1e-3)), collections="losses")
    hook.save_tensor("accuracy", np.float32(step * 1e-5), collections="metrics")
    hook.next_step()
    step += 1
    time.sleep(0.02)
hook.close()
"""


def write_long(out: Path, steps: int) -> None:
    rng = np.random.default_rng(0)
    hook = tt.Hook(
        out, save_config=tt.SaveConfig(save_interval=1), include_collections=["losses", "metrics"]
    )
    noise = rng.normal(0, 0.01, steps)
    for step in range(steps):
        hook.set_mode(tt.modes.TRAIN)
        hook.save_tensor(
            "loss", np.float32(1 / (1 + step * 1e-3) + noise[step]), collections="losses"
        )
        hook.save_tensor("accuracy", np.float32(step / steps), collections="metrics")
        hook.next_step()
        if step % 1000 == 999:
            hook.set_mode(tt.modes.EVAL)
            hook.save_tensor("loss", np.float32(1 / (1 + step * 1e-3)), collections="losses")
            hook.next_step()
    hook.close()


def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium")
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--window-size=1400,1000",
    ):
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)


PAINTED = (
    "const d = document.querySelector('#curves .plot');"  # the first chart: the loss
    "return d && d.data && d.data.length && d.data[0].x.length ? performance.now() : null;"
)


def wait_for(driver, script: str, timeout: float = 120.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = driver.execute_script(script)
        if value:
            return value
        time.sleep(0.01)
    raise TimeoutError(script)


def first_paint(trial: Path, driver, warm: bool) -> tuple[float, float]:
    """Seconds to the loss chart drawn: ``warm``, after the server has read the run ahead (it
    does as soon as it finds it); else a click at once on a server that has read nothing."""
    dashboard = start([str(trial)], port=0, warm=warm)
    try:
        ident = json.load(urllib.request.urlopen(dashboard.url + "api/runs"))["runs"][0]["id"]
        if warm:
            wait_for_warm(dashboard.url, ident)
        driver.get(f"{dashboard.url}run/{ident}")
        painted = wait_for(driver, PAINTED) / 1000
        began = time.perf_counter()
        urllib.request.urlopen(f"{dashboard.url}api/run/{ident}/curves").read()  # now warm
        warm = time.perf_counter() - began
        return painted, warm
    finally:
        dashboard.stop()


def wait_for_warm(url: str, ident: str, timeout: float = 120.0) -> None:
    """Until a curves request answers fast (the read-ahead is done)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        began = time.perf_counter()
        urllib.request.urlopen(f"{url}api/run/{ident}/curves").read()
        if time.perf_counter() - began < 0.5:
            return
        time.sleep(0.2)
    raise TimeoutError("the server did not read the run ahead")


def cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def following(root: Path, seconds: float, driver) -> dict[str, float]:
    trial = root / "live"
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(trial), str(seconds + 5)])
    try:
        deadline = time.monotonic() + 60
        while not (trial / "tensortap.json").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        dashboard = start([str(root)], port=0)
        try:
            ident = json.load(urllib.request.urlopen(dashboard.url + "api/runs"))["runs"][0]["id"]
            before, t0 = cpu(), time.perf_counter()
            time.sleep(min(5.0, seconds / 4))  # the idle server: nobody asks
            idle = (cpu() - before) / (time.perf_counter() - t0)
            driver.get(f"{dashboard.url}run/{ident}")
            wait_for(driver, PAINTED)
            before, t0 = cpu(), time.perf_counter()
            time.sleep(seconds)
            busy = (cpu() - before) / (time.perf_counter() - t0)
            points = driver.execute_script("return window.tensortapCurves.series[0].points")
        finally:
            dashboard.stop()
    finally:
        writer.wait(timeout=120)
    return {"idle_cpu": round(idle, 3), "following_cpu": round(busy, 3), "points_seen": points}


def scalars(out: Path, steps: int, names: int) -> None:
    """A run of ``names`` scalars saved every step for ``steps`` steps."""
    hook = tt.Hook(out, save_config=tt.SaveConfig(save_interval=1))
    for step in range(steps):
        for i in range(names):
            hook.save_scalar(f"metric_{i:05d}", float(step + i))
        hook.next_step()
    hook.close()


def get_seconds(url: str) -> float:
    began = time.perf_counter()
    with urllib.request.urlopen(url, timeout=120) as response:
        response.read()
    return time.perf_counter() - began


def waits(root: Path) -> dict[str, Any]:
    """The runs list during a long run's read; a chart while its trial is read; a wide run."""
    scalars(root / "runs" / "big", steps=20_000, names=10)
    scalars(root / "runs" / "small", steps=3, names=1)
    during: list[float] = []  # each runs list asked while the first curves read went on
    while len(during) < 20:
        dashboard = start([str(root / "runs")], port=0, warm=False)  # nothing read yet
        try:
            runs = json.load(urllib.request.urlopen(dashboard.url + "api/runs"))["runs"]
            big = next(r["id"] for r in runs if r["name"] == "big")
            done = threading.Event()

            def read(url: str, done: threading.Event) -> None:
                try:
                    urllib.request.urlopen(url, timeout=120).read()
                finally:
                    done.set()

            url = f"{dashboard.url}api/run/{big}/curves"
            threading.Thread(target=read, args=(url, done), daemon=True).start()
            while not done.is_set():
                during.append(get_seconds(dashboard.url + "api/runs"))
        finally:
            dashboard.stop()
    dashboard = start([str(root / "runs" / "small")], port=0, warm=False)
    try:
        assert dashboard.catalog is not None
        (run,) = dashboard.catalog.runs()
        with run.trial_lock:  # a read of the trial going on (a heat map, say)
            chart = get_seconds(f"{dashboard.url}api/run/{run.id}/curves")
    finally:
        dashboard.stop()
    hook = tt.Hook(root / "wide", save_config=tt.SaveConfig(save_interval=1))
    for step in range(2):
        for i in range(20_000):
            hook.save_tensor(f"metric_{i:05d}", np.float32(i + step), collections="scalars")
        hook.next_step()
    hook.close()
    dashboard = start([str(root / "wide")], port=0, warm=False)
    try:
        assert dashboard.catalog is not None
        (run,) = dashboard.catalog.runs()
        wide = get_seconds(f"{dashboard.url}api/run/{run.id}/curves")
    finally:
        dashboard.stop()
    return {
        "runs_list_during_a_read_s_median": round(statistics.median(during), 4),
        "runs_list_during_a_read_s_max": round(max(during), 4),
        "runs_lists_during_reads": len(during),
        "chart_while_trial_read_s": round(chart, 4),
        "curves_of_20000_names_first_request_s": round(wide, 3),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--follow-secs", type=float, default=20.0)
    parser.add_argument("--waits", action="store_true", help="only the waits (no browser)")
    args = parser.parse_args(argv)
    machine = f"{platform.machine()} {platform.python_version()}"
    if args.waits:
        with tempfile.TemporaryDirectory() as tmp:
            print(json.dumps({"machine": machine, **waits(Path(tmp))}, indent=1))
        return 0
    driver = browser()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            long = Path(tmp) / "long"
            write_long(long, args.steps)
            cold, paints, warm = [], [], []
            for _ in range(args.repeat):
                cold.append(first_paint(long, driver, warm=False)[0])
                painted, again = first_paint(long, driver, warm=True)
                paints.append(painted)
                warm.append(again)
            follow = following(Path(tmp) / "live-root", args.follow_secs, driver)
            waited = waits(Path(tmp) / "waits")
    finally:
        driver.quit()
    result = {
        "machine": machine,
        "steps": args.steps,
        "first_paint_s_median": round(statistics.median(paints), 3),
        "first_paint_s": [round(p, 3) for p in paints],
        "first_paint_cold_s_median": round(statistics.median(cold), 3),
        "first_paint_cold_s": [round(p, 3) for p in cold],
        "warm_curves_request_s_median": round(statistics.median(warm), 3),
        **follow,
        **waited,
    }
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
