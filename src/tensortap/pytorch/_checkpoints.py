"""Where a rollback's checkpoints go: the user's own save and load functions, or
``torch.distributed.checkpoint`` for a model's and an optimizer's state (see
:mod:`tensortap.healing._rollback`).

A checkpoint of step ``s`` holds the state *before* step ``s`` trains (after steps 0 to s-1),
with ``extra``: a small JSON-able dict the rollback keeps beside it (where the batch stream was).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import pickle
import shutil
import stat
from typing import Any

from tensortap.exceptions import CheckpointError, FormatError
from tensortap.format._rollback_manifest import (
    MANIFEST_NAME,
    MAX_MANIFEST_BYTES,
    FileDigest,
    RollbackManifest,
    decode_manifest,
    encode_manifest,
)
from tensortap.healing._agreement import gather_documents, rank
from tensortap.healing._checkpoints import Checkpoints, FunctionCheckpoints
from tensortap.pytorch._nonfinite import nonfinite_name

__all__ = ["Checkpoints", "DistributedCheckpoints", "FunctionCheckpoints"]


class DistributedCheckpoints:
    """The model's and the optimizer's state dicts through ``torch.distributed.checkpoint``
    (``get_state_dict``/``set_state_dict``, so DDP and FSDP2 models save and load sharded),
    one directory per step under ``directory`` (``step-<s>``), with ``rollback.json`` beside
    (written by rank 0): the ``extra`` and every file's size and SHA-256. Works in one process
    without a process group too.

    It cannot hurt the run it protects:

    - a save that fails (the disk is full) raises :class:`~tensortap.exceptions.CheckpointError`
      (the rollback records it as an event and training goes on) and leaves no half-written
      checkpoint behind;
    - a load checks, before any weight changes, that the checkpoint is one this process saved
      and that every file is as it was saved (size and digest; ``rollback.json``'s own digest
      is kept in memory): a truncated shard, a changed manifest or a planted ``.metadata``
      raises :class:`~tensortap.exceptions.CheckpointError` with nothing restored (the rollback
      falls back to an older checkpoint). The state is read into copies and handed to the model
      and the optimizer only once all of it was read;
    - DCP's ``.metadata`` is a pickle: it is unpickled only from the bytes whose digest was
      recorded when this process saved it; the other non-tensor values are read with
      ``torch.load(weights_only=True)``, which runs no code.
    """

    def __init__(self, directory: str | os.PathLike[str], model: Any, optimizer: Any) -> None:
        self.directory = os.fspath(directory)
        self.model, self.optimizer = model, optimizer
        self._steps: set[int] = set()
        self._manifests: dict[int, str] = {}  # step -> SHA-256 of its rollback.json, as saved

    def path(self, step: int) -> str:
        """The directory of the checkpoint of ``step``."""
        return os.path.join(self.directory, f"step-{step}")

    def save(self, step: int, extra: dict[str, Any]) -> None:
        import torch.distributed as dist
        from torch.distributed.checkpoint.api import CheckpointException
        from torch.distributed.checkpoint.state_dict import get_state_dict
        from torch.distributed.checkpoint.state_dict_saver import save

        path = self.path(step)
        ranked = dist.is_initialized()
        writer = not ranked or dist.get_rank() == 0
        manifest = os.path.join(path, MANIFEST_NAME)
        if writer:  # an older branch's manifest must not stand for this save
            with contextlib.suppress(FileNotFoundError, NotADirectoryError):
                os.unlink(manifest)
        error: BaseException | None = None
        try:
            model_state, optim_state = get_state_dict(self.model, self.optimizer)
            # collective: a full disk fails it on every rank alike
            save({"model": model_state, "optim": optim_state}, checkpoint_id=path)
        except (Exception, CheckpointException) as exc:  # DCP's is a BaseException
            error = exc
        if error is None and writer:
            try:
                _write_manifest(path, step, extra)
            except (OSError, FormatError) as exc:
                error = exc
        if ranked:
            dist.barrier()  # the manifest is there (or not) before any rank reads it
        if error is None:
            try:  # every rank keeps the manifest's digest: a load trusts nothing else
                self._manifests[step] = _sha256(_read_regular(manifest, MAX_MANIFEST_BYTES))
            except CheckpointError as exc:
                error = exc
        if error is not None:
            self._manifests.pop(step, None)
            if ranked:
                dist.barrier()  # every rank saw the failure before the files go
            if writer:
                shutil.rmtree(path, ignore_errors=True)
            raise CheckpointError(
                f"the checkpoint of step {step} could not be saved in {path} "
                f"({type(error).__name__}: {error}); it was removed, and a rollback uses an "
                "older checkpoint (free disk space, or give DistributedCheckpoints a directory "
                "with room)"
            ) from error
        self._steps.add(step)

    def load(self, step: int) -> dict[str, Any]:
        from torch.distributed.checkpoint.api import CheckpointException
        from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
        from torch.distributed.checkpoint.state_dict_loader import load

        path = self.path(step)
        manifest = self._verified(step, path)
        model_state, optim_state = get_state_dict(self.model, self.optimizer)
        # read into copies: the model and the optimizer change only once all of it was read
        state = _cloned({"model": model_state, "optim": optim_state})
        try:
            load(
                state,
                storage_reader=_verified_reader(path, manifest.files),
                planner=_safe_planner(),
            )
        except (Exception, CheckpointException) as exc:  # DCP's is a BaseException
            raise CheckpointError(
                f"the checkpoint of step {step} in {path} could not be read "
                f"({type(exc).__name__}: {exc}); nothing was restored from it"
            ) from exc
        bad = any_rank(nonfinite_name(state))  # every rank restores, or none does
        if bad is not None:  # a NaN checkpoint is never resumed from (issue 46)
            raise CheckpointError(
                f"the checkpoint of step {step} in {path} holds values that are not finite "
                f"({bad}); nothing was restored from it"
            )
        set_state_dict(
            self.model,
            self.optimizer,
            model_state_dict=state["model"],
            optim_state_dict=state["optim"],
        )
        return dict(manifest.extra)

    def _verified(self, step: int, path: str) -> RollbackManifest:
        """The checkpoint's manifest, once every file is as it was saved; CheckpointError
        (saying which file, and what was expected) otherwise. Changes nothing."""
        recorded = self._manifests.get(step)
        if recorded is None:
            raise CheckpointError(
                f"no checkpoint of step {step} was saved by this process (saved: "
                f"{sorted(self._manifests) or 'none'}); only those are loaded"
            )
        where = os.path.join(path, MANIFEST_NAME)
        raw = _read_regular(where, MAX_MANIFEST_BYTES)
        if _sha256(raw) != recorded:
            raise CheckpointError(
                f"{where} changed since the checkpoint was saved (its SHA-256 differs from the "
                "one recorded then); nothing was restored from it"
            )
        try:
            manifest = decode_manifest(raw, where)
        except FormatError as exc:
            raise CheckpointError(f"{exc}; nothing was restored from it") from exc
        if manifest.step != step:
            raise CheckpointError(f"{where} is the checkpoint of step {manifest.step}, not {step}")
        for name, expected in manifest.files.items():
            file = os.path.join(path, name)
            size, digest = _file_digest(file)
            if size != expected.size or digest != expected.sha256:
                got = f"{size} bytes" if size != expected.size else "other bytes (its SHA-256)"
                raise CheckpointError(
                    f"{file} is damaged: saved as {expected.size} bytes with SHA-256 "
                    f"{expected.sha256[:12]}..., now {got}; nothing was restored from the "
                    f"checkpoint of step {step}"
                )
        return manifest

    def steps(self) -> list[int]:
        return sorted(self._steps)

    def forget(self, step: int) -> None:
        self._steps.discard(step)
        self._manifests.pop(step, None)

    def remove(self, step: int) -> None:
        """Forget the checkpoint of ``step`` and delete its directory (rank 0; a rotation's
        ``keep_last_n``, see :class:`~tensortap.pytorch.GuardedCheckpoints`)."""
        self.forget(step)
        if _rank0():
            shutil.rmtree(self.path(step), ignore_errors=True)


_CHUNK = 1 << 20


def _rank0() -> bool:
    return rank() == 0


def any_rank(problem: str | None) -> str | None:
    """``problem`` (or None), or the first other rank's when this one has none: every rank
    decides alike (one gather of a short JSON document, when more than one process runs)."""
    gathered = gather_documents({"problem": problem})
    if problem is not None:
        return problem
    for r, doc in enumerate(gathered):
        other = doc.get("problem") if isinstance(doc, dict) and len(doc) == 1 else doc
        if other is not None and not isinstance(other, str):
            raise FormatError(
                f"rank {r} sent {doc!r}, not a checkpoint's problem ({{'problem': a string or "
                "None}); the ranks run different versions of tensortap: run one version"
            )
        if other is not None:
            return f"on rank {r}: {other}"
    return None


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _open_regular(path: str) -> int:
    """A descriptor of the regular file at ``path`` (no symlink, FIFO or device)."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise CheckpointError(f"{path} cannot be read: {exc.strerror or exc}") from exc
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise CheckpointError(f"{path} is not a regular file")
    return fd


