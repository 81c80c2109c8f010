"""The indicators SpikeWatch records are the plain computation's, bit for bit where they can be:
each attention call's largest logit per head (``q @ k^T``, masked, ``amax``, ``* scale``, one call
at a time), the output's largest logit and entropy. The update norms, now one norm per layer
group's slice of a flat buffer instead of one per parameter combined on the host, agree to
float32 rounding. The watch's fewer, cheaper operations must not drift these values."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import tensortap.pytorch as ttp
from tensortap.core._spike_forecast import ForecastConfig
from tensortap.pytorch._spike_values import Snapshot, _to_host
from tensortap.pytorch._spike_watch import layer_group

VOCAB, CONTEXT, WIDTH, HEADS = 32, 16, 16, 4


class Block(nn.Module):
    """As in bench/bench_spikes.py: separate q/k/v projections, heads by view and transpose
    (queries and keys that are not contiguous), causal attention."""

    def __init__(self) -> None:
        super().__init__()
        self.ln = nn.LayerNorm(WIDTH)
        self.q, self.k, self.v = (nn.Linear(WIDTH, WIDTH) for _ in range(3))
        self.proj = nn.Linear(WIDTH, WIDTH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        h = self.ln(x)

        def heads(z: torch.Tensor) -> torch.Tensor:
            return z.view(b, t, HEADS, WIDTH // HEADS).transpose(1, 2)

        a = F.scaled_dot_product_attention(
            heads(self.q(h)), heads(self.k(h)), heads(self.v(h)), is_causal=True
        )
        out: torch.Tensor = x + self.proj(a.transpose(1, 2).reshape(b, t, WIDTH))
        return out


class GPT(nn.Module):
    def __init__(self, layers: int) -> None:
        super().__init__()
        self.wte = nn.Embedding(VOCAB, WIDTH)
        self.wpe = nn.Embedding(CONTEXT, WIDTH)
        self.blocks = nn.ModuleList(Block() for _ in range(layers))
        self.mha = nn.MultiheadAttention(WIDTH, 2, batch_first=True)
        self.head = nn.Linear(WIDTH, VOCAB, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        for block in self.blocks:
            x = block(x)
        x = x + self.mha(x, x, x, need_weights=False)[0]
        out: torch.Tensor = self.head(x)
        return out


class Reference:
    """The indicators computed plainly, one call at a time, as the watch computed them before
    (tensortap 2026-12-04): attention logits per head through ``torch.matmul``, a
    ``masked_fill`` and ``* scale``; update norms per parameter, summed in squares per group."""

    def __init__(self, model: GPT, opt: torch.optim.Optimizer) -> None:
        self.model, self.opt = model, opt
        self.values: dict[str, float] = {}
        self.calls = 0
        names = {id(p): n for n, p in model.named_parameters()}
        self.params = [p for g in opt.param_groups for p in g["params"]]
        self.groups: list[str] = []
        for p in self.params:
            if layer_group(names[id(p)]) not in self.groups:
                self.groups.append(layer_group(names[id(p)]))
        self.index = np.array([self.groups.index(layer_group(names[id(p)])) for p in self.params])

    def sdpa(self, original: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
        def scored(q: torch.Tensor, k: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
            if torch.is_grad_enabled():  # nn.MultiheadAttention calls it too (not causal)
                causal = kwargs.get("is_causal", args[3] if len(args) > 3 else False)
                with torch.no_grad():
                    logits = torch.matmul(q[0], k[0].transpose(-2, -1))
                    if causal:
                        hidden = ~torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril()
                        logits = logits.masked_fill(hidden, float("-inf"))
                    per_head = logits.amax(dim=(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))
                self.keep_max(f"attention_logit/{self.calls}", per_head.tolist())
                self.calls += 1
            return original(q, k, *args, **kwargs)

        return scored

    def keep_max(self, name: str, heads: list[float]) -> None:
        old = [self.values.get(f"{name}/head{h}", -math.inf) for h in range(len(heads))]
        heads = [max(a, b) for a, b in zip(old, heads, strict=True)]
        self.values[name] = max(heads)
        self.values.update((f"{name}/head{h}", v) for h, v in enumerate(heads))

    def mha(self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """An nn.MultiheadAttention's logits from its input projection (before its call)."""
        if not torch.is_grad_enabled():
            return
        assert isinstance(module, nn.MultiheadAttention)
        assert module.in_proj_weight is not None and module.in_proj_bias is not None
        w, bias, e, d = module.in_proj_weight, module.in_proj_bias, WIDTH, WIDTH // 2
        with torch.no_grad():
            first = args[0][0]
            q = F.linear(first, w[:e], bias[:e]).reshape(-1, 2, d).transpose(0, 1)
            k = F.linear(first, w[e : 2 * e], bias[e : 2 * e]).reshape(-1, 2, d).transpose(0, 1)
            per_head = torch.matmul(q, k.transpose(-2, -1)).amax(dim=(-2, -1)) * (1 / math.sqrt(d))
        self.keep_max(f"attention_logit/mha{self.calls}", per_head.tolist())
        self.calls += 1

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls = 0
        logits = self.model(x)
        with torch.no_grad():
            out = logits[0].float()
            entropy = torch.special.entr(torch.softmax(out, dim=-1)).sum(-1).mean()
            largest = float(out.amax())
            self.values["output_logit"] = max(self.values.get("output_logit", -math.inf), largest)
            self.values["output_entropy"] = float(entropy)
        return logits

    def step(self) -> dict[str, float]:
        before = [p.detach().clone() for p in self.params]
        self.opt.step()
        with torch.no_grad():
            norms = torch._foreach_norm([b - p for b, p in zip(before, self.params, strict=True)])
        squares = np.bincount(self.index, np.square([float(n) for n in norms]))
        values = dict(self.values)
        values.update(
            (f"update_norm/{g}", v) for g, v in zip(self.groups, np.sqrt(squares), strict=True)
        )
        self.values = {}
        return values


