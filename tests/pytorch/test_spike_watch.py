"""SpikeWatch (issue 46 item 3): the leading indicators of a real tiny training loop, the
warning ahead of a runaway learning rate, and the warning kept in the trial."""

from __future__ import annotations

import math
import statistics
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import tensortap as tt
import tensortap.pytorch as ttp
from tensortap.core._spike_forecast import ForecastConfig
from tensortap.exceptions import InvalidConfigError
from tensortap.pytorch._spike_watch import layer_group

VOCAB, WIDTH, HEADS, LENGTH = 16, 16, 2, 8
#: small windows, so a test of a few hundred steps has a history to judge against
SMALL = ForecastConfig(recent=10, gap=20, baseline=60, warmup=90, trend_z=2.5, persist=3)


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.Linear(WIDTH, 3 * WIDTH)
        self.mha = nn.MultiheadAttention(WIDTH, HEADS, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q, k, v = (z.view(b, t, HEADS, -1).transpose(1, 2) for z in self.qkv(x).chunk(3, -1))
        x = x + F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(
            b, t, WIDTH
        )
        out, _ = self.mha(x, x, x, need_weights=False)
        return x + out


class TinyGPT(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.wte = nn.Embedding(VOCAB, WIDTH)
        self.blocks = nn.ModuleList([Block()])
        self.head = nn.Linear(WIDTH, VOCAB)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        h: torch.Tensor = self.wte(idx)
        for block in self.blocks:
            h = block(h)
        out: torch.Tensor = self.head(h)
        return out


def _batch(gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    start = torch.randint(0, VOCAB, (4, 1), generator=gen)
    seq = (start + torch.arange(LENGTH + 1)) % VOCAB  # counting: learnable
    noise = torch.randint(0, VOCAB, seq.shape, generator=gen)
    seq = torch.where(torch.rand(seq.shape, generator=gen) < 0.5, noise, seq)  # a loss floor
    return seq[:, :-1], seq[:, 1:]


LOSS = nn.CrossEntropyLoss()


def _step(model: nn.Module, opt: torch.optim.Optimizer, gen: torch.Generator) -> float:
    x, y = _batch(gen)
    loss = LOSS(model(x).reshape(-1, VOCAB), y.reshape(-1))
    opt.zero_grad()
    loss.backward()
    opt.step()
    return float(loss.detach())


def test_the_indicators_of_a_real_training_step() -> None:
    torch.manual_seed(0)
    model = TinyGPT()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    gen = torch.Generator().manual_seed(0)
    sdpa = F.scaled_dot_product_attention
    with ttp.SpikeWatch(opt, model) as watch:
        before = {n: p.detach().clone() for n, p in model.named_parameters()}
        x, y = _batch(gen)
        logits = model(x)
        # the attention logits of the first sample, per head, from the pre-softmax scores
        block = model.blocks[0]
        assert isinstance(block, Block)
        with torch.no_grad():
            h = model.wte(x)
            q, k, _ = (
                z.view(4, LENGTH, HEADS, -1).transpose(1, 2) for z in block.qkv(h).chunk(3, -1)
            )
            scores = (q[0] @ k[0].transpose(-2, -1)) / math.sqrt(WIDTH // HEADS)
            causal = torch.ones(LENGTH, LENGTH, dtype=torch.bool).tril()
            per_head = scores.masked_fill(~causal, -math.inf).amax(dim=(-2, -1))
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        values = watch.last_values
        # the update norm of each layer group is the norm of its parameters' change
        for group in ("wte", "blocks.0", "head"):
            change = [
                p.detach() - before[n]
                for n, p in model.named_parameters()
                if layer_group(n) == group
            ]
            expected = math.sqrt(sum(float((c.double() ** 2).sum()) for c in change))
            assert values[f"update_norm/{group}"] == pytest.approx(expected, rel=1e-4)
        for head in range(HEADS):
            assert values[f"attention_logit/0/head{head}"] == pytest.approx(
                float(per_head[head]), rel=1e-5
            )
        assert values["attention_logit/0"] == pytest.approx(float(per_head.max()), rel=1e-5)
        assert "attention_logit/mha1" in values  # the nn.MultiheadAttention, from its inputs
        first = logits[0].detach()
        assert values["output_logit"] == pytest.approx(float(first.max()), rel=1e-5)
        log_p = first.log_softmax(-1)
        entropy = float(-(log_p.exp() * log_p).sum(-1).mean())
        assert values["output_entropy"] == pytest.approx(entropy, rel=1e-5)
        assert F.scaled_dot_product_attention is sdpa  # put back after the forward
        assert watch.steps == 1
    assert F.scaled_dot_product_attention is sdpa


def test_a_runaway_learning_rate_is_warned_of_and_kept_in_the_trial(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = TinyGPT()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    hook = ttp.Hook(tmp_path / "run", save_config=tt.SaveConfig(save_interval=50))
    hook.register_module(model)
    hook.register_loss(LOSS)
    seen: list[ttp.SpikeWarning] = []
    watch = ttp.SpikeWatch(opt, model, hook=hook, config=SMALL, on_warning=seen.append)
    gen = torch.Generator().manual_seed(1)
    onset, losses = 200, []
    healthy_warnings = -1
    for step in range(320):
        if step == onset:
            healthy_warnings = len(watch.warnings)
        if step >= onset:  # the learning rate runs away: x1.04 a step
            for group in opt.param_groups:
                group["lr"] *= 1.04
        losses.append(_step(model, opt, gen))
        if not math.isfinite(losses[-1]) or losses[-1] > 2 * statistics.median(losses[:onset]):
            break  # the loss spiked
    hook.close()
    spike = len(losses) - 1
    assert onset < spike < 319, "the loss never spiked"
    assert healthy_warnings == 0
    assert watch.warnings, "no warning before the loss spiked"
    first = watch.warnings[0]
    assert seen == watch.warnings
    assert first.signal.startswith("update_norm/")
    assert onset <= first.step <= spike - 50, (first, spike)  # 50 steps ahead at least
    trial = tt.create_trial(tmp_path / "run")
    (session,) = trial.sessions()
    kinds = [e for e in session.events if e["kind"] == "spike_warning"]
    assert kinds and kinds[0]["fields"]["signal"] == first.signal
    assert kinds[0]["fields"]["step"] == first.step
    assert "spikes/update_norm/blocks.0" in trial.tensor_names()
    from tensortap.report._training import training_report

    page = training_report(trial, rules=[])  # marked on the loss curve
    assert f">spike warning: {first.signal}" in page
    watch.remove()


def test_bad_arguments_say_what_was_expected() -> None:
    model = TinyGPT()
    with pytest.raises(InvalidConfigError, match="torch.optim.Optimizer"):
        ttp.SpikeWatch(model, model)  # type: ignore[arg-type]
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(InvalidConfigError, match="ForecastConfig"):
        ttp.SpikeWatch(opt, model, config={"recent": 5})  # type: ignore[arg-type]
    with pytest.raises(InvalidConfigError, match="record_event"):
        ttp.SpikeWatch(opt, model, hook=object())


def test_layer_groups() -> None:
    assert layer_group("blocks.3.attn.q.weight") == "blocks.3"
    assert layer_group("transformer.h.0.mlp.c_fc.bias") == "transformer.h.0"
    assert layer_group("wte.weight") == "wte"
