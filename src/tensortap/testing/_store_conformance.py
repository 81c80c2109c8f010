"""The Store contract as checks any backend can run: ``check_store(make_store)``.

Each check takes a fresh, empty store and raises :class:`ConformanceError` (an AssertionError)
saying what the contract asks and what the store did. They need no test framework; with pytest,
run them one by one over a backend::

    from tensortap.testing._store_conformance import CHECKS

    @pytest.mark.parametrize("check", CHECKS, ids=lambda check: check.__name__)
    def test_my_store(check, tmp_path):
        with MyStore(tmp_path) as store:
            check(store)

The local, memory and S3 stores are run through them in tensortap's own tests, as is a
backend registered by a test under a scheme of its own. Checks of what a backend declares in
its :class:`~tensortap.storage.StoreCapabilities` (conditional writes, a local directory) run
only where it declares them.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from tensortap.exceptions import StorageError, TensortapError
from tensortap.storage._base import Store, StoreCapabilities

Check = Callable[[Store], None]


class ConformanceError(TensortapError, AssertionError):
    """A store does not keep the Store contract."""


def _expect(condition: bool, what: str, got: Any = None) -> None:
    if not condition:
        raise ConformanceError(what if got is None else f"{what}; got {got!r}")


def _raises(kind: type[BaseException], call: Callable[[], Any], what: str) -> None:
    try:
        got = call()
    except kind:
        return
    except Exception as exc:
        raise ConformanceError(f"{what}: expected {kind.__name__}, got {exc!r}") from exc
    raise ConformanceError(f"{what}: expected {kind.__name__}, got the answer {got!r}")


def check_put_get_range_exists_delete(store: Store) -> None:
    """Objects are written whole, read whole or by range, replaced, and deleted."""
    store.put("a/b/c.bin", b"0123456789")
    _expect(store.get("a/b/c.bin") == b"0123456789", "get returns what put wrote")
    _expect(store.get_range("a/b/c.bin", 2, 3) == bytearray(b"234"), "get_range(key, 2, 3)")
    _expect(store.exists("a/b/c.bin"), "exists is True for a written key")
    _expect(not store.exists("a/b/d.bin"), "exists is False for a key never written")
    store.put("a/b/c.bin", b"new")
    _expect(store.get("a/b/c.bin") == b"new", "put replaces an object", store.get("a/b/c.bin"))
    store.delete("a/b/c.bin")
    store.delete("a/b/c.bin")  # missing is fine
    _raises(KeyError, lambda: store.get("a/b/c.bin"), "get of a deleted key")


def check_list_and_list_dir(store: Store) -> None:
    """``list`` is recursive, sorted and starts after ``start_after``; ``list_dir`` names the
    immediate children."""
    for key in ["w/0/i/001", "w/0/i/002", "w/0/i/003", "w/1/i/001", "top"]:
        store.put(key, b"x")
    got = store.list("w/0/i/")
    _expect(got == ["w/0/i/001", "w/0/i/002", "w/0/i/003"], "list(prefix)", got)
    got = store.list("w/0/i/", start_after="w/0/i/001")
    _expect(got == ["w/0/i/002", "w/0/i/003"], "list(prefix, start_after)", got)
    got = store.list("w/")
    _expect(got == ["w/0/i/001", "w/0/i/002", "w/0/i/003", "w/1/i/001"], "list is recursive", got)
    _expect(store.list_dir("w/") == ["0", "1"], "list_dir(prefix)", store.list_dir("w/"))
    got = store.list_dir("w")
    _expect(got == ["0", "1"], "list_dir without a trailing '/'", got)
    _expect(store.list_dir("") == ["top", "w"], "list_dir of the root", store.list_dir(""))
    _expect(store.list("nothing/") == [], "list of an empty prefix", store.list("nothing/"))
    _expect(store.list_dir("nothing/") == [], "list_dir of an empty prefix")
    # objects and directories are never "special" (a reader would call them not followed)
    got = store.special_entries("w/")
    _expect(got == [], "special_entries of objects and directories is empty", got)


def check_streaming_writer_is_invisible_until_commit(store: Store) -> None:
    """A streamed object appears whole at ``commit``; an aborted one never appears."""
    writer = store.open_writer("d/obj")
    writer.write(b"part1")
    _expect(store.list("d/") == [], "an object being written is not listed", store.list("d/"))
    _expect(not store.exists("d/obj"), "an object being written does not exist yet")
    writer.write(memoryview(b"part2"))
    writer.commit()
    _expect(store.get("d/obj") == b"part1part2", "commit publishes every write", store.get("d/obj"))
    aborted = store.open_writer("d/other")
    aborted.write(b"x")
    aborted.abort()
    _expect(store.list("d/") == ["d/obj"], "an aborted object is never listed", store.list("d/"))


def check_missing_keys(store: Store) -> None:
    """A missing key raises KeyError from every read, and deleting it is not an error."""
    for name, call in [
        ("get", lambda: store.get("no/such")),
        ("get_range", lambda: store.get_range("no/such", 0, 1)),
        ("size", lambda: store.size("no/such")),
        ("version", lambda: store.version("no/such")),
    ]:
        _raises(KeyError, call, f"{name} of a missing key")
    _expect(not store.exists("no/such"), "exists of a missing key is False")
    store.delete("no/such")


def check_invalid_keys_are_refused(store: Store) -> None:
    """A key that could leave the store's root (absolute, '..', empty parts) is refused."""
    for key in ["/abs", "a/../b", "a//b", "./a", "a/", ""]:
        _raises(StorageError, partial(store.put, key, b"x"), f"put({key!r})")
        _raises(StorageError, partial(store.get, key), f"get({key!r})")


