"""Training programs with one known bug each, by problem class.

Each function takes the hook a job would attach (see run.py) and trains. The bug is the kind a
person writes by accident; the docstring says what it is.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

import tensortap.pytorch as tt
from bench.detection.common import Data, digits, digits_raw, fit, mlp, split, standardised


def exploding_deep_init(hook: tt.Hook) -> None:
    """A 10-layer ReLU MLP initialised at 3x He's scale: activations and gradients grow ~4.5x
    per layer, and SGD's first steps blow the weights up."""
    torch.manual_seed(1)
    model = mlp([64] + [64] * 9 + [10])
    with torch.no_grad():
        for m in model:
            if isinstance(m, nn.Linear):
                m.weight.normal_(0, 3 * (2 / m.in_features) ** 0.5)
    fit(hook, model, digits(), torch.optim.SGD(model.parameters(), lr=0.01))


def exploding_regression(hook: tt.Hook) -> None:
    """Linear regression on unscaled synthetic features with lr past the stability limit: the
    error grows geometrically, finite for the whole run."""
    torch.manual_seed(2)
    gen = np.random.default_rng(2)
    x = gen.normal(0, 1, (1600, 20)).astype(np.float32) * np.linspace(1, 6, 20, dtype=np.float32)
    w = gen.normal(0, 1, (20,)).astype(np.float32)
    y = (x @ w + gen.normal(0, 0.1, 1600)).astype(np.float32)[:, None]
    data = Data(*map(torch.from_numpy, (x[:1400], y[:1400], x[1400:], y[1400:])))
    model = nn.Linear(20, 1)
    fit(
        hook,
        model,
        data,
        torch.optim.SGD(model.parameters(), lr=0.06),
        nn.MSELoss(),
        classify=False,
        steps=120,
        loss_of=lambda out, y: nn.functional.mse_loss(out, y),
    )


def vanishing_deep_sigmoid(hook: tt.Hook) -> None:
    """A 12-layer sigmoid MLP with small weights: each layer scales the gradient by < 0.25."""
    torch.manual_seed(3)
    model = mlp([64] + [32] * 11 + [10], nn.Sigmoid)
    with torch.no_grad():
        for m in model:
            if isinstance(m, nn.Linear):
                m.weight.normal_(0, 0.05)
    fit(hook, model, digits(), torch.optim.SGD(model.parameters(), lr=0.05))


def vanishing_deep_tanh(hook: tt.Hook) -> None:
    """A 10-layer tanh MLP initialised with std 0.01: the signal and the gradients shrink
    ~10x per layer."""
    torch.manual_seed(4)
    model = mlp([64] + [64] * 9 + [10], nn.Tanh)
    with torch.no_grad():
        for m in model:
            if isinstance(m, nn.Linear):
                m.weight.normal_(0, 0.01)
                m.bias.zero_()
    fit(hook, model, digits(), torch.optim.SGD(model.parameters(), lr=0.1))


def dead_relu_bias(hook: tt.Hook) -> None:
    """Hidden biases initialised to -5 (meant for a different activation): the ReLUs never fire."""
    torch.manual_seed(5)
    model = mlp([64, 128, 64, 10])
    with torch.no_grad():
        model[0].bias.fill_(-5.0)
        model[2].bias.fill_(-5.0)
    fit(hook, model, digits(), torch.optim.SGD(model.parameters(), lr=0.05))


def dead_relu_lr(hook: tt.Hook) -> None:
    """Huge early steps (lr 6 for the first 3 steps, a broken schedule) push most hidden
    units into the negative region for good."""
    torch.manual_seed(6)
    model = mlp([64, 128, 128, 10])
    opt = torch.optim.SGD(model.parameters(), lr=6.0)

    def schedule(step: int) -> None:
        for group in opt.param_groups:
            group["lr"] = 6.0 if step < 3 else 0.01

    fit(hook, model, digits(), opt, before_step=schedule)


def saturated_tanh(hook: tt.Hook) -> None:
    """Raw pixels (0..16, scaled by 16 by mistake) into a tanh layer with weights of std 5:
    its inputs sit far in the flat tails."""
    torch.manual_seed(7)
    x, y = digits_raw()
    model = mlp([64, 64, 10], nn.Tanh)
    with torch.no_grad():
        model[0].weight.normal_(0, 5.0)
    fit(hook, model, split(x * 16, y), torch.optim.SGD(model.parameters(), lr=0.01))


