from __future__ import annotations

import contextlib
import os
import random
import socket
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "tensortap",
    deadline=None,
    max_examples=60,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
settings.load_profile("tensortap")

# The suite counts saved steps of small fast models run as jobs: the save budget, which widens a
# job's default schedule on a machine's load (tensortap.core._save_budget), is off unless a test
# turns it on (tests/core/test_save_budget.py, tests/jobs/test_save_budget_jobs.py). Jobs read it
# in the test's process (jobs._specs.hook_config), and their processes inherit it.
os.environ.setdefault("TENSORTAP_SAVE_BUDGET", "off")

HELPERS = Path(__file__).parent / "helpers"


@pytest.fixture(autouse=True)
def _environment_as_it_was() -> Iterator[None]:
    """Each test leaves ``os.environ`` as it found it. Frameworks run in a test's process set
    variables there (Lightning and torch.distributed a rendezvous: ``MASTER_PORT``,
    ``LOCAL_RANK``, ``WORLD_SIZE``), and a later test's job inherits them: a Hugging Face job
    then tried a rendezvous on a port already taken (EADDRINUSE), in whatever order the tests
    happened to run. What a fixture of a wider scope sets for all its tests (the S3 server's
    credentials, even when a test's fixture first asks for it) is named in ``_SESSION_ENV`` and
    kept."""
    before = dict(os.environ)
    yield
    if dict(os.environ) != before:
        kept = {k: os.environ[k] for k in _SESSION_ENV if k in os.environ}
        os.environ.clear()
        os.environ.update(before)
        os.environ.update(kept)


# Variables that a session fixture sets for the rest of the session (see above).
_SESSION_ENV: set[str] = set()


@pytest.fixture
def trial_dir(tmp_path: Path) -> Path:
    return tmp_path / "trial"


@pytest.fixture
def count_submissions(monkeypatch: pytest.MonkeyPatch) -> Any:
    """``count_submissions(hook)``: a list that counts what the hook hands its trial writer
    from then on, 1 for each step submitted alone and a block's length for each block."""

    def attach(hook: Any) -> list[int]:
        writer = hook._writer
        one, many = writer.submit, writer.submit_steps
        handed: list[int] = []

        def submit(batch: Any) -> None:
            handed.append(1)
            one(batch)

        def submit_steps(block: Any) -> None:
            handed.append(len(block))
            many(block)

        monkeypatch.setattr(writer, "submit", submit)
        monkeypatch.setattr(writer, "submit_steps", submit_steps)
        return handed

    return attach