def check_ranges_sizes_and_batches(store: Store) -> None:
    """Sizes, empty objects, ranges checked against the object, and batched reads in order."""
    store.put("r/a", b"abcdef")
    store.put("r/b", b"0123456789")
    store.put("r/empty", b"")
    _expect(store.size("r/b") == 10, "size", store.size("r/b"))
    _expect(store.get("r/empty") == b"" and store.size("r/empty") == 0, "an empty object")
    _expect(store.get_range("r/a", 0, 0) == bytearray(), "a range of no bytes")
    _expect(store.get_range("r/a", 0, 6) == bytearray(b"abcdef"), "a range of every byte")
    _raises(StorageError, lambda: store.get_range("r/a", 4, 10), "a range past the end")
    got = store.get_many(["r/b", "r/a"])
    _expect(got == [b"0123456789", b"abcdef"], "get_many, in order", got)
    got_ranges = store.get_ranges([("r/b", 7, 3), ("r/a", 1, 2), ("r/b", 0, 1)])
    _expect(
        got_ranges == [bytearray(b"789"), bytearray(b"bc"), bytearray(b"0")],
        "get_ranges, in order",
        got_ranges,
    )


def check_version_follows_content(store: Store) -> None:
    """``version`` stays while an object stays, and changes when it is replaced."""
    store.put("v/obj", b"first")
    before = store.version("v/obj")
    _expect(store.version("v/obj") == before, "version of an unchanged object is stable")
    store.put("v/obj", b"other")
    _expect(store.version("v/obj") != before, "version changes when the content does")


def check_replacing_an_object_while_it_is_read(store: Store) -> None:
    """Reads after a replacing ``commit`` see the new object, even where the old one was read
    (and its handle kept) while the new one was being written."""
    store.put("p/obj", b"old bytes")
    _expect(store.size("p/obj") == 9, "size of the old object")
    writer = store.open_writer("p/obj")
    _expect(store.get_range("p/obj", 0, 3) == bytearray(b"old"), "a read while it is replaced")
    writer.write(b"new")
    writer.commit()
    _expect(store.size("p/obj") == 3, "size after the replacing commit", store.size("p/obj"))
    got = store.get_range("p/obj", 0, 3)
    _expect(got == bytearray(b"new"), "a range after the replacing commit", got)


def check_capabilities(store: Store) -> None:
    """What the store declares it can do, it does; what it does not declare raises
    StorageError."""
    capabilities = store.capabilities
    _expect(isinstance(capabilities, StoreCapabilities), "capabilities", capabilities)
    store.put("c/obj", b"1")
    if capabilities.local_path:
        path = store.local_directory().joinpath("c", "obj")
        _expect(path.is_file() and path.read_bytes() == b"1", "objects are files", path)
    else:
        _raises(StorageError, store.local_directory, "local_directory without local_path")
    if not capabilities.conditional_put:
        _raises(StorageError, lambda: store.put_conditional("c/new", b"x"), "put_conditional")
        _raises(StorageError, lambda: store.get_with_etag("c/obj"), "get_with_etag")
        return
    etag = store.put_conditional("c/lease", b"mine", if_none_match=True)
    _expect(isinstance(etag, str), "put_conditional(if_none_match) of a new key", etag)
    again = store.put_conditional("c/lease", b"theirs", if_none_match=True)
    _expect(again is None, "put_conditional(if_none_match) of an existing key fails", again)
    data, current = store.get_with_etag("c/lease")
    _expect((data, current) == (b"mine", etag), "get_with_etag", (data, current))
    renewed = store.put_conditional("c/lease", b"mine2", if_match=etag)
    _expect(isinstance(renewed, str), "put_conditional(if_match) with the ETag", renewed)
    stale = store.put_conditional("c/lease", b"theirs", if_match=etag)
    _expect(stale is None, "put_conditional(if_match) with an old ETag fails", stale)
    data, current, age = store.get_with_age("c/lease")
    _expect(data == b"mine2" and current == renewed, "get_with_age", (data, current))
    _expect(age is None or isinstance(age, float), "get_with_age's age", age)
    _raises(KeyError, lambda: store.get_with_etag("c/missing"), "get_with_etag of a missing key")


def check_close_and_context_manager(store: Store) -> None:
    """``close`` releases what is open and leaves the store usable; ``with`` closes it."""
    store.put("x/obj", b"0123")
    _expect(store.get_range("x/obj", 1, 2) == bytearray(b"12"), "a read before close")
    with store as entered:
        _expect(entered is store, "a store is its own context manager", entered)
    store.close()
    _expect(store.get_range("x/obj", 0, 4) == bytearray(b"0123"), "a read after close")
    store.put("x/after", b"y")
    _expect(store.list("x/") == ["x/after", "x/obj"], "a write after close", store.list("x/"))


#: Every check, in the order :func:`check_store` runs them.
CHECKS: tuple[Check, ...] = (
    check_put_get_range_exists_delete,
    check_list_and_list_dir,
    check_streaming_writer_is_invisible_until_commit,
    check_missing_keys,
    check_invalid_keys_are_refused,
    check_ranges_sizes_and_batches,
    check_version_follows_content,
    check_replacing_an_object_while_it_is_read,
    check_capabilities,
    check_close_and_context_manager,
)


def check_store(make_store: Callable[[], Store]) -> None:
    """Run every check on a fresh, empty store from ``make_store`` (closed afterwards); raise
    ConformanceError naming the first check the store fails (or raised an error in)."""
    for check in CHECKS:
        store = make_store()
        try:
            check(store)
        except Exception as exc:
            raise ConformanceError(f"{store!r} fails {check.__name__}: {exc!r}") from exc
        finally:
            store.close()


__all__ = ["CHECKS", "Check", "ConformanceError", "check_store"]
