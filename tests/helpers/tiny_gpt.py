"""A small GPT as a stranger writes one, its token task, and a fault tied to a layer (NaN written
into a module's output at given steps, whatever the batch): for the rollback's decisions
(tests/pytorch/test_rollback_decisions.py, decide_job_train.py)."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import TensorDataset

VOCAB, CONTEXT, BATCH = 32, 16, 8


class Block(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, d // self.heads).unbind(2)
        a = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True
        )
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, layers: int = 4, d: int = 32, heads: int = 2) -> None:
        super().__init__()
        self.tok, self.pos = nn.Embedding(VOCAB, d), nn.Embedding(CONTEXT, d)
        self.blocks = nn.Sequential(*(Block(d, heads) for _ in range(layers)))
        self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, VOCAB, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(idx.shape[1], device=idx.device)
        return self.head(self.ln(self.blocks(self.tok(idx) + self.pos(pos))))


def tokens(batches: int) -> TensorDataset:
    """A learnable sequence task: each next token is the last one plus one, modulo VOCAB."""
    g = torch.Generator().manual_seed(0)
    start = torch.randint(0, VOCAB, (batches * BATCH, 1), generator=g)
    seq = (start + torch.arange(CONTEXT + 1)) % VOCAB
    return TensorDataset(seq[:, :-1], seq[:, 1:])


def gpt_step(model: nn.Module, batch: Any) -> torch.Tensor:
    x, y = batch
    loss = F.cross_entropy(model(x).reshape(-1, VOCAB), y.reshape(-1))
    loss.backward()
    return loss


class LayerFault:
    """NaN written into a module's output while the loop is at one of ``steps``, whatever the
    batch (the replay of such a step, run before the next one starts, sees it too)."""

    def __init__(self, module: nn.Module, steps: set[int]) -> None:
        self.steps, self.step = steps, -1
        module.register_forward_hook(self._forward)

    def _forward(self, module: nn.Module, args: Any, output: torch.Tensor) -> torch.Tensor | None:
        if module.training and self.step in self.steps:
            return output.clone().fill_(float("nan"))
        return None
