"""Mixture-of-experts health: the ``router`` collection of the PyTorch hook (counts exact, reduced
across two real gloo processes) and the rules DeadExperts, RouterCollapse and ExpertImbalance on a
tiny MoE trained for real; UpdateNormSpike, the leading indicator of a loss spike."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import tensortap
import tensortap.pytorch as tt
from tensortap.exceptions import InvalidConfigError
from tensortap.rules import (
    DeadExperts,
    ExpertImbalance,
    LossSpike,
    RouterCollapse,
    UpdateNormSpike,
    invoke_rule,
    iter_findings,
    rule_configs,
)
from tensortap.rules.builtin._router import RouterRule
from tensortap.testing import TrialBuilder
from tests.conftest import helper_cmd
from tests.helpers import moe_models
from tests.helpers.ranks import run_ranks
from tests.helpers.torch_models import Net, batches

MOE_RULES = (DeadExperts, RouterCollapse, ExpertImbalance)


def trained(tmp_path: Path, kind: str, steps: int = 40) -> Any:
    """A real trial of the tiny MoE trained ``steps`` steps, ``router`` saved every step (the
    routers found by the convention: integer ``num_experts`` and ``top_k`` attributes)."""
    torch.manual_seed(0)
    model = getattr(moe_models, kind)()
    balance = moe_models.BALANCE_COEFFICIENT if kind == "healthy" else 0.0
    with tt.Hook(
        tmp_path / kind,
        save_config=tt.SaveConfig(save_interval=1),
        include_collections=["losses", "router"],
    ) as hook:
        hook.register_module(model)
        moe_models.train(model, steps, balance)
    return tt.create_trial(tmp_path / kind)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("moe")
    return {kind: trained(root, kind) for kind in ("healthy", "collapsed")}


@pytest.mark.parametrize("rule", MOE_RULES, ids=lambda r: r.__name__)
def test_the_moe_rules_fire_on_a_collapsed_router(runs: dict[str, Any], rule: type) -> None:
    summary = invoke_rule(rule(runs["collapsed"]))
    assert summary.triggered and summary.errors == 0
    first = summary.findings[0]
    assert first.step == 2  # the condition held at 3 saved steps in a row: 0, 1, 2
    rule_class = rule_configs.config_for(rule.__name__).rule_class
    assert issubclass(rule_class, RouterRule)  # where ``cause`` is declared
    assert first.details["cause"] == rule_class.cause
    assert "raise the load-balance loss coefficient" in first.message


def test_the_collapsed_router_findings_name_expert_and_share(runs: dict[str, Any]) -> None:
    collapse = invoke_rule(RouterCollapse(runs["collapsed"])).findings[0]
    assert collapse.message.startswith("router collapse in moe1.router: expert 0 receives 100%")
    assert collapse.severity is not None and collapse.severity.value == "problem"
    dead = invoke_rule(DeadExperts(runs["collapsed"])).findings[0]
    assert dead.details["dead_experts"] == [2, 3, 4, 5, 6, 7]  # moe2: top-2 of 8, 0 and 1 win
    severity = invoke_rule(ExpertImbalance(runs["collapsed"])).findings[0].severity
    assert severity is not None and severity.value == "warning"


@pytest.mark.parametrize("rule", MOE_RULES, ids=lambda r: r.__name__)
def test_the_moe_rules_stay_quiet_on_a_healthy_router(runs: dict[str, Any], rule: type) -> None:
    summary = invoke_rule(rule(runs["healthy"]))
    assert summary.triggered == 0, summary.findings[:1]
    assert summary.status.value == "NoIssuesFound" and summary.judged == 40


def test_the_moe_rules_say_what_to_save_on_a_trial_without_routers(runs: Any, tmp_path: Path):
    builder = TrialBuilder(tmp_path)
    builder.step({"loss": np.float32(1.0)})
    summary = invoke_rule(DeadExperts(builder.close()))
    assert summary.status.value == "NoData" and "router" in summary.details


def test_the_router_collection_is_left_out_of_every_tensor_rules(runs: dict[str, Any]) -> None:
    """A healthy count of 0 dead experts is not "all zero", nor a NaN hunt's business."""
    from tensortap.rules import AllZero, ExplodingTensor

    for rule in (AllZero, ExplodingTensor):
        summary = invoke_rule(rule(runs["healthy"]))
        assert not any("router/" in n for f in summary.findings for n in f.tensors)


