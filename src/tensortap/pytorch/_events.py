"""Process-wide torch events, dispatched to the live PyTorch hooks.

Installed once, when the first PyTorch hook is created (under zero code change earlier, when
the script imports torch: :func:`install`):

- ``Tensor.backward`` is wrapped so hooks learn that a backward pass ended, and on which tensor
  (the loss is saved from there when no loss module or ``record_loss`` provided one);
- global optimizer step hooks tell hooks that an optimizer stepped (each hook keeps only the
  optimizers that update its models' parameters);
- ``step`` of torch's learning-rate schedulers (``LRScheduler`` and the subclasses that define
  their own) is wrapped so hooks learn which schedulers drive which optimizer;
- torch's gradient clipping functions (``torch.nn.utils.clip_grad_norm_``, ``clip_grad_value_``,
  ``clip_grads_with_norm_``, as ``torch.nn.utils`` and ``torch.nn.utils.clip_grad`` name them)
  are wrapped so hooks see the gradients before they are clipped, the clip threshold, and
  the total norm from before the clip (what ``clip_grad_norm_`` returned; the ``total_norm``
  handed to ``clip_grads_with_norm_``, as Accelerate >= 1.16 clips: it computes the norm
  with ``get_total_norm`` and clips with it). Code
  that bound one of them to a name of its own before the first hook was made (``from
  torch.nn.utils import clip_grad_norm_`` at the top of a script) calls the original: the hook
  then saves the gradients as the optimizer receives them, clipped (not under zero code change,
  which installs the wrappers first);
- the functional losses are wrapped (:func:`tensortap.pytorch._outcome.patch_functional`): the
  regression losses (``F.mse_loss``, ``F.l1_loss``, ``F.smooth_l1_loss``, ``F.huber_loss``,
  which ``nn.MSELoss`` and its kin call too) so hooks see the prediction and the target a
  regression's loss compared (its outcome), in training and in an evaluation under
  ``no_grad`` alike; under zero code change (:func:`install`) the classification losses
  (``F.cross_entropy`` and its kin) too, so hooks sample the outcome they compare. The same
  caveat: a name bound before the wrappers were installed (``from torch.nn.functional import
  mse_loss`` before the first hook was made) calls the original; zero code change installs
  them before the script runs.

With no live hook, each event costs an empty loop.
"""

from __future__ import annotations

import functools
import threading
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from torch.optim.optimizer import (
    register_optimizer_step_post_hook,
    register_optimizer_step_pre_hook,
)

from tensortap.pytorch._batch_targets import watch_loaders
from tensortap.pytorch._outcome import REGRESSION, patch_functional, tap_classification

if TYPE_CHECKING:
    from tensortap.core._framework_events import FrameworkEvents

# A tuple of weak references, replaced on every change: iterating it is cheaper than a WeakSet.
_hooks: tuple[weakref.ref[FrameworkEvents], ...] = ()
_install_lock = threading.Lock()
_installed = False
_original_backward: Callable[..., Any] = torch.Tensor.backward


