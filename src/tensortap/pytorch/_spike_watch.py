"""Spikes seen coming: the PyTorch side of :mod:`tensortap.core._spike_forecast`.

::

    watch = tt.SpikeWatch(optimizer, model, hook=hook)   # hook optional: saves to the trial
    for x, y in loader:
        loss = loss_fn(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()           # the step's indicators are read and judged here
        if watch.warnings:         # or watch.last_warnings: those of the last step
            ...

It gathers, at every optimizer step, cheap leading indicators of a loss spike:

- ``update_norm/<group>``: the L2 norm of the update the optimizer applied to each layer group
  (parameters grouped by name up to their first block index, ``blocks.3``, ``transformer.h.0``,
  else by their first name part, ``wte``): one ``_foreach_copy_`` before the step into one flat
  buffer (per device and dtype, allocated once, each group's parameters side by side), one
  ``_foreach_sub_`` after it and one ``_foreach_norm`` over the groups' slices of the buffer;
- ``attention_logit/<k>`` (the max over heads; ``attention_logit/<k>/head<h>`` per head is
  kept in :attr:`SpikeWatch.last_values`): the largest pre-softmax logit ``q.k * scale`` of the
  k-th attention call of the forward, for callers of ``F.scaled_dot_product_attention``
  (caught by standing in for ``F.scaled_dot_product_attention`` while the model's forward
  runs, put back when it ends, an exception included: Hugging Face's "sdpa" attention, most
  hand-written GPTs; code that imported the function by name before is not seen) and
  ``nn.MultiheadAttention`` modules (recomputed from their input projection). Only the
  first sample of the batch is scored, when the forward ends (the calls' queries and keys are
  the forward's, kept for its backward anyway): ``bmm``, the causal mask added, ``amax``, the
  scale applied on the host (:mod:`tensortap.pytorch._spike_values`);
- ``output_logit`` and ``output_entropy``: the largest logit and the mean entropy of the
  softmax of the model's output (a tensor, a tuple's first tensor, or ``.logits``) whose last
  dimension is a class/vocabulary axis, on the first sample.

The values stay on the device while the step runs and are read back together after
``optimizer.step()`` (one transfer per step off the CPU; on it, each as it is). Each warning is
kept in :attr:`warnings`, logged, handed to ``on_warning``, and, with a ``hook``, recorded in
the trial as a session event of kind ``"spike_warning"`` (``trial.sessions()[i].events``); the
indicators are saved as scalars ``spikes/<name>`` when the hook's ``scalars`` collection is due.
"""

from __future__ import annotations

import logging
import math
import re
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import torch
from torch import nn

from tensortap.core._spike_forecast import ForecastConfig, SpikeForecast, SpikeWarning
from tensortap.exceptions import InvalidConfigError
from tensortap.pytorch._spike_values import NoGrad, Snapshot, StepValues, max_logits

logger = logging.getLogger(__name__)

_BLOCK = re.compile(r"^(.*?\.\d+)(\.|$)")


def layer_group(name: str) -> str:
    """A parameter's layer group: its name up to the first block index (``blocks.3``), else
    its first part (``wte``)."""
    match = _BLOCK.match(name)
    if match:
        return match.group(1)
    return name.split(".", 1)[0]


class _PatchedAttention:
    """Stands in for ``F.scaled_dot_product_attention`` while a watched model runs: keeps each
    call's first query and key for the watch to score when the forward ends, then runs the
    original. (A ``TorchFunctionMode`` would see the calls too, but it puts Python around every
    operation of the forward: 15 % of a small GPT's step.)"""

    def __init__(self, watch: SpikeWatch, original: Callable[..., Any]) -> None:
        self._watch = watch
        self.original = original

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if len(args) >= 2:
            try:
                self._watch._keep_sdpa(args, kwargs)
            except Exception:  # never break the forward
                logger.debug("could not score an attention call", exc_info=True)
        return self.original(*args, **kwargs)


