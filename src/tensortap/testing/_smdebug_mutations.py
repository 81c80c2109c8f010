"""Ways to damage a trial that smdebug wrote (TFRecord event files, index and collections JSON),
each seeded: what :func:`tensortap.testing._fuzz.fuzz_smdebug` reads back (bits flipped, files cut
or extended, record lengths changed, crafted index JSON, catastrophic collection regexes, symlinks
and FIFOs, odd records: text tensors, non-finite wall times, steps over 64 bits)."""

from __future__ import annotations

import json
import os
import random
import shutil
import struct
from pathlib import Path
from typing import Any

from tensortap.testing._mutations import WRONG_VALUES, Mutation, pick_file, retype

_RECORD = struct.Struct("<QI")


def _tfrecords(data: bytes) -> list[tuple[int, int]]:
    """``(offset, payload length)`` of each whole TFRecord of an event file."""
    out, at = [], 0
    while at + 16 <= len(data):
        (length, _) = _RECORD.unpack_from(data, at)
        if at + 16 + length > len(data):
            break
        out.append((at, length))
        at += 16 + length
    return out


def with_checksums(root: Path) -> Path:
    """Write the real data CRC into every record of the smdebug trial at ``root`` (what smdebug
    writes when told to compute checksums; by default it writes a placeholder, which leaves a
    record's bytes unverifiable)."""
    from tensortap.format._crc32c import masked_crc32c

    for path in sorted((root / "events").rglob("*.tfevents")):
        data = bytearray(path.read_bytes())
        for at, length in _tfrecords(bytes(data)):
            payload = bytes(data[at + 12 : at + 12 + length])
            struct.pack_into("<I", data, at + 12 + length, masked_crc32c(payload))
        path.write_bytes(bytes(data))
    return root


def _smd_pick(root: Path, rng: random.Random, part: str) -> Path:
    files = sorted(p for p in (root / part).rglob("*") if p.is_file() and not p.is_symlink())
    return rng.choice(files) if files else pick_file(root, rng)


def smd_flip(root: Path, rng: random.Random) -> str:
    path = _smd_pick(root, rng, rng.choice(["events", "events", "index", "collections"]))
    data = bytearray(path.read_bytes())
    if not data:
        return f"{path.name}: empty, left as it is"
    for _ in range(rng.choice([1, 1, 2, 8])):
        data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
    path.write_bytes(bytes(data))
    return f"flipped bits in {path.relative_to(root)}"


def smd_truncate(root: Path, rng: random.Random) -> str:
    path = _smd_pick(root, rng, rng.choice(["events", "index"]))
    data = path.read_bytes()
    path.write_bytes(data[: rng.randrange(len(data) + 1)])
    return f"truncated {path.relative_to(root)}"


def smd_extend(root: Path, rng: random.Random) -> str:
    path = _smd_pick(root, rng, rng.choice(["events", "index", "collections"]))
    with path.open("ab") as out:
        out.write(os.urandom(rng.randrange(1, 512)))
    return f"extended {path.relative_to(root)}"


def smd_delete(root: Path, rng: random.Random) -> str:
    path = _smd_pick(root, rng, rng.choice(["events", "index", "collections"]))
    path.unlink()
    return f"deleted {path.relative_to(root)}"


def smd_length(root: Path, rng: random.Random) -> str:
    """Change one record's length field (its length CRC recomputed half of the time)."""
    from tensortap.format._crc32c import masked_crc32c

    path = _smd_pick(root, rng, "events")
    data = bytearray(path.read_bytes())
    records = _tfrecords(bytes(data))
    if not records:
        return f"{path.name}: no record, left as it is"
    at, length = rng.choice(records)
    new = rng.choice([0, 1, length - 1, length + 1, length + 4, 2**40, 2**63, rng.randrange(4096)])
    struct.pack_into("<Q", data, at, max(0, new))
    crafted = rng.random() < 0.5
    if crafted:
        struct.pack_into("<I", data, at + 8, masked_crc32c(bytes(data[at : at + 8])))
    path.write_bytes(bytes(data))
    crc = "valid" if crafted else "old"
    return f"length {length} -> {new} in {path.relative_to(root)} (CRC {crc})"


