"""Storage as one wing: a backend is one module (a Store, its capabilities, one register_store
call) that passes the shipped conformance suite; what a store can do is asked, never its class;
unknown schemes are refused; stores and trials close."""

from __future__ import annotations

import importlib
import sys
import uuid

import numpy as np
import pytest

import tensortap as tt
from tensortap.exceptions import InvalidConfigError, WorkerInUse
from tensortap.storage import LocalStore, MemoryStore, S3Store, StoreCapabilities, open_store
from tensortap.storage._descriptors import HANDLES
from tensortap.testing._store_conformance import CHECKS, ConformanceError, check_store
from tests.helpers import mem_backend
from tests.helpers.mem_backend import DictStore


def _url() -> str:
    return f"{mem_backend.SCHEME}://{uuid.uuid4().hex}"


def test_a_backend_registered_under_a_new_scheme_passes_the_conformance_suite() -> None:
    check_store(lambda: open_store(_url()))
    assert isinstance(open_store(_url()), DictStore)


def test_the_suite_catches_a_backend_that_breaks_the_contract() -> None:
    class Leaky(DictStore):  # publishes while the object is still being written
        def open_writer(self, key):
            writer = super().open_writer(key)
            real = writer.write

            def write(data):
                real(data)
                writer.commit()

            writer.write = write  # type: ignore[method-assign]
            return writer

    with pytest.raises(ConformanceError, match="check_streaming_writer_is_invisible_until_commit"):
        check_store(lambda: Leaky(uuid.uuid4().hex))


def test_a_hook_writes_a_new_scheme_and_create_trial_reads_it() -> None:
    url = _url()
    with tt.Hook(url, save_config=tt.SaveConfig(save_interval=1)) as hook:
        for step in range(3):
            hook.save_tensor("w", np.full(4, step, dtype=np.float32))
            hook.next_step()
    with tt.create_trial(url) as trial:
        assert trial.steps() == [0, 1, 2] and trial.loaded_all_steps
        assert trial.tensor("w").value(2).tolist() == [2.0] * 4
    assert open_store(url).closed >= 1  # type: ignore[attr-defined]


def test_a_store_only_this_process_sees_is_claimed_in_the_process() -> None:
    url = _url()
    config = tt.SaveConfig(save_interval=1)
    with tt.Hook(url, save_config=config), pytest.raises(WorkerInUse, match="being written by"):
        tt.Hook(url, save_config=config)


def test_a_store_that_cannot_keep_a_worker_to_one_writer_is_refused() -> None:
    """Before, a backend without a local directory or conditional writes silently got a claim
    in a process-wide table, which a writer in another process never sees."""

    class Shared(DictStore):  # seen by other processes, no conditional writes
        capabilities = StoreCapabilities(lists_trials=True)

    with pytest.raises(InvalidConfigError, match="cannot keep workers/worker_0 to one writer"):
        tt.Hook(Shared(uuid.uuid4().hex), save_config=tt.SaveConfig(save_interval=1))


def test_capabilities_are_declared_by_each_backend() -> None:
    assert LocalStore.capabilities == StoreCapabilities(local_path=True, lists_trials=True)
    assert MemoryStore.capabilities == StoreCapabilities(lists_trials=True, process_local=True)
    assert S3Store.capabilities == StoreCapabilities(conditional_put=True, lists_trials=True)


def test_a_scheme_unregistered_is_refused_again(tmp_path) -> None:
    """unregister_store undoes register_store (a test's scheme must not outlive it); the local
    scheme, which opens plain paths, stays."""
    from tensortap.storage import known_schemes, register_store, unregister_store

    register_store("scratch", lambda location: LocalStore(str(tmp_path)))
    assert "scratch" in known_schemes()
    assert isinstance(open_store("scratch://x"), LocalStore)
    unregister_store("scratch")
    unregister_store("never-registered")  # ignored
    unregister_store("file")  # kept: plain paths open with it
    assert "scratch" not in known_schemes() and "file" in known_schemes()
    with pytest.raises(InvalidConfigError, match="no storage backend for scratch://"):
        open_store("scratch://x")


