"""A seeded mutator of trials, and a reader that must survive whatever it makes.

A trial may come from a shared bucket or another team, damaged or crafted. :func:`mutate`
damages a copy of a healthy trial in one of the ways such a trial can be damaged (bytes flipped,
truncated or extended objects, deleted or moved files, JSON fields of the wrong type, deeply
nested JSON, symlinks out of the trial or to ``/dev/zero``, FIFOs, catastrophic regexes), and
:func:`read_everything` reads all of it through the public trial API. Reading may raise only
tensortap's typed errors (or skip the damaged part and list it in ``trial.problems()``); it must
finish within a deadline and use memory within a small constant of the trial's real size.

``tests/security/test_hostile_trials.py`` runs a few hundred cases; ``python -m bench.fuzz`` runs
thousands and reports the counts (docs/format.md).
"""

from __future__ import annotations

import json
import logging
import os
import random
import shutil
import struct
import threading
import time
import traceback
import tracemalloc
import zlib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tensortap.exceptions import TensortapError

Mutation = Callable[[Path, random.Random], str]


def _files(root: Path, suffix: str = "") -> list[Path]:
    return sorted(
        p for p in root.rglob("*") if p.is_file() and not p.is_symlink() and p.name.endswith(suffix)
    )


def _pick(root: Path, rng: random.Random, suffix: str = "") -> Path:
    files = _files(root, suffix) or _files(root)
    return rng.choice(files)


def flip_bytes(root: Path, rng: random.Random) -> str:
    path = _pick(root, rng)
    data = bytearray(path.read_bytes())
    if not data:
        return f"{path.name}: empty, left as it is"
    for _ in range(rng.choice([1, 1, 2, 8])):
        at = rng.randrange(len(data))
        data[at] ^= 1 << rng.randrange(8)
    path.write_bytes(bytes(data))
    return f"flipped bits in {path.relative_to(root)}"


def truncate(root: Path, rng: random.Random) -> str:
    path = _pick(root, rng)
    data = path.read_bytes()
    path.write_bytes(data[: rng.randrange(len(data) + 1)])
    return f"truncated {path.relative_to(root)}"


def extend(root: Path, rng: random.Random) -> str:
    path = _pick(root, rng)
    junk = rng.choice([b"\0" * rng.randrange(1, 4096), os.urandom(rng.randrange(1, 512))])
    with path.open("ab") as out:
        out.write(junk)
    return f"extended {path.relative_to(root)}"


def delete(root: Path, rng: random.Random) -> str:
    path = _pick(root, rng, rng.choice([".ttdat", ".ttidx", ".json", ""]))
    path.unlink()
    return f"deleted {path.relative_to(root)}"


def move(root: Path, rng: random.Random) -> str:
    """Copy or move an index, data or JSON object into another worker's folder."""
    workers = sorted(p for p in (root / "workers").iterdir() if p.is_dir() and not p.is_symlink())
    path = _pick(rng.choice(workers), rng, rng.choice([".ttidx", ".ttdat", ".json"]))
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


_WRONG: list[Any] = [None, True, -1, 2**70, 1.5, "x", "", [], {}, [1, "a"], {"a": 1}, [[[]]]]


def _retype(value: Any, rng: random.Random) -> Any:
    if isinstance(value, dict) and value and rng.random() < 0.7:
        key = rng.choice(sorted(value))
        return {**value, key: _retype(value[key], rng)}
    if isinstance(value, list) and value and rng.random() < 0.7:
        at = rng.randrange(len(value))
        return [*value[:at], _retype(value[at], rng), *value[at + 1 :]]
    return rng.choice(_WRONG)


