"""A step's spike indicators on the device, read to the host once: what
:class:`~tensortap.pytorch.SpikeWatch` gathers, computed in as few kinds of operation as it can.

In a small model's training step the watch's cost is not arithmetic but the first call of each
kind of operation after the step's own (its code and data out of the caches again: ~10-25 us
on the benchmark's CPU; the same kind called again costs ~1-2 us). So the watch calls few kinds:
the causal mask is an addition (the forward has just run some), not a ``masked_fill``; the
attention scale is applied on the host (in float32: the bits the device gives); many attention
calls of a forward are scored together (their first samples' queries and keys side by side:
one matrix product, one mask, one maximum for all); and on the CPU each value is read as it is
(no concatenation).
"""

from __future__ import annotations

import itertools
from array import array

import torch

#: indicators kept for the record but not judged: an attention call's value per head
PER_HEAD = "/head"

_MASKS: dict[tuple[int, int, torch.dtype, torch.device | None], torch.Tensor] = {}
_HEAD_NAMES: dict[tuple[str, int], list[str]] = {}


class NoGrad:
    """``torch.no_grad()`` for the watch's few operations, in two calls: the context manager
    runs five Python frames, ~12 us a use in a training loop (cold code), where this is ~1 us."""

    __slots__ = ("_before",)

    def __enter__(self) -> None:
        self._before = torch.is_grad_enabled()
        torch.set_grad_enabled(False)

    def __exit__(self, *exc: object) -> None:
        torch.set_grad_enabled(self._before)


def max_logits(q: torch.Tensor, k: torch.Tensor, causal: bool) -> torch.Tensor:
    """The largest logit per head, before the scale: q, k of shape (..., heads, length, dim),
    the leading dimensions a batch of attention calls (one matrix product for all of them: the
    same bits as one per call)."""
    if q.dim() == 3 and k.dim() == 3:
        logits = torch.bmm(q, k.transpose(1, 2))  # what matmul calls, without its reshapes
    else:
        logits = torch.matmul(q, k.transpose(-2, -1))
    if causal:
        lq, lk = logits.shape[-2], logits.shape[-1]
        key = (lq, lk, logits.dtype, None if logits.is_cpu else logits.device)  # (.device: slow)
        mask = _MASKS.get(key)
        if mask is None:  # made once per shape: -inf where a causal query may not see
            hidden = ~torch.ones(lq, lk, dtype=torch.bool, device=logits.device).tril(lk - lq)
            mask = torch.full((lq, lk), -0.0, dtype=logits.dtype, device=logits.device)
            mask = _MASKS.setdefault(key, mask.masked_fill(hidden, float("-inf")))
        # x + -0.0 is x, bit for bit (-0.0 too): the mask as an addition, an operation the
        # model's forward has just run (cheaper after it than a masked_fill)
        logits = logits + mask
    return logits.amax(dim=(-2, -1))


class StepValues:
    """The indicators of one optimizer step while it runs: attention and output scores as the
    forwards end, the update norms after the step; :meth:`read` brings them to the host in the
    order their names were first seen (the attention calls', the output's, the groups')."""

    def __init__(self) -> None:
        self._names: dict[str, None] = {}  # first seen first (a dict as an ordered set)
        # attention scores: the calls' names, their largest logits per head (calls x heads,
        # unscaled if ``scale`` is not None: applied on the host) and the number of heads
        self._attention: list[tuple[list[str], torch.Tensor, int, float | None]] = []
        self._outputs: list[tuple[torch.Tensor, torch.Tensor]] = []  # (largest, entropy)

    def __bool__(self) -> bool:
        return bool(self._attention or self._outputs)

    def place(self, name: str) -> None:
        """Keeps ``name``'s place in the order (an attention call, scored later)."""
        self._names.setdefault(name, None)

    def add_attention(self, names: list[str], largest: torch.Tensor, scale: float) -> None:
        """The calls ``names``' largest logits per head before their (common) ``scale``,
        ``largest`` of shape (calls, heads) or (calls x heads)."""
        for name in names:
            self._names.setdefault(name, None)
        heads = largest.numel() // len(names)
        if largest.dim() != 1:
            largest = largest.reshape(-1)
        if largest.dtype == torch.float32:
            self._attention.append((names, largest, heads, scale))
        else:  # scaled in its own precision, as the model's attention does, then widened
            self._attention.append((names, (largest * scale).float(), heads, None))

    def add_output(self, largest: torch.Tensor, entropy: torch.Tensor) -> None:
        """The output's largest logit and mean entropy (0-d float32 tensors)."""
        self._names.setdefault("output_logit", None)
        self._names.setdefault("output_entropy", None)
        self._outputs.append((largest, entropy))

    def read(
        self, norms: list[torch.Tensor]
    ) -> tuple[dict[str, float], dict[str, float], list[float]]:
        """Every value of the step on the host (one transfer off the CPU), by name: an
        attention call's largest logit over its heads, and ``<name>/head<h>`` each head's
        (the largest over the step's forwards); the output's (its largest logit over the
        forwards, the last forward's entropy). Then those to judge (not the heads'), and
        ``norms`` (0-d tensors), read with them."""
        attention = [t for _, t, _, _ in self._attention]
        scalars = [x for pair in self._outputs for x in pair] + norms
        first = (attention or scalars)[0]
        lists, floats = _to_host(attention, scalars, one_transfer=not first.is_cpu)
        heads_of: dict[str, list[float]] = {}
        for (names, _, heads, scale), flat in zip(self._attention, lists, strict=True):
            if scale is not None:  # x * scale in float32: exact in double, then rounded once
                scale32 = array("f", [scale])[0]
                flat = array("f", [v * scale32 for v in flat]).tolist()
            for i, name in enumerate(names):
                part = flat[i * heads : (i + 1) * heads]
                seen = heads_of.get(name)
                heads_of[name] = part if seen is None else list(map(max, seen, part))
        outputs = floats[: 2 * len(self._outputs)]
        values: dict[str, float] = {}
        judged: dict[str, float] = {}
        for name in self._names:
            per_head = heads_of.get(name)
            if per_head is not None:
                values[name] = judged[name] = max(per_head)
                if len(per_head) > 1:
                    values.update(zip(_head_names(name, len(per_head)), per_head, strict=True))
            elif name == "output_logit":
                values[name] = judged[name] = max(outputs[0::2])
            elif name == "output_entropy":
                values[name] = judged[name] = outputs[-1]
        return values, judged, floats[len(outputs) :]


