"""The runs list never waits for a run's read (issue 48, item 4): while a chart's read of a
run is held inside the storage itself (a store whose first series read waits on a gate,
opened through the real storage interface), the runs list and the runs table (what the runs
page asks) answer, and list that run."""

from __future__ import annotations

import builtins
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

import tensortap as tt
from tensortap.storage import StoreCapabilities, register_store, unregister_store
from tensortap.storage._local import LocalStore
from tests.helpers.json_get import get_json as get

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

SCHEME = "gated"


class GatedStore(LocalStore):
    """A local directory read as a store of another scheme (not a local path: the dashboard
    lists it as a store place) whose reads of series objects wait until :attr:`gate` opens."""

    capabilities = StoreCapabilities(lists_trials=True)
    gate = threading.Event()  # open: reads go through
    held = threading.Semaphore(0)  # released when a read is held at the gate
    _holding = threading.Lock()  # one read is held (a long one); the others go through

    def __init__(self, url: str) -> None:
        super().__init__(url[len(f"{SCHEME}://") :])
        self.location = url

    def get_ranges(self, ranges: Sequence[tuple[str, int, int]]) -> builtins.list[bytearray]:
        series = any("/series/" in k or "/rollups/" in k for k, _, _ in ranges)
        if series and not self.gate.is_set() and self._holding.acquire(blocking=False):
            self.held.release()
            assert self.gate.wait(120), "the test never opened the gate"
        return super().get_ranges(ranges)


@pytest.fixture
def gated() -> Iterator[None]:
    """The scheme known for this test only: a scheme left registered would be listed by every
    later test's "known schemes"."""
    register_store(SCHEME, GatedStore)
    try:
        yield
    finally:
        unregister_store(SCHEME)


def test_the_runs_list_answers_while_a_read_of_a_run_is_held_in_storage(
    tmp_path, serve, gated
) -> None:
    for name, steps in (("big", 200), ("small", 3)):
        hook = tt.Hook(tmp_path / "runs" / name, save_config=tt.SaveConfig(save_interval=1))
        for step in range(steps):
            hook.save_scalar("loss", 1 / (1 + step))
            hook.next_step()
        hook.close()
    GatedStore.gate.clear()
    try:
        dashboard = serve(f"{SCHEME}://{tmp_path / 'runs'}", warm=False)
        _, listed = get(dashboard.url + "api/runs")
        ids = {r["name"]: r["id"] for r in listed["runs"]}
        assert set(ids) == {"big", "small"}
        got: list[tuple[int, Any]] = []
        reading = threading.Thread(
            target=lambda: got.append(get(f"{dashboard.url}api/run/{ids['big']}/curves")),
            daemon=True,
        )
        reading.start()
        assert GatedStore.held.acquire(timeout=60)  # the chart's read is inside the store now
        assert dashboard.catalog is not None
        big = next(r for r in dashboard.catalog.runs() if r.name == "big")
        assert big.lock.locked()  # and holds the run's lock
        for _ in range(5):
            status, body = get(dashboard.url + "api/runs", timeout=60)
            assert status == 200 and sorted(r["name"] for r in body["runs"]) == ["big", "small"]
            status, body = get(dashboard.url + "api/table", timeout=60)
            assert status == 200 and len(body["rows"]) == 2
        assert got == []  # the read was still held all along
    finally:
        GatedStore.gate.set()
    reading.join(60)
    ((status, body),) = got
    assert status == 200 and body["series"][0]["points"] == 200
