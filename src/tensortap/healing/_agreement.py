"""Ranks agree on small JSON documents, without pickle.

``torch.distributed``'s ``all_gather_object`` pickles what it sends and unpickles what it
receives; tensortap never unpickles another process's bytes. Here each rank's document is
JSON, sent as the UTF-8 bytes in a ``uint8`` tensor (every rank's padded to the longest) after
its length, through two ``dist.all_gather`` calls on a gloo (CPU) control group, and read back
through :func:`decode_document`: a byte limit, UTF-8, strict JSON (no ``NaN``), or a
:class:`~tensortap.exceptions.FormatError` that names the rank. A rank whose document is over the
limit sends only its length: every rank raises alike, none waits on a collective the others left.

``torch.distributed`` is reached through ``sys.modules`` only: ranks exist only where the
process imported and set it up, so a JAX or Keras loop's rollback never imports torch.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from tensortap.exceptions import FormatError

#: The most bytes one rank's document may hold (a rollback's request and its evidence).
MAX_DOCUMENT_BYTES = 16 << 20

# the control group made for the default process group: (that group, its gloo twin)
_made: tuple[Any, Any] | None = None


def torch_distributed() -> Any:
    """``torch.distributed`` when this process imported it (and it is built in), else None."""
    dist = sys.modules.get("torch.distributed")
    return dist if dist is not None and dist.is_available() else None


def rank() -> int:
    """This process's rank (0 without ``torch.distributed`` set up)."""
    dist = torch_distributed()
    return int(dist.get_rank()) if dist is not None and dist.is_initialized() else 0


def control_group(group: Any = None) -> tuple[Any, int] | None:
    """The group ranks agree through and its size, or None where one process runs: ``group``
    when given, else the default group when it is gloo, else one gloo group over every rank
    (made once per default group: every rank makes it at the same call, as ``new_group``
    asks)."""
    global _made
    dist = torch_distributed()
    if dist is None or not dist.is_initialized() or dist.get_world_size() < 2:
        return None
    if group is not None:
        return group, int(dist.get_world_size(group))
    world = dist.group.WORLD
    if dist.get_backend() == "gloo":
        return world, int(dist.get_world_size())
    if _made is None or _made[0] is not world:
        _made = (world, dist.new_group(backend="gloo"))
    return _made[1], int(dist.get_world_size())


def any_flag(flag: bool, group: Any) -> bool:
    """Whether ``flag`` is set on any rank of ``group`` (one all-reduce of one int)."""
    import torch

    dist = torch.distributed
    value = torch.tensor([1 if flag else 0], dtype=torch.int32)
    dist.all_reduce(value, op=dist.ReduceOp.MAX, group=group)
    return bool(int(value[0]))


def gather_documents(
    document: Any, group: Any = None, *, limit: int = MAX_DOCUMENT_BYTES
) -> list[Any]:
    """Every rank's ``document`` (JSON values), by rank; this rank's is its own object, the
    others' are decoded. One process: ``[document]``. Raises
    :class:`~tensortap.exceptions.FormatError` on every rank alike when a rank's document is
    over ``limit`` bytes, and on the rank that reads an undecodable one."""
    found = control_group(group)
    if found is None:
        return [document]
    group, world = found
    import torch

    dist = torch.distributed
    data = encode_document(document)
    sizes = [torch.zeros(1, dtype=torch.int64) for _ in range(world)]
    dist.all_gather(sizes, torch.tensor([len(data)], dtype=torch.int64), group=group)
    lengths = [int(s[0]) for s in sizes]
    over = [(r, n) for r, n in enumerate(lengths) if n > limit or n < 0]
    if over:
        who, size = over[0]
        raise FormatError(
            f"the ranks could not agree: rank {who}'s document has {size} bytes, more than the "
            f"{limit} a rank may send (a rollback's request and the replays' evidence); "
            "request fewer batches at once, or tell the rollback fewer attributions"
        )
    longest = max(lengths)
    buffers = [torch.zeros(longest, dtype=torch.uint8) for _ in range(world)]
    mine = torch.zeros(longest, dtype=torch.uint8)
    if data:
        mine[: len(data)] = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    dist.all_gather(buffers, mine, group=group)
    me = int(dist.get_rank(group))
    return [
        document if r == me else decode_document(bytes(buf[:n].numpy()), r, limit=limit)
        for r, (buf, n) in enumerate(zip(buffers, lengths, strict=True))
    ]


def encode_document(document: Any) -> bytes:
    """``document`` as strict JSON in UTF-8 (no ``NaN``: a value no other rank could read)."""
    try:
        return json.dumps(document, allow_nan=False, separators=(",", ":")).encode("utf-8")
    except (TypeError, ValueError) as exc:
        raise FormatError(
            f"a document for the other ranks must be JSON values (dicts, lists, strings, finite "
            f"numbers, None), got one that is not ({exc})"
        ) from exc


def decode_document(raw: bytes, source: int, *, limit: int = MAX_DOCUMENT_BYTES) -> Any:
    """The JSON document rank ``source`` sent, or FormatError saying what was wrong with it."""
    if len(raw) > limit:
        raise FormatError(
            f"rank {source}'s document has {len(raw)} bytes, more than the {limit} expected"
        )
    try:
        text = raw.decode("utf-8")
        return json.loads(text, parse_constant=_no_constant)
    except (UnicodeDecodeError, ValueError) as exc:
        raise FormatError(
            f"rank {source}'s document is not UTF-8 JSON ({exc}); the ranks run different "
            "versions of tensortap, or the bytes were damaged in transit: run one version"
        ) from exc


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")
