"""Rollback checkpoints that cannot hurt the run they protect (issue 45, item 6): a damaged
``DistributedCheckpoints`` checkpoint never changes a weight (it is refused before anything is
restored, and the rollback falls back to an intact older one), a planted ``.metadata`` pickle
never runs, ``rollback.json`` has one validated decoder, and a full disk during a save is an
event, not a crash."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch import nn

import tensortap
import tensortap.pytorch as tt
from tensortap.exceptions import FormatError, TensortapError

HERE = Path(__file__).parent
SRC = str(Path(tensortap.__file__).parents[1])


def model_and_optimizer() -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 4))
    return model, torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)


def train(model: nn.Module, optimizer: torch.optim.Optimizer, steps: int) -> None:
    generator = torch.Generator().manual_seed(steps)
    for _ in range(steps):
        x = torch.randn(8, 16, generator=generator)
        loss = model(x).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def snapshot(model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, torch.Tensor]:
    """Every parameter and every optimizer state tensor, copied."""
    found = {f"param/{k}": v.detach().clone() for k, v in model.state_dict().items()}
    for index, state in optimizer.state_dict()["state"].items():
        for key, value in state.items():
            if isinstance(value, torch.Tensor):
                found[f"optim/{index}/{key}"] = value.clone()
    return found


def assert_unchanged(before: dict[str, torch.Tensor], after: dict[str, torch.Tensor]) -> None:
    assert before.keys() == after.keys()
    changed = [k for k in before if not torch.equal(before[k], after[k])]
    assert changed == [], f"changed by a refused load: {changed}"


def saved_twice(tmp_path: Path) -> tuple[nn.Module, torch.optim.Optimizer, Any, dict]:
    """Checkpoints of steps 0 and 5, then more training; returns the state at step 0."""
    model, optimizer = model_and_optimizer()
    train(model, optimizer, 1)  # the momentum buffers exist
    checkpoints = tt.DistributedCheckpoints(tmp_path / "ckpt", model, optimizer)
    checkpoints.save(0, {"batches": {"position": 0, "offset": 0}})
    at_zero = snapshot(model, optimizer)
    train(model, optimizer, 5)
    checkpoints.save(5, {"batches": {"position": 5, "offset": 5}})
    train(model, optimizer, 3)
    return model, optimizer, checkpoints, at_zero


def _largest_shard(path: Path) -> Path:
    return max(path.glob("*.distcp"), key=lambda p: p.stat().st_size)


def _truncate_shard(path: Path) -> None:
    shard = _largest_shard(path)
    shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])


def _flip_shard(path: Path) -> None:  # same size, other bytes
    shard = _largest_shard(path)
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))


def _truncate_metadata(path: Path) -> None:
    meta = path / ".metadata"
    meta.write_bytes(meta.read_bytes()[:40])


def _bad_manifest(path: Path) -> None:
    (path / "rollback.json").write_text("[1]")


def _garbled_manifest(path: Path) -> None:  # read after the weights, it used to raise then
    (path / "rollback.json").write_text("{not json")


def _delete_shard(path: Path) -> None:
    _largest_shard(path).unlink()


DAMAGES = [
    _truncate_shard,
    _flip_shard,
    _truncate_metadata,
    _bad_manifest,
    _garbled_manifest,
    _delete_shard,
]


@pytest.mark.parametrize("damage", DAMAGES, ids=lambda d: d.__name__.strip("_"))
def test_a_damaged_checkpoint_is_refused_before_any_weight_changes(tmp_path: Path, damage) -> None:
    model, optimizer, checkpoints, _ = saved_twice(tmp_path)
    damage(Path(checkpoints.path(5)))
    before = snapshot(model, optimizer)
    with pytest.raises(BaseException) as raised:  # noqa: PT011 - DCP's too: typed below
        checkpoints.load(5)
    assert_unchanged(before, snapshot(model, optimizer))
    assert isinstance(raised.value, TensortapError), repr(raised.value)
    assert "step 5" in str(raised.value) or "step-5" in str(raised.value)


@pytest.mark.parametrize("damage", DAMAGES, ids=lambda d: d.__name__.strip("_"))
def test_the_rollback_falls_back_to_an_intact_older_checkpoint(tmp_path: Path, damage) -> None:
    model, optimizer, checkpoints, at_zero = saved_twice(tmp_path)
    damage(Path(checkpoints.path(5)))
    rollback = tt.Rollback(checkpoints)
    rollback.request(8, [], "loss spike")
    assert rollback.restore() == 0
    kinds = [(e.kind, e.restored_step) for e in rollback.events]
    assert kinds == [("damaged", 5), ("rollback", 0)]
    assert_unchanged(at_zero, snapshot(model, optimizer))
    assert checkpoints.steps() == [0]


def test_a_planted_metadata_pickle_never_runs(tmp_path: Path) -> None:
    model, optimizer, checkpoints, _ = saved_twice(tmp_path)
    path = Path(checkpoints.path(5))
    marker = tmp_path / "pwned"

    class Payload:
        def __reduce__(self):  # what unpickling would run: open() creates the marker file
            return (open, (str(marker), "w"))

    planted = pickle.dumps(Payload())
    import hashlib

    (path / ".metadata").write_bytes(planted)
    # the adversary rewrites the manifest too, so that it names the planted file's digest
    doc = json.loads((path / "rollback.json").read_text())
    doc["files"][".metadata"] = {
        "size": len(planted),
        "sha256": hashlib.sha256(planted).hexdigest(),
    }
    (path / "rollback.json").write_text(json.dumps(doc))
    before = snapshot(model, optimizer)
    rollback = tt.Rollback(checkpoints)
    rollback.request(8, [], "loss spike")
    assert rollback.restore() == 0  # the intact checkpoint of step 0
    assert not marker.exists(), "the planted pickle ran"
    assert [e.kind for e in rollback.events] == ["damaged", "rollback"]
    assert "changed since the checkpoint was saved" in rollback.events[0].reason
    assert snapshot(model, optimizer).keys() == before.keys()


def test_only_what_this_process_saved_is_loaded(tmp_path: Path) -> None:
    model, optimizer, _, _ = saved_twice(tmp_path)
    other = tt.DistributedCheckpoints(tmp_path / "ckpt", model, optimizer)
    before = snapshot(model, optimizer)
    with pytest.raises(TensortapError, match="no checkpoint of step 5 was saved by this process"):
        other.load(5)
    assert_unchanged(before, snapshot(model, optimizer))


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ([1], "not a tensortap tensortap-rollback-checkpoint document"),
        ({"kind": "tensortap-rollback-checkpoint", "format_version": 1}, "'step'"),
        (
            {
                "kind": "tensortap-rollback-checkpoint",
                "format_version": 1,
                "step": 1,
                "extra": {},
                "files": {"../x": {"size": 1, "sha256": "0" * 64}},
            },
            "not a plain file name",
        ),
        (
            {
                "kind": "tensortap-rollback-checkpoint",
                "format_version": 1,
                "step": 1,
                "extra": {},
                "files": {".metadata": {"size": -1, "sha256": "0" * 64}},
            },
            "size must be >= 0",
        ),
        (
            {
                "kind": "tensortap-rollback-checkpoint",
                "format_version": 1,
                "step": 1,
                "extra": {},
                "files": {"a": {"size": 1, "sha256": "0" * 64}},
            },
            "does not list the checkpoint's .metadata",
        ),
        (
            {
                "kind": "tensortap-rollback-checkpoint",
                "format_version": 1,
                "step": 2**70,
                "extra": {},
                "files": {},
            },
            "'step'",
        ),
    ],
)
def test_rollback_json_has_one_validated_decoder(doc: Any, message: str) -> None:
    from tensortap.format._rollback_manifest import decode_manifest

    with pytest.raises(FormatError, match=message):
        decode_manifest(json.dumps(doc).encode(), "rollback.json")


def test_a_deeply_nested_or_huge_manifest_is_a_format_error() -> None:
    from tensortap.format._rollback_manifest import decode_manifest

    with pytest.raises(FormatError, match="nested too deeply"):
        decode_manifest(b"[" * 100_000, "rollback.json")
    with pytest.raises(FormatError, match="more than"):
        decode_manifest(b" " * (5 << 20), "rollback.json")


def _can_mount_tmpfs(where: Path) -> bool:
    if not sys.platform.startswith("linux") or shutil.which("unshare") is None:
        return False
    probe = subprocess.run(
        ["unshare", "-rm", "sh", "-c", f"mount -t tmpfs -o size=64k tmpfs '{where}'"],
        capture_output=True,
        timeout=60,
    )
    return probe.returncode == 0


def test_a_full_disk_during_a_save_is_an_event_not_a_crash(tmp_path: Path) -> None:
    """A real full filesystem: a small tmpfs, mounted in a user namespace of the training
    process (no root needed), holds the checkpoints."""
    disk = tmp_path / "small"
    disk.mkdir()
    if not _can_mount_tmpfs(disk):
        pytest.skip("cannot mount a tmpfs in a user namespace here (unshare -rm)")
    script = HERE / "checkpoint_disk_full.py"
    done = subprocess.run(
        [
            "unshare",
            "-rm",
            "sh",
            "-c",
            'mount -t tmpfs -o size=160k tmpfs "$1" && shift && exec "$@"',
            "sh",
            str(disk),
            sys.executable,
            str(script),
            str(disk),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": SRC},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    kinds = [kind for kind, _ in result["events"]]
    assert "save_failed" in kinds, result
    assert result["trained"] == result["steps"]  # training went on to the end
    # nothing half-written: every checkpoint directory left is a whole, loadable one
    assert result["left"] == sorted(f"step-{s}" for s in result["saved"]), result
    assert result["restored"] is not None  # a rollback after the failures still restored


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
_FIELDS = ["kind", "format_version", "step", "extra", "files"]


@given(
    field=st.sampled_from([*_FIELDS, "files.entry", "files.size", "files.sha256", "files.name"]),
    value=_JSON,
)
def test_any_damage_to_a_manifest_is_a_format_error_or_reads_back_what_it_holds(
    field: str, value: Any
) -> None:
    """Structure-aware: one field of a valid manifest replaced by any JSON value. The decoder
    answers FormatError, or a manifest holding exactly what the document says."""
    from tensortap.format._rollback_manifest import FileDigest, decode_manifest, encode_manifest

    digest = FileDigest(10, "a" * 64)
    doc = json.loads(encode_manifest(3, {"batches": {"position": 1}}, {".metadata": digest}))
    if field == "files.name":
        doc["files"] = {str(value)[:30]: doc["files"][".metadata"]}
    elif field.startswith("files."):
        entry = doc["files"][".metadata"]
        if field == "files.entry":
            doc["files"][".metadata"] = value
        else:
            entry[field.split(".")[1]] = value
    else:
        doc[field] = value
    raw = json.dumps(doc).encode()
    try:
        manifest = decode_manifest(raw, "rollback.json")
    except FormatError:
        return
    assert manifest.step == doc["step"] and manifest.extra == doc["extra"]
    assert {n: (d.size, d.sha256) for n, d in manifest.files.items()} == {
        n: (e["size"], e["sha256"]) for n, e in doc["files"].items()
    }
