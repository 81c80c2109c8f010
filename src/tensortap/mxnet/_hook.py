"""The MXNet Gluon hook: inputs and outputs of every block, weights, biases, gradients, losses.

Names are Gluon's, as smdebug wrote them: a block's inputs and outputs are
``<block.name>_input_<i>`` and ``<block.name>_output_<i>``
(``convolutionalautoencoder0_hybridsequential0_dense0_output_0``, ``l2loss0_input_1``);
parameters keep their names (``hybridsequential0_conv0_weight``) and gradients are
``gradient/<parameter>``. ReLU blocks (``Activation('relu')``, and the ``relu`` block a layer
built with ``activation='relu'`` holds) also join ``relu_activations``.

Steps: every call of the (first) registered block starts a new step (the first call of a mode
continues the step that ``set_mode`` opened). At the end of a step the hook saves the weights
(after the update) and, when the forward ran under ``autograd.record()``, the gradients it
produced. The mode follows ``autograd.is_training()`` until ``set_mode`` is called.

Hybridized blocks run as one compiled graph: the registered block's own inputs and outputs, the
loss blocks', the weights and the gradients are captured; blocks inside the graph are not called
one by one, so their outputs are not (call ``hybridize()`` after debugging, or keep the blocks
whose outputs you need imperative).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from functools import partial
from typing import TYPE_CHECKING, Any

import mxnet as mx
from mxnet import autograd, gluon

from tensortap.core._collections import CollectionKeys
from tensortap.core._handles import HookHandle
from tensortap.core._modes import ModeKeys
from tensortap.exceptions import InvalidConfigError
from tensortap.hook._hook import Hook as BaseHook
from tensortap.hook._hook import HookOptions, OutDir

if TYPE_CHECKING:
    from typing_extensions import Unpack

logger = logging.getLogger(__name__)

RELU_ACTIVATIONS = "relu_activations"
GRADIENT_PREFIX = "gradient/"
_RELU_BLOCK = re.compile(r"(^|_)relu\d*$")


def _arrays(value: Any) -> Iterator[Any]:
    """The NDArrays in a block's inputs or outputs (nested lists and tuples flattened)."""
    if isinstance(value, (list, tuple)):
        for item in value:
            yield from _arrays(item)
    elif isinstance(value, mx.nd.NDArray):  # not a Symbol (deferred shape inference)
        yield value


def _is_relu(block: gluon.Block) -> bool:
    return getattr(block, "_act_type", None) == "relu" or bool(_RELU_BLOCK.search(block.name))


