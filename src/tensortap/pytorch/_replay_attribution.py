"""What a replay says about a failed step: its :class:`Attribution`, made from the step's first
run and its replay (:func:`attribute`; see :mod:`tensortap.pytorch._replay`).

The first run's fingerprint (the loss and each gradient's norm, taken after its backward pass)
against the replay's: differing, the fault was **transient**; the same, the replay's numbers say
which: a batch holding non-finite or extreme values is **data**, a finite batch whose step still
goes non-finite **numerics**, everything finite **reproducible**. Under DistributedDataParallel,
a rank whose own step is sound looks for the rank whose batch or forward pass went bad. Also here:
what the replay measures per layer (:func:`layer_watch`) and in a batch (:func:`numbers`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

TRANSIENT = "transient"
DATA = "data"
NUMERICS = "numerics"
REPRODUCIBLE = "reproducible"
KINDS = (TRANSIENT, DATA, NUMERICS, REPRODUCIBLE)
EXTREME_INPUT = 1e4  # a batch value larger than this (in magnitude) is extreme


@dataclass(frozen=True)
class Attribution:
    """What a replay says about a failed step.

    ``kind``: :data:`TRANSIENT`, :data:`DATA`, :data:`NUMERICS` or :data:`REPRODUCIBLE`;
    ``first_bad_layer``: the module whose output first went non-finite in the replay (None
    when every output was finite, or for a transient fault); ``evidence``: the numbers it rests
    on (``loss`` and ``replay_loss``, ``grad_norm`` and ``replay_grad_norm``,
    ``fingerprints_differing``, ``batch_nonfinite``, ``batch_max_abs``, ``nonfinite_layers``,
    the first bad layer's ``layer_input_nonfinite``, ``layer_input_max_abs``,
    ``layer_output_nonfinite``, ``seconds``, and ``grad_clip_factor`` where the first run's
    gradients were the replay's times one common factor: clipped before the fingerprint, counted
    the same); ``reason``: why the step was replayed (the
    guard's reason); ``batch``: what names the batch.
    """

    kind: str
    step: int
    first_bad_layer: str | None
    evidence: Mapping[str, float]
    message: str
    reason: str | None = None
    batch: Any = None

    def to_dict(self) -> dict[str, Any]:
        """As JSON values (non-finite numbers as strings; a batch that is not a number or a
        string as its ``repr``)."""
        batch = self.batch
        if not (batch is None or isinstance(batch, (bool, int, float, str))):
            batch = repr(batch)
        return {
            "kind": self.kind,
            "step": self.step,
            "first_bad_layer": self.first_bad_layer,
            "evidence": {k: _json_number(v) for k, v in self.evidence.items()},
            "message": self.message,
            "reason": self.reason,
            "batch": _json_number(batch) if isinstance(batch, float) else batch,
        }


@dataclass
class LayerCall:
    name: str
    numbers: torch.Tensor  # input non-finite, input max |x|, output non-finite, output max |x|


@dataclass
class Replayed:
    """What a replay measured."""

    fingerprint: torch.Tensor
    has_grad: tuple[bool, ...]
    calls: list[LayerCall]
    layers: np.ndarray | None  # per call: input non-finite, input max, output non-finite, max
    batch_nonfinite: float
    batch_max: float
    #: under DDP, per rank: batch non-finite, batch max, first bad layer (-1: none), loss bad
    ranks: np.ndarray | None = None


@dataclass(frozen=True)
class FirstRun:
    """What the step's first run left: its number and fingerprint."""

    step: int
    fingerprint: torch.Tensor
    has_grad: tuple[bool, ...]


def attribute(
    first_run: FirstRun,
    replayed: Replayed,
    *,
    seconds: float,
    reason: str | None,
    batch: Any,
    rtol: float,
    extreme_input: float,
) -> Attribution:
    """The attribution of ``first_run``'s failure from its replay (see the module docstring)."""
    first = first_run.fingerprint.detach().cpu().double().numpy()
    second = replayed.fingerprint.detach().cpu().double().numpy()
    calls, layers = replayed.calls, replayed.layers
    batch_nonfinite, batch_max = replayed.batch_nonfinite, replayed.batch_max
    differing = (
        int(first.size)
        if replayed.has_grad != first_run.has_grad or first.size != second.size
        else int((~_same(first, second, rtol)).sum())
    )
    clip = _common_factor(first, second, rtol) if differing else None
    if clip is not None:
        differing = 0  # clipped after the fingerprint's place: the same step, scaled
    evidence: dict[str, float] = {
        "loss": float(first[0]),
        "replay_loss": float(second[0]),
        "grad_norm": float(np.sqrt(np.sum(first[1:] ** 2))),
        "replay_grad_norm": float(np.sqrt(np.sum(second[1:] ** 2))),
        "fingerprints_differing": float(differing),
        "batch_nonfinite": batch_nonfinite,
        "batch_max_abs": batch_max,
        "nonfinite_layers": float(0 if layers is None else int((layers[:, 2] > 0).sum())),
        "seconds": seconds,
    }
    if clip is not None:
        evidence["grad_clip_factor"] = clip
    at = f"step {first_run.step} replayed from the same weights, RNG state and batch"
    if differing:
        return Attribution(
            TRANSIENT,
            first_run.step,
            None,
            evidence,
            f"{at} gave a different result (loss {first[0]:.6g}, replayed {second[0]:.6g}; "
            f"{differing} of {first.size} loss and gradient fingerprints differ): a "
            "transient fault. Suspect the hardware (silent data corruption), or a kernel "
            "that is not deterministic (torch.use_deterministic_algorithms(True))",
            reason,
            batch,
        )
    bad_layer, where = _first_bad_layer(calls, layers, evidence)
    nonfinite = not bool(np.all(np.isfinite(second)))
    if bad_layer is None and nonfinite:
        where = (
            " Every layer's output was finite: the loss, computed after them, went non-finite"
            if not math.isfinite(second[0])
            else " Every layer's output and the loss were finite: the backward pass went non-finite"
        )
    at = f"{at} gave the same result (loss {second[0]:.6g})"
    if clip is not None:
        at = (
            f"{at}, with every gradient norm {clip:.4g} times the replay's (clipped after "
            "the backward pass: the same step)"
        )
    local_bad = batch_nonfinite > 0 or batch_max > extreme_input or bad_layer is not None
    if replayed.ranks is not None and not local_bad and math.isfinite(second[0]):
        found = _elsewhere(replayed, first_run.step, evidence, at, reason, batch, extreme_input)
        if found is not None:
            return found
    if batch_nonfinite > 0 or batch_max > extreme_input:
        what = (
            f"{int(batch_nonfinite)} non-finite values"
            if batch_nonfinite > 0
            else f"a value of magnitude {batch_max:.4g} (over {extreme_input:g})"
        )
        return Attribution(
            DATA,
            first_run.step,
            bad_layer,
            evidence,
            f"{at}, and the batch holds {what}: the data.{where}",
            reason,
            batch,
        )
    if bad_layer is not None or nonfinite:
        return Attribution(
            NUMERICS,
            first_run.step,
            bad_layer,
            evidence,
            f"{at}; the batch is finite (largest magnitude {batch_max:.4g}) and the step "
            f"still goes non-finite: the numerics (an overflow, or a division by ~0).{where}",
            reason,
            batch,
        )
    return Attribution(
        REPRODUCIBLE,
        first_run.step,
        None,
        evidence,
        f"{at}; everything stays finite and the batch is moderate (largest magnitude "
        f"{batch_max:.4g}): the data or the numerics, not told apart (a spike the step "
        "causes again)",
        reason,
        batch,
    )


def _elsewhere(
    replayed: Replayed,
    step: int,
    evidence: dict[str, float],
    at: str,
    reason: str | None,
    batch: Any,
    extreme_input: float,
) -> Attribution | None:
    """This rank's step is sound but its all-reduced gradients are not: the rank whose batch
    (first) or forward pass went bad, from the rows every rank shared."""
    assert replayed.ranks is not None
    for kind in (DATA, NUMERICS):
        for rank, (nonfinite, largest, index, loss_bad) in enumerate(replayed.ranks):
            data = nonfinite > 0 or largest > extreme_input
            if (kind == DATA and data) or (kind == NUMERICS and (index >= 0 or loss_bad)):
                layer = (
                    replayed.calls[int(index)].name if 0 <= index < len(replayed.calls) else None
                )
                evidence["bad_rank"] = float(rank)
                evidence["bad_rank_batch_nonfinite"] = float(nonfinite)
                evidence["bad_rank_batch_max_abs"] = float(largest)
                what = (
                    f"rank {rank}'s batch holds non-finite or extreme values "
                    f"({int(nonfinite)} non-finite, largest magnitude {largest:.4g}): the data"
                    if kind == DATA
                    else f"rank {rank}'s step goes non-finite from a finite batch: the numerics"
                )
                where = f" (first bad layer there: {layer})" if layer else ""
                return Attribution(
                    kind,
                    step,
                    layer,
                    evidence,
                    f"{at}; this rank's batch and forward pass are finite, but the "
                    f"gradients, all-reduced, are not: {what}{where}",
                    reason,
                    batch,
                )
    return None


def first_bad_index(layers: np.ndarray | None) -> int:
    """The call whose output first went non-finite (first from finite inputs), -1 if none."""
    if layers is None:
        return -1
    bad = [i for i in range(len(layers)) if layers[i, 2] > 0]
    fresh = [i for i in bad if layers[i, 0] == 0]
    return fresh[0] if fresh else (bad[0] if bad else -1)


def _first_bad_layer(
    calls: list[LayerCall], layers: np.ndarray | None, evidence: dict[str, float]
) -> tuple[str | None, str]:
    """The module whose output first went non-finite (forward hooks fire as modules finish,
    innermost first): the first one with finite inputs, else the first one at all; and a
    sentence saying so."""
    index = first_bad_index(layers)
    if layers is None:
        return None, ""
    if index < 0:
        return None, " Every layer's output was finite in the forward pass."
    name = calls[index].name
    evidence["layer_input_nonfinite"] = float(layers[index, 0])
    evidence["layer_input_max_abs"] = float(layers[index, 1])
    evidence["layer_output_nonfinite"] = float(layers[index, 2])
    if layers[index, 0] == 0:
        return name, (
            f" The first layer whose output went non-finite: {name} ({int(layers[index, 2])} "
            f"values; its inputs were finite, largest magnitude {layers[index, 1]:.4g})"
        )
    return name, (
        f" The first layer with a non-finite output: {name} (its input was already non-finite: "
        "the batch, or an operation outside a module before it)"
    )


def layer_watch(name: str, calls: list[LayerCall]) -> Callable[..., None]:
    def watch(module: nn.Module, args: Any, output: Any) -> None:
        calls.append(LayerCall(name, torch.cat([numbers(tensors(args)), numbers(tensors(output))])))

    return watch


def tensors(value: Any) -> Iterator[torch.Tensor]:
    """The floating-point tensors in a batch or a module's inputs or outputs."""
    if isinstance(value, torch.Tensor):
        if value.is_floating_point() or value.is_complex():
            yield value.detach()
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from tensors(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from tensors(item)


def numbers(values: Iterator[torch.Tensor]) -> torch.Tensor:
    """[non-finite count, largest finite magnitude] over ``values``, float64 on the CPU
    (the replay's path: it may wait for the device)."""
    nonfinite, largest = 0.0, 0.0
    for t in values:
        if t.numel() == 0:
            continue
        finite = torch.isfinite(t)
        nonfinite += float((~finite).sum())
        magnitude = torch.where(
            finite, t.abs(), torch.zeros((), dtype=t.abs().dtype, device=t.device)
        )
        largest = max(largest, float(magnitude.max()))
    return torch.tensor([nonfinite, largest], dtype=torch.float64)


CLIP_RTOL = 1e-4  # how far apart the gradients' ratios may be and still be one common factor


def _common_factor(first: np.ndarray, second: np.ndarray, rtol: float) -> float | None:
    """The factor ``c`` when the loss is the same and every gradient norm of the first run is
    ``c`` times the replay's (``c`` < 1: a global clip such as ``clip_grad_norm_`` ran between
    the backward pass and the fingerprint, which the replay's ``step_fn`` does not do); else
    None. Gradients that are 0 in both runs are left out of the ratio."""
    if first.size != second.size or first.size < 2 or not _same(first[:1], second[:1], rtol)[0]:
        return None
    a, b = first[1:], second[1:]
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
        return None
    zero = (a == 0) & (b == 0)
    if np.any((a == 0) != (b == 0)) or bool(np.all(zero)):
        return None
    ratios = a[~zero] / b[~zero]
    factor = float(np.median(ratios))
    tolerance = max(rtol, CLIP_RTOL)
    if not (0 < factor < 1 + tolerance) or np.any(np.abs(ratios - factor) > tolerance * factor):
        return None
    return factor


def _same(first: np.ndarray, second: np.ndarray, rtol: float) -> np.ndarray:
    """Element by element: equal (NaN equals NaN, an infinity the same infinity), or within
    ``rtol`` of each other."""
    equal = (first == second) | (np.isnan(first) & np.isnan(second))
    if rtol > 0:
        with np.errstate(invalid="ignore"):
            equal |= np.abs(first - second) <= rtol * np.maximum(np.abs(first), np.abs(second))
    return np.asarray(equal, dtype=bool)


def _json_number(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


__all__ = [
    "DATA",
    "EXTREME_INPUT",
    "KINDS",
    "NUMERICS",
    "REPRODUCIBLE",
    "TRANSIENT",
    "Attribution",
    "FirstRun",
    "LayerCall",
    "Replayed",
    "attribute",
    "first_bad_index",
    "layer_watch",
    "numbers",
    "tensors",
]