@pytest.mark.parametrize(("layers", "micro_batches"), [(2, 1), (4, 1), (3, 2)])
def test_recorded_indicators_equal_the_plain_computation(layers: int, micro_batches: int) -> None:
    # 2 attention calls are scored one by one, 4 side by side; 2 micro-batches a step keep the
    # largest logits of both forwards and the last one's entropy
    torch.manual_seed(layers)
    model = GPT(layers)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-2)
    reference = Reference(model, opt)
    model.mha.register_forward_pre_hook(reference.mha, with_kwargs=True)
    watch = ttp.SpikeWatch(opt, model, config=ForecastConfig(warmup=1))
    gen = torch.Generator().manual_seed(0)
    sdpa = F.scaled_dot_product_attention
    F.scaled_dot_product_attention = reference.sdpa(sdpa)  # seen inside the watch's wrapper
    try:
        for _ in range(12):
            opt.zero_grad()
            for _ in range(micro_batches):
                x = torch.randint(0, VOCAB, (3, CONTEXT), generator=gen)
                loss = F.cross_entropy(reference.forward(x).reshape(-1, VOCAB), x.reshape(-1))
                loss.backward()
            expected = reference.step()  # runs the optimizer's step: the watch reads it
            got = watch.last_values
            assert list(got) == list(expected)  # the same names, in the same order
            for name, value in expected.items():
                if name.startswith("update_norm/"):
                    assert got[name] == pytest.approx(value, rel=1e-6, abs=1e-12), name
                else:
                    assert got[name] == value, name  # equal, not close
    finally:
        F.scaled_dot_product_attention = sdpa
        watch.remove()
    assert watch.steps == 12


@pytest.mark.parametrize("one_transfer", [False, True])
def test_values_read_one_by_one_or_in_one_transfer_are_the_same(one_transfer: bool) -> None:
    # the CPU reads each tensor as it is; another device concatenates them for one transfer
    # (tried here on the CPU): the same numbers either way
    vectors = [torch.tensor([1.5, -2.0, 3.25]), torch.tensor([0.125])]
    scalars = [torch.tensor(7.0), torch.tensor(-0.5, dtype=torch.float32)]
    lists, floats = _to_host(vectors, scalars, one_transfer=one_transfer)
    assert lists == [[1.5, -2.0, 3.25], [0.125]]
    assert floats == [7.0, -0.5]
    assert _to_host([], scalars, one_transfer=one_transfer) == ([], [7.0, -0.5])


def test_a_group_spread_over_dtypes_is_the_norm_of_all_its_parameters() -> None:
    # parameters of one layer group in two dtypes lie in two flat buffers: the group's norm
    # combines its slices' norms
    params = [
        torch.randn(5, dtype=torch.float64),
        torch.randn(3, 2),
        torch.randn(4),
        torch.randn(2, dtype=torch.float64),
    ]
    groups = [0, 1, 0, 1]
    snapshot = Snapshot(params, groups)
    torch._foreach_copy_(snapshot.copies, params)
    updates = [torch.randn_like(p) for p in params]
    for p, u in zip(params, updates, strict=True):
        p.add_(u)
    torch._foreach_sub_(snapshot.copies, params)
    norms = snapshot.group_norms([float(n) for n in snapshot.norms()])
    for group, norm in enumerate(norms):
        expected = math.sqrt(
            sum(float((u.double() ** 2).sum()) for u, g in zip(updates, groups) if g == group)
        )
        assert norm == pytest.approx(expected, rel=1e-6)