def _backward(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
    for ref in _hooks:
        hook = ref()
        if hook is not None:
            hook.before_backward(self)
    result = _original_backward(self, *args, **kwargs)
    for ref in _hooks:
        hook = ref()
        if hook is not None:
            hook.after_backward(self)
    return result


def _optimizer_pre(optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
    for ref in _hooks:
        hook = ref()
        if hook is not None:
            hook.before_optimizer_step(optimizer)


def _optimizer_post(optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
    for ref in _hooks:
        hook = ref()
        if hook is not None:
            hook.after_optimizer_step(optimizer)


#: The clipping functions wrapped, and the name of the threshold argument each takes second.
_CLIP_FUNCTIONS = {
    "clip_grad_norm_": "max_norm",
    "clip_grad_value_": "clip_value",
    "clip_grads_with_norm_": "max_norm",
}


#: The clipping function handed the total norm it clips with, (parameters, max_norm, total_norm).
_GIVEN_NORM = "clip_grads_with_norm_"


def _wrap_clip(original: Callable[..., Any], name: str, threshold_name: str) -> Callable[..., Any]:
    given_norm = name == _GIVEN_NORM

    @functools.wraps(original)
    def clip(parameters: Any, *args: Any, **kwargs: Any) -> Any:
        if _hooks:
            # A generator (model.parameters()) is read once here and handed on as a list.
            one = isinstance(parameters, torch.Tensor)
            parameters = [parameters] if one else list(parameters)
            threshold = args[0] if args else kwargs.get(threshold_name)
            for ref in _hooks:
                hook = ref()
                if hook is not None:
                    hook.before_clip(parameters, threshold_name, threshold)
            result = original(parameters, *args, **kwargs)
            norm = result
            if given_norm:
                norm = args[1] if len(args) > 1 else kwargs.get("total_norm")
            for ref in _hooks:
                hook = ref()
                if hook is not None:
                    hook.after_clip(parameters, threshold_name, norm)
            return result
        return original(parameters, *args, **kwargs)

    return clip


def _patch_clipping() -> None:
    from torch.nn import utils
    from torch.nn.utils import clip_grad

    for name, threshold_name in _CLIP_FUNCTIONS.items():
        original = getattr(utils, name, None)
        if original is None:  # an older torch without it
            continue
        wrapped = _wrap_clip(original, name, threshold_name)
        setattr(utils, name, wrapped)
        if getattr(clip_grad, name, None) is original:
            setattr(clip_grad, name, wrapped)


def _functional_loss(
    name: str, kind: str, input: Any, target: Any, ignore_index: int | None, loss: Any
) -> None:
    """A wrapped functional loss ran (:func:`tensortap.pytorch._outcome.patch_functional`)."""
    if kind == REGRESSION:
        for ref in _hooks:
            hook = ref()
            if hook is not None:
                hook.after_regression_loss(name, input, target)
    else:
        classification_loss(kind, input, target, ignore_index, loss)


def classification_loss(
    kind: str, scores: Any, target: Any, ignore_index: int | None, loss: Any = None
) -> None:
    """A classification loss of ``kind`` compared ``scores`` with ``target`` and gave ``loss``
    (a functional loss, or Hugging Face's label smoother under zero code change)."""
    for ref in _hooks:
        hook = ref()
        if hook is not None:
            hook.after_functional_loss(kind, scores, target, ignore_index, loss)


def _wrap_scheduler_step(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def step(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = original(self, *args, **kwargs)
        for ref in _hooks:
            hook = ref()
            if hook is not None:
                hook.after_scheduler_step(self)
        return result

    return step


def _patch_schedulers() -> None:
    from torch.optim import lr_scheduler

    base = lr_scheduler.LRScheduler
    classes = [
        c for c in vars(lr_scheduler).values() if isinstance(c, type) and issubclass(c, base)
    ]
    for cls in dict.fromkeys(classes):
        if "step" in cls.__dict__:
            cls.step = _wrap_scheduler_step(cls.__dict__["step"])  # type: ignore[method-assign]


def _install() -> None:
    global _installed
    with _install_lock:
        if _installed:
            return
        wrapped = functools.wraps(_original_backward)(_backward)
        torch.Tensor.backward = wrapped  # type: ignore[method-assign]
        register_optimizer_step_pre_hook(_optimizer_pre)
        register_optimizer_step_post_hook(_optimizer_post)
        _patch_schedulers()
        _patch_clipping()
        patch_functional(_functional_loss)
        _installed = True


def install(classification_outcome: bool = False) -> None:
    """Install the wrappers now (zero code change: before the script binds names of its own to
    the functions wrapped) rather than when the first hook is made; with
    ``classification_outcome``, the functional classification losses hand their inputs on too
    (:func:`tensortap.pytorch._outcome.tap_classification`), and each batch a ``DataLoader``
    yields is looked at for its targets (:func:`tensortap.pytorch._batch_targets.watch_loaders`:
    the outcome of an evaluation that computes no loss)."""
    if classification_outcome:
        tap_classification()
        watch_loaders()
    _install()


def attach(hook: FrameworkEvents) -> None:
    """Start sending events to ``hook``."""
    global _hooks
    _install()
    with _install_lock:
        _hooks = (*(r for r in _hooks if r() is not None), weakref.ref(hook))


def detach(hook: FrameworkEvents) -> None:
    global _hooks
    with _install_lock:
        _hooks = tuple(r for r in _hooks if r() is not None and r() is not hook)