def json_types(root: Path, rng: random.Random) -> str:
    """Give one field of a JSON document (or of an index header, CRC kept valid) a wrong type."""
    if rng.random() < 0.5:
        path = _pick(root, rng, ".json")
        try:
            doc = json.loads(path.read_bytes())
        except ValueError:
            return f"{path.name}: not JSON, left as it is"
        path.write_text(json.dumps(_retype(doc, rng)))
        return f"retyped a field of {path.relative_to(root)}"
    path = _pick(root, rng, ".ttidx")
    if not path.name.endswith(".ttidx"):
        return "no index to retype"
    rewrite_index_header(path, lambda header: _retype(header, rng))
    return f"retyped a field of the header of {path.relative_to(root)} (CRC valid)"


def rewrite_index_header(path: Path, change: Callable[[Any], Any]) -> None:
    """Replace an index's JSON header and recompute its CRC (a crafted, CRC-valid index)."""
    raw = path.read_bytes()
    prefix = struct.Struct("<4sHHIIII")
    magic, version, flags, head_len, n_rec, n_dims, reserved = prefix.unpack_from(raw, 0)
    start = prefix.size
    old_pad = (-(start + head_len)) % 8
    header = change(json.loads(raw[start : start + head_len]))
    head = json.dumps(header).encode()
    pad = (-(start + len(head))) % 8
    rest = raw[start + head_len + old_pad : -4]
    body = (
        prefix.pack(magic, version, flags, len(head), n_rec, n_dims, reserved)
        + head
        + b"\0" * pad
        + rest
    )
    path.write_bytes(body + struct.pack("<I", zlib.crc32(body)))


def nesting(root: Path, rng: random.Random) -> str:
    path = _pick(root, rng, ".json")
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
        path = _pick(root, rng)
        path.unlink()
        os.symlink(target, path)
    return f"{path.relative_to(root)} -> symlink to {target}"


def fifo(root: Path, rng: random.Random) -> str:
    path = _pick(root, rng, rng.choice([".json", ".ttidx", ".ttdat"]))
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
}


def mutate(root: Path, rng: random.Random, kind: str | None = None) -> str:
    """Damage the trial at ``root`` once (``kind`` or a random mutation); says what it did."""
    name = kind or rng.choice(sorted(MUTATIONS))
    return f"{name}: {MUTATIONS[name](root, rng)}"


def read_everything(path: str | os.PathLike[str]) -> int:
    """Read all of a trial through the public API; returns how many values were read.

    A damaged value raises a typed error, which is counted as handled and reading goes on."""
    from tensortap.trials.trial import create_trial

    trial = create_trial(path)
    read = 0
    trial.workers()
    trial.problems()
    for name in trial.collections():
        trial.tensor_names(collection=name)
        trial.tensor_names(collection=name, step=0)
    names = trial.tensor_names()
    for step in trial.steps(show_incomplete_steps=True):
        try:
            trial.tensor_names(step=step)
            block = trial.step_block(step)
            block.reduce(block.names(), "max", abs=True)
            block.nonfinite(block.names())
        except TensortapError:
            pass
    for name in names:
        tensor = trial.tensor(name)
        for step in tensor.steps():
            try:
                np.asarray(tensor.value(step))
                read += 1
            except TensortapError:
                pass
            for reduction in ("min", "l2"):
                try:
                    tensor.reduction_value(step, reduction)
                except TensortapError:
                    pass
    trial.problems()
    return read


def build_healthy(path: Path, steps: int = 6) -> Path:
    """A small healthy trial: two workers, TRAIN and EVAL, raw values, reductions, shapes,
    several dtypes and collections with regexes (what :func:`fuzz` damages)."""
    from tensortap.core.reduction_config import ReductionConfig
    from tensortap.core.save_config import SaveConfig
    from tensortap.hook import Hook
    from tensortap.modes import ModeKeys

    rng = np.random.default_rng(0)
    for worker in range(2):
        hook = Hook(
            path,
            save_config=SaveConfig(save_interval=1),
            include_collections=["weights", "gradients", "losses", "scalars", "default", "norms"],
            worker=worker,
            num_workers=2,
        )
        hook.get_collection("norms").include("^norm/")
        hook.get_collection("norms").reduction_config = ReductionConfig(
            reductions=("min", "max"), norms=("l2",)
        )
        with hook:
            for step in range(steps):
                hook.set_mode(ModeKeys.EVAL if step % 3 == 2 else ModeKeys.TRAIN)
                hook.save_tensor("fc.weight", rng.normal(size=(4, 3)).astype(np.float32), "weights")
                hook.save_tensor("gradient/fc.weight", rng.normal(size=(4, 3)), "gradients")
                hook.save_tensor("norm/h", rng.normal(size=16).astype(np.float16), "norms")
                hook.save_tensor("count", np.arange(5, dtype=np.int64))
                hook.save_scalar("loss", float(1.0 / (step + 1)), "losses")
                # a name on which a backtracking regex engine takes forever with (a+)+$
                hook.save_tensor("a" * 30 + "!", np.ones(1))
                hook.next_step()
    return path