_SMDWRONG_VALUES: list[Any] = [
    *WRONG_VALUES,
    -16,
    2**63,
    2**64 + 1,
    1e308,
    float("nan"),
    "TRAIN",
    "EVAL",
]


def smd_index(root: Path, rng: random.Random) -> str:
    """A crafted index file: a field retyped, entries moved, swapped or duplicated, another
    step's event file named, or the whole index copied under another step or worker."""
    path = _smd_pick(root, rng, "index")
    try:
        doc = json.loads(path.read_bytes())
        entries = doc["tensor_payload"]
    except (ValueError, KeyError, TypeError):
        return f"{path.name}: not an index, left as it is"
    how = rng.choice(["retype", "start", "swap", "event_file", "mode", "copy", "entry"])
    if how == "retype":
        doc = retype(doc, rng)
    elif how == "start" and entries:
        entry = rng.choice(entries)
        entry[rng.choice(["start_idx", "length"])] = rng.choice(
            [*(e["start_idx"] for e in entries), *(e["length"] for e in entries), *_SMDWRONG_VALUES]
        )
    elif how == "swap" and len(entries) > 1:
        a, b = rng.sample(range(len(entries)), 2)
        entries[a]["tensorname"], entries[b]["tensorname"] = (
            entries[b]["tensorname"],
            entries[a]["tensorname"],
        )
    elif how == "event_file":
        others = sorted((root / "events").rglob("*.tfevents"))
        if others:
            doc["meta"]["event_file_name"] = str(rng.choice(others).relative_to(root))
    elif how == "mode":
        doc["meta"]["mode"] = rng.choice(["TRAIN", "EVAL", "PREDICT", "GLOBAL", "train", 3])
        doc["meta"]["mode_step"] = rng.choice([0, 1, 7, -1, 2**70, "2"])
    elif how == "copy":  # the same index under another step number, or another worker
        name = path.name
        step, _, worker = name.partition("_")
        twin = rng.choice([f"{rng.randrange(10):012d}_{worker}", f"{step}_worker_9.json", name])
        target = path.parent.parent / f"{rng.randrange(3):09d}" / twin
        if target == path:
            return f"{path.relative_to(root)} left in place"
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)
        return f"copied {path.relative_to(root)} to {target.relative_to(root)}"
    elif how == "entry" and entries:
        entries.append(dict(rng.choice(entries)))
    path.write_text(json.dumps(doc))
    return f"crafted {how} in {path.relative_to(root)}"


def smd_nesting(root: Path, rng: random.Random) -> str:
    path = _smd_pick(root, rng, rng.choice(["index", "collections"]))
    depth = rng.choice([1000, 100_000])
    path.write_text('{"meta": ' + "[" * depth + "]" * depth + "}")
    return f"nested {path.relative_to(root)} {depth} deep"


def smd_regex(root: Path, rng: random.Random) -> str:
    """A catastrophic or unsupported regex in every collection (the trial's names are long
    enough for Python's ``re`` to take forever on the first ones)."""
    pattern = rng.choice([r"(\w|\w)*!", "(.*.*)*X$", "(a+)+$", r"(a)\1", "(?=a)", "[", "a" * 5000])
    for path in sorted((root / "collections").rglob("*.json")):
        try:
            doc = json.loads(path.read_bytes())
            for entry in doc["collections"].values():
                entry["include_regex"] = [pattern]
        except (ValueError, KeyError, TypeError, AttributeError):
            continue
        path.write_text(json.dumps(doc))
    return f"regex {pattern[:20]!r} in the collections"


def smd_special(root: Path, rng: random.Random) -> str:
    """An event or index file replaced by a symlink out of the trial, to /dev/zero, or a FIFO."""
    path = _smd_pick(root, rng, rng.choice(["events", "index"]))
    path.unlink()
    if rng.random() < 0.3:
        os.mkfifo(path)
        return f"{path.relative_to(root)} is a FIFO"
    target = rng.choice(["/dev/zero", "/etc/hostname", str(root.parent)])
    os.symlink(target, path)
    return f"{path.relative_to(root)} -> symlink to {target}"


