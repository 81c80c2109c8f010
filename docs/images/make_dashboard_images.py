"""The dashboard's pictures (``make images``): the runs table, a run's page and the compare view,
each photographed by headless Chromium (Debian's chromium package, driven by Selenium as the
tests drive it: a page is photographed once it is drawn) over ``tensortap serve``.

The runs: seed 000's CNN job (``--quick``), two TensorBoard runs imported with ``tensortap
import`` (a healthy and a diverging loss, written by the ``tensorboard`` package's writer), and
two short PyTorch trials of one model whose middle layer's initial weights differ x10 (what
the compare view's "layers that differ" names).

    .venv/bin/python docs/images/make_dashboard_images.py [--reuse]
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
WORK = ROOT / "build" / "dashboard-images"
IMAGES = ROOT / "docs" / "images"


def tensorboard_runs(logdir: Path) -> None:
    from tensorboard.summary import Writer

    for name, rise in (("tb-healthy", False), ("tb-diverging", True)):
        writer = Writer(str(logdir / name))
        for step in range(300):
            loss = 2.0 * math.exp(-step / 60) + 0.05
            if rise and step >= 150:
                loss += math.exp((step - 150) / 10) - 1.0
            writer.add_scalar("train/loss", loss, step)
            if step % 50 == 49:
                writer.add_scalar("eval/loss", loss * 1.02, step)
                writer.add_scalar("eval/accuracy", 1 - math.exp(-step / 60), step)
        writer.close()


def torch_runs(runs: Path) -> None:
    import torch
    from torch import nn

    import tensortap.pytorch as tt

    for name, scale in (("cnn-base", 1.0), ("cnn-init-x10", 10.0)):
        torch.manual_seed(0)
        middle = nn.Linear(16, 16)
        model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), middle, nn.ReLU(), nn.Linear(16, 3))
        with torch.no_grad():
            middle.weight.mul_(scale)
        g = torch.Generator().manual_seed(1)
        x, y = torch.randn(256, 8, generator=g), torch.randint(0, 3, (256,), generator=g)
        hook = tt.Hook(
            str(runs / name),
            save_config=tt.SaveConfig(save_interval=5),
            include_collections=["weights", "biases", "gradients", "losses"],
        )
        hook.register_module(model)
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        for i in range(60):
            batch = slice((i * 32) % 256, (i * 32) % 256 + 32)
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(x[batch]), y[batch])
            loss.backward()
            hook.save_vitals({"loss": float(loss)})
            opt.step()
        hook.close()


def browser() -> Any:
    """Headless Chromium through Selenium, as the tests drive it (bench_long's, without
    scrollbars in the pictures)."""
    sys.path.insert(0, str(ROOT))
    from bench.bench_long import browser as chromium

    return chromium("--hide-scrollbars")


def shoot(driver: Any, url: str, size: tuple[int, int], ready: str, picture: Path) -> None:
    """Open ``url`` at ``size``, wait (at most a minute) until the script ``ready`` returns
    true, then photograph the window."""
    driver.set_window_size(*size)
    driver.get(url)
    deadline = time.monotonic() + 60
    while not driver.execute_script(ready):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{url} was not drawn within a minute ({ready})")
        time.sleep(0.2)
    time.sleep(1.0)  # plotly's last frame
    driver.execute_script("window.scrollTo(0, 0);")
    driver.save_screenshot(str(picture))
    print(f"wrote {picture} ({picture.stat().st_size // 1024} KB)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reuse", action="store_true", help="photograph the runs made before")
    ns = parser.parse_args(argv)
    runs = WORK / "runs"
    py = sys.executable
    if not ns.reuse:
        make_runs(runs, py)
    serve_and_shoot(runs, py)
    return 0


def make_runs(runs: Path, py: str) -> None:
    shutil.rmtree(WORK, ignore_errors=True)
    runs.mkdir(parents=True)
    subprocess.run(
        [py, str(ROOT / "examples" / "seed000_builtin_rules.py"), "--output", str(runs), "--quick"],
        check=True,
    )
    tensorboard_runs(WORK / "logdir")
    subprocess.run(
        [py, "-m", "tensortap.cli", "import", str(WORK / "logdir"), "-o", str(runs)], check=True
    )
    torch_runs(runs)


def serve_and_shoot(runs: Path, py: str) -> None:
    log = (WORK / "serve.log").open("w")
    server = subprocess.Popen(
        [py, "-m", "tensortap.cli", "serve", str(runs), "--port", "0"], stdout=log, stderr=log
    )
    try:
        deadline = time.monotonic() + 60
        url = ""
        while not url and time.monotonic() < deadline:
            text = (WORK / "serve.log").read_text()
            url = next((w for w in text.split() if w.startswith("http://")), "")
            time.sleep(0.1)
        found: list[dict[str, str]] = []
        while time.monotonic() < deadline:  # every run found (the catalog scans as they come)
            found = json.load(urllib.request.urlopen(url + "api/runs"))["runs"]
            if len(found) >= 5:
                break
            time.sleep(0.2)
        ids = {Path(r["location"]).name: r["id"] for r in found}
        job = next(r["id"] for r in found if r["kind"] == "job")
        driver = browser()
        try:
            shoot(
                driver,
                url,
                (1200, 560),
                "const r = window.tensortapRuns; return r && r.rows >= 5 && !r.pending;",
                IMAGES / "serve-runs.png",
            )
            shoot(
                driver,
                f"{url}run/{job}",
                (1200, 1500),
                "return document.querySelector('#diagnosis').textContent.length > 0 &&"
                " document.querySelectorAll('#curves .plot .main-svg').length > 1;",
                IMAGES / "serve-run.png",
            )
            shoot(
                driver,
                f"{url}compare?ids={ids['cnn-base']},{ids['cnn-init-x10']}",
                (1200, 1100),
                "return document.querySelectorAll('#diff tr.diff-row').length > 0 &&"
                " document.querySelectorAll('#curves .main-svg').length > 0;",
                IMAGES / "serve-compare.png",
            )
        finally:
            driver.quit()
    finally:
        server.terminate()
        server.wait(timeout=30)


if __name__ == "__main__":
    sys.exit(main())
