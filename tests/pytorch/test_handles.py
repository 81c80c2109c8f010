"""What the PyTorch hook registers on the user's objects: every registration returns a handle,
and a closed hook leaves no torch hook on the model and keeps none of it alive."""

from __future__ import annotations

import gc
import weakref
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

import tensortap.pytorch as tt
from tests.helpers.torch_models import Net, batches, make

EVERY_STEP = tt.SaveConfig(save_interval=1)
_HOOK_DICTS = (
    "_forward_pre_hooks",
    "_forward_hooks",
    "_backward_hooks",
    "_backward_pre_hooks",
    "_state_dict_hooks",
    "_load_state_dict_pre_hooks",
)


def tensortap_hooks(*modules: nn.Module) -> list[str]:
    """The torch hooks on ``modules`` and their submodules that a tensortap object installed."""
    found = []
    for top in modules:
        for name, module in top.named_modules():
            for attr in _HOOK_DICTS:
                for fn in getattr(module, attr, {}).values():
                    owner = getattr(fn, "__self__", None) or getattr(fn, "func", None)
                    text = f"{fn!r} {owner!r}"
                    if "tensortap" in text:
                        found.append(f"{type(top).__name__}.{name or '<top>'}.{attr}: {text}")
    return found


def train(hook: tt.Hook, model: nn.Module, loss_fn: nn.Module, steps: int = 3) -> None:
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    hook.register_optimizer(opt)
    scaler = torch.amp.GradScaler("cpu")
    hook.register_grad_scaler(scaler)
    for xb, yb in batches(32, steps):
        opt.zero_grad()
        scaler.scale(loss_fn(model(xb), yb)).backward()
        scaler.step(opt)
        scaler.update()
        assert "update" in vars(scaler)  # wrapped while registered


def test_close_removes_every_torch_hook_and_frees_the_model(tmp_path: Path) -> None:
    model, loss_fn = make(Net), nn.CrossEntropyLoss()
    hook = tt.Hook(
        tmp_path / "run",
        save_config=EVERY_STEP,
        include_collections=["weights", "gradients", "losses", "relu_activations", "outputs"],
    )
    hook.register_module(model)
    hook.register_loss(loss_fn)
    train(hook, model, loss_fn)
    assert tensortap_hooks(model, loss_fn)  # present while the hook is open
    hook.close()
    assert tensortap_hooks(model, loss_fn) == []
    assert not hook.watches(model)
    trial = tt.create_trial(tmp_path / "run")
    assert trial.tensor("fc1.weight").steps() == [0, 1, 2]  # the last step was saved first

    model_ref, loss_ref = weakref.ref(model), weakref.ref(loss_fn)
    del model, loss_fn
    gc.collect()
    assert model_ref() is None and loss_ref() is None
    assert hook.closed  # the closed hook itself is still here


def test_a_closed_hook_frees_a_model_whose_parameters_got_no_gradient(tmp_path: Path) -> None:
    """The training-loop facts keep the parameters found without a gradient (checked on every
    backward pass): weakly, so a closed hook frees the model and the facts stay saved."""
    model = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))
    hook = tt.Hook(tmp_path / "run", save_config=EVERY_STEP, include_collections=["training_loop"])
    hook.register_module(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for xb, yb in batches(32, 12):
        opt.zero_grad()
        F.cross_entropy(model[2](model[1](model[0](xb).detach())), yb).backward()  # cut
        opt.step()
    hook.close()
    trial = tt.create_trial(tmp_path / "run")
    assert int(trial.tensor("training_loop/no_grad_params").value(trial.steps()[-1])) == 2
    model_ref = weakref.ref(model)
    weight_ref = weakref.ref(model[0].weight)  # one of those without a gradient
    del model, opt
    gc.collect()
    assert model_ref() is None and weight_ref() is None


def test_registration_returns_a_handle_that_removes_it(tmp_path: Path) -> None:
    model, loss_fn = make(Net), nn.CrossEntropyLoss()
    hook = tt.Hook(tmp_path / "run", save_config=EVERY_STEP, include_collections=["weights"])
    handle = hook.register_module(model)
    assert hook.register_module(model) is handle  # registering twice installs nothing more
    loss_handle = hook.register_loss(loss_fn)
    assert tensortap_hooks(model) and tensortap_hooks(loss_fn)
    handle.remove()
    loss_handle.remove()
    assert tensortap_hooks(model, loss_fn) == []
    assert not hook.watches(model) and handle.removed
    handle.remove()  # twice is harmless
    with hook.register_module(model, name="again"):
        assert hook.watches(model)
        for xb, yb in batches(32, 3):
            F.cross_entropy(model(xb), yb).backward()
    assert tensortap_hooks(model) == [] and not hook.watches(model)
    for xb, yb in batches(32, 2):
        F.cross_entropy(model(xb), yb).backward()  # not watched: no step
    hook.close()
    # the steps that ended while it was registered (the third was still open at the removal)
    assert tt.create_trial(tmp_path / "run").tensor("again.fc1.weight").steps() == [0, 1]


def test_a_loss_made_anew_each_step_is_one_series(tmp_path: Path) -> None:
    """Hugging Face models build their ``CrossEntropyLoss`` inside ``forward``: a new module
    each step. Its name was taken for good (``CrossEntropyLoss_1`` ... ``_800``: one series a
    step), and a new module at a collected one's address was taken as registered (that step's
    loss not saved). Each replaces the last: one series holding every step."""
    model = make(Net)
    hook = tt.Hook(tmp_path / "run", save_config=EVERY_STEP, include_collections=["losses"])
    hook.register_module(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    hook.register_optimizer(opt)
    steps = 6
    for xb, yb in batches(32, steps):
        loss_fn = nn.CrossEntropyLoss()
        hook.register_loss(loss_fn)
        opt.zero_grad()
        loss_fn(model(xb), yb).backward()
        opt.step()
        del loss_fn
        gc.collect()
    hook.close()
    trial = tt.create_trial(str(tmp_path / "run"))
    losses = [n for n in trial.tensor_names() if n.startswith("CrossEntropyLoss")]
    assert losses == ["CrossEntropyLoss_output_0"]
    assert trial.tensor("CrossEntropyLoss_output_0").steps() == list(range(steps))
    # a loss that lives on keeps its name: a second one beside it is told apart
    first, second = nn.CrossEntropyLoss(), nn.CrossEntropyLoss()
    other = tt.Hook(tmp_path / "two", save_config=EVERY_STEP, include_collections=["losses"])
    other.register_module(model)
    other.register_loss(first)
    other.register_loss(second)
    xb, yb = next(iter(batches(32, 1)))
    first(model(xb), yb)
    second(model(xb), yb)
    other.close()
    names = tt.create_trial(str(tmp_path / "two")).tensor_names()
    assert {"CrossEntropyLoss_output_0", "CrossEntropyLoss_1_output_0"} <= set(names)
