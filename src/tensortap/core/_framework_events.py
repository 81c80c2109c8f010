"""What a training framework tells a hook: :class:`FrameworkEvents`.

tensortap learns some of a framework's events from patches of its own, installed once per
process (for torch: ``Tensor.backward``, the global optimizer step hooks, the learning-rate
schedulers' ``step``, the gradient clipping functions, the functional losses; see
:mod:`tensortap.pytorch._events` and :mod:`tensortap.attach`). Those patches hand each event
to the live hooks through this protocol, a small named set of events in the manner of
ignite's engine events, and never through a hook's private names. A hook that implements it
(:class:`tensortap.pytorch.Hook`) is told every event; what it does with one is its own
business. Frameworks with callbacks of their own (Keras, Lightning, Hugging Face) tell their
hooks through those callbacks instead.

The members are public by name so that the patches may call them; they are not for users, and
each is called from inside the framework's own call: a member never raises (the hook contains
its failures) and does no work on a step where nothing is due.
"""

from __future__ import annotations

from typing import Any, Protocol


class FrameworkEvents(Protocol):
    """The events a framework's patched calls hand to a hook (see the module docstring)."""

    def before_model_forward(self, module: Any, args: Any) -> None:
        """A registered model's forward pass is about to run on ``args``."""
        ...

    def before_backward(self, tensor: Any) -> None:
        """``tensor.backward()`` (the loss's, most often) is about to run."""
        ...

    def after_backward(self, tensor: Any) -> None:
        """``tensor.backward()`` returned: the gradients of the pass are in place."""
        ...

    def before_clip(self, params: list[Any], threshold_name: str, threshold: Any) -> None:
        """A gradient clipping function is about to clip the gradients of ``params``
        (read once into a list) at ``threshold`` (its argument ``threshold_name``)."""
        ...

    def after_clip(self, params: list[Any], threshold_name: str, norm: Any) -> None:
        """The clipping function returned; ``norm`` is the gradients' total norm from before
        the clip where the function knew one (what ``clip_grad_norm_`` returned, the
        ``total_norm`` handed to ``clip_grads_with_norm_``), else None."""
        ...

    def after_regression_loss(self, name: str, prediction: Any, target: Any) -> None:
        """The functional regression loss ``name`` (``mse_loss``) compared ``prediction`` with
        ``target``: the step's regression outcome."""
        ...

    def before_optimizer_step(self, optimizer: Any) -> None:
        """``optimizer.step()`` is about to apply the gradients."""
        ...

    def after_optimizer_step(self, optimizer: Any) -> None:
        """``optimizer.step()`` returned: the parameters hold the step's update."""
        ...

    def after_scheduler_step(self, scheduler: Any) -> None:
        """A learning-rate scheduler's ``step()`` returned (it sets its optimizer's rate)."""
        ...

    def after_functional_loss(
        self, kind: str, scores: Any, target: Any, ignore_index: int | None, loss: Any = None
    ) -> None:
        """A functional classification loss (``F.cross_entropy`` and its kin: ``kind``) ran
        on ``scores`` and ``target`` and gave ``loss`` (None where not known)."""
        ...
