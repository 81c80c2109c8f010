"""One conformance suite, run over every Store backend."""

from __future__ import annotations

import pytest

from tensortap.storage import LocalStore, MemoryStore, Store, open_store


@pytest.fixture(params=["local", "memory"])
def store(request, tmp_path) -> Store:
    return LocalStore(tmp_path / "s") if request.param == "local" else MemoryStore()


def test_put_get_range_exists_delete(store: Store) -> None:
    store.put("a/b/c.bin", b"0123456789")
    assert store.get("a/b/c.bin") == b"0123456789"
    assert store.get_range("a/b/c.bin", 2, 3) == bytearray(b"234")
    assert store.exists("a/b/c.bin") and not store.exists("a/b/d.bin")
    store.put("a/b/c.bin", b"new")
    assert store.get("a/b/c.bin") == b"new"
    store.delete("a/b/c.bin")
    store.delete("a/b/c.bin")  # missing is fine
    with pytest.raises(KeyError):
        store.get("a/b/c.bin")


def test_list_and_list_dir(store: Store) -> None:
    for key in ["w/0/i/001", "w/0/i/002", "w/0/i/003", "w/1/i/001", "top"]:
        store.put(key, b"x")
    assert store.list("w/0/i/") == ["w/0/i/001", "w/0/i/002", "w/0/i/003"]
    assert store.list("w/0/i/", start_after="w/0/i/001") == ["w/0/i/002", "w/0/i/003"]
    assert store.list("w/") == ["w/0/i/001", "w/0/i/002", "w/0/i/003", "w/1/i/001"]
    assert store.list_dir("w/") == ["0", "1"]
    assert store.list_dir("") == ["top", "w"]
    assert store.list("nothing/") == [] and store.list_dir("nothing/") == []


def test_streaming_writer_is_invisible_until_commit(store: Store) -> None:
    writer = store.open_writer("d/obj")
    writer.write(b"part1")
    assert store.list("d/") == [] and not store.exists("d/obj")
    writer.write(memoryview(b"part2"))
    writer.commit()
    assert store.get("d/obj") == b"part1part2"
    aborted = store.open_writer("d/other")
    aborted.write(b"x")
    aborted.abort()
    assert store.list("d/") == ["d/obj"]


def test_open_store_resolves_locations(tmp_path) -> None:
    assert isinstance(open_store(str(tmp_path)), LocalStore)
    assert isinstance(open_store(tmp_path), LocalStore)
    assert isinstance(open_store(f"file://{tmp_path}"), LocalStore)
    assert open_store("memory://shared") is open_store("memory://shared")
    store = MemoryStore()
    assert open_store(store) is store