@pytest.mark.parametrize("location", ["gs://bucket/run", "az://c/run", "memroy://x"])
def test_an_unknown_scheme_is_refused_naming_the_known_ones(location: str, tmp_path) -> None:
    scheme = location.split("://")[0]
    message = rf"no storage backend for {scheme}://.*known schemes: file, mem, memory, s3"
    with pytest.raises(InvalidConfigError, match=message):
        open_store(location)
    with pytest.raises(InvalidConfigError, match=message):
        tt.Hook(location)
    with pytest.raises(InvalidConfigError, match=message):
        tt.create_trial(location)
    from tensortap.serve._catalog import Catalog

    with pytest.raises(InvalidConfigError, match=message):  # was listed, as holding nothing
        Catalog([str(tmp_path), location])


def test_a_place_whose_store_cannot_list_trials_is_not_listed(monkeypatch, tmp_path) -> None:
    """The dashboard lists a place only where its store declares lists_trials."""
    from tensortap.serve._catalog import Catalog
    from tensortap.storage import _resolve as resolve

    class Unlisted(DictStore):
        capabilities = StoreCapabilities(process_local=True)

    store = Unlisted("runs")  # holds a trial, which a listing would find
    with tt.Hook(store, save_config=tt.SaveConfig(save_interval=1)) as hook:
        hook.save_tensor("w", np.zeros(2, dtype=np.float32))
    monkeypatch.setitem(resolve._FACTORIES, "unlisted", lambda url: store)
    catalog = Catalog(["unlisted://runs"])
    assert catalog.runs() == []
    assert "lists_trials is not among its capabilities" in catalog.errors["unlisted://runs"]


def test_a_scheme_must_look_like_one() -> None:
    with pytest.raises(InvalidConfigError, match="a URL scheme is a letter"):
        tt.storage.register_store("s3://", DictStore.open)


def test_a_trial_and_its_store_close(tmp_path) -> None:
    path = tmp_path / "run"
    with tt.Hook(str(path), save_config=tt.SaveConfig(save_interval=1)) as hook:
        for step in range(3):
            hook.save_tensor("w", np.full(4, step, dtype=np.float32))
            hook.next_step()

    def held(store: LocalStore) -> int:
        return sum(1 for owner, _ in HANDLES._open if owner == store._owner)

    with tt.create_trial(str(path)) as trial:
        assert trial.tensor("w").value(1).tolist() == [1.0] * 4
        assert isinstance(trial.store, LocalStore) and held(trial.store) > 0
    assert held(trial.store) == 0
    assert trial.tensor("w").value(2).tolist() == [2.0] * 4  # usable again after close
    trial.close()
    with LocalStore(path) as store:
        key = store.list("workers/")[0]
        store.get_range(key, 0, 1)
        assert held(store) == 1
    assert held(store) == 0


def test_the_documented_old_s3_paths_warn_with_an_import_that_works() -> None:
    """``tensortap.s3`` once advised "import from tensortap", which has no S3Store; the old
    path never documented as an import (``tensortap.s3_upload``) is gone."""
    for old in ("tensortap.s3", "tensortap.s3_upload", "tensortap.storage.s3"):
        sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match="tensortap.s3 is an old path") as said:
        old_s3 = importlib.import_module("tensortap.s3")
    assert "use from tensortap.storage import S3Store" in str(said[0].message)
    with pytest.warns(DeprecationWarning, match="use from tensortap.storage import S3Store"):
        moved = importlib.import_module("tensortap.storage.s3").S3Store
    from tensortap.storage import S3Store as advised

    assert old_s3.S3Store is moved is S3Store is advised
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("tensortap.s3_upload")


def test_every_check_is_shipped_in_tensortap_testing() -> None:
    assert [c.__name__ for c in CHECKS][:3] == [
        "check_put_get_range_exists_delete",
        "check_list_and_list_dir",
        "check_streaming_writer_is_invisible_until_commit",
    ]