@pytest.fixture
def hold_writer(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """``hold_writer(hook)``: the hook's trial writer writes nothing until someone waits for it
    (a flush with a timeout other than 0), so a test sees what a trial opened before that
    holds, without timing anything. Let go at the test's end whatever happened."""
    import threading

    gates: list[threading.Event] = []

    def attach(hook: Any) -> None:
        gate = threading.Event()
        gates.append(gate)
        writer = hook._writer
        flush = writer.flush

        def waited_for(timeout: float | None = None) -> bool:
            if timeout != 0:
                gate.set()
            return bool(flush(timeout))

        def held(batch: Any) -> None:
            gate.wait(60)

        monkeypatch.setattr(writer, "flush", waited_for)
        writer.add_listener("held until waited for", held)

    yield attach
    for gate in gates:
        gate.set()


@pytest.fixture
def helper_env() -> dict[str, str]:
    """Environment for helper subprocesses: same interpreter, unbuffered output."""
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (for a torch.distributed rendezvous), chosen at random
    below the kernel's ephemeral range: a port the kernel hands out (``bind`` to 0) can be
    handed again to any test's outgoing connection before the ranks bind it, one below the
    range only to a listener that picks the same one."""
    low = 32768
    with contextlib.suppress(OSError, ValueError):
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    rng = random.Random()
    for _ in range(200):
        port = rng.randrange(max(1024, low - 12000), low)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as s:  # a crowded machine: what the kernel gives
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def helper_cmd(name: str, *args: object) -> list[str]:
    return [sys.executable, str(HELPERS / name), *map(str, args)]


@contextlib.contextmanager
def moto_server(**env: str) -> Iterator[str]:
    """A real S3-compatible server (moto's standalone HTTP server) on 127.0.0.1, started with
    ``env`` added to its environment; yields its endpoint URL and stops it afterwards."""
    import subprocess
    import time

    pytest.importorskip("moto.server")
    pytest.importorskip("boto3")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, **env},
    )
    endpoint = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            urllib.request.urlopen(endpoint, timeout=1).close()
            break
        except urllib.error.HTTPError:  # answering (with an error: it wants credentials)
            break
        except Exception:
            if server.poll() is not None or time.monotonic() > deadline:
                server.kill()
                pytest.fail("the moto S3 server did not start on 127.0.0.1")
            time.sleep(0.1)  # polling a server that is starting, with a deadline
    try:
        yield endpoint
    finally:
        server.terminate()
        server.wait(10)


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    """The session's S3 server (:func:`moto_server`), with dummy credentials and its endpoint
    in the environment (as users configure one); yields its endpoint URL."""
    names = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL")
    saved = {k: os.environ.get(k) for k in names}
    with moto_server() as endpoint:
        _SESSION_ENV.update(names)
        os.environ.update(
            AWS_ACCESS_KEY_ID="testing",
            AWS_SECRET_ACCESS_KEY="testing",
            AWS_DEFAULT_REGION="us-east-1",
            AWS_ENDPOINT_URL=endpoint,
        )
        try:
            yield endpoint
        finally:
            _SESSION_ENV.difference_update(names)
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value


@pytest.fixture
def s3_bucket(s3_endpoint):
    """A fresh bucket on the local S3 server; yields its name."""
    import uuid

    import boto3

    name = f"tt-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=s3_endpoint).create_bucket(Bucket=name)
    return name


class Browser:
    """A real headless Chromium (Debian's, driven by its ChromeDriver) that opens local pages."""

    def __init__(self, driver: Any) -> None:
        self.driver = driver

    def open(self, page: Path) -> Any:
        """Open a local file, after leaving the page before for a blank one (as
        :meth:`visit`): what that page still did cannot be logged as this one's."""
        self.driver.get("about:blank")
        self.driver.get_log("browser")  # drain what earlier pages logged
        self.driver.get(page.resolve().as_uri())
        return self.driver

    def visit(self, url: str) -> Any:
        """Open ``url`` (an http:// page of a local server). The page before is left for a
        blank one first, so that a request it still had in flight (to a server a test has
        stopped) cannot log its failure as this page's."""
        self.driver.get("about:blank")
        self.driver.get_log("browser")
        self.driver.get(url)
        return self.driver

    def until(self, script: str, check: Any = bool, timeout: float = 30.0) -> Any:
        """Run ``script`` (JavaScript returning a value) until ``check(value)`` holds; the value
        then. Fails with the last value seen when ``timeout`` seconds pass first."""
        import time

        deadline = time.monotonic() + timeout
        while True:
            value = self.driver.execute_script(script)
            if check(value):
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"still {value!r} after {timeout} s: {script}")
            time.sleep(0.05)

    def errors(self) -> list[dict[str, Any]]:
        """The console's SEVERE entries since the page was opened."""
        return [e for e in self.driver.get_log("browser") if e["level"] == "SEVERE"]


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    """Skips where Chromium and ChromeDriver are missing (.ci/run installs them, as root)."""
    import shutil

    webdriver = pytest.importorskip("selenium.webdriver")
    chromium, driver_path = shutil.which("chromium"), shutil.which("chromedriver")
    if not (chromium and driver_path):
        pytest.skip("Chromium and ChromeDriver are not installed (.ci/run installs them)")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-background-networking",  # this machine's network is closed: no retries
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--window-size=1200,900",
        "--use-angle=swiftshader",  # WebGL in software, for plotly's 3-D figures
        "--enable-unsafe-swiftshader",
    ):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(driver_path), options=options)
    try:
        yield Browser(driver)
    finally:
        driver.quit()


@pytest.fixture
def serve():
    """Start dashboards on free ports over the given places; stopped after the test."""
    from tensortap.serve import start

    started = []

    def serve(*places, **kwargs):
        dashboard = start([str(p) for p in places], port=0, **kwargs)
        started.append(dashboard)
        return dashboard

    yield serve
    for dashboard in started:
        dashboard.stop()
