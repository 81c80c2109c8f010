"""A tiny mixture-of-experts classifier for the MoE health tests: two MoE layers of small MLP
experts behind top-k routers shaped like Hugging Face transformers' ``*TopKRouter`` (integer
``num_experts`` and ``top_k`` attributes; the output ``(logits, weights, indices)``).

- healthy: pre-norm blocks, routers initialised small, orthogonal and unbiased, trained with
  the Switch Transformer load-balance loss at 0.1 (at Switch's 0.01 this toy's second layer,
  whose task gradient is large next to the balancing term over 40 steps, drifts above 2x the
  mean load from about step 20: ExpertImbalance rightly says so);
- collapsed: a router bias that makes the first ``top_k`` experts win every token (the
  other experts never receive one), trained without the load-balance loss.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

#: The load-balance loss coefficient of the healthy runs (Switch Transformer's is 0.01, for
#: long runs; see the module docstring).
BALANCE_COEFFICIENT = 0.1


class TopKRouter(nn.Module):
    """Logits ``[tokens, E]`` of a linear gate, the top-k experts and their weights."""

    def __init__(self, dim: int, num_experts: int, top_k: int, bias: float = 0.0) -> None:
        super().__init__()
        self.num_experts, self.top_k = num_experts, top_k
        self.gate = nn.Linear(dim, num_experts)
        with torch.no_grad():
            # orthogonal rows: at initialisation each expert's direction is as likely a winner
            nn.init.orthogonal_(self.gate.weight, gain=0.1)
            self.gate.bias.zero_()
            self.gate.bias[:top_k] = bias  # a collapsed router: the first top_k experts win

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        logits = self.gate(x.reshape(-1, x.shape[-1]))
        top, indices = logits.softmax(dim=-1).topk(self.top_k, dim=-1)
        return logits, top / top.sum(dim=-1, keepdim=True), indices


class MoELayer(nn.Module):
    """A pre-norm transformer's MoE block: LayerNorm, top-k routed experts (small MLPs), and a
    residual connection."""

    def __init__(self, dim: int, num_experts: int, top_k: int, bias: float = 0.0) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.router = TopKRouter(dim, num_experts, top_k, bias)
        self.experts = nn.ModuleList(
            nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))
            for _ in range(num_experts)
        )
        self.aux_loss = torch.zeros(())

    def forward(self, residual: torch.Tensor) -> torch.Tensor:
        x = self.norm(residual)
        logits, weights, indices = self.router(x)
        out = torch.zeros_like(x)
        for e, expert in enumerate(self.experts):
            chosen = indices == e  # [tokens, k]
            rows = chosen.any(dim=-1)
            if rows.any():
                w = (weights * chosen).sum(dim=-1, keepdim=True)[rows]
                out[rows] += w * expert(x[rows])
        self.aux_loss = load_balance_loss(logits, indices, len(self.experts))
        return residual + out


def load_balance_loss(logits: torch.Tensor, indices: torch.Tensor, experts: int) -> torch.Tensor:
    """Switch Transformer's auxiliary loss, ``E * sum_i f_i * P_i`` (f_i: share of the
    assignments, P_i: mean router probability): 1.0 when balanced."""
    counts = torch.zeros(experts, device=logits.device).index_add_(
        0, indices.reshape(-1), torch.ones(indices.numel(), device=logits.device)
    )
    share = counts / indices.numel()
    return experts * (share * logits.softmax(dim=-1).mean(dim=0)).sum()


class TinyMoE(nn.Module):
    """Inputs of 16 features, two MoE layers (4 experts top-1, 8 experts top-2), 4 classes."""

    def __init__(self, bias: float = 0.0, dim: int = 16) -> None:
        super().__init__()
        self.embed = nn.Linear(16, dim)
        self.moe1 = MoELayer(dim, 4, 1, bias)
        self.moe2 = MoELayer(dim, 8, 2, bias)
        self.head = nn.Linear(dim, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.moe2(self.moe1(torch.tanh(self.embed(x)))))

    def aux_loss(self) -> torch.Tensor:
        return self.moe1.aux_loss + self.moe2.aux_loss


def healthy() -> TinyMoE:
    return TinyMoE()


def collapsed() -> TinyMoE:
    return TinyMoE(bias=8.0)


def data(seed: int, n: int = 256) -> tuple[torch.Tensor, torch.Tensor]:
    """A batch of ``n`` tokens of 16 standard normal features, labelled by a fixed random
    linear teacher (4 classes): varied tokens, as a language model's are."""
    teacher = torch.randn(16, 4, generator=torch.Generator().manual_seed(1234))
    x = torch.randn(n, 16, generator=torch.Generator().manual_seed(seed))
    return x, (x @ teacher).argmax(dim=-1)


def train(model: TinyMoE, steps: int, balance: float, seed: int = 0, lr: float = 3e-3) -> None:
    """``steps`` Adam steps on fresh batches; ``balance`` weighs the load-balance loss."""
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    for step in range(steps):
        x, y = data(seed * 100_000 + step)
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        (loss + balance * model.aux_loss()).backward()
        opt.step()