# -- the collection: exact counts, windows, modes --
class PlainGate(nn.Module):
    """A model whose router is a plain ``nn.Linear`` returning logits (registered by hand)."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = nn.Linear(6, 5)
        self.head = nn.Linear(5, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.gate(x))


def direct(logits: torch.Tensor, top_k: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Counts per expert, probability sums per expert and tokens, computed plainly."""
    flat = logits.detach().reshape(-1, logits.shape[-1]).float()
    chosen = flat.topk(top_k, dim=-1).indices.reshape(-1)
    counts = np.bincount(chosen.numpy(), minlength=flat.shape[1]).astype(np.float64)
    return counts, flat.softmax(dim=-1).sum(dim=0).double().numpy(), flat.shape[0]


def test_counts_and_statistics_are_exact_over_each_saving_window(tmp_path: Path) -> None:
    torch.manual_seed(3)
    model = PlainGate()
    hook = tt.Hook(tmp_path, save_config=tt.SaveConfig(save_interval=3))
    hook.register_module(model)
    hook.register_router(model.gate, top_k=2)  # num_experts: the Linear's 5 outputs
    seen: list[torch.Tensor] = []
    model.gate.register_forward_hook(lambda m, i, o: seen.append(o.detach().clone()))
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    hook.register_optimizer(opt)  # its step ends a step: the two micro-batches are one
    for _ in range(7):
        for _ in range(2):  # two micro-batches (of 3 x 4 tokens) per step: one window
            x = torch.randn(3, 4, 6)
            F.mse_loss(model(x), torch.zeros(3, 4, 2)).backward()
        opt.step()
        opt.zero_grad()
    hook.close()
    trial = tt.create_trial(tmp_path)
    # the router keeps the hook's schedule (vitals alone are saved at every step)
    assert trial.tensor("router/gate/tokens").steps() == [0, 3, 6]
    windows = {0: seen[0:2], 3: seen[2:8], 6: seen[8:14]}  # steps 1-3, then 4-6
    for step, logits in windows.items():
        each = [direct(t, 2) for t in logits]
        counts = np.sum([c for c, _, _ in each], axis=0)
        probs = np.sum([p for _, p, _ in each], axis=0)
        tokens = sum(n for _, _, n in each)

        def value(stat: str, step: int = step) -> Any:
            return trial.tensor(f"router/gate/{stat}").value(step)

        np.testing.assert_array_equal(value("tokens_per_expert"), counts)
        assert value("tokens") == tokens == 12 * len(logits)
        share, mean_prob = counts / counts.sum(), probs / tokens
        np.testing.assert_allclose(value("load_balance_loss"), 5 * (share * mean_prob).sum())
        np.testing.assert_allclose(value("imbalance"), counts.max() / counts.mean())
        np.testing.assert_allclose(value("cv"), counts.std() / counts.mean())
        assert value("dead_experts") == (counts == 0).sum()
    assert "router/gate/local_tokens_per_expert" not in trial.tensor_names()


def test_a_router_without_num_experts_is_refused_saying_how_to_give_it(tmp_path: Path) -> None:
    hook = tt.Hook(tmp_path)
    with pytest.raises(InvalidConfigError, match="pass it to register_router.num_experts"):
        hook.register_router(nn.Identity(), top_k=1)
    hook.close()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"top_k": 5, "num_experts": 4}, "top_k \\(5\\) is more than num_experts"),
        ({"top_k": 0, "num_experts": 4}, "top_k must be an integer >= 1"),
        ({"top_k": 1, "num_experts": 4, "scores": "softmax"}, "scores must be 'logits'"),
    ],
)
def test_register_router_refuses_what_a_router_cannot_be(
    tmp_path: Path, kwargs: dict[str, Any], message: str
) -> None:
    hook = tt.Hook(tmp_path)
    with pytest.raises(InvalidConfigError, match=message):
        hook.register_router(nn.Linear(3, 4), **kwargs)
    hook.close()


def test_a_router_output_without_scores_or_indices_is_said_once_and_training_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    model = PlainGate()
    hook = tt.Hook(tmp_path, save_config=tt.SaveConfig(save_interval=1))
    hook.register_module(model)
    hook.register_router(model.head, top_k=1, num_experts=7)  # its output is [..., 2]
    with caplog.at_level(logging.ERROR):
        for _ in range(3):
            model(torch.randn(4, 6)).sum().backward()
    hook.close()
    said = [r.getMessage() for r in caplog.records if "internal error in router head" in r.message]
    assert len(said) == 1 and "holds neither scores [..., 7]" in said[0]
    assert hook.status.internal_errors == 3  # counted in the hook's status (and the trial)


