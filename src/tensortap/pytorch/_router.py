"""Mixture-of-experts health: what each MoE layer's router did, in a few numbers per layer.

A router is a module whose output holds, for every token, a score per expert (logits
``[..., E]``) and/or the experts it chose (integer indices ``[..., top_k]``). The hook keeps,
on the router's device and per mode, a running sum over the **saving window** (every forward
since the ``router`` collection was last saved in that mode): the assignments per expert,
the routing probabilities per expert, and the tokens. Nothing is read back to the host while
training: a forward adds a softmax, a sum and an ``index_add_`` on the device.

When ``router`` is due, every layer's window goes into one flat tensor, reduced across ranks
by **one** ``all_reduce(SUM)`` (all layers at once), and saved as, per layer
``router/<layer path>/``:

- ``tokens_per_expert`` ``[E]``: tokens routed to each expert (each token counts once per
  expert it was sent to, so the vector sums to ``tokens * top_k``);
- ``tokens``: tokens routed (summed over ranks);
- ``load_balance_loss``: the auxiliary loss of Switch Transformer (Fedus et al. 2021, eq. 4,
  without its coefficient alpha) over the window's tokens, ``E * sum_i f_i * P_i`` with
  ``f_i`` the share of assignments expert ``i`` got and ``P_i`` the mean router probability of
  expert ``i``; 1.0 when perfectly balanced whatever ``top_k``. For top-k it is the loss of
  GShard (Lepikhin et al. 2020) and of Hugging Face's ``load_balancing_loss_func`` divided by
  ``top_k``. Saved only for routers whose output holds scores;
- ``imbalance``: the busiest expert's load over the mean load (max / mean), and ``cv``: the
  coefficient of variation of the loads (std / mean);
- ``dead_experts``: how many experts got no token in the window;
- ``local_tokens_per_expert`` ``[E]`` (under ``torch.distributed`` only): this rank's own
  counts, before the reduction.

Empty windows save zeros (never NaN). **Ranks.** A token is routed once, by the rank that
holds it, over the global expert ids: summing over data-parallel (DP) and expert-parallel (EP)
ranks gives each expert's global load, whichever rank hosts the expert. Ranks that hold the
same tokens (tensor or context parallel replicas) would count them twice: give
``register_router`` the DP x EP process ``group`` to sum over. Every rank of the group must
register the same routers and save on the same steps (the all-reduce is a collective).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Set
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

from tensortap.core._collections import ROUTER, ROUTER_PREFIX
from tensortap.core._modes import ModeKeys
from tensortap.exceptions import InvalidConfigError, InvalidTensorError
from tensortap.pytorch._naming import flatten_tensors

logger = logging.getLogger(__name__)

#: Module attributes that make a module a router by convention: Hugging Face transformers'
#: ``*TopKRouter`` classes (Mixtral, Qwen2/Qwen3-MoE, OLMoE, DeepSeek-V3, GPT-OSS) and
#: torchtitan's ``TokenChoiceTopKRouter`` hold both.
TOP_K_ATTRIBUTE = "top_k"
NUM_EXPERTS_ATTRIBUTE = "num_experts"
SCORES = ("logits", "probs")

Save = Callable[[str, torch.Tensor, Iterable[str]], None]
_COLLECTIONS = (ROUTER,)
_TINY = 1e-30


@dataclass
class RouterSpec:
    """One registered router: its name (the layer's path), E, top_k and what its scores are."""

    name: str
    num_experts: int
    top_k: int
    scores: str = "logits"
    group: Any = None
    has_scores: bool = False  # learnt at its first forward
    windows: dict[ModeKeys, torch.Tensor] = field(default_factory=dict)

    @property
    def width(self) -> int:
        """Length of a window: counts [E], probability sums [E], tokens, tokens with scores."""
        return 2 * self.num_experts + 2


def detect(module: nn.Module) -> tuple[int, int] | None:
    """(num_experts, top_k) when ``module`` is a router by the documented convention: integer
    attributes ``num_experts`` and ``top_k`` (``1 <= top_k <= num_experts``)."""
    experts = getattr(module, NUM_EXPERTS_ATTRIBUTE, None)
    top_k = getattr(module, TOP_K_ATTRIBUTE, None)
    if type(experts) is not int or type(top_k) is not int:  # bool is not an expert count
        return None
    return (experts, top_k) if 1 <= top_k <= experts else None


def check_router(module: object, compiled: Set[int]) -> None:
    """Refuse what ``register_router`` cannot watch: not a module, or one inside a model
    registered compiled (``compiled``: the ids of such models' modules)."""
    if not isinstance(module, nn.Module):
        raise InvalidConfigError(
            f"register_router expects the router's torch.nn.Module, got {type(module).__name__}"
        )
    if id(module) in compiled:
        raise InvalidConfigError(
            "the router is inside a model registered as torch.compile'd: a hook on it would "
            "break the compiled graph at every step. Register the uncompiled model to watch "
            "its routers"
        )


def router_shape(module: nn.Module, num_experts: Any, top_k: Any) -> tuple[Any, Any]:
    """(num_experts, top_k): as given, else the module's attributes of those names, else (for
    ``num_experts``) an ``nn.Linear`` gate's ``out_features``; checked by :func:`check_spec`."""
    found = detect(module)
    if num_experts is None:
        linear = module.out_features if isinstance(module, nn.Linear) else None
        num_experts = found[0] if found else linear
    if top_k is None and found:
        top_k = found[1]
    return num_experts, top_k


def find_routers(core: nn.Module, compiled: bool, others: bool) -> list[nn.Module]:
    """The routers of ``core`` by the convention (:func:`detect`); none for a model registered
    compiled (said once), and a warning when there are none (and no ``others`` registered)."""
    routers = [m for m in core.modules() if detect(m) is not None]
    if compiled and routers:
        logger.warning(
            "tensortap: the routers of a torch.compile'd model are not watched (a hook on "
            "them would break its graph); register the uncompiled model to save 'router'"
        )
        return []
    if not routers and not others:
        logger.warning(
            "tensortap: 'router' is included but %s has no module with integer num_experts "
            "and top_k attributes; call hook.register_router(module, top_k=...) for each router",
            type(core).__name__,
        )
    return routers


def check_spec(name: str, num_experts: Any, top_k: Any, scores: Any) -> None:
    """Refuse values a router cannot have, saying what was expected."""
    for what, value in (("num_experts", num_experts), ("top_k", top_k)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InvalidConfigError(
                f"router {name}: {what} must be an integer >= 1, got {value!r}; pass it to "
                f"register_router({what}=...) or give the module a {what} attribute"
            )
    if top_k > num_experts:
        raise InvalidConfigError(
            f"router {name}: top_k ({top_k}) is more than num_experts ({num_experts}); a token "
            "is sent to top_k distinct experts"
        )
    if scores not in SCORES:
        raise InvalidConfigError(
            f"router {name}: scores must be 'logits' (the hook applies a softmax) or 'probs' "
            f"(already normalised), got {scores!r}"
        )


class RouterStats:
    """The routers of one hook: forward hooks that add to the windows, and the step-end save."""

    def __init__(
        self,
        mode: Callable[[], ModeKeys],
        save: Save,
        contain: Callable[[BaseException, str], None],
    ) -> None:
        self._mode = mode
        self._save = save
        self._contain = contain  # the hook's: logged once, counted in its status and the trial
        self.specs: dict[nn.Module, RouterSpec] = {}
        self._handles: dict[nn.Module, RemovableHandle] = {}

    def __bool__(self) -> bool:
        return bool(self.specs)

    def add(
        self,
        module: nn.Module,
        name: str,
        num_experts: int,
        top_k: int,
        scores: str = "logits",
        group: Any = None,
    ) -> None:
        """Watch ``module``'s output as router ``name``."""
        check_spec(name, num_experts, top_k, scores)
        if any(s.name == name for m, s in self.specs.items() if m is not module):
            raise InvalidConfigError(
                f"another router is already registered as {name!r}; give register_router a "
                "different name="
            )
        others = {id(s.group) for m, s in self.specs.items() if m is not module}
        if others and others != {id(group)}:
            raise InvalidConfigError(
                f"router {name}: every router of a hook is reduced by one all-reduce over one "
                "process group; register them all with the same group="
            )
        self.remove(module)
        self.specs[module] = RouterSpec(name, num_experts, top_k, scores, group)
        self._handles[module] = module.register_forward_hook(partial(self._on_forward, module))

    def remove(self, module: nn.Module) -> None:
        handle = self._handles.pop(module, None)
        if handle is not None:
            handle.remove()
        self.specs.pop(module, None)

    def clear(self) -> None:
        for module in list(self.specs):
            self.remove(module)

    # -- every forward --
    def _on_forward(self, module: nn.Module, _: nn.Module, inputs: Any, output: Any) -> None:
        spec = self.specs.get(module)
        if spec is None or _in_backward():
            return  # activation checkpointing runs the forward again in backward: counted once
        try:
            self._accumulate(spec, output)
        except Exception as exc:  # never break training
            self._contain(exc, f"router {spec.name}")

    @torch.no_grad()
    def _accumulate(self, spec: RouterSpec, output: Any) -> None:
        scores, indices = _pick(spec, flatten_tensors(output))
        e, k = spec.num_experts, spec.top_k
        device = scores.device if scores is not None else indices.device
        window = spec.windows.get(self._mode())
        if window is None or window.device != device:
            window = spec.windows[self._mode()] = torch.zeros(
                spec.width, dtype=_accumulator_dtype(device), device=device
            )
        if scores is not None:
            flat = scores.detach().reshape(-1, e).float()
            probs = flat.softmax(dim=-1) if spec.scores == "logits" else flat
            window[e : 2 * e] += probs.sum(dim=0).to(window.dtype)
            window[2 * e + 1] += flat.shape[0]
            spec.has_scores = True
            if indices is None:
                indices = flat.topk(k, dim=-1).indices
            tokens = flat.shape[0]
        else:
            tokens = indices.numel() // k
        chosen = indices.detach().reshape(-1).long()
        window[:e].index_add_(0, chosen, torch.ones_like(chosen, dtype=window.dtype))
        window[2 * e] += tokens

    # -- at the end of a step where ``router`` is due --
    def save_window(self) -> None:
        """Reduce this mode's windows of every router across ranks (one all-reduce), save
        them and their statistics, and start new windows."""
        mode = self._mode()
        specs = sorted(self.specs.values(), key=lambda s: s.name)
        if not specs:
            return
        windows = [_window_of(spec, mode) for spec in specs]
        # an accelerator's when any router runs on one (NCCL reduces device tensors only)
        device = next((w.device for w in windows if w.device.type != "cpu"), windows[0].device)
        flat = torch.cat([w.to(device) for w in windows])
        reduced, local = _all_reduce(flat, specs[0].group)
        for window in windows:
            window.zero_()
        offset = 0
        for spec in specs:
            part = reduced[offset : offset + spec.width]
            mine = None if local is None else local[offset : offset + spec.width]
            offset += spec.width
            self._save_layer(spec, part, mine)

    def _save_layer(self, spec: RouterSpec, part: torch.Tensor, local: torch.Tensor | None) -> None:
        e = spec.num_experts
        counts, prob_sums = part[:e], part[e : 2 * e]
        tokens, scored = part[2 * e], part[2 * e + 1]
        prefix = f"{ROUTER_PREFIX}{spec.name}/"
        for stat, value in statistics(counts, prob_sums, scored).items():
            if stat == "load_balance_loss" and not spec.has_scores:
                continue
            self._save(prefix + stat, value, _COLLECTIONS)
        self._save(prefix + "tokens", tokens, _COLLECTIONS)
        if local is not None:
            self._save(prefix + "local_tokens_per_expert", local[:e], _COLLECTIONS)


def statistics(
    counts: torch.Tensor, prob_sums: torch.Tensor, scored: torch.Tensor
) -> dict[str, torch.Tensor]:
    """The saved statistics of one layer's window, computed on its device (no host read);
    zeros for an empty window. ``counts`` [E]: assignments per expert; ``prob_sums`` [E]: the
    routing probabilities summed over the ``scored`` tokens."""
    e = counts.numel()
    assigned = counts.sum()
    mean = (assigned / e).clamp_min(_TINY)
    share = counts / assigned.clamp_min(_TINY)  # f_i: share of the assignments
    mean_prob = prob_sums / scored.clamp_min(_TINY)  # P_i: mean routing probability
    return {
        "tokens_per_expert": counts,
        "load_balance_loss": e * (share * mean_prob).sum(),
        "imbalance": counts.max() / mean,
        "cv": counts.std(correction=0) / mean,
        "dead_experts": torch.where(assigned > 0, (counts == 0).sum(), 0).to(counts.dtype),
    }


def _pick(spec: RouterSpec, tensors: list[torch.Tensor]) -> tuple[Any, Any]:
    """The router's scores (the first floating tensor whose last dimension is E) and chosen
    experts (the first integer tensor whose last dimension is top_k), from its output."""
    scores = next(
        (
            t
            for t in tensors
            if t.is_floating_point() and t.ndim and t.shape[-1] == spec.num_experts
        ),
        None,
    )
    indices = next(
        (
            t
            for t in tensors
            if not t.is_floating_point()
            and not t.is_complex()
            and t.dtype != torch.bool
            and t.ndim
            and t.shape[-1] == spec.top_k
        ),
        None,
    )
    if scores is None and indices is None:
        shapes = [tuple(t.shape) for t in tensors] or "no tensor"
        raise InvalidTensorError(
            f"its output ({shapes}) holds neither scores [..., {spec.num_experts}] nor integer "
            f"expert indices [..., {spec.top_k}]; register the module that returns the router "
            "logits (or give num_experts/top_k that match them)"
        )
    return scores, indices  # not both None


def _in_backward() -> bool:
    """Whether autograd's engine is running (a checkpointed forward being recomputed)."""
    task = getattr(torch._C, "_current_graph_task_id", None)
    return task is not None and task() != -1


def _accumulator_dtype(device: torch.device) -> torch.dtype:
    """float64 (exact counts up to 2**53) where the device has it."""
    return torch.float32 if device.type == "mps" else torch.float64


def _window_of(spec: RouterSpec, mode: ModeKeys) -> torch.Tensor:
    """This mode's window of ``spec`` (zeros on the CPU when it saw no forward in this mode)."""
    window = spec.windows.get(mode)
    if window is None:
        device = next(iter(spec.windows.values())).device if spec.windows else "cpu"
        window = spec.windows[mode] = torch.zeros(
            spec.width, dtype=_accumulator_dtype(torch.device(device)), device=device
        )
    return window


def _all_reduce(flat: torch.Tensor, group: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(the sum over the group's ranks, this rank's own values) under torch.distributed; (flat,
    None) otherwise. One collective for every layer."""
    dist = torch.distributed
    if not (dist.is_available() and dist.is_initialized()):
        return flat, None
    if dist.get_world_size(group) == 1:
        return flat, None
    local = flat.clone()
    dist.all_reduce(flat, op=dist.ReduceOp.SUM, group=group)
    return flat, local