def _varint(n: int) -> bytes:
    out = b""
    while True:
        low, n = n & 0x7F, n >> 7
        if not n:
            return out + bytes([low])
        out += bytes([low | 0x80])


def _field(number: int, wire: int, payload: bytes) -> bytes:
    key = _varint(number << 3 | wire)
    return key + (_varint(len(payload)) + payload if wire == 2 else payload)


def string_tensor(text: bytes) -> bytes:
    """A ``TensorProto`` of TensorFlow's ``DT_STRING`` holding ``text``."""
    return _field(1, 0, _varint(7)) + _field(8, 2, text)


def float_tensor(values: list[float]) -> bytes:
    """A ``TensorProto`` of ``DT_FLOAT`` (a vector of ``values``)."""
    import numpy as np

    shape = _field(2, 2, _field(2, 2, _field(1, 0, _varint(len(values)))))
    content = np.asarray(values, "<f4").tobytes()
    return _field(1, 0, _varint(1)) + shape + _field(4, 2, content)


def append_tensor(root: Path, index: Path, tag: str, proto: bytes, wall: float) -> None:
    """Append one ``Event`` record (``tag``'s ``proto`` at wall time ``wall``, with valid CRCs)
    to the event file of the smdebug index file ``index`` and list it in that index."""
    from tensortap.format._crc32c import masked_crc32c

    doc = json.loads(index.read_bytes())
    step = int(index.name.split("_", 1)[0])
    value = _field(1, 2, tag.encode()) + _field(8, 2, proto)
    event = (
        _field(1, 1, struct.pack("<d", wall))
        + _field(2, 0, _varint(step))
        + _field(5, 2, _field(1, 2, value))
    )
    head = struct.pack("<Q", len(event))
    record = head + struct.pack("<I", masked_crc32c(head)) + event
    record += struct.pack("<I", masked_crc32c(event))
    events = root / doc["meta"]["event_file_name"]
    start = events.stat().st_size
    with events.open("ab") as out:
        out.write(record)
    doc["tensor_payload"].append({"tensorname": tag, "start_idx": start, "length": len(record)})
    index.write_text(json.dumps(doc))


def smd_odd_record(root: Path, rng: random.Random) -> str:
    """One odd record added to a step (valid CRCs): a ``DT_STRING`` tensor, or a tensor whose
    wall time is NaN or infinite; or a step whose ``mode_step`` is 2**63."""
    path = _smd_pick(root, rng, "index")
    try:
        doc = json.loads(path.read_bytes())
        events = root / doc["meta"]["event_file_name"]
        inside = events.resolve().is_relative_to(root.resolve()) and not events.is_symlink()
        int(path.name.split("_", 1)[0])
        if not (inside and events.is_file() and isinstance(doc["tensor_payload"], list)):
            raise ValueError("not an index of an event file in the trial")
    except (ValueError, KeyError, TypeError, RecursionError, OSError):
        return f"{path.name}: not an index of an event file in the trial, left as it is"
    how = rng.choice(["string", "nan", "inf", "mode_step"])
    if how == "mode_step":
        doc["meta"]["mode_step"] = 2**63
        path.write_text(json.dumps(doc))
    elif how == "string":
        append_tensor(root, path, "odd/text", string_tensor(b"hello"), 1.0)
    else:
        wall = float("nan") if how == "nan" else float("inf")
        append_tensor(root, path, "odd/late", float_tensor([1.0, 2.0]), wall)
    return f"{how} in {path.relative_to(root)}"


SMDEBUG_MUTATIONS: dict[str, Mutation] = {
    "flip": smd_flip,
    "truncate": smd_truncate,
    "extend": smd_extend,
    "delete": smd_delete,
    "length": smd_length,
    "index": smd_index,
    "nesting": smd_nesting,
    "regex": smd_regex,
    "special": smd_special,
    "odd_record": smd_odd_record,
}
