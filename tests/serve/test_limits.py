"""The dashboard's limits (issue 32): one budget of open files for every run it serves, job
files opened as the trial reader opens files, bounded curve answers, and ``s3://`` places
listed incrementally with one client."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest

import tensortap as tt
from tests.helpers.json_get import get_json as get

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

SRC = Path(__file__).resolve().parents[2] / "src"


def child_env() -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]),
    }


def segmented_trial(out: Path | str, segments: int = 12) -> None:
    """A trial of ``segments`` segments (one per step): each one a file a reader opens."""
    hook = tt.Hook(out, save_config=tt.SaveConfig(save_interval=1))
    for step in range(segments):
        hook.save_tensor("loss", np.float32(1.0 / (step + 1)), collections="losses")
        hook.next_step()
        hook.flush()
    hook.close()


CHILD = """
import resource, sys
resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))  # the hard limit too: none to raise
from tensortap.serve import start
dashboard = start([sys.argv[1]], port=0)
print(dashboard.url, flush=True)
sys.stdin.read()
"""


def test_200_runs_are_served_under_a_limit_of_256_open_files(tmp_path) -> None:
    for i in range(200):
        segmented_trial(tmp_path / "runs" / f"run{i:03d}")
    env = child_env()
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(tmp_path / "runs")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
        text=True,
    )
    try:
        assert child.stdout is not None
        url = child.stdout.readline().strip()
        assert url.startswith("http://"), url
        status, body = get(url + "api/runs")
        assert status == 200
        assert len(body["runs"]) == 200
        for run in body["runs"]:  # every run's curves, each segment of each run read
            status, curves = get(url + f"api/run/{run['id']}/curves")
            assert status == 200, curves
            (loss,) = curves["series"]
            assert loss["points"] == 12
        status, body = get(url + "api/runs")  # and the server still answers
        assert status == 200 and all(not r["problems"] for r in body["runs"])
    finally:
        child.kill()
        child.wait()


RULES_CHILD = """
import resource, sys
resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))
from tensortap.scale import run_rules
results = run_rules(sys.argv[1:], ["LossNotDecreasing", "ExplodingTensor"], workers=1)
rows = results.summary.to_pylist()
print(len(rows), sum(r["status"] == "Error" for r in rows), flush=True)
"""


def test_rules_over_30_trials_in_process_under_256_open_files(tmp_path) -> None:
    trials = [tmp_path / f"t{i:02d}" for i in range(30)]
    for trial in trials:
        segmented_trial(trial, segments=20)
    done = subprocess.run(
        [sys.executable, "-c", RULES_CHILD, *map(str, trials)],
        capture_output=True,
        text=True,
        env=child_env(),
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["60", "0"], done.stdout


def test_open_read_descriptors_stay_within_one_budget_for_the_process(tmp_path) -> None:
    from tensortap.storage._local import HANDLES

    for i in range(40):
        segmented_trial(tmp_path / f"t{i:02d}", segments=20)
    before = len(os.listdir("/proc/self/fd")) if Path("/proc/self/fd").is_dir() else None
    trials = [tt.create_trial(tmp_path / f"t{i:02d}") for i in range(40)]
    for trial in trials:  # every value of every trial: 800 segment files between them
        assert len(trial.tensor("loss").values()) == 20
    assert len(HANDLES) <= HANDLES.capacity
    if before is not None:
        assert len(os.listdir("/proc/self/fd")) - before <= HANDLES.capacity
    for trial in trials:
        trial.store.close()
    owners = {t.store._owner for t in trials}  # type: ignore[attr-defined]
    assert not any(owner in owners for owner, _key in HANDLES._open)


RAISE_CHILD = """
import resource
from tensortap.storage._local import HANDLES, budget_for, raise_open_file_limit
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (64, hard))
print(raise_open_file_limit(), min(hard, 65536), HANDLES.capacity, budget_for(min(hard, 65536)))
"""


def test_serving_raises_the_soft_open_file_limit_toward_the_hard_one() -> None:
    done = subprocess.run(
        [sys.executable, "-c", RAISE_CHILD], capture_output=True, text=True, env=child_env()
    )
    assert done.returncode == 0, done.stderr
    now, wanted, capacity, expected = map(int, done.stdout.split())
    assert now == wanted and capacity == expected


def test_a_run_whose_page_stopped_asking_has_its_trial_closed(tmp_path) -> None:
    from tensortap.serve import _data as data
    from tensortap.serve._catalog import Catalog
    from tensortap.storage._local import HANDLES

    segmented_trial(tmp_path / "runs" / "a", segments=5)
    catalog = Catalog([str(tmp_path / "runs")])
    (run,) = catalog.runs()
    with run.lock:
        data.curves(run)  # its series reader
    owner = run.cache.series.store._owner  # type: ignore[union-attr]
    assert any(k[0] == owner for k in HANDLES._open)
    assert catalog.close_idle(idle_secs=3600) == 0  # asked for just now: kept
    assert catalog.close_idle(idle_secs=0) == 1
    assert run.cache.series is None
    assert not any(k[0] == owner for k in HANDLES._open)
    assert len(run.cache.answers) == 0  # what was answered is let go too
    with run.lock:  # the page comes back: opened again, the same curves
        assert data.curves(run)["series"][0]["points"] == 5


def make_job(job_dir: Path, **job: object) -> str:
    """A job directory as `tensortap run` lays it out, with a trial in ``trial/``."""
    from tensortap.jobs._record import JobRecord

    JobRecord(job_dir).create({"created": 1.0, "command": ["train.py"], **job})
    segmented_trial(job_dir / "trial", segments=3)
    (job_dir / "logs" / "training.log").write_text("epoch 1\nepoch 2\n")
    return job_dir.name


def by_name(dashboard) -> dict[str, dict]:
    status, body = get(dashboard.url + "api/runs")
    assert status == 200
    return {r["name"]: r for r in body["runs"]}


def test_a_training_log_that_is_not_a_regular_file_in_the_job_is_not_read(tmp_path, serve) -> None:
    runs = tmp_path / "runs"
    for name in ("plain", "passwd", "fifo", "zero", "linkeddir"):
        make_job(runs / name)
    (runs / "passwd" / "logs" / "training.log").unlink()
    (runs / "passwd" / "logs" / "training.log").symlink_to("/etc/passwd")
    (runs / "fifo" / "logs" / "training.log").unlink()
    os.mkfifo(runs / "fifo" / "logs" / "training.log")
    (runs / "zero" / "logs" / "training.log").unlink()
    (runs / "zero" / "logs" / "training.log").symlink_to("/dev/zero")
    os.mkfifo(runs / "fifo" / "events.jsonl")
    (runs / "zero" / "events.jsonl").symlink_to("/dev/zero")
    (runs / "passwd" / "summary.json").symlink_to("/etc/passwd")
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "training.log").write_text("a secret outside the job\n")
    for child in (runs / "linkeddir" / "logs").iterdir():
        child.unlink() if child.is_file() else None
    (runs / "linkeddir" / "logs" / "training.log").unlink(missing_ok=True)
    os.rmdir(runs / "linkeddir" / "logs" / "rules")
    os.rmdir(runs / "linkeddir" / "logs")
    (runs / "linkeddir" / "logs").symlink_to(outside)
    dashboard = serve(runs, warm=False)
    ids = {name: run["id"] for name, run in by_name(dashboard).items()}
    status, plain = get(dashboard.url + f"api/run/{ids['plain']}")
    assert status == 200 and plain["log_tail"] == ["epoch 1", "epoch 2"]
    for name in ("passwd", "fifo", "zero", "linkeddir"):
        # no hang: a read that blocked on the FIFO would raise at the request's timeout
        status, body = get(dashboard.url + f"api/run/{ids[name]}", timeout=10)
        assert status == 200, body
        (said,) = body["log_tail"]
        assert "not shown" in said, (name, said)
        assert "root:" not in said and "secret" not in said
        assert len(json.dumps(body)) < 100_000
        status, curves = get(dashboard.url + f"api/run/{ids[name]}/curves", timeout=10)
        assert status == 200 and curves["series"][0]["points"] == 3
    status, body = get(dashboard.url + "api/runs")  # the server still answers
    assert status == 200


def test_a_job_pointing_at_a_trial_outside_the_places_served_is_refused(tmp_path, serve) -> None:
    private = tmp_path / "private"
    segmented_trial(private, segments=4)
    runs = tmp_path / "runs"
    make_job(runs / "inside")
    make_job(runs / "escape", trial_location=str(private))
    dashboard = serve(runs, warm=False)
    found = by_name(dashboard)
    assert not found["inside"]["problems"]
    (why,) = found["escape"]["problems"]
    assert "outside the places served" in why and str(private) in why
    assert found["escape"]["last_step"] is None
    status, body = get(dashboard.url + f"api/run/{found['escape']['id']}/curves")
    assert status == 422 and "outside the places served" in body["error"]
    status, body = get(dashboard.url + f"report/{found['escape']['id']}")
    assert status == 403
    status, body = get(dashboard.url + f"api/run/{found['inside']['id']}/curves")
    assert status == 200 and body["series"][0]["points"] == 3
    both = serve(runs, private, warm=False)  # served once its place is given
    assert not by_name(both)["escape"]["problems"]


def test_a_run_with_20000_scalar_names_answers_a_bounded_truncated_curves_request(
    tmp_path, serve
) -> None:
    from tensortap.serve._data import MAX_SERIES

    hook = tt.Hook(tmp_path / "wide", save_config=tt.SaveConfig(save_interval=1))
    for step in range(2):
        for i in range(20_000):
            hook.save_tensor(f"metric_{i:05d}", np.float32(i + step), collections="scalars")
        hook.next_step()
    hook.close()
    dashboard = serve(tmp_path / "wide", warm=False)
    (run,) = by_name(dashboard).values()
    curves = dashboard.url + f"api/run/{run['id']}/curves"
    with urllib.request.urlopen(curves, timeout=60) as response:  # its time: bench_serve.py
        raw = response.read()
    body = json.loads(raw)
    assert body["truncated"] is True and body["total"] == 20_000
    assert body["series_names"] == MAX_SERIES == len(body["series"])
    assert [s["name"] for s in body["series"][:2]] == ["metric_00000", "metric_00001"]
    assert len(raw) < 200 * 1024
    status, some = get(curves + "?match=METRIC_1999")  # a part of the names, any case
    assert status == 200 and not some["truncated"] and some["total"] == 10
    assert [s["name"] for s in some["series"]][-1] == "metric_19999"
    status, named = get(curves + "?name=metric_12345&name=metric_00007&limit=1")
    assert status == 200 and named["total"] == 2 and named["truncated"]
    assert [s["name"] for s in named["series"]] == ["metric_00007"]
    assert named["series"][0]["y"] == [7.0, 8.0]
    status, body = get(curves + f"?limit={MAX_SERIES + 1}")
    assert status == 422 and "by name" in body["error"]


def test_an_s3_place_is_listed_a_level_at_a_time_with_one_client(s3_bucket, monkeypatch) -> None:
    from tensortap.serve._catalog import Catalog, S3Place

    place = f"s3://{s3_bucket}/team"
    for name in ("run1", "run2", "group/run3"):
        segmented_trial(f"{place}/{name}", segments=2)
    monkeypatch.setattr(S3Place, "rescan_secs", 3600.0)  # nothing due again in this test...
    catalog = Catalog([place])
    catalog._scan()
    assert sorted(r.name for r in catalog.runs()) == ["run1", "run2", "run3"]
    listed = catalog._stores[place]
    store, client = listed.store, listed.store.client  # type: ignore[attr-defined]

    def lists() -> int:
        return store.stats()["by_operation"].get("ListObjectsV2", 0)

    first = lists()
    assert first == 5  # the place, run1, run2, group and group/run3 once: never every key
    for _ in range(20):  # rescans before anything is due list nothing
        catalog._scan()
    assert lists() == first
    segmented_trial(f"{place}/run4", segments=2)
    monkeypatch.setattr(S3Place, "rescan_secs", 0.0)  # ...until now
    for pending in listed._pending:
        listed._pending[pending] = 0.0
    deadline = time.monotonic() + 20
    while "run4" not in {r.name for r in catalog.runs()}:
        assert time.monotonic() < deadline, "a new trial was not found"
        catalog._scan()
        time.sleep(0.05)
    # found by listing the place and group (no trial in either), not the known trials
    assert lists() - first <= 3
    assert catalog._stores[place].store is store and store.client is client  # type: ignore[attr-defined]
    assert not {"run1", "run2", "group/run3"} & set(listed._pending)


def test_the_live_view_of_tensortap_run_never_follows_a_log_that_is_not_a_regular_file(
    tmp_path,
) -> None:
    import io

    from tensortap.jobs._live import LiveView
    from tensortap.jobs._record import JobRecord

    record = JobRecord(tmp_path / "job")
    record.create({"name": "job", "rules": []})
    record.training_log.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(record.training_log)  # no writer: a blocking open would never return
    summary = {"status": "InProgress", "training": {"status": "InProgress"}, "rules": []}
    out = io.StringIO()
    LiveView(record, out).update(summary)
    record.training_log.unlink()
    record.training_log.symlink_to("/etc/passwd")
    LiveView(record, out).update(summary)
    assert "root:" not in out.getvalue()