def saturated_sigmoid(hook: tt.Hook) -> None:
    """A sigmoid MLP whose first layer was scaled by 10,000 (a unit mix-up)."""
    torch.manual_seed(8)
    model = mlp([64, 64, 10], nn.Sigmoid)
    with torch.no_grad():
        model[0].weight.mul_(10_000.0)
    fit(hook, model, digits(), torch.optim.SGD(model.parameters(), lr=0.01))


def lr_high_sgd(hook: tt.Hook) -> None:
    """SGD at lr 20 on an MLP: the loss leaves the basin at once and diverges to NaN."""
    torch.manual_seed(9)
    model = mlp([64, 64, 10])
    fit(hook, model, digits(), torch.optim.SGD(model.parameters(), lr=20.0))


def lr_high_adam(hook: tt.Hook) -> None:
    """Adam at lr 1.0: every update is about as large as the weights, the loss jumps about far
    above where it started."""
    torch.manual_seed(10)
    model = mlp([64, 64, 10])
    fit(hook, model, digits(), torch.optim.Adam(model.parameters(), lr=1.0))


def lr_low(hook: tt.Hook) -> None:
    """SGD at lr 1e-7 (a typo for 1e-2 with the wrong exponent): nothing is learned."""
    torch.manual_seed(11)
    model = mlp([64, 64, 10])
    fit(hook, model, digits(), torch.optim.SGD(model.parameters(), lr=1e-7))


def lr_low_adam(hook: tt.Hook) -> None:
    """Adam at lr 1e-8: the updates are a hundred-millionth of the weights."""
    torch.manual_seed(12)
    model = mlp([64, 64, 10])
    fit(hook, model, digits(), torch.optim.Adam(model.parameters(), lr=1e-8))


def not_updating_no_step(hook: tt.Hook) -> None:
    """optimizer.step() forgotten: gradients are computed and zeroed, the weights never move."""
    torch.manual_seed(13)
    model = mlp([64, 64, 10])
    fit(hook, model, digits(), torch.optim.SGD(model.parameters(), lr=0.05), step_optimizer=False)


def not_updating_wrong_model(hook: tt.Hook) -> None:
    """The optimizer was built over a copy of the model (made before a refactor), so the model
    that trains is never updated."""
    torch.manual_seed(14)
    model = mlp([64, 64, 10])
    copy = mlp([64, 64, 10])
    copy.load_state_dict(model.state_dict())
    fit(hook, model, digits(), torch.optim.SGD(copy.parameters(), lr=0.05))


def unnormalised_images(hook: tt.Hook) -> None:
    """A CNN fed raw pixel values 0..16 (the normalisation step was dropped)."""
    from bench.detection.common import cnn

    torch.manual_seed(15)
    x, y = digits_raw()
    model = cnn()
    fit(hook, model, split(x.reshape(-1, 1, 8, 8), y), torch.optim.SGD(model.parameters(), lr=0.01))


def unnormalised_images_255(hook: tt.Hook) -> None:
    """Images scaled to 0..255 as if they were bytes, never normalised."""
    from bench.detection.common import cnn

    torch.manual_seed(16)
    x, y = digits_raw()
    model = cnn()
    data = split((x * 255 / 16).reshape(-1, 1, 8, 8), y)
    fit(hook, model, data, torch.optim.Adam(model.parameters(), lr=1e-3))


def class_imbalance(hook: tt.Hook) -> None:
    """A training set filtered by a wrong condition keeps nearly only class 0: the model
    predicts 0 for everything."""
    torch.manual_seed(17)
    x, y = digits_raw()
    x = standardised(x)
    keep = (y == 0) | (np.arange(len(y)) % 40 == 0)
    data = split(x[keep], y[keep], n_train=int(keep.sum() * 0.8))
    model = mlp([64, 32, 10])
    fit(hook, model, data, torch.optim.SGD(model.parameters(), lr=0.05), steps=300)


def overfitting(hook: tt.Hook) -> None:
    """A wide MLP trained for dozens of epochs on 200 samples, a third of them mislabelled: it
    learns the digits, then memorises the wrong labels, and the validation loss climbs while
    the training loss keeps falling."""
    torch.manual_seed(18)
    x, y = digits_raw()
    x = standardised(x)
    noisy = y[:200].copy()
    flip = np.random.default_rng(18).random(200) < 0.35
    noisy[flip] = np.random.default_rng(19).integers(0, 10, int(flip.sum()))
    data = Data(*map(torch.from_numpy, (x[:200], noisy, x[1400:], y[1400:])))
    model = mlp([64, 512, 512, 10])
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    fit(hook, model, data, optimizer, batch=16, steps=400, eval_every=25)