def test_eval_forwards_are_a_window_of_their_own(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = moe_models.healthy()
    with tt.Hook(tmp_path, include_collections=["router"]) as hook:
        hook.register_module(model)
        moe_models.train(model, 2, 0.0)
        model.eval()
        with torch.no_grad():
            model(moe_models.data(7, n=10)[0])
    trial = tt.create_trial(tmp_path)
    tokens = trial.tensor("router/moe2.router/tokens")
    assert tokens.value(0, mode=tt.modes.EVAL) == 10
    assert tokens.value(0, mode=tt.modes.TRAIN) == 256
    counts = trial.tensor("router/moe2.router/tokens_per_expert").value(0, mode=tt.modes.EVAL)
    assert counts.sum() == 20  # top-2


def test_two_ranks_save_the_sum_of_what_each_routed(tmp_path: Path, helper_env) -> None:
    # the helpers, and the tensortap under test (not another one installed)
    env = dict(helper_env, PYTHONPATH=str(Path(tensortap.__file__).parents[1]))
    for p in run_ranks(helper_cmd("moe_ddp.py", tmp_path, 5), 2, env, timeout=180):
        assert p.returncode == 0, p.stderr
    routed = [json.loads((tmp_path / f"direct_{r}.json").read_text()) for r in range(2)]
    trial = tt.create_trial(tmp_path / "trial")
    saved = [0, 2, 4]  # the router's schedule (vitals alone are saved at every step)
    for layer in ("moe1.router", "moe2.router"):
        assert trial.tensor(f"router/{layer}/tokens").steps() == saved
        for i, step in enumerate(saved):
            mine = [np.array(routed[r][layer][i]) for r in range(2)]
            assert not np.array_equal(mine[0], mine[1])  # the ranks routed differently
            for r in range(2):
                worker = f"worker_{r}"
                total = trial.tensor(f"router/{layer}/tokens_per_expert").value(step, worker=worker)
                np.testing.assert_array_equal(total, mine[0] + mine[1])
                local = trial.tensor(f"router/{layer}/local_tokens_per_expert")
                np.testing.assert_array_equal(local.value(step, worker=worker), mine[r])
                tokens = trial.tensor(f"router/{layer}/tokens").value(step, worker=worker)
                assert tokens == 2 * 64 * (1 if step == 0 else 2)
    # each rank sends its tokens to its own expert: every rank's load is judged too
    found = [f for f in iter_findings(ExpertImbalance(trial)) if f.triggered]
    assert [f.step for f in found] == [4]
    assert found[0].details["rank_imbalance"] > found[0].details["imbalance"]
    assert "on worker_" in found[0].message


# -- the rules on synthetic trials: each condition, its near miss, and what they read --
def router_steps(
    builder: TrialBuilder, loads: Sequence[Sequence[float]], tokens: float, mode="train"
):
    for counts in loads:
        values = {
            "router/l0/tokens_per_expert": np.asarray(counts, dtype=np.float64),
            "router/l0/tokens": np.float64(tokens),
        }
        builder.step(values, mode=mode, collections={n: "router" for n in values})


def fired(rule: Any) -> list[int]:
    return [f.step for f in iter_findings(rule) if f.triggered]


@pytest.mark.parametrize("mode", ["train", "global"])
def test_dead_experts_need_num_steps_in_a_row_and_enough_tokens(tmp_path: Path, mode: str):
    b = TrialBuilder(tmp_path / "t")
    router_steps(b, [[40, 40, 0, 40]] * 2 + [[40, 40, 1, 40]] + [[40, 40, 0, 40]] * 3, 121, mode)
    assert fired(DeadExperts(b.close())) == [5]
    few = TrialBuilder(tmp_path / "few")  # 9 assignments per expert on average: not judged
    router_steps(few, [[12, 12, 0, 12]] * 4, 36)
    summary = invoke_rule(DeadExperts(few.close()))
    assert summary.triggered == 0 and summary.status.value == "NoData"


def test_router_collapse_is_measured_within_the_top_k_range(tmp_path: Path) -> None:
    b = TrialBuilder(tmp_path / "top2")  # top-2 of 4 experts, every token on experts 0 and 1
    router_steps(b, [[100, 100, 0, 0]] * 3, 100)
    found = [f for f in iter_findings(RouterCollapse(b.close())) if f.triggered]
    assert [f.step for f in found] == [2]
    assert "expert 0 receives 100% of the tokens" in found[0].message
    ok = TrialBuilder(tmp_path / "spread")  # top-2 of 4, spread: 0.75 of the range
    router_steps(ok, [[80, 60, 40, 20]] * 3, 100)
    assert fired(RouterCollapse(ok.close())) == []


def test_expert_imbalance_names_the_busiest_expert_parallel_rank(tmp_path: Path) -> None:
    b = TrialBuilder(tmp_path / "t")
    router_steps(b, [[50, 30, 30, 30, 10, 10, 10, 10]] * 2 + [[30] * 4 + [10] * 4], 90)
    trial = b.close()
    assert fired(ExpertImbalance(trial)) == []  # 2.22x at two steps, then 1.5x: not 3 in a row
    b = TrialBuilder(tmp_path / "t3")
    router_steps(b, [[50, 30, 30, 30, 10, 10, 10, 10]] * 3, 90)
    found = [f for f in iter_findings(ExpertImbalance(b.close(), ep_size=2)) if f.triggered]
    assert [f.step for f in found] == [2]
    assert "expert 0 gets 2.22x the mean load of 8 experts" in found[0].message
    assert "EP rank 0 (experts 0-3) gets 1.56x the mean load of 2 EP ranks" in found[0].message
    assert found[0].details["busiest_ep_rank"] == 0


def test_nan_router_statistics_are_a_problem(tmp_path: Path) -> None:
    b = TrialBuilder(tmp_path / "t")
    router_steps(b, [[np.nan, 1, 1, 1]], 3)
    summary = invoke_rule(RouterCollapse(b.close()))
    assert summary.findings[0].details["cause"] == "nonfinite"


def test_moe_and_update_rules_are_not_in_the_recommended_set() -> None:
    for name in ("DeadExperts", "RouterCollapse", "ExpertImbalance", "UpdateNormSpike"):
        assert name not in rule_configs.RECOMMENDED
    assert [c.name for c in rule_configs.dead_experts().collections] == ["router"]


# -- UpdateNormSpike: the leading indicator --
def net_run(path: Path, spike_at: int | None, steps: int = 45) -> Any:
    """Net on the digits with Adam; at ``spike_at`` one update with a learning rate 30x."""
    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    with tt.Hook(
        path,
        save_config=tt.SaveConfig(save_interval=1),
        include_collections=["weights", "losses"],
    ) as hook:
        hook.register_module(model)
        for step, (x, y) in enumerate(batches(64, steps)):
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            for group in opt.param_groups:
                group["lr"] = 0.3 if step == spike_at else 1e-2
            opt.step()
    return tt.create_trial(path)


def test_update_norm_spike_fires_before_the_loss_spike_and_not_on_a_healthy_run(
    tmp_path: Path,
) -> None:
    spiked = net_run(tmp_path / "spike", spike_at=30)
    updates = [f for f in iter_findings(UpdateNormSpike(spiked)) if f.triggered]
    losses = [f.step for f in iter_findings(LossSpike(spiked)) if f.triggered]
    assert updates[0].step == 30  # the update of step 30, seen at step 30
    assert losses[0] == 31  # the loss it spoilt, computed at step 31
    assert "loss spikes tend to follow" in updates[0].message
    assert updates[0].details["cause"] == "update_spike"
    assert updates[0].details["lower_bound"] is False
    healthy = invoke_rule(UpdateNormSpike(net_run(tmp_path / "healthy", spike_at=None)))
    assert healthy.triggered == 0 and healthy.judged > 30


def test_update_norm_spike_uses_saved_l2_norms_as_a_lower_bound(tmp_path: Path) -> None:
    from tensortap import ReductionConfig

    b = TrialBuilder(tmp_path / "t", reduction_config=ReductionConfig(norms=["l2"]))
    norms = [1.0 + 0.01 * s for s in range(15)] + [3.0]
    for value in norms:
        b.step({"fc.weight": np.full(4, value / 2, dtype=np.float32)})
    found = [f for f in iter_findings(UpdateNormSpike(b.close())) if f.triggered]
    assert [f.step for f in found] == [15] and found[0].details["lower_bound"] is True


def test_a_transformers_router_is_found_and_its_loss_is_hugging_faces_over_top_k(
    tmp_path: Path,
) -> None:
    """The convention finds transformers' own router (MixtralTopKRouter: ``num_experts``,
    ``top_k``; output ``(logits, scores, indices)``), and the saved load-balance loss is
    ``load_balancing_loss_func`` of transformers divided by top_k."""
    mixtral = pytest.importorskip("transformers.models.mixtral.modeling_mixtral")
    config = mixtral.MixtralConfig(hidden_size=8, num_local_experts=4, num_experts_per_tok=2)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), mixtral.MixtralTopKRouter(config))
    weight = model[1].weight
    assert isinstance(weight, torch.Tensor)
    nn.init.normal_(weight)
    x = torch.randn(30, 8)
    with tt.Hook(tmp_path, include_collections=["router"]) as hook:
        hook.register_module(model)
        logits = model(x)[0]
    trial = tt.create_trial(tmp_path)
    counts = trial.tensor("router/1/tokens_per_expert").value(0)
    chosen = logits.softmax(dim=-1).topk(2, dim=-1).indices.reshape(-1).numpy()
    np.testing.assert_array_equal(counts, np.bincount(chosen, minlength=4))
    expected = float(mixtral.load_balancing_loss_func((logits.detach(),), 4, 2)) / 2
    np.testing.assert_allclose(trial.tensor("router/1/load_balance_loss").value(0), expected)