def _head_names(name: str, heads: int) -> list[str]:
    names = _HEAD_NAMES.get((name, heads))
    if names is None:
        names = [f"{name}{PER_HEAD}{h}" for h in range(heads)]
        _HEAD_NAMES[(name, heads)] = names
    return names


def _to_host(
    vectors: list[torch.Tensor], scalars: list[torch.Tensor], one_transfer: bool
) -> tuple[list[list[float]], list[float]]:
    """``vectors`` (1-d) and ``scalars`` (0-d) as Python numbers: each read as it is (on the
    CPU), or all in one transfer (on the first one's device, then one read)."""
    if not one_transfer:
        return [t.tolist() for t in vectors], [t.item() for t in scalars]
    device = (vectors or scalars)[0].device
    parts = [t.to(device) for t in vectors]
    if scalars:
        parts.append(torch.stack([t.to(device) for t in scalars]))
    flat: list[float] = torch.cat(parts).tolist()
    lists, at = [], 0
    for t in vectors:
        lists.append(flat[at : at + len(t)])
        at += len(t)
    return lists, flat[at:]


class Snapshot:
    """The parameters as they were before the optimizer's step, in one flat buffer per device
    and dtype, each layer group's parameters side by side: after the step, the buffer less the
    parameters is the update, and each group's update norm is the norm of one slice of it (one
    ``_foreach_norm`` over the groups, not one norm per parameter)."""

    def __init__(self, params: list[torch.Tensor], group_index: list[int]) -> None:
        kinds: dict[tuple[torch.device, torch.dtype], list[int]] = {}
        for i, p in enumerate(params):
            kinds.setdefault((p.device, p.dtype), []).append(i)
        copies: list[torch.Tensor | None] = [None] * len(params)
        self.segments: list[torch.Tensor] = []
        self.segment_groups: list[int] = []
        for (device, dtype), members in kinds.items():
            members.sort(key=lambda i: group_index[i])  # a stable sort: by group, then order
            flat = torch.empty(sum(params[i].numel() for i in members), dtype=dtype, device=device)
            at = 0
            for group, run in itertools.groupby(members, key=lambda i: group_index[i]):
                start = at
                for i in run:
                    n = params[i].numel()
                    copies[i] = flat[at : at + n].view(params[i].shape)
                    at += n
                self.segments.append(flat[start:at])
                self.segment_groups.append(group)
        self.copies: list[torch.Tensor] = [c for c in copies if c is not None]
        self.groups = max(group_index) + 1

    def norms(self) -> list[torch.Tensor]:
        """Each segment's L2 norm (of the update, once the parameters were subtracted), 0-d
        tensors in float32."""
        norms = torch._foreach_norm(self.segments)
        return [n if n.dtype == torch.float32 else n.float() for n in norms]

    def group_norms(self, segment_norms: list[float]) -> list[float]:
        """Each group's norm from its segments' (as usual one a group: that one, as read)."""
        if self.segment_groups == list(range(self.groups)):
            return segment_norms
        squares = [0.0] * self.groups
        for group, norm in zip(self.segment_groups, segment_norms, strict=True):
            squares[group] += norm * norm
        return [s**0.5 for s in squares]
