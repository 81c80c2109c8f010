"""S3 against a real S3-compatible server on 127.0.0.1 (moto): faults, credentials, prefixes.

The store conformance suite (tests/storage/test_storage.py) and the live-reader and SIGKILL process
tests (tests/processes/test_processes.py) run over S3 too.
"""

from __future__ import annotations

import logging
import time
from urllib.parse import urlparse

import numpy as np
import pytest

import tensortap as tt
from tensortap.exceptions import StorageError
from tests.conftest import moto_server
from tests.helpers.flaky_proxy import FlakyProxy

pytest.importorskip("boto3")
from tensortap.storage._s3 import S3Store

DEADLINE = 60.0


@pytest.fixture
def proxy(s3_endpoint):
    flaky = FlakyProxy(urlparse(s3_endpoint).port or 80)
    yield flaky
    flaky.close()


def value(name: str, step: int) -> np.ndarray:
    return np.arange(16, dtype=np.float32) + step * 100 + int(name[-1])


NAMES = ["w0", "w1", "w2"]


def save_step(hook: tt.Hook, step: int) -> None:
    for name in NAMES:
        hook.save_tensor(name, value(name, step))
    hook.next_step()


def check_trial(trial: tt.Trial, steps: int) -> None:
    assert trial.steps() == list(range(steps))  # nothing lost, nothing twice
    for name in NAMES:
        values = trial.tensor(name).values()
        assert sorted(values) == list(range(steps))
        for step, got in values.items():
            np.testing.assert_array_equal(got, value(name, step))


def test_reads_ride_through_503s_and_resets(s3_bucket, proxy) -> None:
    url = f"s3://{s3_bucket}/reads"
    with tt.Hook(url, save_config=tt.SaveConfig(save_interval=1)) as hook:
        for step in range(20):
            save_step(hook, step)
    store = S3Store(url, endpoint_url=proxy.url)
    trial = tt.create_trial(store)
    proxy.fail_next(2, "503")
    proxy.fail_next(2, "reset")
    check_trial(trial, 20)
    assert proxy.failed == {"503": 2, "reset": 2} and proxy.pending_failures() == 0
    assert store.stats()["retries"] >= 4


def test_a_writer_catches_up_after_an_outage_without_losing_or_repeating_steps(
    s3_bucket, proxy, caplog
) -> None:
    """The store gives up after 2 attempts, so the writer itself must keep the segment and
    retry it; training goes on all along."""
    url = f"s3://{s3_bucket}/outage"
    store = S3Store(url, endpoint_url=proxy.url, max_attempts=2)
    hook = tt.Hook(
        store,
        save_config=tt.SaveConfig(save_interval=1),
        writer_options=tt.WriterOptions(flush_secs=0.01),
    )
    step = 0
    for _ in range(10):
        save_step(hook, step)
        step += 1
    assert hook.flush(DEADLINE)
    for how in ("503", "reset"):
        proxy.fail_next(4, how)  # two writer retries each, as the store tries twice
        deadline = time.monotonic() + DEADLINE
        while proxy.pending_failures():  # training goes on through the outage
            assert time.monotonic() < deadline, "the writer stopped trying"
            save_step(hook, step)
            step += 1
            time.sleep(0.005)  # a training step's worth of time, between polls
    for _ in range(10):
        save_step(hook, step)
        step += 1
    status = hook.close()
    assert status is not None
    writer = status.writer
    assert writer.retries >= 2 and writer.steps_lost == 0 and writer.steps_dropped == 0
    assert writer.steps_written == step
    assert "retrying while training goes on" in caplog.text
    check_trial(tt.create_trial(url), step)
    end = tt.create_trial(url).worker_status("worker_0")
    assert end is not None and end["storage"]["retries"] >= 4


