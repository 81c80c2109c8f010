"""Ways to damage a trial of tensortap's format, each seeded: what :mod:`tensortap.testing._fuzz`
reads back (bytes flipped, objects truncated or extended, files deleted or moved between workers,
JSON fields of the wrong type, deep nesting, symlinks, FIFOs, catastrophic regexes, a worker's
index lost, steps numbered below 0)."""

from __future__ import annotations

import json
import os
import random
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

Mutation = Callable[[Path, random.Random], str]


def trial_files(root: Path, suffix: str = "") -> list[Path]:
    """The regular files under ``root`` (no symlink) whose names end with ``suffix``."""
    return sorted(
        p for p in root.rglob("*") if p.is_file() and not p.is_symlink() and p.name.endswith(suffix)
    )


def pick_file(root: Path, rng: random.Random, suffix: str = "") -> Path:
    """One of the files under ``root`` ending with ``suffix`` (any file when none does)."""
    files = trial_files(root, suffix) or trial_files(root)
    return rng.choice(files)


def flip_bytes(root: Path, rng: random.Random) -> str:
    path = pick_file(root, rng)
    data = bytearray(path.read_bytes())
    if not data:
        return f"{path.name}: empty, left as it is"
    for _ in range(rng.choice([1, 1, 2, 8])):
        at = rng.randrange(len(data))
        data[at] ^= 1 << rng.randrange(8)
    path.write_bytes(bytes(data))
    return f"flipped bits in {path.relative_to(root)}"


def truncate(root: Path, rng: random.Random) -> str:
    path = pick_file(root, rng)
    data = path.read_bytes()
    path.write_bytes(data[: rng.randrange(len(data) + 1)])
    return f"truncated {path.relative_to(root)}"


def extend(root: Path, rng: random.Random) -> str:
    path = pick_file(root, rng)
    junk = rng.choice([b"\0" * rng.randrange(1, 4096), os.urandom(rng.randrange(1, 512))])
    with path.open("ab") as out:
        out.write(junk)
    return f"extended {path.relative_to(root)}"


def delete(root: Path, rng: random.Random) -> str:
    path = pick_file(root, rng, rng.choice([".ttdat", ".ttidx", ".json", ""]))
    path.unlink()
    return f"deleted {path.relative_to(root)}"


def move(root: Path, rng: random.Random) -> str:
    """Copy or move an index, data or JSON object into another worker's folder."""
    workers = sorted(p for p in (root / "workers").iterdir() if p.is_dir() and not p.is_symlink())
    path = pick_file(rng.choice(workers), rng, rng.choice([".ttidx", ".ttdat", ".json"]))
    target_worker = rng.choice(workers)
    rel = path.relative_to(root / "workers" / path.relative_to(root / "workers").parts[0])
    target = target_worker / rel
    if rng.random() < 0.3:  # and under another sequence number
        target = target.with_name(f"{rng.randrange(50):012d}{''.join(target.suffixes)}")
    if target == path:
        return f"{path.relative_to(root)} left in place"
    target.parent.mkdir(parents=True, exist_ok=True)
    (shutil.copyfile if rng.random() < 0.5 else shutil.move)(path, target)
    return f"moved {path.relative_to(root)} to {target.relative_to(root)}"


#: values of the wrong type (or range) for a JSON field
WRONG_VALUES: list[Any] = [None, True, -1, 2**70, 1.5, "x", "", [], {}, [1, "a"], {"a": 1}, [[[]]]]


def retype(value: Any, rng: random.Random) -> Any:
    """``value`` (a JSON document) with one field, at any depth, given a wrong value."""
    if isinstance(value, dict) and value and rng.random() < 0.7:
        key = rng.choice(sorted(value))
        return {**value, key: retype(value[key], rng)}
    if isinstance(value, list) and value and rng.random() < 0.7:
        at = rng.randrange(len(value))
        return [*value[:at], retype(value[at], rng), *value[at + 1 :]]
    return rng.choice(WRONG_VALUES)


def json_types(root: Path, rng: random.Random) -> str:
    """Give one field of a JSON document (or of an index header, CRC kept valid) a wrong type."""
    if rng.random() < 0.5:
        path = pick_file(root, rng, ".json")
        try:
            doc = json.loads(path.read_bytes())
        except ValueError:
            return f"{path.name}: not JSON, left as it is"
        path.write_text(json.dumps(retype(doc, rng)))
        return f"retyped a field of {path.relative_to(root)}"
    path = pick_file(root, rng, ".ttidx")
    if not path.name.endswith(".ttidx"):
        return "no index to retype"
    rewrite_index_header(path, lambda header: retype(header, rng))
    return f"retyped a field of the header of {path.relative_to(root)} (CRC valid)"


def rewrite_index_header(path: Path, change: Callable[[Any], Any]) -> None:
    """Replace an index's JSON header and recompute its CRC (a crafted, CRC-valid index), in
    the index's own version (plain or packed)."""
    from tensortap.format._index import assemble_index, index_layout

    version, head, records, dims = index_layout(path.read_bytes())
    header = change(json.loads(head))
    path.write_bytes(assemble_index(json.dumps(header).encode(), records, dims, version))