def poor_init_large(hook: tt.Hook) -> None:
    """Weights drawn from N(0, 1) regardless of fan-in: each layer multiplies the activations'
    variance by its width."""
    torch.manual_seed(19)
    model = mlp([64, 128, 128, 128, 10])
    with torch.no_grad():
        for m in model:
            if isinstance(m, nn.Linear):
                m.weight.normal_(0, 1.0)
    fit(hook, model, digits(), torch.optim.SGD(model.parameters(), lr=1e-4))


def poor_init_tiny(hook: tt.Hook) -> None:
    """Weights of std 1e-3 in a 6-layer ReLU MLP: the activations shrink ~80x per layer and
    the loss sits at log(10) while the optimiser barely moves it."""
    torch.manual_seed(20)
    model = mlp([64] + [64] * 5 + [10])
    with torch.no_grad():
        for m in model:
            if isinstance(m, nn.Linear):
                m.weight.normal_(0, 1e-3)
                m.bias.zero_()
    fit(hook, model, digits(), torch.optim.SGD(model.parameters(), lr=0.01))


def nan_standardise(hook: tt.Hook) -> None:
    """Per-feature standardisation without a guard: the digits' always-blank pixels divide 0 by
    0, and NaN flows through the whole network."""
    torch.manual_seed(21)
    x, y = digits_raw()
    with np.errstate(invalid="ignore", divide="ignore"):
        x = (x - x.mean(axis=0)) / x.std(axis=0)
    model = mlp([64, 64, 10])
    fit(hook, model, split(x.astype(np.float32), y), torch.optim.SGD(model.parameters(), lr=0.05))


def nan_log(hook: tt.Hook) -> None:
    """A hand-written cross-entropy, log(softmax(z)) in two steps: once the logits grow, a
    probability underflows to 0 and log(0) * 0 is NaN."""
    torch.manual_seed(22)
    model = mlp([64, 64, 10])

    def loss_of(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        p = torch.softmax(out * 60, dim=1)
        onehot = nn.functional.one_hot(y, 10).float()
        return -(onehot * torch.log(p) + (1 - onehot) * torch.log(1 - p)).sum(dim=1).mean()

    fit(hook, model, digits(), torch.optim.SGD(model.parameters(), lr=0.1), loss_of=loss_of)


def all_zero_inputs(hook: tt.Hook) -> None:
    """A mask meant to clip outliers ((x > 20) instead of (x <= 20), on data that never passes
    16) zeroes every input: the model sees only zeros."""
    torch.manual_seed(23)
    x, y = digits_raw()
    x = x * (x > 20)
    model = mlp([64, 64, 10])
    fit(hook, model, split(x.astype(np.float32), y), torch.optim.SGD(model.parameters(), lr=0.05))


def all_zero_weights(hook: tt.Hook) -> None:
    """Every weight initialised to zero (a 'clean start' gone wrong): the hidden layer's
    weights and gradients stay exactly zero."""
    torch.manual_seed(24)
    model = mlp([64, 64, 64, 10])
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
    fit(hook, model, digits(), torch.optim.SGD(model.parameters(), lr=0.05))


#: name -> (problem class, program)
BUGGY = {
    "exploding_deep_init": ("exploding", exploding_deep_init),
    "exploding_regression": ("exploding", exploding_regression),
    "vanishing_deep_sigmoid": ("vanishing", vanishing_deep_sigmoid),
    "vanishing_deep_tanh": ("vanishing", vanishing_deep_tanh),
    "dead_relu_bias": ("dead_relu", dead_relu_bias),
    "dead_relu_lr": ("dead_relu", dead_relu_lr),
    "saturated_tanh": ("saturated", saturated_tanh),
    "saturated_sigmoid": ("saturated", saturated_sigmoid),
    "lr_high_sgd": ("lr_high", lr_high_sgd),
    "lr_high_adam": ("lr_high", lr_high_adam),
    "lr_low": ("lr_low", lr_low),
    "lr_low_adam": ("lr_low", lr_low_adam),
    "not_updating_no_step": ("not_updating", not_updating_no_step),
    "not_updating_wrong_model": ("not_updating", not_updating_wrong_model),
    "unnormalised_images": ("unnormalised_input", unnormalised_images),
    "unnormalised_images_255": ("unnormalised_input", unnormalised_images_255),
    "class_imbalance": ("class_imbalance", class_imbalance),
    "overfitting": ("overfitting", overfitting),
    "poor_init_large": ("poor_init", poor_init_large),
    "poor_init_tiny": ("poor_init", poor_init_tiny),
    "nan_standardise": ("nan", nan_standardise),
    "nan_log": ("nan", nan_log),
    "all_zero_inputs": ("all_zero", all_zero_inputs),
    "all_zero_weights": ("all_zero", all_zero_weights),
}