class SpikeWatch:
    """Gathers leading indicators of loss spikes at every optimizer step and forecasts them
    (see the module docstring).

    Arguments: ``optimizer`` (its steps are the steps watched), ``model`` (or models) whose
    forwards show attention and output logits; ``hook`` (a tensortap hook: the warnings and
    indicators go into its trial); ``config`` (a :class:`ForecastConfig`); ``on_warning``
    (called with each :class:`SpikeWarning`); ``attention`` and ``output`` (False leaves those
    indicators out); ``groups`` (a function of a parameter's name to its group)."""

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        model: nn.Module | Iterable[nn.Module] | None = None,
        *,
        hook: Any = None,
        config: ForecastConfig | None = None,
        on_warning: Callable[[SpikeWarning], None] | None = None,
        attention: bool = True,
        output: bool = True,
        groups: Callable[[str], str] | None = None,
    ) -> None:
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise InvalidConfigError(
                f"SpikeWatch needs a torch.optim.Optimizer, got {type(optimizer).__name__}; "
                "pass the optimizer whose step() trains the model"
            )
        if config is not None and not isinstance(config, ForecastConfig):
            raise InvalidConfigError(
                f"SpikeWatch's config must be a ForecastConfig, got {type(config).__name__}"
            )
        if hook is not None and not hasattr(hook, "record_event"):
            raise InvalidConfigError(
                f"SpikeWatch's hook must be a tensortap hook (with record_event), got "
                f"{type(hook).__name__}"
            )
        models = [] if model is None else [model] if isinstance(model, nn.Module) else list(model)
        self.forecast = SpikeForecast(config or ForecastConfig())
        self.on_warning = on_warning
        self.last_values: dict[str, float] = {}
        self.last_warnings: list[SpikeWarning] = []
        self.steps = 0
        self.seconds = 0.0  # time spent gathering and judging (the watch's own cost)
        self._hook = hook
        self._optimizer = optimizer
        self._values = StepValues()  # this step's, so far
        # the attention calls of the running forward: name, query, key, scale, causal
        self._calls: list[tuple[str, torch.Tensor, torch.Tensor, float, bool]] = []
        self._attention_calls = 0
        self._patch: _PatchedAttention | None = None
        self._depth = 0
        name_of = _parameter_names(models)
        group_of = groups or layer_group
        self._params: list[torch.Tensor] = []
        self._group_index: list[int] = []
        group_names: list[str] = []
        for group in optimizer.param_groups:
            for p in group["params"]:
                if not p.requires_grad:
                    continue
                label = group_of(name_of.get(id(p), "params"))
                if label not in group_names:
                    group_names.append(label)
                self._params.append(p)
                self._group_index.append(group_names.index(label))
        self._group_names = group_names
        self._norm_names = [f"update_norm/{g}" for g in group_names]
        self._snapshot: Snapshot | None = None
        self._handles: list[Any] = [
            optimizer.register_step_pre_hook(self._before_step),
            optimizer.register_step_post_hook(self._after_step),
        ]
        self._output = output
        for m in models:
            if attention:
                self._handles.append(m.register_forward_pre_hook(self._enter_forward))
                for sub in m.modules():
                    if isinstance(sub, nn.MultiheadAttention):
                        self._handles.append(
                            sub.register_forward_pre_hook(self._score_mha, with_kwargs=True)
                        )
            if attention or output:  # one hook: the attention calls, then the output
                self._handles.append(m.register_forward_hook(self._leave_forward, always_call=True))

    # -- API --
    @property
    def warnings(self) -> list[SpikeWarning]:
        """Every warning so far, oldest first."""
        return list(self.forecast.warnings)

    @property
    def seconds_per_step(self) -> float:
        return self.seconds / self.steps if self.steps else 0.0

    def remove(self) -> None:
        """Detach from the optimizer and the models."""
        for handle in self._handles:
            handle.remove()
        self._handles = []
        self._snapshot = None

    def __enter__(self) -> SpikeWatch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()

    # -- the forward --
    def _enter_forward(self, module: nn.Module, args: Any) -> None:
        self._depth += 1
        functional = torch.nn.functional
        if self._depth == 1 and torch.is_grad_enabled():
            current = functional.scaled_dot_product_attention
            if isinstance(current, _PatchedAttention):
                return  # another watch's forward is running: it scores this one
            self._patch = _PatchedAttention(self, current)
            functional.scaled_dot_product_attention = self._patch
            self._attention_calls = 0

    def _leave_forward(self, module: nn.Module, args: Any, output: Any) -> None:
        self._depth = max(0, self._depth - 1)
        if self._depth == 0 and self._patch is not None:
            patch, self._patch = self._patch, None
            functional = torch.nn.functional
            if functional.scaled_dot_product_attention is patch:
                functional.scaled_dot_product_attention = patch.original
        calls = self._calls if self._depth == 0 else []
        score_output = self._output and torch.is_grad_enabled()  # not in evaluation
        if not (calls or score_output):
            return
        started = time.perf_counter()
        with NoGrad():
            if calls:
                self._calls = []
                try:
                    self._score_calls(calls)
                except Exception:
                    logger.debug("could not score the attention calls", exc_info=True)
            if score_output:
                try:
                    self._score_output(output)
                except Exception:
                    logger.debug("could not score the model's output", exc_info=True)
        self.seconds += time.perf_counter() - started

    def _keep_sdpa(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> None:
        """Keeps an attention call's first query and key (they are the forward's, kept for its
        backward anyway) to score with the others when the forward ends."""
        q, k = args[0], args[1]
        if not (isinstance(q, torch.Tensor) and isinstance(k, torch.Tensor)) or q.dim() < 3:
            return
        scale = kwargs.get("scale")
        if scale is None:
            scale = 1.0 / math.sqrt(q.shape[-1])
        causal = bool(kwargs.get("is_causal", args[5] if len(args) > 5 else False))
        name = f"attention_logit/{self._attention_calls}"
        self._attention_calls += 1
        self._values.place(name)  # its place, in the order of the calls
        self._calls.append((name, q, k, float(scale), causal))

    def _score_calls(
        self, calls: list[tuple[str, torch.Tensor, torch.Tensor, float, bool]]
    ) -> None:
        """Scores the attention calls kept in a forward: one by one, or, when there are more
        than two and all alike (shapes, dtype, device, scale, mask), side by side (a
        concatenation costs about what one more call's few operations do, warm by then)."""
        firsts = [_first_sample(q, k) for _, q, k, _, _ in calls]
        values = self._values
        if len(calls) > 2 and firsts[0][0].dim() == 3:
            kinds = {
                (q1.shape, k1.shape, q1.dtype, q1.get_device(), scale, causal)
                for (q1, k1), (_, _, _, scale, causal) in zip(firsts, calls, strict=True)
            }
            if len(kinds) == 1:
                _, _, _, scale, causal = calls[0]
                queries = torch.cat([q1 for q1, _ in firsts])  # (calls x heads, length, dim)
                keys = torch.cat([k1 for _, k1 in firsts])
                names = [name for name, *_ in calls]
                values.add_attention(names, max_logits(queries, keys, causal), scale)
                return
        for (q1, k1), (name, _, _, scale, causal) in zip(firsts, calls, strict=True):
            values.add_attention([name], max_logits(q1, k1, causal), scale)

    def _score_mha(self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        started = time.perf_counter()
        try:
            assert isinstance(module, nn.MultiheadAttention)
            query = args[0] if args else kwargs.get("query")
            key = args[1] if len(args) > 1 else kwargs.get("key")
            weight = module.in_proj_weight
            if not isinstance(query, torch.Tensor) or not isinstance(key, torch.Tensor):
                return
            if weight is None or not torch.is_grad_enabled():
                return  # separate q/k/v projections: not scored
            with NoGrad():
                if query.dim() == 2:  # an unbatched call
                    query1, key1 = query, key
                elif module.batch_first:
                    query1, key1 = query[0], key[0]
                else:
                    query1, key1 = query[:, 0], key[:, 0]
                e, h = module.embed_dim, module.num_heads
                bias = module.in_proj_bias
                q = torch.nn.functional.linear(
                    query1, weight[:e], None if bias is None else bias[:e]
                )
                k = torch.nn.functional.linear(
                    key1, weight[e : 2 * e], None if bias is None else bias[e : 2 * e]
                )
                d = e // h
                q = q.reshape(-1, h, d).transpose(0, 1)
                k = k.reshape(-1, h, d).transpose(0, 1)
                causal = bool(kwargs.get("is_causal", False))
                name = f"attention_logit/mha{self._attention_calls}"
                self._values.add_attention([name], max_logits(q, k, causal), 1.0 / math.sqrt(d))
            self._attention_calls += 1
        except Exception:
            logger.debug("could not score an nn.MultiheadAttention call", exc_info=True)
        finally:
            self.seconds += time.perf_counter() - started

    def _score_output(self, output: Any) -> None:
        logits = _logits(output)
        if logits is None:
            return
        first = logits[0]
        if first.dim() != 2:
            first = first.reshape(-1, first.shape[-1])
        if first.dtype != torch.float32:
            first = first.float()
        entropy = torch.special.entr(torch.softmax(first, dim=-1)).sum(-1).mean()
        self._values.add_output(first.amax(), entropy)

    # -- the step --
    def _before_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        started = time.perf_counter()
        try:
            with NoGrad():
                if self._snapshot is None and self._params:
                    self._snapshot = Snapshot(self._params, self._group_index)
                if self._snapshot is not None:
                    torch._foreach_copy_(self._snapshot.copies, self._params)
        except Exception:
            logger.warning("SpikeWatch could not copy the parameters", exc_info=True)
            self._snapshot = None
        self.seconds += time.perf_counter() - started

    def _after_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        started = time.perf_counter()
        try:
            self._judge_step()
        except Exception:
            logger.warning("SpikeWatch could not judge the step", exc_info=True)
        finally:
            self._values = StepValues()
            self.seconds += time.perf_counter() - started

    def _judge_step(self) -> None:
        snapshot = self._snapshot
        norms: list[torch.Tensor] = []
        if snapshot is not None:
            with NoGrad():
                torch._foreach_sub_(snapshot.copies, self._params)
                norms = snapshot.norms()
        if not (self._values or norms):
            return
        values, judged, segment_norms = self._values.read(norms)
        if snapshot is not None:
            for name, norm in zip(
                self._norm_names, snapshot.group_norms(segment_norms), strict=True
            ):
                values[name] = judged[name] = norm
        step = self.steps
        self.steps += 1
        self.last_values = values
        raised = self.forecast.update(step, judged)
        self.last_warnings = raised
        self._publish(values, raised)

    def _publish(self, values: Mapping[str, float], raised: list[SpikeWarning]) -> None:
        hook = self._hook
        for warning in raised:
            logger.warning("spike forecast: %s", warning)
            if hook is not None:
                hook.record_event("spike_warning", warning.to_dict())
            if self.on_warning is not None:
                try:
                    self.on_warning(warning)
                except Exception:
                    logger.warning("on_warning raised; the watch goes on", exc_info=True)
        if hook is not None and hasattr(hook, "save_scalar"):
            for name, value in values.items():
                if math.isfinite(value):
                    hook.save_scalar(f"spikes/{name}", value)


def _first_sample(q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """An attention call's query and key of its first sample, (heads, length, dim)."""
    q1 = q[0] if q.dim() == 4 else q
    k1 = k[0] if k.dim() == 4 else k
    if k1.shape[0] != q1.shape[0]:  # grouped-query attention: share the key heads
        k1 = k1.repeat_interleave(q1.shape[0] // k1.shape[0], dim=0)
    return q1, k1


def _logits(output: Any) -> torch.Tensor | None:
    if isinstance(output, tuple | list) and output:
        output = output[0]
    elif not isinstance(output, torch.Tensor):
        output = getattr(output, "logits", None)
    if (
        isinstance(output, torch.Tensor)
        and output.is_floating_point()
        and output.dim() >= 2
        and output.shape[-1] >= 2
    ):
        return output
    return None


def _parameter_names(models: list[nn.Module]) -> dict[int, str]:
    names: dict[int, str] = {}
    for m in models:
        for name, p in m.named_parameters():
            names.setdefault(id(p), name)
    return names