@dataclass
class Outcome:
    """What reading one mutated trial did."""

    mutation: str
    result: str  # "ok", "typed", "untyped", "hang"
    error: str = ""
    peak_bytes: int = 0
    seconds: float = 0.0


@dataclass
class Summary:
    cases: int = 0
    results: Counter[str] = field(default_factory=Counter)
    by_mutation: dict[str, Counter[str]] = field(default_factory=dict)
    failures: list[Outcome] = field(default_factory=list)
    typed: list[Outcome] = field(default_factory=list)  # reading refused the whole trial
    max_peak_ratio: float = 0.0
    max_seconds: float = 0.0


def trial_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in _files(root))


def check_one(
    trial: Path, mutation: str, deadline: float = 10.0, measure_memory: bool = True
) -> Outcome:
    """Read a (mutated) trial in a daemon thread with a deadline, tracing its peak memory."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            read_everything(trial)
            box["result"] = "ok"
        except TensortapError as exc:
            box["result"], box["error"] = "typed", f"{type(exc).__name__}: {exc}"
        except BaseException as exc:  # what the fuzzer is looking for
            where = traceback.extract_tb(exc.__traceback__)[-1]
            box["result"] = "untyped"
            box["error"] = f"{type(exc).__name__}: {exc} (at {where.filename}:{where.lineno})"

    if measure_memory:
        tracemalloc.start()
        tracemalloc.reset_peak()
    started = time.monotonic()
    thread = threading.Thread(target=run, daemon=True, name="tensortap-fuzz-read")
    thread.start()
    thread.join(deadline)
    seconds = time.monotonic() - started
    peak = tracemalloc.get_traced_memory()[1] if measure_memory else 0
    if measure_memory:
        tracemalloc.stop()
    if thread.is_alive():
        return Outcome(mutation, "hang", f"still reading after {deadline} s", peak, seconds)
    return Outcome(mutation, box["result"], box.get("error", ""), peak, seconds)


def fuzz(
    healthy: Path,
    work: Path,
    cases: int,
    seed: int = 0,
    deadline: float = 10.0,
    memory_slack: int = 32 << 20,
    measure_memory: bool = True,
) -> Summary:
    """Mutate copies of the trial at ``healthy`` ``cases`` times and read each one.

    A case fails when reading raises an untyped exception, hangs past ``deadline`` or traces
    more than ``memory_slack`` bytes above the trial's real size."""
    log = logging.getLogger("tensortap")
    level = log.level
    log.setLevel(logging.ERROR)  # every case logs its problems
    try:
        return _fuzz(healthy, work, cases, seed, deadline, memory_slack, measure_memory)
    finally:
        log.setLevel(level)