def test_a_missing_bucket_and_wrong_credentials_fail_early_and_name_what_to_check(
    s3_endpoint, monkeypatch, caplog
) -> None:
    caplog.set_level(logging.DEBUG)
    with pytest.raises(tt.exceptions.NotATrialError, match="no bucket 'nope-missing'"):
        tt.create_trial("s3://nope-missing/trial")
    with pytest.raises(StorageError, match="no bucket 'nope-missing'"):
        tt.Hook("s3://nope-missing/trial")
    secret = "sEcReT-value-that-must-not-leak"
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAWRONGWRONGWRONG")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    with moto_server(INITIAL_NO_AUTH_ACTION_COUNT="0") as strict:  # checks credentials
        monkeypatch.setenv("AWS_ENDPOINT_URL", strict)
        with pytest.raises(StorageError, match="access to bucket 'b' was denied") as caught:
            tt.Hook("s3://b/trial")
        assert "AWS_ACCESS_KEY_ID" in str(caught.value)
        with pytest.raises(tt.exceptions.NotATrialError, match="denied"):
            tt.create_trial("s3://b/trial")
    assert secret not in caplog.text and secret not in str(caught.value)


def test_names_never_make_keys_outside_the_prefix(s3_bucket) -> None:
    import boto3

    url = f"s3://{s3_bucket}/jobs/one"
    with tt.Hook(
        url, save_config=tt.SaveConfig(save_interval=1), include_collections=["../../evil"]
    ) as hook:
        hook.save_tensor("../../../escape", np.ones(3), collections=["../../evil"])
        hook.save_tensor("/abs/name", np.ones(3))
        hook.next_step()
    client = boto3.client("s3")
    keys = [o["Key"] for o in client.list_objects_v2(Bucket=s3_bucket)["Contents"]]
    assert keys and all(k.startswith("jobs/one/") and ".." not in k.split("/") for k in keys)
    trial = tt.create_trial(url)
    assert trial.tensor("../../../escape").value(0).tolist() == [1.0, 1.0, 1.0]
    assert trial.tensor_names(collection="../../evil") == ["../../../escape"]


def test_values_of_many_steps_are_fetched_in_parallel_and_cached(s3_bucket) -> None:
    url = f"s3://{s3_bucket}/parallel"
    big = np.arange(1 << 16, dtype=np.float32)  # 256 KiB: every step is its own run
    with tt.Hook(
        url,
        save_config=tt.SaveConfig(save_interval=1),
        writer_options=tt.WriterOptions(segment_bytes=1 << 20),
    ) as hook:
        for step in range(12):
            hook.save_tensor("big", big + step)
            hook.save_tensor("other", big)
            hook.next_step()
    trial = tt.create_trial(url)
    store = trial.store
    assert isinstance(store, S3Store)
    assert trial.steps()  # the index, read when first needed: its GETs are not the values'
    before = store.stats()["by_operation"].get("GetObject", 0)
    values = trial.tensor("big").values()
    assert sorted(values) == list(range(12)) and values[5][3] == 8.0
    gets = store.stats()["by_operation"]["GetObject"] - before
    assert gets == 12  # one ranged GET per run, issued together
    values[5][:] = -1  # the caller's copy: the cached bytes are untouched
    assert trial.tensor("big").value(5)[3] == 8.0
    assert store.stats()["by_operation"]["GetObject"] - before == 12  # served from the cache
    blocks = list(trial.iter_step_blocks(batch_bytes=4 << 20))  # a whole trial, read ahead
    assert [b.value("big")[3] for b in blocks] == [3.0 + s for s in range(12)]


def test_a_multipart_upload_keeps_a_failed_part_and_finishes_it_at_commit(s3_bucket, proxy) -> None:
    store = S3Store(
        f"s3://{s3_bucket}/multi", endpoint_url=proxy.url, max_attempts=1, part_size=5 << 20
    )
    data = np.random.default_rng(0).integers(0, 255, 11 << 20, dtype=np.uint8).tobytes()
    writer = store.open_writer("seg")
    proxy.fail_next(1, "reset")  # the first part's upload fails: kept, not lost
    writer.write(data[: 6 << 20])
    assert proxy.failed["reset"] == 1
    writer.write(data[6 << 20 :])
    proxy.fail_next(1, "503")
    with pytest.raises(StorageError) as failed:  # the caller (the writer thread) retries
        writer.commit()
    assert failed.value.transient and store.list() == []
    writer.commit()
    assert store.get("seg") == data


