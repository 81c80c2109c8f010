"""The hook and trial APIs by hand: train a small PyTorch model with the hook, read it back.

Run with `.venv/bin/python examples/hook_and_trial.py`. A CNN learns scikit-learn's handwritten
digits (8x8 images) for two epochs, with an evaluation pass after each. The hook saves the
losses every step, weights, gradients and ReLU activations every 20 steps, and gradient norms
every step; a trial opened before training follows along and prints what a person debugging the
run would look at.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import torch
from sklearn.datasets import load_digits
from torch import nn

import tensortap.pytorch as tt

OUT = Path("runs/demo")


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.relu1 = nn.ReLU()
        self.pool = nn.MaxPool2d(2)
        self.fc1 = nn.Linear(16 * 4 * 4, 64)
        self.relu2 = nn.ReLU()
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(self.relu1(self.conv1(x)))
        return self.fc2(self.relu2(self.fc1(x.flatten(1))))


def data() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    x, y = load_digits(return_X_y=True)
    images = torch.tensor(x / 16.0, dtype=torch.float32).view(-1, 1, 8, 8)
    labels = torch.tensor(y)
    return images[:1500], labels[:1500], images[1500:], labels[1500:]


def main() -> int:
    torch.manual_seed(0)
    torch.set_num_threads(1)
    shutil.rmtree(OUT, ignore_errors=True)
    hook = tt.Hook(
        OUT,
        save_config=tt.SaveConfig(save_interval=20),
        include_collections=["losses", "weights", "gradients", "relu_activations", "norms"],
    )
    hook.get_collection("losses").save_config = tt.SaveConfig(save_interval=1)
    norms = hook.get_collection("norms")  # the gradients again, as l2 norms on every step
    norms.include("^gradient/")
    norms.save_config = tt.SaveConfig(save_interval=1)
    norms.reduction_config = tt.ReductionConfig(norms=["l2"])

    model = Net()
    hook.register_module(model)
    loss_fn = nn.CrossEntropyLoss()
    hook.register_loss(loss_fn)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    hook.register_optimizer(optimizer)
    trial = tt.create_trial(OUT)  # opened before training: it follows along

    x_train, y_train, x_test, y_test = data()
    for epoch in range(2):
        hook.set_mode(tt.modes.TRAIN)
        model.train()
        for i in range(0, len(x_train), 50):
            optimizer.zero_grad()
            loss = loss_fn(model(x_train[i : i + 50]), y_train[i : i + 50])
            loss.backward()
            optimizer.step()
        hook.set_mode(tt.modes.EVAL)
        model.eval()
        correct = 0
        with torch.no_grad():
            for i in range(0, len(x_test), 100):
                out = model(x_test[i : i + 100])
                loss_fn(out, y_test[i : i + 100])
                correct += int((out.argmax(1) == y_test[i : i + 100]).sum())
        accuracy = correct / len(x_test)
        hook.save_scalar("accuracy", accuracy, collections="metrics")
        hook.flush()
        seen = len(trial.steps())
        print(f"epoch {epoch}: test accuracy {accuracy:.3f}; the trial already sees {seen} steps")
    status = hook.close()

    written = status.writer
    print(f"\nwrote {written.steps_written} steps ({written.bytes_written / 1e6:.1f} MB) to {OUT}")
    print(f"modes: {[m.name for m in trial.modes()]}, all steps loaded: {trial.loaded_all_steps}")
    print(f"collections: {sorted(trial.collections())}")
    print(f"relu activations: {trial.tensor_names(collection='relu_activations')}")
    loss = trial.tensor("CrossEntropyLoss_output_0")
    train_steps = loss.steps(mode=tt.modes.TRAIN)
    print(f"train loss over {len(train_steps)} steps:")
    for step in train_steps[:: len(train_steps) // 6]:
        print(f"  train step {step:3d}: loss {float(loss.value(step, mode=tt.modes.TRAIN)):.4f}")
    eval_loss = loss.values(mode=tt.modes.EVAL)
    print(f"eval loss by eval step: { {s: round(float(v), 3) for s, v in eval_loss.items()} }")
    grad = trial.tensor("gradient/fc1.weight")
    print("gradient l2 norm of fc1.weight (every step) and ReLU sparsity (saved steps):")
    relu = trial.tensor("relu2/relu_output_0")
    for step in relu.steps(mode=tt.modes.TRAIN):
        dead = float(np.mean(relu.value(step, mode=tt.modes.TRAIN) == 0))
        norm = grad.reduction_value(step, "l2", mode=tt.modes.TRAIN)
        print(f"  train step {step:3d}: |grad|_2 = {norm:.4f}, relu2 zeros = {dead:.0%}")
    try:
        loss.value(10_000)
    except tt.exceptions.NoMoreData as exc:
        print(f"asking for step 10000: {type(exc).__name__}: {exc}")
    print(f"problems: {trial.problems() or 'none'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
