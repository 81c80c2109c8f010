"""The declared space of training runs: a :class:`Draw` is one point, ``draw(seed)`` picks it.

Two spaces share one generator, partitioned here and nowhere else. The **dev** space (the
``dev`` and the by-seed ``heldout`` splits) is the generator's original one: ``TASKS``. The
**family** space (the ``family`` split) is ``FAMILY_TASKS``: every draw in it uses an
architecture family (``HELD_OUT_ARCHS``) or a data set (``HELD_OUT_TASKS``) that the dev space
never draws, or both, and one schedule (``HELD_OUT_SCHEDULES``) dev never uses; its faults are
second, independent implementations (``faults_family.py``). ``draw(seed)`` picks from the dev
space exactly as before (the same draws, so dev's validated draws stay valid);
``draw(seed, FAMILY)`` picks from the family space.

Everything a run does is fixed by its draw (and, for a faulty run, by the fault): the task,
the architecture, the optimizer and its learning rate, the batch size, the schedule, the
regularisation, the evaluation cadence, the run's length and its seed. The learning-rate
ranges are the healthy ones: each architecture trains reliably anywhere inside them (the
validation pass checks every healthy draw it accepts).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

#: architecture -> the tasks it is drawn with
TASKS: dict[str, tuple[str, ...]] = {
    "mlp": ("digits", "iris", "wine", "breast_cancer", "synth_cls", "diabetes", "synth_reg"),
    "cnn": ("digits_images",),
    "gru": ("seq_cls", "seq_reg"),
    "lstm": ("seq_cls", "seq_reg"),
    "transformer": ("seq_cls", "seq_reg"),
    "autoencoder": ("digits", "breast_cancer", "wine"),
    "logreg": ("digits", "iris", "wine", "breast_cancer", "synth_cls"),
    "linreg": ("diabetes", "synth_reg"),
}
ARCHS = tuple(TASKS)
_ARCH_P = (0.26, 0.14, 0.09, 0.09, 0.08, 0.12, 0.11, 0.11)

DEV, FAMILY = "dev", "family"
#: held out of the dev space: architectures, data sets, schedules only the family space draws
HELD_OUT_ARCHS = ("resmlp", "cnn1d")
HELD_OUT_TASKS = ("moons", "circles", "synth_reg_t")
HELD_OUT_SCHEDULES = ("exp_epoch",)
#: the family space: a held-out architecture with any task it takes, or a dev architecture
#: with held-out data only
FAMILY_TASKS: dict[str, tuple[str, ...]] = {
    "resmlp": (
        "digits", "iris", "wine", "breast_cancer", "synth_cls", "diabetes", "synth_reg",
        "moons", "circles", "synth_reg_t",
    ),
    "cnn1d": ("seq_cls", "seq_reg"),
    "mlp": ("moons", "circles", "synth_reg_t"),
    "logreg": ("moons",),
    "linreg": ("synth_reg_t",),
}  # fmt: skip
_FAMILY_ARCH_P = (0.34, 0.2, 0.26, 0.1, 0.1)

#: the bundled sets' sizes (rows), so a draw can size its run without loading them
BUNDLED_ROWS = {
    "digits": 1797,
    "digits_images": 1797,
    "iris": 150,
    "wine": 178,
    "breast_cancer": 569,
    "diabetes": 442,
}
REGRESSION_TASKS = ("diabetes", "synth_reg", "seq_reg", "synth_reg_t")
SEQUENCE_TASKS = ("seq_cls", "seq_reg")
VAL_FRACTION = 0.25

#: optimizer -> healthy learning-rate range (log-uniform), per family of architecture
LR_RANGES: dict[str, dict[str, tuple[float, float]]] = {
    "sgd": {"dense": (0.07, 0.2), "cnn": (0.07, 0.2), "rnn": (0.2, 0.5), "linear": (0.01, 0.05)},
    "sgd_momentum": {
        "dense": (0.01, 0.03),
        "cnn": (0.01, 0.03),
        "rnn": (0.02, 0.05),
        "linear": (0.002, 0.008),
    },
    "adam": {
        "dense": (1e-3, 5e-3),
        "cnn": (1e-3, 4e-3),
        "rnn": (2e-3, 8e-3),
        "transformer": (1e-3, 3e-3),
        "autoencoder": (2e-3, 8e-3),
        "linear": (5e-3, 3e-2),
    },
    "adamw": {
        "dense": (1e-3, 5e-3),
        "cnn": (1e-3, 4e-3),
        "rnn": (2e-3, 8e-3),
        "transformer": (1e-3, 3e-3),
        "autoencoder": (2e-3, 8e-3),
        "linear": (5e-3, 3e-2),
    },
    "rmsprop": {
        "dense": (5e-4, 2e-3),
        "cnn": (6e-4, 2e-3),
        "rnn": (1e-3, 4e-3),
        "autoencoder": (1e-3, 3e-3),
        "linear": (3e-3, 1e-2),
    },
}
#: architectures trained with adaptive optimizers only (as people train them)
ADAPTIVE_ONLY = ("transformer", "autoencoder")
SCHEDULES = ("constant", "step", "cosine_epoch", "cosine_step", "warmup")
#: the family space's schedules: dev's, and an exponential decay per epoch (to 10% at the end)
FAMILY_SCHEDULES = (*SCHEDULES, *HELD_OUT_SCHEDULES)


@dataclass(frozen=True)
class Draw:
    """One healthy training run, fully described. ``epochs`` is counted over the training set;
    an optimizer step takes ``accum_steps`` micro-batches of ``batch_size`` samples."""

    seed: int
    arch: str
    task: str
    # data
    n_samples: int  # rows (bundled sets: as loaded; synthetic: drawn)
    n_features: int  # synthetic tabular features or sequence channels (0: as loaded)
    n_classes: int  # synthetic classification (0: as loaded or regression)
    label_noise: float  # fraction of synthetic labels flipped
    seq_len: int
    seq_rule: str  # "sign_sum" | "argmax_sum" | "ema"
    imbalance_keep: float  # 1.0: as loaded; else the kept fraction of the minority classes
    # model
    activation: str  # "relu" | "tanh" | "gelu" | "leaky_relu"
    hidden: tuple[int, ...]  # MLP / autoencoder layer widths; RNN hidden size; CNN channels
    batchnorm: bool
    dropout: float
    d_model: int
    n_heads: int
    n_layers: int
    sigmoid_output: bool  # autoencoder on [0, 1] inputs
    frozen_backbone: bool  # pre-trained, then frozen (requires_grad=False); only a head trains
    # optimisation
    optimizer: str
    lr: float
    weight_decay: float
    batch_size: int
    accum_steps: int
    epochs: int
    schedule: str
    label_smoothing: float
    loss_style: str  # "module" (nn.CrossEntropyLoss ...) | "functional" (F.cross_entropy ...)
    eval_every: int  # steps between evaluation passes; 0: after every epoch

    @property
    def classify(self) -> bool:
        return self.arch != "autoencoder" and self.task not in REGRESSION_TASKS

    @property
    def regression(self) -> bool:
        return self.arch != "autoencoder" and self.task in REGRESSION_TASKS

    @property
    def family(self) -> str:
        """Which learning-rate range applies."""
        return family_of(self.arch)

    @property
    def n_train(self) -> int:
        """Training rows before any subsampling (the rest is the validation set)."""
        return self.n_samples - round(self.n_samples * VAL_FRACTION)

    @property
    def steps_per_epoch(self) -> int:
        """Optimizer steps per epoch (about: subsampling for imbalance is counted roughly)."""
        return steps_per_epoch(self.n_train, self.batch_size, self.accum_steps, self.imbalance_keep)

    @property
    def total_steps(self) -> int:
        return self.epochs * self.steps_per_epoch

    @property
    def label(self) -> str:
        """Short description used in case names: ``mlp-digits``."""
        return f"{self.arch}-{self.task.replace('_', '')}"

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["hidden"] = list(self.hidden)
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Draw:
        return cls(**{**d, "hidden": tuple(d["hidden"])})


def family_of(arch: str) -> str:
    """Which learning-rate range an architecture draws from."""
    if arch in ("logreg", "linreg"):
        return "linear"
    if arch in ("gru", "lstm"):
        return "rnn"
    if arch in ("cnn", "transformer", "autoencoder"):
        return arch
    if arch == "cnn1d":
        return "cnn"
    return "dense"


def steps_per_epoch(n_train: int, batch_size: int, accum_steps: int, imbalance_keep: float) -> int:
    """Optimizer steps per epoch: full micro-batches (the last partial one is dropped), then
    ``accum_steps`` of them per step. Subsampling for imbalance keeps about half the majority
    classes' rows and ``imbalance_keep`` of the rest."""
    rows = n_train if imbalance_keep >= 1.0 else round(n_train * (0.5 + 0.5 * imbalance_keep))
    return max(1, max(1, rows // batch_size) // accum_steps)


def sub_seed(seed: int, attempt: int) -> int:
    """The seed of ``seed``'s ``attempt``-th redraw (attempt 0 is the seed itself)."""
    if attempt == 0:
        return seed
    state = np.random.SeedSequence([seed, attempt]).generate_state(1)[0]
    return int(state % 2_000_000_000) + 100_000  # never one of the suite's slot seeds


def _log_uniform(rng: np.random.Generator, lo: float, hi: float) -> float:
    return float(math.exp(rng.uniform(math.log(lo), math.log(hi))))


def _pick(rng: np.random.Generator, options: tuple[Any, ...] | list[Any], p: Any = None) -> Any:
    return options[int(rng.choice(len(options), p=p))]


def space_of(d: Draw) -> str:
    """Which space a draw belongs to (the family space's draws each use something held out)."""
    held = d.arch in HELD_OUT_ARCHS or d.task in HELD_OUT_TASKS
    return FAMILY if held or d.schedule in HELD_OUT_SCHEDULES else DEV


def draw(seed: int, space: str = DEV) -> Draw:
    """The run ``seed`` picks in ``space`` (DEV or FAMILY): every choice comes from
    ``numpy.random.default_rng(seed)``."""
    rng = np.random.default_rng(seed)
    if space == DEV:
        arch: str = _pick(rng, ARCHS, _ARCH_P)
        task: str = _pick(rng, TASKS[arch])
    elif space == FAMILY:
        arch = _pick(rng, tuple(FAMILY_TASKS), _FAMILY_ARCH_P)
        task = _pick(rng, FAMILY_TASKS[arch])
    else:
        raise ValueError(f"no space {space!r}; spaces: {DEV}, {FAMILY}")

    # -- data --
    n_samples, n_features, n_classes, label_noise = BUNDLED_ROWS.get(task, 0), 0, 0, 0.0
    seq_len, seq_rule = 0, ""
    if task == "synth_cls":
        n_samples = int(rng.integers(600, 1600))
        n_features = int(rng.integers(8, 33))
        n_classes = int(_pick(rng, (2, 3, 4, 5)))
        label_noise = float(_pick(rng, (0.0, 0.0, 0.02, 0.05)))
    elif task == "synth_reg":
        n_samples = int(rng.integers(500, 1500))
        n_features = int(rng.integers(5, 25))
    elif task in ("moons", "circles"):  # 2 informative features, a few of pure noise
        n_samples = int(rng.integers(400, 1500))
        n_features = 2 + int(rng.integers(0, 5))
        label_noise = float(rng.uniform(0.05, 0.25))  # make_moons/make_circles' noise
    elif task == "synth_reg_t":
        n_samples = int(rng.integers(300, 1200))
        n_features = int(rng.integers(4, 21))
    elif task in SEQUENCE_TASKS:
        n_samples = int(rng.integers(800, 1600))
        n_features = int(rng.integers(2, 6))
        seq_len = int(rng.integers(8, 13 if arch == "transformer" else 17))
        seq_rule = "ema" if task == "seq_reg" else _pick(rng, ("sign_sum", "argmax_sum"))
    classify = arch != "autoencoder" and task not in REGRESSION_TASKS
    imbalance_keep = 1.0
    if classify and task not in ("iris", "wine") and rng.random() < 0.15:
        imbalance_keep = float(rng.uniform(0.2, 0.4))  # handled with class weights

    # -- model --
    activation = "relu"
    hidden: tuple[int, ...] = ()
    batchnorm, dropout, sigmoid_output = False, 0.0, False
    d_model = n_heads = n_layers = 0
    if arch == "mlp":
        activation = _pick(rng, ("relu", "tanh", "gelu", "leaky_relu"), (0.4, 0.2, 0.2, 0.2))
        depth = int(rng.integers(1, 5))
        width = int(_pick(rng, (32, 64, 128)))
        halving = bool(rng.random() < 0.5)
        hidden = tuple(max(16, width >> i) if halving else width for i in range(depth))
        dropouts = (0.0, 0.0, 0.1, 0.2, 0.3, 0.5) if min(hidden) >= 64 else (0.0, 0.0, 0.1, 0.2)
        dropout = float(_pick(rng, dropouts))
    elif arch == "cnn":
        c = int(_pick(rng, (8, 16)))
        hidden = (c, 2 * c)
        batchnorm = bool(rng.random() < 0.5)
        dropout = float(_pick(rng, (0.0, 0.0, 0.25)))
    elif arch in ("gru", "lstm"):
        hidden = (int(_pick(rng, (16, 32, 48))),)
        dropout = float(_pick(rng, (0.0, 0.0, 0.2)))
    elif arch == "transformer":
        d_model = int(_pick(rng, (16, 24, 32)))
        n_heads = int(_pick(rng, (2, 4)))
        n_layers = int(rng.integers(1, 3))
        dropout = float(_pick(rng, (0.0, 0.1, 0.1, 0.2)))
    elif arch == "autoencoder":
        activation = _pick(rng, ("relu", "tanh", "gelu", "leaky_relu"), (0.4, 0.2, 0.2, 0.2))
        width = int(_pick(rng, (32, 64)))
        code = int(_pick(rng, (4, 8, 12)))
        hidden = (width, code) if rng.random() < 0.6 else (width, width // 2, code)
        sigmoid_output = task == "digits" and bool(rng.random() < 0.5)
    elif arch == "resmlp":
        activation = _pick(rng, ("relu", "tanh", "gelu", "leaky_relu"), (0.4, 0.2, 0.2, 0.2))
        hidden = (int(_pick(rng, (32, 64, 128))),) * int(rng.integers(1, 4))  # blocks
        batchnorm = bool(rng.random() < 0.5)  # a LayerNorm before the head
        dropout = float(_pick(rng, (0.0, 0.0, 0.1, 0.2)))
    elif arch == "cnn1d":
        c = int(_pick(rng, (16, 32)))
        hidden = (c, 2 * c)
        batchnorm = bool(rng.random() < 0.5)
        dropout = float(_pick(rng, (0.0, 0.0, 0.25)))
    frozen_backbone = arch in ("mlp", "cnn", "gru", "lstm") and bool(rng.random() < 0.12)

    # -- optimisation --
    family = family_of(arch)
    optimizers = ("adam", "adamw", "rmsprop") if arch in ADAPTIVE_ONLY else tuple(LR_RANGES)
    if arch == "transformer":
        optimizers = ("adam", "adamw")
    optimizer: str = _pick(rng, optimizers)
    lr = _log_uniform(rng, *LR_RANGES[optimizer][family])
    weight_decay = 0.0
    if optimizer == "adamw":
        weight_decay = _log_uniform(rng, 1e-3, 5e-2)
    elif rng.random() < 0.3:
        weight_decay = _log_uniform(rng, 1e-5, 5e-4)
    n_train = n_samples - round(n_samples * VAL_FRACTION)
    batches = [b for b in (8, 16, 32, 64, 128) if b <= n_train // 2]
    if arch in ("transformer", "gru", "lstm", "cnn", "cnn1d"):
        batches = [b for b in batches if b >= 16]
    if arch == "transformer":
        batches = [b for b in batches if b <= 64]
    batch_size = int(_pick(rng, batches))
    accum_steps = 1
    if rng.random() < 0.15 and n_train // batch_size >= 8 and arch != "autoencoder":
        accum_steps = int(_pick(rng, (2, 4)))
    if space == DEV:
        schedule: str = _pick(rng, SCHEDULES, (0.4, 0.15, 0.15, 0.15, 0.15))
    else:
        schedule = _pick(rng, FAMILY_SCHEDULES, (0.3, 0.1, 0.1, 0.1, 0.1, 0.3))
    label_smoothing = float(_pick(rng, (0.0, 0.0, 0.0, 0.05, 0.1))) if classify else 0.0
    loss_style: str = _pick(rng, ("module", "functional"), (0.7, 0.3))

    # -- run length and evaluation cadence --
    target_steps = int(rng.integers(100, 401))
    if accum_steps > 1:
        target_steps = max(60, target_steps // accum_steps)
    if arch == "transformer":
        target_steps = 120 + target_steps // 5  # 140-200: the costliest architecture
    if arch == "autoencoder":
        target_steps = max(target_steps, 200)
    per_epoch = steps_per_epoch(n_train, batch_size, accum_steps, imbalance_keep)
    epochs = max(2, round(target_steps / per_epoch))
    total = epochs * per_epoch
    eval_every = 0
    if epochs > 25 or rng.random() < 0.5:
        eval_every = max(5, total // int(rng.integers(5, 16)))

    return Draw(
        seed=seed,
        arch=arch,
        task=task,
        n_samples=n_samples,
        n_features=n_features,
        n_classes=n_classes,
        label_noise=label_noise,
        seq_len=seq_len,
        seq_rule=seq_rule,
        imbalance_keep=imbalance_keep,
        activation=activation,
        hidden=hidden,
        batchnorm=batchnorm,
        dropout=dropout,
        d_model=d_model,
        n_heads=n_heads,
        n_layers=n_layers,
        sigmoid_output=sigmoid_output,
        frozen_backbone=frozen_backbone,
        optimizer=optimizer,
        lr=lr,
        weight_decay=weight_decay,
        batch_size=batch_size,
        accum_steps=accum_steps,
        epochs=epochs,
        schedule=schedule,
        label_smoothing=label_smoothing,
        loss_style=loss_style,
        eval_every=eval_every,
    )