def _read_regular(path: str, limit: int) -> bytes:
    fd = _open_regular(path)
    try:
        size = os.fstat(fd).st_size
        if size > limit:
            raise CheckpointError(f"{path} has {size} bytes, more than the {limit} expected")
        with os.fdopen(os.dup(fd), "rb") as f:
            return f.read(limit + 1)
    finally:
        os.close(fd)


def _file_digest(path: str) -> tuple[int, str]:
    """The size and SHA-256 of the regular file at ``path``."""
    fd = _open_regular(path)
    digest = hashlib.sha256()
    size = 0
    with os.fdopen(fd, "rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return size, digest.hexdigest()


def _write_manifest(path: str, step: int, extra: dict[str, Any]) -> None:
    """Rank 0, once every rank's files are written: ``rollback.json`` with each file's digest
    (written aside, then renamed: never half a manifest)."""
    files: dict[str, FileDigest] = {}
    with os.scandir(path) as entries:
        for entry in entries:
            if entry.name == MANIFEST_NAME or not entry.is_file(follow_symlinks=False):
                continue
            size, digest = _file_digest(entry.path)
            files[entry.name] = FileDigest(size, digest)
    data = encode_manifest(step, extra, files)
    tmp = os.path.join(path, f".{MANIFEST_NAME}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, os.path.join(path, MANIFEST_NAME))
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _cloned(value: Any) -> Any:
    """``value`` with every tensor copied (containers rebuilt, other leaves shared)."""
    import torch

    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, dict):
        return {k: _cloned(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_cloned(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_cloned(v) for v in value)
    return value


def _verified_reader(path: str, files: dict[str, FileDigest]) -> Any:
    """A ``FileSystemReader`` that unpickles ``.metadata`` only from the bytes whose digest
    the manifest (itself checked against the digest kept in memory) recorded."""
    from torch.distributed.checkpoint.filesystem import FileSystemReader
    from torch.distributed.checkpoint.metadata import StorageMeta

    class VerifiedReader(FileSystemReader):
        def read_metadata(self, *args: Any, **kwargs: Any) -> Any:
            where = os.fspath(self._get_metadata_path(kwargs.get("rank")))
            expected = files.get(os.path.basename(where))
            raw = _read_regular(where, expected.size if expected is not None else 0)
            if expected is None or _sha256(raw) != expected.sha256:
                raise CheckpointError(f"{where} is not the file saved with the checkpoint")
            metadata = pickle.loads(raw)  # what this process saved: its digest was checked
            if getattr(metadata, "storage_meta", None) is None:
                metadata.storage_meta = StorageMeta()
            metadata.storage_meta.load_id = self.load_id
            return metadata

    return VerifiedReader(path)


def _safe_planner() -> Any:
    """DCP's default load planner, reading non-tensor values with ``weights_only=True`` (no
    code runs from a checkpoint's bytes)."""
    import torch
    from torch.distributed.checkpoint._traverse import set_element
    from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner

    class SafePlanner(DefaultLoadPlanner):
        def load_bytes(self, read_item: Any, value: Any) -> None:
            loaded = torch.load(value, weights_only=True)
            if self.flatten_state_dict:
                set_element(
                    self.original_state_dict, self.mappings[read_item.dest_index.fqn], loaded
                )
            else:
                self.state_dict[read_item.dest_index.fqn] = loaded

    return SafePlanner()