def _fuzz(
    healthy: Path,
    work: Path,
    cases: int,
    seed: int,
    deadline: float,
    memory_slack: int,
    measure_memory: bool,
) -> Summary:
    rng = random.Random(seed)
    summary = Summary()
    size = trial_bytes(healthy)
    for case in range(cases):
        root = work / f"case_{case}" / "trial"
        shutil.copytree(healthy, root, symlinks=True)
        mutation = mutate(root, rng)
        for _ in range(rng.choice([0, 0, 0, 1, 2])):  # sometimes several kinds of damage
            try:
                mutation += " + " + mutate(root, rng)
            except Exception:  # the first damage left nothing to damage this way
                break
        outcome = check_one(root, mutation, deadline, measure_memory)
        kind = mutation.split(":", 1)[0]
        summary.cases += 1
        summary.results[outcome.result] += 1
        summary.by_mutation.setdefault(kind, Counter())[outcome.result] += 1
        summary.max_seconds = max(summary.max_seconds, outcome.seconds)
        if measure_memory:
            summary.max_peak_ratio = max(summary.max_peak_ratio, outcome.peak_bytes / size)
        too_big = measure_memory and outcome.peak_bytes > size + memory_slack
        if outcome.result in ("untyped", "hang") or too_big:
            summary.failures.append(outcome)
        elif outcome.result == "typed":
            summary.typed.append(outcome)
        if outcome.result != "hang":
            shutil.rmtree(root.parent, ignore_errors=True)
    return summary


# -- trials written by smdebug ----------------------------------------------------------------
#
# The same harness over smdebug's format (TFRecord event files, index and collections JSON):
# :func:`fuzz_smdebug` damages copies of a healthy smdebug trial (bits flipped, files cut or
# extended, record lengths changed, crafted index JSON, catastrophic collection regexes) and reads
# each through ``create_trial``. Besides no hang and no untyped exception, every value read must
# equal the healthy trial's, or the trial must list a problem: a value that differs while
# ``problems()`` is empty is a ``wrong`` result (a failure).

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
    from tensortap.format.crc32c import masked_crc32c

    for path in sorted((root / "events").rglob("*.tfevents")):
        data = bytearray(path.read_bytes())
        for at, length in _tfrecords(bytes(data)):
            payload = bytes(data[at + 12 : at + 12 + length])
            struct.pack_into("<I", data, at + 12 + length, masked_crc32c(payload))
        path.write_bytes(bytes(data))
    return root


def _smd_pick(root: Path, rng: random.Random, part: str) -> Path:
    files = sorted(p for p in (root / part).rglob("*") if p.is_file() and not p.is_symlink())
    return rng.choice(files) if files else _pick(root, rng)


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
    from tensortap.format.crc32c import masked_crc32c

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


_SMD_WRONG: list[Any] = [*_WRONG, -16, 2**63, 2**64 + 1, 1e308, float("nan"), "TRAIN", "EVAL"]


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
        doc = _retype(doc, rng)
    elif how == "start" and entries:
        entry = rng.choice(entries)
        entry[rng.choice(["start_idx", "length"])] = rng.choice(
            [*(e["start_idx"] for e in entries), *(e["length"] for e in entries), *_SMD_WRONG]
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
}

Values = dict[tuple[str, int, str, str], Any]


def read_values(path: str | os.PathLike[str]) -> tuple[Values, list[str]]:
    """Every raw value and reduction of a trial, keyed by (name, global step, worker, what),
    and its problems; typed errors of single values are kept as the error's class name."""
    from tensortap.trials.trial import create_trial

    trial = create_trial(path)
    for name in trial.collections():
        trial.tensor_names(collection=name)
    out: Values = {}
    for name in trial.tensor_names():
        tensor = trial.tensor(name)
        for worker in trial.workers():
            for step in tensor.steps():
                for what in ("value", "min", "max", "mean", "l2", "abs_max"):
                    try:
                        if what == "value":
                            got: Any = np.asarray(tensor.value(step, worker=worker))
                        else:
                            red, on_abs = what.removeprefix("abs_"), what.startswith("abs_")
                            got = tensor.reduction_value(step, red, abs=on_abs, worker=worker)
                    except TensortapError as exc:
                        got = type(exc).__name__
                    out[name, step, worker, what] = got
    return out, trial.problems()


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, str) or isinstance(b, str):
        return bool(a == b)
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and bool(np.array_equal(a, b, equal_nan=True))


