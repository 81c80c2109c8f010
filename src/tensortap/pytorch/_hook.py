"""The PyTorch hook: weights, gradients, activations, losses and optimizer state of torch models.

Work happens only on steps where something is due. On other steps the hook costs a few Python
calls per iteration: the top-level model's forward pre-hook, the wrapped ``Tensor.backward``,
the optimizer step hooks; per-module forward hooks exist only during steps that are due.
See ``docs/pytorch.md`` for the step rule, the names and the collections.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable, Iterable
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from tensortap.core._collections import (
    GRADIENT_CLIP,
    INITIAL_WEIGHTS,
    ROUTER,
    TRAINING_LOOP,
    CollectionKeys,
)
from tensortap.core._handles import HookHandle
from tensortap.core._modes import ModeKeys
from tensortap.core._outcome import MAX_REGRESSION_VALUES, OUTCOME_NAMES
from tensortap.core._recorder import RAW_PLAN, records_from_array
from tensortap.core._reduction_config import ReductionConfig
from tensortap.core._stages import stage_marks_for
from tensortap.core._step_tracker import StepTracker, Update
from tensortap.exceptions import InvalidConfigError
from tensortap.hook._hook import Hook as BaseHook
from tensortap.hook._hook import HookOptions, OutDir
from tensortap.pytorch import _batch_targets as batch_targets
from tensortap.pytorch import _events as events
from tensortap.pytorch._compiled import is_compiled, refuse_io_inside_compiled, warn_traced
from tensortap.pytorch._compiled_slots import CompiledTaps, tap
from tensortap.pytorch._config import ConfigWatch
from tensortap.pytorch._convert import TorchConverter
from tensortap.pytorch._due import DueKinds, Kind
from tensortap.pytorch._gradients import clip_threshold, inverse_scale, save_gradients
from tensortap.pytorch._initial import InitialWeights
from tensortap.pytorch._loop_facts import LoopFacts
from tensortap.pytorch._module_io import ModuleIOHooks
from tensortap.pytorch._naming import (
    ALL_EXCLUDES,
    GRADIENT_PREFIX,
    LOSS_COLLECTIONS,
    OPTIMIZER_COLLECTIONS,
    OPTIMIZER_VARIABLES,
    RELU_ACTIVATIONS,
    ModuleNames,
    flatten_tensors,
    unwrap,
)
from tensortap.pytorch._optimizer import optimizer_tensors
from tensortap.pytorch._outcome import REGRESSION_LOSS_MODULES, OutcomeTap
from tensortap.pytorch._registry import Param, Registry
from tensortap.pytorch._router import RouterStats, check_router, find_routers, router_shape
from tensortap.pytorch._slot_layout import (
    ACTIVATION_GRADIENTS,
    check_statistics,
    refuse_collections,
    refuse_not_derivable,
)
from tensortap.pytorch._slots import SlotStatistics
from tensortap.pytorch._trainer_controls import TrainerControls
from tensortap.pytorch._vitals import StepVitals

if TYPE_CHECKING:
    from typing_extensions import Unpack

logger = logging.getLogger(__name__)

_NUMPY_SCALARS = frozenset((torch.float16, torch.float32, torch.float64, torch.int32, torch.int64))


def _distributed() -> tuple[int, int] | None:
    """(rank, world size) when torch.distributed is initialised."""
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return None


#: where a functional regression loss's inputs are saved, as a loss module's are
_INPUTS = (CollectionKeys.INPUTS,)


class Hook(TrainerControls, BaseHook):
    """Saves tensors of torch models into a trial.

    ::

        hook = Hook(out_dir="runs/job1", save_config=SaveConfig(save_interval=10),
                    include_collections=["weights", "gradients", "losses", "relu_activations"])
        hook.register_module(model)
        hook.register_loss(loss_fn)

    Under ``torch.distributed`` each rank writes as ``worker_<rank>`` unless ``worker`` is given.
    Steps end automatically (see :mod:`tensortap.core._step_tracker`); with ``auto_step=False``
    they end only at ``hook.next_step()`` (calling it also turns automatic steps off).
    """

    known_collections = (
        *BaseHook.known_collections,
        RELU_ACTIVATIONS,
        OPTIMIZER_VARIABLES,
        INITIAL_WEIGHTS,
        TRAINING_LOOP,
        GRADIENT_CLIP,
        ROUTER,
        ACTIVATION_GRADIENTS,
    )
    framework = "pytorch"

    def __init__(
        self,
        out_dir: OutDir,
        *,
        auto_step: bool = True,
        statistics: str = "per_tensor",
        **options: Unpack[HookOptions],
    ) -> None:
        if not isinstance(auto_step, bool):
            raise InvalidConfigError(f"auto_step must be True or False, got {auto_step!r}")
        self._slots = check_statistics(statistics) == "slots"
        reductions = options.get("reduction_config")
        if self._slots and isinstance(reductions, ReductionConfig):  # before anything opens
            refuse_not_derivable("the hook's reduction_config", reductions.reduction_specs)
        dist = _distributed()
        if dist is not None:  # each rank writes as its own worker
            if options.get("worker") is None:
                options["worker"] = dist[0]
            if options.get("num_workers") is None:
                options["num_workers"] = dist[1]
        super().__init__(out_dir, **options)
        self.get_collection(RELU_ACTIVATIONS)
        self.get_collection(OPTIMIZER_VARIABLES)
        self.get_collection(CollectionKeys.ALL).exclude(ALL_EXCLUDES)
        if CollectionKeys.GRADIENTS in self._recorder.include_collections:
            self._recorder.include_collection(GRADIENT_CLIP)  # the clip the gradients went to
        self._slot_stats = SlotStatistics() if self._slots else None
        self._converter = TorchConverter(self._slot_stats)
        self._taps: dict[int, CompiledTaps] = {}  # in-graph slots of compiled models, by id
        self._tracker = StepTracker()
        if not auto_step:
            self._tracker.stop_automatic()
        self._backward_reached = False
        self._models: list[nn.Module] = []  # as registered (wrappers included)
        self._registry = Registry()
        self._names = self._registry.names
        self._optimizers: list[tuple[str, torch.optim.Optimizer]] = []
        self._optimizer_owned: weakref.WeakKeyDictionary[torch.optim.Optimizer, bool] = (
            weakref.WeakKeyDictionary()
        )
        self._scaler: Any = None
        self._due = DueKinds(self._recorder, self._registry)
        self._in_graph: set[int] = set()  # ids of modules whose slots a compiled graph computes
        self._module_io = ModuleIOHooks(
            self._due, self._registry, self._on_module_forward, self._in_graph
        )
        self._explicit_gradients = False
        self._paused = False
        self._losses_on_request = False
        self._backward_losses: Callable[[torch.Tensor], None] | None = None
        self._loss_seen = False
        self._gradients_taken: set[int] = set()  # ids of parameters whose gradients this
        # step saved before they were clipped: not saved again (clipped) before the update
        self._initial = InitialWeights(self._recorder)
        self._routers = RouterStats(
            lambda: self._recorder.mode, self._save_contained, self._contain
        )
        self._vitals = StepVitals(self._recorder)  # every step's (core._vitals)
        self._recorder.add_step_end_callback(self._on_step_end)
        self._loop = LoopFacts(self._recorder, self._registry, self._contain)
        self._config_watch = ConfigWatch(self.gather_config)  # the run's configuration
        self._outcome = OutcomeTap(self._recorder, self._save_outcome)
        # the targets of the batch the forward under way reads (zero code change watches the
        # loaders: _batch_targets), for an evaluation that computes no loss
        self._batch_target: torch.Tensor | None = None
        self._regression_module = False  # a registered regression loss module saves its inputs
        # the model the last trainer fit of this trial trained (fit_begins), in any session
        self._stages = stage_marks_for(self.out_dir, self.worker)
        events.attach(self)

    # -- registration --
    # Each register_* returns a HookHandle: handle.remove() takes away the torch hooks it
    # installed and forgets the object; close() removes them all, so a closed hook leaves
    # nothing on the model and keeps none of it alive.
    def register_module(self, module: nn.Module, name: str | None = None) -> HookHandle:
        """Watch ``module`` and its submodules: a forward of ``module`` drives step counting.

        ``name`` prefixes the names of a second model's tensors (default: its class name).
        Returns the registration's handle (the same one when ``module`` is registered already).
        """
        if not isinstance(module, nn.Module):
            raise InvalidConfigError(
                f"register_module expects a torch.nn.Module, got {type(module).__name__}"
            )
        if any(m is module for m in self._models):
            return self._registrations[id(module)]
        if self._slots:
            refuse_collections(self._recorder)  # collections configured since the hook was made
        compiled = is_compiled(module)
        if compiled:
            refuse_io_inside_compiled(self._recorder, self._slots)
        self._registry.add_model(unwrap(module), name, compiled)
        if ROUTER in self._recorder.include_collections:
            self._find_routers(unwrap(module), compiled)
        if compiled and self._slots and RELU_ACTIVATIONS in self._recorder.include_collections:
            taps = self._taps[id(module)] = tap(unwrap(module), self._registry, self._recorder)
            self._in_graph.update(taps.covered)
        pre = module.register_forward_pre_hook(self.before_model_forward)
        post = module.register_forward_hook(self._on_model_output)
        self._models.append(module)
        self._optimizer_owned = weakref.WeakKeyDictionary()  # ownership may change
        self._guard_event(self._config_watch.on_model, unwrap(module))
        return self._registered(id(module), pre.remove, post.remove, partial(self._forget, module))

    def register_router(
        self,
        module: nn.Module,
        *,
        top_k: int | None = None,
        num_experts: int | None = None,
        scores: str = "logits",
        name: str | None = None,
        group: Any = None,
    ) -> HookHandle:
        """Save what the mixture-of-experts router ``module`` does in ``router`` (included
        from now on): tokens per expert over each saving window, summed over the ranks of
        ``group`` (default: all), the load-balance loss, dead experts and the imbalance (see
        :mod:`tensortap.pytorch._router`). Its output must hold scores ``[..., num_experts]``
        (``scores="logits"``, or ``"probs"`` when already normalised) and/or the chosen
        experts' integer indices ``[..., top_k]``. ``top_k`` and ``num_experts`` default to
        the module's attributes of those names (``num_experts``: an ``nn.Linear`` gate's
        ``out_features``); ``name`` to its path in a registered model."""
        check_router(module, self._registry.compiled)
        num_experts, top_k = router_shape(module, num_experts, top_k)
        known = self._names.get(module)
        path = name or (known.path if known is not None else type(module).__name__)
        self._routers.add(module, path, num_experts, top_k, scores, group)
        self._recorder.include_collection(ROUTER)
        return self._registered(("router", id(module)), partial(self._routers.remove, module))

    def _find_routers(self, core: nn.Module, compiled: bool) -> None:
        """``router`` is included: watch the model's routers found by the convention."""
        for module in find_routers(core, compiled, bool(self._routers)):
            if ("router", id(module)) not in self._registrations:
                self.register_router(module)

    def register_hook(self, module: nn.Module) -> HookHandle:
        """smdebug's name for :meth:`register_module`."""
        return self.register_module(module)

    def register_loss(self, loss_module: nn.Module) -> HookHandle:
        """Save the output of a loss module in ``losses`` (``<LossClass>_output_0``)."""
        if not isinstance(loss_module, nn.Module):
            raise InvalidConfigError(
                f"register_loss expects a torch.nn.Module loss (e.g. nn.CrossEntropyLoss()), got "
                f"{type(loss_module).__name__}; for a functional loss call hook.record_loss(loss)"
            )
        known = self._registrations.get(id(loss_module))
        if known is not None or not self._registry.add_loss(loss_module):
            return known or HookHandle(())  # a module of a registered model: nothing installed
        if isinstance(loss_module, REGRESSION_LOSS_MODULES):
            self._regression_module = True
        post = loss_module.register_forward_hook(self._on_loss_forward)
        # held weakly: a loss made anew in each forward pass must be free to go
        forget = partial(self._forget_loss, weakref.ref(loss_module))
        handle = self._registered(id(loss_module), post.remove, forget)
        # a collected loss's registration goes with it: its id is free for the next module
        # (a loss made anew in each forward pass), which would otherwise be taken as known
        # (the hook held weakly: a loss that outlives a closed hook does not keep it alive)
        drop = weakref.WeakMethod(self._drop_registration)
        weakref.finalize(loss_module, _if_alive, drop, id(loss_module), handle)
        return handle

    def _drop_registration(self, key: int, handle: HookHandle) -> None:
        """A registered loss module was collected: its registration goes."""
        if self._registrations.get(key) is handle:
            self._registrations.pop(key, None)

    def register_optimizer(self, optimizer: torch.optim.Optimizer) -> HookHandle:
        """Save the optimizer's hyperparameters and state in ``optimizer_variables``; its
        ``step()`` then marks the end of a training step (so gradient accumulation over several
        backward passes is one step)."""
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise InvalidConfigError(
                "register_optimizer expects a torch.optim.Optimizer, got "
                f"{type(optimizer).__name__}"
            )
        if any(o is optimizer for _, o in self._optimizers):
            return self._registrations[id(optimizer)]
        n = len(self._optimizers)
        self._optimizers.append(("optimizer" if n == 0 else f"optimizer_{n}", optimizer))
        self._optimizer_owned[optimizer] = True
        self._tracker.expect(Update.OPTIMIZER_STEP)
        return self._registered(id(optimizer), partial(self._forget_optimizer, optimizer))

    @property
    def grad_scaler(self) -> Any:
        """The ``torch.amp.GradScaler`` registered (:meth:`register_grad_scaler`), or None."""
        return self._scaler

    def register_grad_scaler(self, scaler: Any) -> HookHandle:
        """Use a ``torch.amp.GradScaler``: gradients are saved unscaled, and its ``update()``
        marks the end of a training step (steps it skips for inf/NaN still count)."""
        if not callable(getattr(scaler, "update", None)) or not hasattr(scaler, "scale"):
            raise InvalidConfigError(
                f"register_grad_scaler expects a torch.amp.GradScaler, got {type(scaler).__name__}"
            )
        if self._scaler is scaler:
            return self._registrations[id(scaler)]
        self._scaler = scaler
        original = scaler.update
        own = vars(scaler).get("update")  # an update the scaler's owner set on it, if any
        hook_ref = weakref.ref(self)

        def update(*args: Any, **kwargs: Any) -> Any:
            result = original(*args, **kwargs)
            hook = hook_ref()
            if hook is not None:
                hook._after_update(Update.SCALER_UPDATE)
            return result

        def restore() -> None:
            if own is None:
                vars(scaler).pop("update", None)
            else:
                scaler.update = own
            if self._scaler is scaler:
                self._scaler = None
                self._expect_registered_updates()

        scaler.update = update
        self._tracker.expect(Update.SCALER_UPDATE)
        return self._registered(id(scaler), restore)

    def _forget(self, module: nn.Module) -> None:
        """A model's registration was removed: its tensors are no longer saved."""
        with self._lock:
            self._models = [m for m in self._models if m is not module]
            self._registry.remove_model(unwrap(module))
            taps = self._taps.pop(id(module), None)
            if taps is not None:
                taps.remove()
                self._in_graph.difference_update(taps.covered)
            self._module_io.remove()  # installed again at the next due step, for those left
            self._optimizer_owned = weakref.WeakKeyDictionary()

    def _forget_loss(self, ref: weakref.ref[nn.Module]) -> None:
        module = ref()
        if module is None:
            return  # collected: its name went with it (Registry.add_loss)
        with self._lock:
            self._registry.remove_loss(module)
            self._module_io.remove()

    def _forget_optimizer(self, optimizer: torch.optim.Optimizer) -> None:
        with self._lock:
            self._optimizers = [(n, o) for n, o in self._optimizers if o is not optimizer]
            self._optimizer_owned = weakref.WeakKeyDictionary()
            self._expect_registered_updates()

    def _expect_registered_updates(self) -> None:
        """Steps end at the most specific update still registered."""
        self._tracker.update = Update.BACKWARD
        if self._optimizers:
            self._tracker.expect(Update.OPTIMIZER_STEP)
        if self._scaler is not None:
            self._tracker.expect(Update.SCALER_UPDATE)

    # -- explicit saving --
    def save_tensor(
        self, name: str, value: Any, collections: str | Iterable[str] | None = None
    ) -> bool:
        """Save a torch tensor (or anything array-like) if a collection it joins is due."""
        if name in OUTCOME_NAMES:  # the script's own outcome wins over the sampled one
            with self._lock:
                self._outcome.stand_aside()
        if not isinstance(value, torch.Tensor):
            return super().save_tensor(name, value, collections)
        if value.numel() == 1 and value.device.type == "cpu" and value.dtype in _NUMPY_SCALARS:
            # A loss or a metric: one number, cheaper through NumPy than through the converter.
            return super().save_tensor(name, value.detach().numpy().copy(), collections)
        with self._lock:
            if self._closed:
                self._warn_closed()
                return False
            return bool(self._guard(self._save, name, value, collections or ("default",)))

    def record_tensor_value(self, tensor_name: str, tensor_value: Any) -> bool:
        """smdebug's name for saving a value computed outside a module (in ``default``)."""
        return self.save_tensor(tensor_name, tensor_value)

    def record_loss(self, loss: Any, name: str = "loss") -> bool:
        """Save a loss computed without a loss module (``F.cross_entropy``) in ``losses``."""
        with self._lock:
            self._loss_seen = True
        self._guard(self._vitals.on_recorded_loss, loss)
        if isinstance(loss, torch.Tensor):
            if self._loop.enabled:
                self._guard_event(self._loop.on_recorded_loss, loss)
            return self.save_tensor(name, loss, LOSS_COLLECTIONS)
        return self.save_scalar(name, loss, LOSS_COLLECTIONS)

    # -- step and mode --
    def _mode_changed(self) -> None:
        self._tracker.reset()  # set_mode moved on: the mode no longer follows model.training

    def next_step(self) -> None:
        """Mark the end of a step explicitly; automatic step boundaries stop from here on."""
        with self._lock:
            if self._tracker.automatic:
                logger.info("tensortap: steps are marked by hook.next_step() from now on")
                self._tracker.stop_automatic()
            super().next_step()
            self._tracker.reset()

    def close(self) -> Any:
        events.detach(self)
        with self._lock:
            self._module_io.remove()
            if self._loop.enabled and not self._closed:
                self._guard_event(self._loop.close)
        return super().close()

    # -- events: core._framework_events.FrameworkEvents, which _events.py and attach/ call --
    def before_model_forward(self, module: nn.Module, args: Any) -> None:
        if torch.compiler.is_compiling():  # the model was compiled after it was registered
            warn_traced()
        with self._lock:
            if self._closed or self._paused:
                return
            self._guard_event(self._begin_forward, module, args)
            if not self._config_watch.batch_seen and self._recorder.mode == ModeKeys.TRAIN:
                self._guard_event(self._config_watch.on_train_forward, args)

    def _begin_forward(self, module: nn.Module, args: Any = ()) -> None:
        recorder = self._recorder
        if not self._explicit_mode:
            mode = ModeKeys.TRAIN if module.training and torch.is_grad_enabled() else ModeKeys.EVAL
            if mode != recorder.mode:
                # The first step starts in GLOBAL only because no forward had told the mode yet.
                recorder.set_mode(mode, keep_step=recorder.mode == ModeKeys.GLOBAL)
                self._tracker.reset()
        if self._tracker.forward_starts_step(recorder.mode):
            recorder.next_step()
            self._tracker.reset()
        recorder.touch()
        self._batch_target = batch_targets.take()  # its batch's: this forward's only
        self._vitals.on_forward(args)
        if recorder.mode == ModeKeys.TRAIN:
            if self._stages.due:  # the first TRAIN step of a fit of another model
                self._stages.save(recorder)
                self._initial.again()  # and its weights before their first update
            with self._converter.together(replicated=True):  # parameters: one per model
                self._initial.before_update(self._registry.params, self._save_contained)
        self._tracker.on_forward()
        self._module_io.update()
        if self._loop.enabled:
            self._guard_event(self._loop.on_forward, module)

    def _on_model_output(self, module: nn.Module, args: Any, output: Any) -> None:
        """Learn whether a later backward pass runs through this model (not some other graph);
        in an evaluation, offer its scores for the batch's targets."""
        if self._batch_target is not None:
            target, self._batch_target = self._batch_target, None
            if self._recorder.mode == ModeKeys.EVAL:  # contained: never the forward's failure
                self._guard_event(self._offer_scores, output, target)
        if self._closed or self._paused or not torch.is_grad_enabled():
            return
        if (
            self._tracker.update > Update.BACKWARD
            and not self._recorder.is_anything_due()
            and not self._vitals.wants_backward_loss
            and not (self._backward_losses is not None and self._vitals.enabled)
        ):  # (a trainer's loss comes from backward: the vital sign's of every step too)
            return  # the optimizer ends steps, and nothing is saved at this backward
        for t in flatten_tensors(output):
            if t.requires_grad:
                t.register_hook(self._mark_backward)  # type: ignore[no-untyped-call]
                return

    def _mark_backward(self, grad: torch.Tensor) -> None:
        self._backward_reached = True

    def after_backward(self, tensor: torch.Tensor) -> None:
        self._loop_event(self._loop.after_backward, tensor)  # reached the models or not
        with self._lock:
            if self._closed or not self._backward_reached:
                return  # a backward pass that did not reach a registered model
            self._backward_reached = False
            self._guard_event(self._on_backward, tensor)

    def _unscaled(self, loss: torch.Tensor) -> torch.Tensor:
        """The loss of ``scaler.scale(loss).backward()``, unscaled (a registered GradScaler)."""
        inverse = inverse_scale(self._scaler)
        return loss if inverse is None else loss.detach() * inverse.to(loss.device)

    def _on_backward(self, tensor: torch.Tensor) -> None:
        self._after_update(Update.BACKWARD)
        if tensor.numel() == 1:
            loss = self._unscaled(tensor).detach()
            self._vitals.on_backward_loss(loss)
            if self._backward_losses is not None:
                self._backward_losses(loss)
        if not self._optimizers and not self._explicit_gradients:
            # no optimizer ends the step: the gradients are complete after backward
            inverse = inverse_scale(self._scaler)
            params = (e[1] for e in self._registry.params)
            self._vitals.on_gradients(params, inverse, provisional=True)
        if not self._recorder.is_anything_due():
            return
        if self._registry.refresh():  # after backward: FSDP2 has resharded every parameter
            self._optimizer_owned = weakref.WeakKeyDictionary()
        if not self._loss_seen and not self._losses_on_request and tensor.numel() == 1:
            self._save_contained("loss", self._unscaled(tensor), LOSS_COLLECTIONS)
        if not self._optimizers and not self._explicit_gradients:
            self._save_gradients(unscale=True)  # with an optimizer: before its step

    def before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        with self._lock:
            if not self._closed:
                self._guard_event(self._on_optimizer_step, optimizer)

    def _on_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        owned = self._owns(optimizer)
        if self._loop.enabled:
            self._guard_event(self._loop.before_optimizer_step, optimizer, owned)
        if owned:
            self._vitals.on_optimizer_step(optimizer)
        if self._explicit_gradients:
            return
        if owned and not self._vitals.grad_norm_taken:  # not clipped: as the update sees them
            self._vitals.on_gradients(e[1] for e in self._registry.params)
        if owned and self._recorder.is_anything_due():
            self._save_gradients(unscale=False)  # GradScaler.step unscaled them already

    def before_clip(self, params: list[torch.Tensor], threshold_name: str, threshold: Any) -> None:
        with self._lock:
            if not self._closed and not self._paused:
                self._guard_event(self._on_clip, params, threshold_name, threshold)

    def _on_clip(self, params: list[torch.Tensor], threshold_name: str, threshold: Any) -> None:
        """Gradients are about to be clipped: save those of the registered models' parameters
        being clipped as they are (unless a trainer saves gradients itself, at a moment before
        the clip), and the threshold they are clipped to."""
        if threshold_name != "max_norm" and not self._vitals.grad_norm_taken:
            names = self._registry.param_names  # clipped by value: the norm before it
            if any(id(p) in names for p in params):
                self._vitals.on_gradients(params)
        if not self._recorder.is_anything_due():
            return
        ids = {id(p) for p in params}
        clipped = [entry for entry in self._registry.params if id(entry[1]) in ids]
        if not clipped:
            return  # another model's parameters
        if not self._explicit_gradients:
            # Before the clip GradScaler's gradients are unscaled already: scaler.unscale_
            # (or Accelerate) must run first for the clip to mean anything.
            self._save_gradients(unscale=False, params=clipped)
            self._gradients_taken.update(id(entry[1]) for entry in clipped)
        clip = clip_threshold(threshold_name, threshold)
        if clip is not None and GRADIENT_CLIP in self._recorder.include_collections:
            name, value = clip
            plan = self._recorder.begin(name, (GRADIENT_CLIP,))
            if plan is None and self._due(Kind.GRADIENTS):
                plan = RAW_PLAN  # with the gradients it belongs to, whatever its own schedule
            if plan is not None:
                array = np.asarray(value, dtype=np.float64)
                self._recorder.put(name, records_from_array(name, array, plan))

    def after_clip(self, params: list[torch.Tensor], threshold_name: str, norm: Any) -> None:
        """A clip by norm knew the gradients' total norm from before it: the step's
        ``vitals/grad_norm``, computed once (by the clip) rather than twice."""
        if threshold_name != "max_norm" or not isinstance(norm, torch.Tensor):
            return
        with self._lock:
            if self._closed or self._paused or self._vitals.grad_norm_taken:
                return
            names = self._registry.param_names
            if any(id(p) in names for p in params):
                self._guard_event(self._vitals.take_grad_norm, norm)

    def after_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        owned = bool(self._optimizer_owned.get(optimizer))
        if owned:
            self._after_update(Update.OPTIMIZER_STEP)
            if not self._config_watch.seen_last(optimizer=optimizer):  # each, once
                self._guard_event(self._config_watch.on_optimizer_step, optimizer)
        self._loop_event(self._loop.after_optimizer_step, optimizer, owned)

    def before_backward(self, tensor: torch.Tensor) -> None:
        self._loop_event(self._loop.before_backward, tensor)

    def after_scheduler_step(self, scheduler: Any) -> None:
        if not self._config_watch.seen_last(scheduler=scheduler):  # each, once
            self._guard_event(self._config_watch.on_scheduler_step, scheduler)
        self._loop_event(self._loop.after_scheduler_step, scheduler)

    def _loop_event(self, handler: Any, *args: Any) -> None:
        """Hand an event to the training loop's facts, when they are collected."""
        if self._loop.enabled:
            with self._lock:
                if not self._closed and not self._paused:
                    self._guard_event(handler, *args)

    def _after_update(self, update: Update) -> None:
        self._tracker.on_update(update)

    def _owns(self, optimizer: torch.optim.Optimizer) -> bool:
        owned = self._optimizer_owned.get(optimizer)
        if owned is None:
            ids = self._registry.param_names
            owned = any(id(p) in ids for g in optimizer.param_groups for p in g["params"])
            self._optimizer_owned[optimizer] = owned
            if owned:
                self.register_optimizer(optimizer)
        return owned

    def _on_loss_forward(self, module: nn.Module, inputs: Any, output: Any) -> None:
        with self._lock:
            if not self._closed and not self._paused:
                self._loss_seen = True
                self._vitals.on_module_loss(output)
                self._guard_event(self._save_loss_io, module, inputs, output)
                self._guard_event(self._outcome.on_module, module, inputs)
                if self._loop.enabled:
                    self._guard_event(self._loop.on_loss, module, inputs, output)

    def after_functional_loss(
        self, kind: str, scores: Any, target: Any, ignore_index: int | None, loss: Any = None
    ) -> None:
        """A functional classification loss ran (zero code change wraps them) and gave
        ``loss``: its outcome (:mod:`tensortap.pytorch._outcome`) where due, and ``loss`` known
        as a whole loss to the training-loop facts (several backward passes on such a loss
        before one optimizer step are an accumulation that does not divide)."""
        with self._lock:
            if not self._closed and not self._paused:
                self._guard_event(self._outcome.on_loss, kind, scores, target, ignore_index)
                if self._loop.enabled and isinstance(loss, torch.Tensor) and loss.ndim == 0:
                    self._guard_event(self._loop.on_recorded_loss, loss, target)

    def after_regression_loss(self, name: str, prediction: Any, target: Any) -> None:
        """A functional regression loss (``F.mse_loss``, which ``nn.MSELoss`` calls too) ran:
        its prediction and target saved as a loss module's inputs are (``mse_loss_input_0``,
        ``mse_loss_input_1`` in ``inputs``) where ``inputs`` is due, each of at most
        ``MAX_REGRESSION_VALUES`` values: the regression's outcome, which AccuracyAtChance
        judges. Not where a registered regression loss module saves its own inputs."""
        with self._lock:
            if self._closed or self._paused or self._regression_module:
                return
            if not self._recorder.is_collection_due(CollectionKeys.INPUTS):
                return
            for i, value in enumerate((prediction, target)):
                if isinstance(value, torch.Tensor) and 0 < value.numel() <= MAX_REGRESSION_VALUES:
                    self._save_contained(f"{name}_input_{i}", value.detach(), _INPUTS)

    def wants_scores(self) -> bool:
        """Whether :meth:`after_scores` would save anything at this step (the outcome is due,
        and no loss of the step gave it): a trainer adapter watches the model's output only
        then."""
        with self._lock:
            if self._closed or self._paused:
                return False
            return bool(self._guard_event(self._outcome.wants_scores))

    def after_scores(self, scores: Any, target: Any) -> None:
        """The model gave ``scores`` per class (axis 1) for ``target`` in an evaluation that
        computed no loss (a Lightning ``validation_step`` that counts ``argmax == y``): the
        step's outcome from them, where no loss gives it."""
        with self._lock:
            if not self._closed and not self._paused:
                self._guard_event(self._outcome.on_scores, scores, target)

    def _offer_scores(self, output: Any, target: torch.Tensor) -> None:
        """An evaluation forward's ``output`` for the batch's ``target`` (zero code change): its
        scores per class are the step's outcome where it is wanted and no loss gives it (an
        evaluation loop that counts ``argmax == y`` itself). The targets must be classes of the
        scores' columns (a read of the targets: on due steps only)."""
        scores = batch_targets.class_scores(output, target)
        if scores is None or not self.wants_scores():
            return
        if batch_targets.targets_are_classes(scores, target):
            self.after_scores(scores.detach(), target.detach().to(scores.device))

    def _save_outcome(self, name: str, value: np.ndarray, collections: tuple[str, ...]) -> None:
        plan = self._recorder.begin(name, collections)
        if plan is not None:
            self._recorder.put(name, records_from_array(name, value, plan))

    def _save_loss_io(self, module: nn.Module, inputs: Any, output: Any) -> None:
        if self._recorder.is_anything_due():
            self._save_io(self._names[module], inputs, output)

    def _on_module_forward(
        self, names: ModuleNames, module: nn.Module, inputs: Any, output: Any
    ) -> None:
        with self._lock:
            if not self._closed and not self._paused:
                self._guard_event(self._save_io, names, inputs, output)

    # -- saving --
    def _save(self, name: str, tensor: torch.Tensor, collections: Iterable[str] | str) -> bool:
        plan = self._recorder.begin(name, collections)
        if plan is None:
            return False
        with self._saving():  # what the save budget measures
            self._recorder.put(name, self._converter.records(name, tensor, plan))
        return True

    def _save_contained(
        self, name: str, tensor: torch.Tensor, collections: Iterable[str] | str
    ) -> None:
        """Save from a framework event: a failure loses this tensor only, never the step."""
        try:
            self._save(name, tensor, collections)
        except Exception as exc:
            self._contain(exc, f"saving {name!r}")

    def _save_io(self, names: ModuleNames, inputs: Any, output: Any) -> None:
        in_colls = names.input_collections
        for i, t in enumerate(flatten_tensors(inputs)):
            self._save_contained(names.input_name(i), t, in_colls)
        out_colls = names.output_collections
        for i, t in enumerate(flatten_tensors(output)):
            self._save_contained(names.output_name(i), t, out_colls)
            if self._slots and t.requires_grad and not names.loss:
                self._watch_gradient(names.output_name(i), t)

    def _watch_gradient(self, name: str, t: torch.Tensor) -> None:
        """statistics="slots" with ``activation_gradients``: save the gradient of a module
        output as ``gradient/<output name>`` when backward reaches it (a tensor hook)."""
        recorder = self._recorder
        if ACTIVATION_GRADIENTS not in recorder.include_collections:
            return
        if not recorder.is_collection_due(ACTIVATION_GRADIENTS) or recorder.plan_for(name) is None:
            return  # its output is not saved at this step
        step = (recorder.global_step, recorder.mode)
        t.register_hook(partial(self._on_output_gradient, GRADIENT_PREFIX + name, step))  # type: ignore[no-untyped-call]

    def _on_output_gradient(
        self, name: str, step: tuple[int, ModeKeys], grad: torch.Tensor
    ) -> None:
        with self._lock:
            recorder = self._recorder
            if self._closed or step != (recorder.global_step, recorder.mode):
                return  # a backward pass after the step of its forward ended
            self._save_contained(name, grad, (ACTIVATION_GRADIENTS,))

    def _save_gradients(self, unscale: bool, params: list[Param] | None = None) -> None:
        """Save the gradients of ``params`` (default: every registered parameter's, except
        those saved before a clip this step)."""
        if not self._due(Kind.GRADIENTS):
            return
        inverse = inverse_scale(self._scaler) if unscale else None
        if params is None:
            taken = self._gradients_taken
            params = [e for e in self._registry.params if id(e[1]) not in taken]
        with self._saving():
            save_gradients(self._recorder, self._converter, params, inverse, self._contain)

    def _on_step_end(self) -> None:
        """Before a step is handed on: weights after the update, optimizer state, device values."""
        try:
            if self._routers and self._recorder.is_collection_due(ROUTER):
                self._routers.save_window()  # first: a collective every rank must reach
            if self._due(Kind.PARAMETERS):
                with self._converter.together(replicated=True):
                    for name, param, colls in self._registry.params:
                        self._save_contained(name, param, colls)
            if self._due(Kind.OPTIMIZER):
                names = self._registry.param_names
                for prefix, optimizer in self._optimizers:
                    for name, value in optimizer_tensors(prefix, optimizer, names):
                        self._save_contained(name, value, OPTIMIZER_COLLECTIONS)
            for taps in self._taps.values():  # activations' slots from inside compiled graphs
                if self._slot_stats is not None and self._due(Kind.MODULE_IO):
                    taps.take(self._recorder, self._slot_stats)
                else:
                    taps.clear()
            with self._saving():  # device values read back: saving work too
                self._converter.resolve()
        except Exception as exc:
            self._converter.discard()
            self._contain(exc, "Hook._on_step_end")
        try:
            self._vitals.take(self._scaler)
        except Exception as exc:
            self._contain(exc, "saving the step's vital signs")
        self._loss_seen = False
        self._gradients_taken = set()


#: The open PyTorch hook made last in this process (see :meth:`tensortap.hook._hook.Hook.current`).
get_hook = Hook.current


def _if_alive(method: weakref.WeakMethod[Callable[..., None]], *args: Any) -> None:
    """Call ``method`` with ``args`` if its object is still alive."""
    bound = method()
    if bound is not None:
        bound(*args)
