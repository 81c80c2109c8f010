"""Large objects of a local store go past the page cache (O_DIRECT) where the filesystem
allows, byte for byte the same as written; elsewhere (tmpfs) they are written as before."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from tensortap.storage import LocalStore

pytestmark = pytest.mark.skipif(not hasattr(os, "O_DIRECT"), reason="O_DIRECT is Linux's")


def _direct_supported(directory: Path) -> bool:
    probe = directory / "probe"
    probe.touch()
    try:
        os.close(os.open(probe, os.O_WRONLY | os.O_DIRECT))
        return True
    except OSError:
        return False
    finally:
        probe.unlink()


def _write(store: LocalStore, key: str, chunks: list[bytes]):
    writer = store.open_writer(key)
    for chunk in chunks:
        writer.write(memoryview(chunk))
    writer.commit()
    return writer


def _chunks(sizes: list[int]) -> list[bytes]:
    rng = np.random.default_rng(0)
    return [rng.integers(0, 256, n, dtype=np.uint8).tobytes() for n in sizes]


# odd sizes: blocks split across chunks, a last partial block, a chunk larger than the stage
SIZES = [3, 6_291_456, 1_000_001, 4_194_304, 77, 9_000_000, 12_345]


def test_a_large_object_is_written_directly_and_reads_back_exactly(tmp_path: Path) -> None:
    if not _direct_supported(tmp_path):
        pytest.skip(f"{tmp_path} refuses O_DIRECT")
    store = LocalStore(tmp_path / "trial")
    chunks = _chunks(SIZES)
    writer = _write(store, "workers/w/data/000000000001.ttdata", chunks)
    assert writer.direct
    assert store.get("workers/w/data/000000000001.ttdata") == b"".join(chunks)
    assert os.path.getsize(tmp_path / "trial/workers/w/data/000000000001.ttdata") == sum(SIZES)
    assert not [p for p in (tmp_path / "trial").rglob("*") if ".tmp-" in p.name]


def test_small_objects_and_the_opt_out_go_through_the_page_cache(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "trial")
    small = _write(store, "a.json", [b'{"x": 1}'])
    assert not small.direct
    assert store.get("a.json") == b'{"x": 1}'
    chunks = _chunks(SIZES)
    off = _write(LocalStore(tmp_path / "trial", direct_writes=False), "b.bin", chunks)
    assert not off.direct
    assert store.get("b.bin") == b"".join(chunks)


def test_a_filesystem_refusing_o_direct_gets_the_same_bytes(tmp_path: Path) -> None:
    shm = Path("/dev/shm")
    if not shm.is_dir() or _direct_supported(shm):
        pytest.skip("no tmpfs that refuses O_DIRECT here")
    root = shm / f"tensortap-test-{os.getpid()}-{tmp_path.name}"
    try:
        store = LocalStore(root)
        chunks = _chunks(SIZES)
        writer = _write(store, "d.bin", chunks)
        assert not writer.direct
        assert store.get("d.bin") == b"".join(chunks)
    finally:
        for p in sorted(root.rglob("*"), reverse=True):
            p.unlink() if p.is_file() else p.rmdir()
        root.rmdir()


def test_an_aborted_direct_write_leaves_nothing(tmp_path: Path) -> None:
    if not _direct_supported(tmp_path):
        pytest.skip(f"{tmp_path} refuses O_DIRECT")
    store = LocalStore(tmp_path / "trial")
    writer = store.open_writer("x.bin")
    for chunk in _chunks([9_000_000, 5]):
        writer.write(chunk)
    writer.abort()
    assert list((tmp_path / "trial").rglob("*.bin*")) == []
    assert not store.exists("x.bin")
