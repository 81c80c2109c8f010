"""`tensortap report` and `tensortap serve` straight on another tracker's logs (issue 47): a
TensorBoard logdir written by torch's own SummaryWriter is imported into a temporary directory
the command owns (never into the source: its files and bytes are the same after), said on
stderr, reported or served, and the temporary directory is gone when the command ends, also
when a signal ends `serve`. A directory that is neither tensortap's nor a tracker's gets the
error `diagnose` gives."""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from tests.cli.test_jobs import run_cli
from tests.helpers.json_get import get_json as get

pytest.importorskip("tensorboard")
pytest.importorskip("yaml")

SRC = Path(__file__).resolve().parents[2] / "src"
STEPS = 200


def _loss(step: int, diverges: bool) -> float:
    healthy = 2.0 * math.exp(-step / 40) + 0.05
    return healthy + (math.exp((step - 100) / 10) - 1.0 if diverges and step >= 100 else 0.0)


def _write_logdir(root: Path, runs: dict[str, bool]) -> Path:
    """One run per name by torch's SummaryWriter, its loss diverging where True."""
    torch_tb = pytest.importorskip("torch.utils.tensorboard")
    for name, diverges in runs.items():
        writer = torch_tb.SummaryWriter(str(root / name))
        for step in range(STEPS):
            writer.add_scalar("Loss/train", _loss(step, diverges), step)
        writer.close()
    return root


def _snapshot(root: Path) -> dict[str, str]:
    """Every file under ``root`` with a digest of its bytes."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def _text(page: str) -> str:
    """The page's words, without its markup."""
    return " ".join(re.sub("<[^>]+>", " ", page).split())