def nesting(root: Path, rng: random.Random) -> str:
    path = pick_file(root, rng, ".json")
    depth = rng.choice([1000, 100_000])
    path.write_text("[" * depth + "]" * depth)
    return f"nested {path.relative_to(root)} {depth} deep"


def symlink(root: Path, rng: random.Random) -> str:
    """Replace a file (or a worker's folder) by a symlink out of the trial."""
    outside = root.parent / "outside.bin"
    outside.write_bytes(b"secret outside the trial " * 64)
    target = rng.choice([str(outside), "/dev/zero", "/etc/hostname", str(root.parent)])
    if rng.random() < 0.2:
        path = rng.choice(sorted(p for p in (root / "workers").iterdir() if p.is_dir()))
        shutil.rmtree(path)
        os.symlink(root.parent if target != "/dev/zero" else target, path)
    else:
        path = pick_file(root, rng)
        path.unlink()
        os.symlink(target, path)
    return f"{path.relative_to(root)} -> symlink to {target}"


def fifo(root: Path, rng: random.Random) -> str:
    path = pick_file(root, rng, rng.choice([".json", ".ttidx", ".ttdat"]))
    path.unlink()
    os.mkfifo(path)
    return f"{path.relative_to(root)} is a FIFO"


def evil_regex(root: Path, rng: random.Random) -> str:
    """A catastrophic (or unsupported) regex in the collections of every worker."""
    pattern = rng.choice(["(a+)+$", "(x+x+)+y", "(a|aa)+$", r"(a)\1", "(?=a)", "[", "a" * 5000])
    changed = []
    for worker in sorted((root / "workers").iterdir()):
        snapshots = sorted((worker / "collections").glob("*.json"))
        if not snapshots or snapshots[-1].is_symlink() or not snapshots[-1].is_file():
            continue
        try:
            doc = json.loads(snapshots[-1].read_bytes())
            for entry in doc["collections"]:
                entry["include_regex"] = [pattern]
                entry["exclude_regex"] = [pattern]
        except (ValueError, RecursionError, KeyError, TypeError):
            continue
        snapshots[-1].write_text(json.dumps(doc))
        changed.append(str(snapshots[-1].relative_to(root)))
    return f"regex {pattern[:20]!r} in {', '.join(changed) or 'no collections file'}"


def lose_index(root: Path, rng: random.Random) -> str:
    """A worker's index (often its only one) deleted, or replaced by a FIFO, a symlink (to
    its own copy outside the trial, or to ``/dev/zero``) or a directory: its steps must not
    vanish from the trial without a problem."""
    indexes = trial_files(root, ".ttidx")
    if not indexes:
        return "no index to lose"
    path = rng.choice(indexes)
    how = rng.choice(["deleted", "a FIFO", "a symlink", "a directory"])
    outside = root.parent / f"kept-{path.name}"
    shutil.copyfile(path, outside)
    path.unlink()
    if how == "a FIFO":
        os.mkfifo(path)
    elif how == "a symlink":
        os.symlink(rng.choice([str(outside), "/dev/zero"]), path)
    elif how == "a directory":
        path.mkdir()
    return f"{path.relative_to(root)} {how}"


def negative_steps(root: Path, rng: random.Random) -> str:
    """An index (CRC valid) whose steps are numbered below 0 (a writer numbers them from 0)."""
    indexes = trial_files(root, ".ttidx")
    if not indexes:
        return "no index to renumber"
    path = rng.choice(indexes)
    shift = rng.choice([1, 100, 2**62])
    rewrite_index_records(path, lambda header, records: _shift_steps(header, records, shift))
    return f"steps of {path.relative_to(root)} moved {shift} below their numbers (CRC valid)"


def _shift_steps(header: Any, records: Any, shift: int) -> Any:
    header["steps"] = [
        [row[0] - shift, row[1], row[2] - shift, *row[3:]] for row in header["steps"]
    ]
    records["global_step"] -= shift
    records["mode_step"] -= shift
    return header


def rewrite_index_records(path: Path, change: Callable[[Any, Any], Any]) -> None:
    """Give ``change`` an index's JSON header and a writable copy of its records (a NumPy array),
    and write back what it returns and the records, with a valid CRC, in the index's own
    version (plain or packed)."""
    from tensortap.format._index import assemble_index, index_layout

    version, head, records, dims = index_layout(path.read_bytes())
    header = change(json.loads(head), records)
    path.write_bytes(assemble_index(json.dumps(header).encode(), records, dims, version))


MUTATIONS: dict[str, Mutation] = {
    "flip": flip_bytes,
    "truncate": truncate,
    "extend": extend,
    "delete": delete,
    "move": move,
    "json_types": json_types,
    "nesting": nesting,
    "symlink": symlink,
    "fifo": fifo,
    "regex": evil_regex,
    "lose_index": lose_index,
    "negative_steps": negative_steps,
}


def mutate(root: Path, rng: random.Random, kind: str | None = None) -> str:
    """Damage the trial at ``root`` once (``kind`` or a random mutation); says what it did."""
    name = kind or rng.choice(sorted(MUTATIONS))
    return f"{name}: {MUTATIONS[name](root, rng)}"