def test_a_slow_network_fills_the_queue_and_the_drop_policy_records_what_it_dropped(
    s3_bucket, proxy
) -> None:
    url = f"s3://{s3_bucket}/drops"
    store = S3Store(url, endpoint_url=proxy.url, max_attempts=2)
    step_bytes = len(NAMES) * value("w0", 0).nbytes
    hook = tt.Hook(
        store,
        save_config=tt.SaveConfig(save_interval=1),
        writer_options=tt.WriterOptions(
            flush_secs=0.01, max_queue_bytes=3 * step_bytes, when_full="drop"
        ),
    )
    proxy.fail_next(6, "503")
    step = 0
    deadline = time.monotonic() + DEADLINE
    while proxy.pending_failures() or step < 20:  # the queue (3 steps) overflows meanwhile
        assert time.monotonic() < deadline
        save_step(hook, step)
        step += 1
        time.sleep(0.005)
    writer = hook.close().writer
    assert writer.steps_dropped > 0 and writer.steps_lost == 0
    assert writer.steps_written + writer.steps_dropped == step
    trial = tt.create_trial(url)
    saved = trial.steps()
    assert len(saved) == writer.steps_written and len(set(saved)) == len(saved)
    assert any("dropped" in p for p in trial.problems())
    for name in NAMES:  # what was kept is intact
        for s, got in trial.tensor(name).values().items():
            np.testing.assert_array_equal(got, value(name, s))


def test_a_huge_claimed_length_costs_one_request_not_thousands(s3_bucket, tmp_path) -> None:
    """A CRC-valid index claiming a 1 TiB value (and a 1 TiB data object) on S3: the reader
    checks the object's real size with one HEAD and queues no GET, instead of 131k."""
    import boto3

    from tensortap.core._modes import ModeKeys
    from tensortap.core._records import Record, RecordKind
    from tensortap.exceptions import StorageError
    from tensortap.format import _layout as layout
    from tensortap.format._index import IndexBuilder

    local = tmp_path / "t"
    with tt.Hook(local, save_config=tt.SaveConfig(save_interval=1)) as hook:
        hook.save_tensor("big", np.arange(4.0))
        hook.next_step()
    builder = IndexBuilder()
    builder.add_step(0, ModeKeys.GLOBAL, 0, 0.0)
    builder.add(
        Record("big", RecordKind.TENSOR, "<f4", (1 << 38,)), 0, ModeKeys.GLOBAL, 0, 0, 1 << 40
    )
    key = layout.data_key("worker_0", 0)
    header = {"worker": "worker_0", "seq": 0, "session": "x", "data_key": key, "data_size": 1 << 40}
    (local / layout.index_key("worker_0", 0)).write_bytes(builder.encode(header))
    client = boto3.client("s3")
    for path in local.rglob("*"):
        if path.is_file():
            client.put_object(
                Bucket=s3_bucket, Key=f"huge/{path.relative_to(local)}", Body=path.read_bytes()
            )
    trial = tt.create_trial(f"s3://{s3_bucket}/huge")
    store = trial.store
    assert isinstance(store, S3Store)
    assert trial.steps() == [0]  # the index, read when first needed: counted before
    before = dict(store.stats()["by_operation"])
    with pytest.raises(StorageError, match="bytes; bytes"):
        trial.tensor("big").value(0)
    after = store.stats()["by_operation"]
    assert after.get("GetObject", 0) == before.get("GetObject", 0)
    assert after.get("HeadObject", 0) - before.get("HeadObject", 0) == 1
    assert any("reading values" in p for p in trial.problems())


def test_a_prefix_that_holds_nothing_yet_warns_or_raises_when_asked(s3_bucket, caplog) -> None:
    """As on a local path: a notebook may open the trial before training writes it (a warning
    says so at once); must_exist=True refuses it; export and query refuse nothing."""
    url = f"s3://{s3_bucket}/jobs/not-yet"
    with caplog.at_level("WARNING", logger="tensortap"):
        trial = tt.create_trial(url)
    assert f"no trial at {url} yet: nothing is stored under it" in caplog.text
    with pytest.raises(tt.exceptions.NotATrialError, match="nothing is stored under it"):
        tt.create_trial(url, must_exist=True)
    with tt.Hook(url, save_config=tt.SaveConfig(save_interval=1)) as hook:
        hook.save_scalar("loss", 1.0)
    trial.refresh()
    assert trial.tensor_names() == ["loss"]
    pytest.importorskip("duckdb")
    from tensortap.table import query

    with pytest.raises(tt.exceptions.InvalidConfigError, match="no dataset at"):
        query("SELECT * FROM stats", f"s3://{s3_bucket}/no-stats")