@pytest.fixture
def private_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The temporary directories of this process and its children go here, to be counted."""
    place = tmp_path / "tmp"
    place.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(place))
    monkeypatch.setenv("TMPDIR", str(place))
    return place


def test_report_on_a_tensorboard_logdir(tmp_path: Path, private_tmp: Path) -> None:
    logdir = _write_logdir(tmp_path / "logs", {"diverging": True})
    before = _snapshot(logdir)
    out = tmp_path / "report.html"
    code, text, err = run_cli("report", str(logdir), "-o", str(out))
    assert code == 0, err
    assert f"imported 1 TensorBoard run of {logdir} (read-only; nothing written there)" in err
    assert f"wrote {out}" in text
    page = out.read_text()
    assert "vitals/loss" in page  # the run's loss, as the import names it
    # the verdict: the loss that blows up from step 100 diverges (its earlier "no progress since
    # the start" is a warning while training goes on, a problem only if training ended so)
    assert "Diagnosis: the learning rate is too high: vitals/loss (TRAIN) rose" in _text(page)
    assert "diverging" in _text(page)
    assert "LossNotDecreasing IssuesFound (problem)" in _text(page)
    assert _snapshot(logdir) == before
    assert list(private_tmp.iterdir()) == []  # the import is gone with the command


def test_report_names_the_source_never_the_temporary_directory(
    tmp_path: Path, private_tmp: Path
) -> None:
    logdir = _write_logdir(tmp_path / "logs", {"exp1": False})
    out = tmp_path / "report.html"
    code, _, err = run_cli("report", str(logdir / "exp1"), "-o", str(out))
    assert code == 0, err
    page = out.read_text()
    assert f"Trial {logdir / 'exp1'} (TensorBoard logdir, imported):" in _text(page)
    assert str(private_tmp) not in page and "tensortap-report-" not in page


def test_diagnose_names_the_source_never_the_temporary_directory(
    tmp_path: Path, private_tmp: Path
) -> None:
    logdir = _write_logdir(tmp_path / "logs", {"exp1": True})
    code, text, err = run_cli("diagnose", str(logdir / "exp1"))
    assert code == 0, err
    assert f"exp1 -> {logdir / 'exp1'} (TensorBoard logdir, imported):" in text
    assert str(private_tmp) not in text + err and "tensortap-diagnose-" not in text + err


def test_histograms_not_imported_are_said_with_their_count(
    tmp_path: Path, private_tmp: Path
) -> None:
    torch_tb = pytest.importorskip("torch.utils.tensorboard")
    logdir = tmp_path / "logs"
    writer = torch_tb.SummaryWriter(str(logdir / "exp1"))
    for step in range(STEPS):
        writer.add_scalar("loss", _loss(step, False), step)
        if step % 20 == 0:
            writer.add_histogram("weights/fc1", np.array([0.1 * step, 0.2, 0.3]), step)
            writer.add_histogram("grads/fc1", np.array([0.01, 0.02]), step)
    writer.close()
    said = "2 histogram tags (20 values: grads/fc1, weights/fc1) not imported"
    code, _, err = run_cli("report", str(logdir / "exp1"), "-o", str(tmp_path / "r.html"))
    assert code == 0, err
    assert f"  exp1: {said}: tensortap imports a tracker's scalars" in err
    code, text, err = run_cli("import", str(logdir), "-o", str(tmp_path / "runs"))
    assert code == 0, err
    assert f"    {said}" in text


def test_report_of_several_runs_says_which_to_pick(tmp_path: Path, private_tmp: Path) -> None:
    logdir = _write_logdir(tmp_path / "logs", {"a": False, "b": True})
    code, _, err = run_cli("report", str(logdir), "-o", str(tmp_path / "r.html"))
    assert code == 2
    assert "a report shows one run" in err and "(a, b)" in err
    assert not (tmp_path / "r.html").exists()
    assert list(private_tmp.iterdir()) == []


def test_serve_on_a_tensorboard_logdir(tmp_path: Path, private_tmp: Path) -> None:
    pytest.importorskip("starlette")
    pytest.importorskip("uvicorn")
    logdir = _write_logdir(tmp_path / "logs", {"healthy": False, "diverging": True})
    before = _snapshot(logdir)
    env = _child_env(private_tmp)
    child = subprocess.Popen(
        [sys.executable, "-m", "tensortap.cli", "serve", str(logdir), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        text=True,
    )
    try:
        assert child.stdout is not None
        ready = child.stdout.readline()
        assert ready.startswith("tensortap serve: http://127.0.0.1:"), ready
        url = ready.split()[2]
        assert len(list(private_tmp.iterdir())) == 1  # the imported trials, not in logdir
        deadline = time.monotonic() + 60
        names: set[str] = set()
        while names != {"healthy", "diverging"} and time.monotonic() < deadline:
            status, body = get(url + "api/runs")
            assert status == 200
            names = {run["name"] for run in body["runs"]}
        assert names == {"healthy", "diverging"}
        # every place the page names a run's path names the source, never the temporary
        # directory (gone when serve ends)
        assert body["places"] == [f"{logdir} (TensorBoard logdir, imported)"]
        assert {run["name"]: run["location"] for run in body["runs"]} == {
            name: f"{logdir / name} (TensorBoard logdir, imported)"
            for name in ("healthy", "diverging")
        }
        status, table = get(url + "api/table")
        assert status == 200 and table["places"] == body["places"]
        answers = [json.dumps(body), json.dumps(table)]
        for run in body["runs"]:
            status, detail = get(f"{url}api/run/{run['id']}")
            assert status == 200
            answers.append(json.dumps(detail))
            with urllib.request.urlopen(f"{url}report/{run['id']}", timeout=60) as answer:
                report = answer.read().decode()
            assert f"Trial {logdir / run['name']} (TensorBoard logdir, imported)" in _text(report)
            answers.append(report)
        assert not [a for a in answers if str(private_tmp) in a or "tensortap-serve-" in a]
        # a run the tracker starts while serve runs is followed: listed, named by its source
        _write_logdir(logdir, {"late": False})
        before = _snapshot(logdir)
        deadline = time.monotonic() + 60
        while "late" not in names and time.monotonic() < deadline:
            time.sleep(0.1)
            status, body = get(url + "api/runs")
            names = {run["name"] for run in body["runs"]}
        late = [run for run in body["runs"] if run["name"] == "late"]
        assert late and late[0]["location"] == f"{logdir / 'late'} (TensorBoard logdir, imported)"
        child.send_signal(signal.SIGTERM)
        _, err = child.communicate(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert "imported 2 TensorBoard runs of" in err and "read-only; nothing written there" in err
    assert "followed: checked every 5 s" in err
    assert _snapshot(logdir) == before
    assert list(private_tmp.iterdir()) == []  # removed before the signal ended the process


def _child_env(private_tmp: Path | None = None) -> dict[str, str]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]),
    }
    if private_tmp is not None:
        env["TMPDIR"] = str(private_tmp)
    return env


def test_neither_tensortap_nor_a_tracker_says_what_it_takes(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("hello")
    code, _, err = run_cli("report", str(tmp_path), "-o", "0")
    assert code == 2
    assert "is neither a tensortap trial, job or runs directory nor a source" in err
    assert "--format" in err
    # serve in a process of its own: before, it served the directory, empty, until stopped
    child = subprocess.Popen(
        [sys.executable, "-m", "tensortap.cli", "serve", str(tmp_path), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_child_env(),
        text=True,
    )
    try:
        out, err = child.communicate(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == 2, out
    assert "is neither a tensortap trial, job or runs directory nor a source" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]
