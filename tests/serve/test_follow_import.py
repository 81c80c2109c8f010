"""`tensortap serve` on another tracker's logs follows them (issue 47): a TensorBoard logdir,
written by the ``tensorboard`` package's own writer while served, shows the steps written
later and the runs started later, without a restart; an unchanged source is never read again
(only ``stat``-ed), a run that changed is imported again alone, and a run whose files vanished
stays as last imported, said in its problems, while the others go on being followed."""

from __future__ import annotations

import math
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from tests.helpers.json_get import get_json as get

pytest.importorskip("tensorboard")
pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

T = TypeVar("T")
DEADLINE_SECS = 60.0


def _loss(step: int) -> float:
    return 2.0 * math.exp(-step / 40) + 0.05


def _write(writer: Any, steps: range) -> None:
    """Steps of the loss, flushed to the event file as a writer does during training."""
    for step in steps:
        writer.add_scalar("loss", _loss(step), step)
    writer.flush()


def _until(what: Callable[[], T | None], said: str) -> T:
    """Poll ``what`` until it answers something, within :data:`DEADLINE_SECS`."""
    deadline = time.monotonic() + DEADLINE_SECS
    while time.monotonic() < deadline:
        found = what()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError(f"not within {DEADLINE_SECS} s: {said}")


def _runs(url: str) -> dict[str, dict[str, Any]]:
    status, body = get(url + "api/runs")
    assert status == 200, body
    return {run["name"]: run for run in body["runs"]}


def _listing(url: str, name: str) -> dict[str, dict[str, Any]] | None:
    """The runs list once it lists ``name``."""
    runs = _runs(url)
    return runs if name in runs else None


def _loss_steps(url: str, ident: str) -> list[int]:
    """The steps of the run's loss curve, as the run's page asks for them."""
    status, body = get(f"{url}api/run/{ident}/curves")
    assert status == 200, body
    lines = [s for s in body["series"] if s["name"] == "vitals/loss" and s["mode"] == "TRAIN"]
    return [] if not lines else [int(x) for x in lines[0]["x"]]


def _follow(tmp_path: Path, logdir: Path) -> Any:
    from tensortap.trackers import FollowedImport

    follower = FollowedImport(logdir, tmp_path / "imported", tmp_path / "next", interval=0.05)
    follower.start()
    return follower


def test_steps_and_runs_written_later_are_shown(tmp_path: Path, serve: Any) -> None:
    from tensorboard.summary import Writer

    logdir = tmp_path / "logs"
    writer = Writer(str(logdir / "exp1"))
    try:
        _write(writer, range(50))
        follower = _follow(tmp_path, logdir)
        url = serve(tmp_path / "imported", follow=[follower]).url
        ident = _runs(url)["exp1"]["id"]
        assert _loss_steps(url, ident) == list(range(50))
        # training goes on, and a second run starts
        _write(writer, range(50, 120))
        second = Writer(str(logdir / "exp2"))
        _write(second, range(30))
        second.close()
        _until(lambda: _loss_steps(url, ident) == list(range(120)), "exp1's new steps shown")
        runs = _until(lambda: _listing(url, "exp2"), "exp2 listed")
        assert runs["exp1"]["id"] == ident  # the same run, its page's address kept
        assert _loss_steps(url, runs["exp2"]["id"]) == list(range(30))
        assert runs["exp2"]["location"] == str(logdir / "exp2")  # its source, as it was read
        assert all(not run["problems"] for run in runs.values())
        _until(lambda: _runs(url)["exp1"]["last_step"] == 119, "the runs list's last step")
    finally:
        writer.close()


def test_an_unchanged_source_is_not_imported_again(tmp_path: Path, serve: Any) -> None:
    from tensorboard.summary import Writer

    logdir = tmp_path / "logs"
    writers = {name: Writer(str(logdir / name)) for name in ("exp1", "exp2")}
    try:
        for writer in writers.values():
            _write(writer, range(40))
        follower = _follow(tmp_path, logdir)
        dashboard = serve(tmp_path / "imported", follow=[follower])
        assert (follower.reads, follower.writes) == (1, 2)  # the import at start
        _until(lambda: follower.checks >= 5, "five checks")
        assert (follower.reads, follower.writes) == (1, 2)  # looked at, never read again
        locations = {run.name: run.location for run in dashboard.catalog.runs()}
        # one run grows: the source is read again, and that run alone written again
        _write(writers["exp1"], range(40, 60))
        _until(lambda: follower.reads >= 2, "the source read again")
        # (the writer's thread may land the steps over two checks: each read writes one run)
        reads = [-1]

        def settled() -> bool:
            checks = follower.checks
            _until(lambda: follower.checks >= checks + 3, "three more checks")
            settled, reads[0] = follower.reads == reads[0], follower.reads
            return settled

        _until(settled, "no more reads once the writer flushed")
        assert follower.writes == 2 + (follower.reads - 1)
        now = {run.name: run.location for run in dashboard.catalog.runs()}
        assert now["exp2"] == locations["exp2"] and now["exp1"] != locations["exp1"]
        assert not Path(locations["exp1"]).exists()  # the trial swapped out, removed
    finally:
        for writer in writers.values():
            writer.close()


def test_a_vanished_run_stays_as_last_imported_and_says_so(tmp_path: Path, serve: Any) -> None:
    from tensorboard.summary import Writer

    logdir = tmp_path / "logs"
    gone = Writer(str(logdir / "gone"))
    _write(gone, range(40))
    gone.close()
    writer = Writer(str(logdir / "kept"))
    try:
        _write(writer, range(40))
        follower = _follow(tmp_path, logdir)
        url = serve(tmp_path / "imported", follow=[follower]).url
        ids = {name: run["id"] for name, run in _runs(url).items()}
        shutil.rmtree(logdir / "gone")
        _write(writer, range(40, 80))

        def said() -> dict[str, dict[str, Any]] | None:
            runs = _runs(url)
            return runs if runs["gone"]["problems"] else None

        runs = _until(said, "the vanished run's problem listed")
        assert runs["gone"]["problems"] == [f"gone: no longer in {logdir}; shown as last imported"]
        assert not runs["kept"]["problems"]
        assert _loss_steps(url, ids["gone"]) == list(range(40))  # as last imported
        _until(lambda: _loss_steps(url, ids["kept"]) == list(range(80)), "kept followed")
    finally:
        writer.close()