def test_a_router_forward_reads_nothing_back_to_the_host(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between saved steps the windows grow on the router's device: no ``.item()``,
    ``.tolist()``, ``.numpy()`` or ``.cpu()`` (each a synchronisation on a GPU)."""
    torch.manual_seed(0)
    model = moe_models.healthy()
    hook = tt.Hook(tmp_path, save_config=tt.SaveConfig(save_steps=[0, 4]), include_collections=[])
    hook.register_module(model)
    hook.register_router(model.moe1.router)
    hook.register_router(model.moe2.router)
    x = moe_models.data(0)[0]
    with torch.no_grad():
        model(x)  # step 0, saved when step 1 begins
        model(x)
    reads: list[str] = []
    for name in ("item", "tolist", "numpy", "cpu"):
        original = getattr(torch.Tensor, name)

        def counted(self: torch.Tensor, *a: Any, _name: str = name, _f: Any = original) -> Any:
            reads.append(_name)
            return _f(self, *a)

        monkeypatch.setattr(torch.Tensor, name, counted)
    with torch.no_grad():
        for _ in range(3):  # steps 2-4: nothing due but at the end of 4 (at close)
            model(x)
    monkeypatch.undo()
    hook.close()
    assert reads == []
    trial = tt.create_trial(tmp_path)
    assert trial.tensor("router/moe1.router/tokens").value(4, mode=tt.modes.EVAL) == 4 * 256


def test_routers_of_a_compiled_model_are_not_watched(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    model = moe_models.healthy()
    hook = tt.Hook(tmp_path, include_collections=["router"])
    with caplog.at_level(logging.WARNING):
        compiled = torch.compile(model)
        assert isinstance(compiled, nn.Module)  # typed by torch as a plain callable
        hook.register_module(compiled)
    assert "routers of a torch.compile'd model are not watched" in caplog.text
    with pytest.raises(InvalidConfigError, match="break the compiled graph"):
        hook.register_router(model.moe1.router)
    hook.close()


def test_a_run_too_short_for_num_steps_is_no_data_not_healthy(tmp_path: Path) -> None:
    """Two collapsed windows of three needed: the rules could not judge, and say why."""
    b = TrialBuilder(tmp_path / "t")
    router_steps(b, [[100, 0, 0, 0]] * 2, 100)
    trial = b.close()
    for rule in MOE_RULES:
        summary = invoke_rule(rule(trial))
        assert summary.status.value == "NoData", rule
        assert "fires once its condition held at 3 saved steps in a row" in summary.details


def test_a_checkpointed_router_is_counted_once(tmp_path: Path) -> None:
    """Activation checkpointing runs the router's forward again during backward."""

    class Checkpointed(PlainGate):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            def block(t: torch.Tensor) -> torch.Tensor:
                return torch.tanh(self.gate(t))

            return self.head(torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False))

    torch.manual_seed(0)
    model = Checkpointed()
    with tt.Hook(tmp_path, save_config=tt.SaveConfig(save_interval=1)) as hook:
        hook.register_module(model)
        hook.register_router(model.gate, top_k=1)
        x = torch.randn(8, 6, requires_grad=True)
        model(x).sum().backward()
    counts = tt.create_trial(tmp_path).tensor("router/gate/tokens_per_expert").value(0)
    assert counts.sum() == 8
