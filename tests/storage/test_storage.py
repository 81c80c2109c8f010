"""One conformance suite, run over every Store backend."""

from __future__ import annotations

import pytest

from tensortap.storage import LocalStore, MemoryStore, Store, open_store
from tensortap.testing._store_conformance import CHECKS


@pytest.fixture(params=["local", "memory", "s3", "registered"])
def store(request, tmp_path) -> Store:
    if request.param == "registered":  # a backend a test adds under a scheme of its own
        import uuid

        from tests.helpers import mem_backend

        return open_store(f"{mem_backend.SCHEME}://{uuid.uuid4().hex}")
    if request.param == "s3":
        from tensortap.storage._s3 import S3Store

        bucket = request.getfixturevalue("s3_bucket")
        return S3Store(f"s3://{bucket}/some/prefix", part_size=5 << 20)
    return LocalStore(tmp_path / "s") if request.param == "local" else MemoryStore()


@pytest.mark.parametrize("check", CHECKS, ids=lambda check: check.__name__)
def test_store_conformance(store: Store, check) -> None:
    """The shipped conformance suite (tensortap.testing._store_conformance), over every backend."""
    check(store)


def test_open_store_resolves_locations(tmp_path) -> None:
    assert isinstance(open_store(str(tmp_path)), LocalStore)
    assert isinstance(open_store(tmp_path), LocalStore)
    assert isinstance(open_store(f"file://{tmp_path}"), LocalStore)
    assert open_store("memory://shared") is open_store("memory://shared")
    store = MemoryStore()
    assert open_store(store) is store


def test_s3_writer_switches_to_multipart_and_abort_leaves_nothing(s3_bucket) -> None:
    from tensortap.storage._s3 import S3Store

    store = S3Store(f"s3://{s3_bucket}/p", part_size=5 << 20)
    big = bytes(range(256)) * (6 << 12)  # 6 MiB: two parts
    writer = store.open_writer("seg/data")
    writer.write(big[: 3 << 20])
    writer.write(big[3 << 20 :])
    assert writer.upload_id is not None and store.list("seg/") == []  # type: ignore[attr-defined]
    writer.commit()
    assert (
        store.get("seg/data") == big
        and store.get_range("seg/data", 5 << 20, 4) == big[5 << 20 : (5 << 20) + 4]
    )
    aborted = store.open_writer("seg/other")
    aborted.write(big)
    aborted.abort()
    assert store.list("seg/") == ["seg/data"]


def test_s3_errors_name_the_bucket(s3_endpoint) -> None:
    from tensortap.exceptions import StorageError
    from tensortap.storage._s3 import S3Store

    with pytest.raises(StorageError, match="no bucket 'missing-bucket-x'"):
        S3Store("s3://missing-bucket-x/trial")
    with pytest.raises(StorageError, match="invalid storage key"):
        S3Store("s3://b/../escape")


def test_hook_writes_to_s3_and_a_trial_reads_it(s3_bucket) -> None:
    import numpy as np

    import tensortap as tt

    url = f"s3://{s3_bucket}/runs/job1"
    with tt.Hook(url, save_config=tt.SaveConfig(save_interval=1)) as hook:
        for step in range(3):
            hook.save_tensor("w", np.full(4, step, dtype=np.float32))
            hook.next_step()
    trial = tt.create_trial(url)
    assert trial.steps() == [0, 1, 2] and trial.loaded_all_steps
    assert trial.tensor("w").value(2).tolist() == [2.0] * 4


def test_a_local_store_lists_a_symlink_or_fifo_and_never_reads_it(tmp_path) -> None:
    """What stands in the place of an object is listed (a reader then says what it is, rather
    than losing it silently) but never followed or opened blocking: its read is refused."""
    import os

    from tensortap.exceptions import StorageError

    store = LocalStore(tmp_path / "s")
    store.put("index/000000000000.ttidx", b"real")
    outside = tmp_path / "outside.bin"
    outside.write_bytes(b"secret")
    os.symlink(outside, tmp_path / "s" / "index" / "000000000001.ttidx")
    os.mkfifo(tmp_path / "s" / "index" / "000000000002.ttidx")
    (tmp_path / "s" / "index" / "sub").mkdir()
    assert store.list("index/") == [f"index/00000000000{i}.ttidx" for i in range(3)]
    assert store.list("index/", start_after="index/000000000001.ttidx") == [
        "index/000000000002.ttidx"
    ]
    with pytest.raises(StorageError, match="symbolic link"):
        store.get("index/000000000001.ttidx")
    with pytest.raises(StorageError, match="not a regular file"):
        store.get("index/000000000002.ttidx")
    assert not store.exists("index/000000000001.ttidx")
    assert store.list_dir("index/") == ["000000000000.ttidx", "sub"]
    assert store.special_entries("index/") == ["000000000001.ttidx", "000000000002.ttidx"]
    assert MemoryStore().special_entries("index/") == []  # every entry is an object there