class Hook(BaseHook):
    """Saves tensors of Gluon blocks into a trial (see the module docstring)::

    hook = Hook(out_dir="runs/job1", save_config=SaveConfig(save_interval=10))
    hook.register_block(net)
    hook.register_loss(loss_fn)
    """

    known_collections = (*BaseHook.known_collections, RELU_ACTIVATIONS)
    framework = "mxnet"

    def __init__(self, out_dir: OutDir, **options: Unpack[HookOptions]) -> None:
        super().__init__(out_dir, **options)
        self.get_collection(RELU_ACTIVATIONS)
        self._blocks: list[gluon.Block] = []
        self._losses: list[gluon.Block] = []
        self._params: dict[str, Any] = {}
        self._forward_in_step = False
        self._recording = False  # a forward of this step ran under autograd.record()
        self._recorder.add_step_end_callback(self._on_step_end)

    # -- registration --
    def register_block(self, block: gluon.Block) -> HookHandle:
        """Watch ``block`` and its children. Each call of the first block registered is a step;
        blocks registered after it (the two halves of a GAN, say) are watched within its steps.
        Returns the registration's handle: ``handle.remove()`` detaches the block's Gluon hooks
        and forgets it; ``close()`` removes every registration."""
        if not isinstance(block, gluon.Block):
            raise InvalidConfigError(
                f"register_block expects a mxnet.gluon.Block, got {type(block).__name__}"
            )
        if any(b is block for b in self._blocks):
            return self._registrations[id(block)]
        installed = []
        if not self._blocks:
            installed.append(block.register_forward_pre_hook(self._on_forward))
        self._blocks.append(block)
        params = dict(block.collect_params().items())
        self._params.update(params)
        for child in self._descendants(block):
            installed.append(child.register_forward_hook(self._on_block_output))
        undo = [h.detach for h in installed]
        return self._registered(id(block), *undo, partial(self._forget_block, block, list(params)))

    def register_module(self, block: gluon.Block) -> HookHandle:
        """The other adapters' name for :meth:`register_block`."""
        return self.register_block(block)

    register_hook = register_module  # smdebug's name

    def _descendants(self, block: gluon.Block) -> Iterator[gluon.Block]:
        yield block
        for child in block._children.values():
            yield from self._descendants(child)

    def register_loss(self, loss_block: gluon.Block) -> HookHandle:
        """Save a loss block's output in ``losses`` (``<loss.name>_output_0``) and its inputs."""
        if not isinstance(loss_block, gluon.Block):
            raise InvalidConfigError(
                "register_loss expects a Gluon loss block (e.g. gluon.loss.L2Loss()), got "
                f"{type(loss_block).__name__}"
            )
        if any(b is loss_block for b in self._losses):
            return self._registrations[id(loss_block)]
        self._losses.append(loss_block)
        installed = loss_block.register_forward_hook(self._on_loss_output)
        forget = partial(self._forget_block, loss_block, [])
        return self._registered(id(loss_block), installed.detach, forget)

    def _forget_block(self, block: gluon.Block, params: list[str]) -> None:
        """A block's registration was removed: its tensors are no longer saved."""
        with self._lock:
            self._blocks = [b for b in self._blocks if b is not block]
            self._losses = [b for b in self._losses if b is not block]
            for name in params:
                self._params.pop(name, None)

    # -- step and mode --
    def _mode_changed(self) -> None:
        self._forward_in_step = False  # set_mode moved on: the mode no longer follows autograd

    def next_step(self) -> None:
        with self._lock:
            super().next_step()
            self._forward_in_step = False

    # -- events --
    def _on_forward(self, block: gluon.Block, inputs: Any) -> None:
        with self._lock:
            if not self._closed:
                self._guard_event(self._begin_forward)

    def _begin_forward(self) -> None:
        recorder = self._recorder
        if not self._explicit_mode:
            mode = ModeKeys.TRAIN if autograd.is_training() else ModeKeys.EVAL
            if mode != recorder.mode:
                # the first step starts in GLOBAL only because no forward had told the mode yet
                recorder.set_mode(mode, keep_step=recorder.mode == ModeKeys.GLOBAL)
                self._forward_in_step = False  # a new step, or the first one moved to the mode
        if self._forward_in_step:
            recorder.next_step()
        self._forward_in_step = True
        self._recording = self._recording or autograd.is_recording()
        recorder.touch()

    def _on_block_output(self, block: gluon.Block, inputs: Any, outputs: Any) -> None:
        with self._lock:
            if not self._closed and self._recorder.is_anything_due():
                relu = (RELU_ACTIVATIONS,) if _is_relu(block) else ()
                self._guard_event(self._save_io, block.name, inputs, outputs, relu)

    def _on_loss_output(self, block: gluon.Block, inputs: Any, outputs: Any) -> None:
        with self._lock:
            if not self._closed and self._recorder.is_anything_due():
                self._guard_event(self._save_io, block.name, inputs, outputs, (), True)

    # -- saving --
    def _save_array(self, name: str, array: Any, collections: tuple[str, ...]) -> None:
        """Save from a framework event: a failure loses this tensor only, never the step."""
        try:
            self._save_lazy(name, collections, array.asnumpy)
        except Exception as exc:
            self._contain(exc, f"saving {name!r}")

    def _save_io(
        self,
        name: str,
        inputs: Any,
        outputs: Any,
        extra: tuple[str, ...],
        loss: bool = False,
    ) -> None:
        for i, array in enumerate(_arrays(inputs)):
            self._save_array(f"{name}_input_{i}", array, (CollectionKeys.INPUTS, *extra))
        out = (CollectionKeys.OUTPUTS, CollectionKeys.LOSSES) if loss else (CollectionKeys.OUTPUTS,)
        for i, array in enumerate(_arrays(outputs)):
            self._save_array(f"{name}_output_{i}", array, (*out, *extra))

    def _on_step_end(self) -> None:
        """Weights after the update; gradients of a step that recorded a backward graph."""
        try:
            if self._recorder.is_anything_due():
                for name, param in self._params.items():
                    if param._data is None:  # deferred initialisation not done yet
                        continue
                    bias = name.endswith("bias")
                    kind = CollectionKeys.BIASES if bias else CollectionKeys.WEIGHTS
                    self._save_array(name, param.data(), (kind,))
                    if self._recording and param.grad_req != "null":
                        grad = param.grad()
                        self._save_array(GRADIENT_PREFIX + name, grad, (CollectionKeys.GRADIENTS,))
        except Exception as exc:
            self._contain(exc, "Hook._on_step_end")
        self._recording = False


#: The open MXNet hook made last in this process (see :meth:`tensortap.hook._hook.Hook.current`).
get_hook = Hook.current