def wrong_values(healthy: Values, got: Values) -> list[str]:
    """The values ``got`` holds that differ from ``healthy``'s (a missing one is not wrong)."""
    out = []
    for key, value in got.items():
        if isinstance(value, str):
            continue  # a typed refusal of that value
        if key not in healthy or not _same(healthy[key], value):
            out.append(f"{key}: {value!r} where the healthy trial has {healthy.get(key)!r}")
    return out


def check_one_smdebug(trial: Path, healthy: Values, mutation: str, deadline: float) -> Outcome:
    """Read a (mutated) smdebug trial in a daemon thread with a deadline; ``wrong`` when a
    value differs from the healthy trial's and no problem is listed."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            got, problems = read_values(trial)
            wrong = wrong_values(healthy, got)
            if wrong and not problems:
                box["result"], box["error"] = "wrong", f"{len(wrong)} wrong, e.g. {wrong[0]}"
            else:
                box["result"] = "ok"
        except TensortapError as exc:
            box["result"], box["error"] = "typed", f"{type(exc).__name__}: {exc}"
        except BaseException as exc:  # what the fuzzer is looking for
            where = traceback.extract_tb(exc.__traceback__)[-1]
            box["result"] = "untyped"
            box["error"] = f"{type(exc).__name__}: {exc} (at {where.filename}:{where.lineno})"

    started = time.monotonic()
    thread = threading.Thread(target=run, daemon=True, name="tensortap-fuzz-smdebug")
    thread.start()
    thread.join(deadline)
    seconds = time.monotonic() - started
    if thread.is_alive():
        return Outcome(mutation, "hang", f"still reading after {deadline} s", 0, seconds)
    return Outcome(mutation, box["result"], box.get("error", ""), 0, seconds)


def fuzz_smdebug(
    healthy: Path, work: Path, cases: int, seed: int = 0, deadline: float = 20.0
) -> Summary:
    """Mutate copies of the smdebug trial at ``healthy`` ``cases`` times and read each one (the
    conversion cache under ``work``). A case fails when reading raises an untyped exception,
    hangs past ``deadline`` or returns a wrong value without listing a problem."""
    log = logging.getLogger("tensortap")
    level = log.level
    log.setLevel(logging.CRITICAL)
    cache = os.environ.get("TENSORTAP_CACHE")
    os.environ["TENSORTAP_CACHE"] = str(work / "cache")
    try:
        values, problems = read_values(healthy)
        if problems:
            raise ValueError(f"the healthy smdebug trial has problems: {problems}")
        rng = random.Random(seed)
        summary = Summary()
        for case in range(cases):
            root = work / f"case_{case}" / "trial"
            shutil.copytree(healthy, root, symlinks=True)
            name = rng.choice(sorted(SMDEBUG_MUTATIONS))
            mutation = f"{name}: {SMDEBUG_MUTATIONS[name](root, rng)}"
            for _ in range(rng.choice([0, 0, 0, 1, 2])):
                extra = rng.choice(sorted(SMDEBUG_MUTATIONS))
                try:
                    mutation += f" + {extra}: {SMDEBUG_MUTATIONS[extra](root, rng)}"
                except Exception:  # the first damage left nothing to damage this way
                    break
            outcome = check_one_smdebug(root, values, mutation, deadline)
            summary.cases += 1
            summary.results[outcome.result] += 1
            summary.by_mutation.setdefault(name, Counter())[outcome.result] += 1
            summary.max_seconds = max(summary.max_seconds, outcome.seconds)
            if outcome.result in ("untyped", "hang", "wrong"):
                summary.failures.append(outcome)
            elif outcome.result == "typed":
                summary.typed.append(outcome)
            if outcome.result != "hang":
                shutil.rmtree(root.parent, ignore_errors=True)
                shutil.rmtree(work / "cache", ignore_errors=True)
        return summary
    finally:
        log.setLevel(level)
        if cache is None:
            os.environ.pop("TENSORTAP_CACHE", None)
        else:
            os.environ["TENSORTAP_CACHE"] = cache
