"""`tensortap serve` ends on SIGTERM and SIGINT whatever a request is doing (issue 45: SIGTERM
did not stop the server while it built the runs list over a 27 MB summary.json), killed by
the signal it got (the conventional status), within its grace for the requests in flight."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest

import tensortap as tt

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

SRC = Path(__file__).resolve().parents[2] / "src"

#: `tensortap serve` as the command line runs it, with the runs list made a request that never
#: ends (the test's slow hook: the 27 MB summary's diagnosis took minutes)
CHILD = """
import sys, threading
import tensortap.serve._meta as meta

never = threading.Event()

def overview(run):
    print("building the runs list", flush=True)
    never.wait()

meta.overview = overview
from tensortap.cli import main
sys.exit(main(["serve", sys.argv[1], "--port", "0"]))
"""


def _ask(url: str) -> None:
    try:
        urllib.request.urlopen(url, timeout=120).read()
    except (urllib.error.URLError, OSError):  # the server ended under it: expected
        pass


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_ends_the_server_while_a_request_never_ends(tmp_path, sig) -> None:
    with tt.Hook(tmp_path / "runs" / "run", save_config=tt.SaveConfig(save_interval=1)) as hook:
        hook.save_tensor("loss", np.float32(1.0), collections="losses")
        hook.next_step()
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]),
    }
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(tmp_path / "runs")],
        stdout=subprocess.PIPE,
        env=env,
        text=True,
    )
    try:
        assert child.stdout is not None
        ready = child.stdout.readline()
        assert ready.startswith("tensortap serve: http://"), ready
        url = ready.split()[2]
        threading.Thread(target=_ask, args=(url + "api/runs",), daemon=True).start()
        assert child.stdout.readline().strip() == "building the runs list"  # in flight now
        child.send_signal(sig)
        try:
            code = child.wait(timeout=20)  # polls until it exits, or the deadline
        except subprocess.TimeoutExpired:
            pytest.fail(f"the server was still running 20 s after {sig.name}")
        assert code == -sig, f"the server ended with {code}, not as {sig.name} ends a process"
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
