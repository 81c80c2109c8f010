"""The Keras hook's vital signs (every batch) and the weights before the first update."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
pytest.importorskip("keras")
pytest.importorskip("tensorflow")

import keras

import tensortap.keras as tt
from tensortap.jobs._specs import Rule as RuleSpec
from tensortap.jobs._specs import hook_config
from tensortap.rules import WeightUpdateRatio, invoke_rule, rule_configs
from tests.keras.test_keras_hook import data, mlp

TRAIN, EVAL = tt.modes.TRAIN, tt.modes.EVAL


def job_hook(path: Path) -> tt.KerasHook:
    """The hook a job attaches for the recommended rules (weights every 10th TRAIN step)."""
    specs = [RuleSpec.builtin(config) for config in rule_configs.recommended()]
    return hook_config(str(path), None, specs, None).create_hook(tt.KerasHook)


class BatchLosses(keras.callbacks.Callback):
    """Each TRAIN batch's own loss and learning rate, computed before the batch's update."""

    def __init__(self, x: np.ndarray, y: np.ndarray, batch_size: int) -> None:
        super().__init__()
        self.x, self.y, self.batch_size = x, y, batch_size
        self.loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        self.seen: list[tuple[float, float]] = []

    def on_train_batch_begin(self, batch: int, logs: object = None) -> None:
        part = slice(batch * self.batch_size, (batch + 1) * self.batch_size)
        loss = self.loss_fn(self.y[part], self.model(self.x[part]))
        self.seen.append((float(loss), float(self.model.optimizer.learning_rate)))


@pytest.mark.parametrize("eager", [False, True])
def test_every_batch_has_its_own_loss_and_learning_rate(tmp_path: Path, eager: bool) -> None:
    """Keras logs the epoch's running mean; vitals/loss is each batch's own loss (as Keras's
    loss tracker got it), at every step although tensors are saved every 10th; vitals/lr
    follows a schedule. The logs Keras's own callbacks see are unchanged."""
    x, y = data(100)
    model = mlp()
    schedule = keras.optimizers.schedules.ExponentialDecay(0.1, decay_steps=1, decay_rate=0.9)
    model.compile(
        keras.optimizers.SGD(schedule),
        keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
        run_eagerly=eager,
    )
    hook, truth = job_hook(tmp_path / "t"), BatchLosses(x, y, 32)
    history = model.fit(
        x, y, batch_size=32, epochs=2, shuffle=False, verbose=0,
        callbacks=[truth, hook], validation_data=(x[:40], y[:40]),
    )  # fmt: skip
    hook.close()
    assert sorted(history.history) == ["accuracy", "loss", "val_accuracy", "val_loss"]
    trial = tt.create_trial(tmp_path / "t")
    steps = trial.steps(TRAIN)
    assert steps == list(range(8))  # 4 batches (the last of 4 samples) per epoch
    loss, lr = trial.tensor("vitals/loss"), trial.tensor("vitals/lr")
    for step, (own_loss, own_lr) in zip(steps, truth.seen, strict=True):
        assert float(loss.value(step, mode=TRAIN)) == pytest.approx(own_loss, rel=1e-6)
        assert float(lr.value(step, mode=TRAIN)) == pytest.approx(own_lr, rel=1e-6)
    assert lr.value(7, mode=TRAIN) < lr.value(0, mode=TRAIN)  # the schedule, step by step
    assert trial.tensor("loss").steps(mode=TRAIN) == [0]  # the running mean keeps its schedule
    for name in ("vitals/step_time", "vitals/samples_per_second"):
        values = [float(trial.tensor(name).value(s, mode=TRAIN)) for s in steps]
        assert all(v > 0 for v in values), (name, values)
    # validation: 2 batches per epoch, each with its own loss (the weights of that epoch's end)
    assert trial.tensor("vitals/loss").steps(mode=EVAL) == [0, 1, 2, 3]
    last = keras.losses.SparseCategoricalCrossentropy(from_logits=True)(y[32:40], model(x[32:40]))
    assert float(loss.value(3, mode=EVAL)) == pytest.approx(float(last), rel=1e-5)
    # closed: nothing of the hook is left in the step Keras traces, nor in its logs
    assert sorted(model.fit(x, y, verbose=0, epochs=1).history) == ["accuracy", "loss"]
    assert "train_step" not in vars(model) and "update_state" not in vars(model._loss_tracker)


def test_the_first_update_is_judged_by_the_initial_weights(tmp_path: Path) -> None:
    """A job saves weights every 10th step: a fit of 8 batches saved them at step 0 only, so
    WeightUpdateRatio had no earlier weights to compare with. The weights before step 0's
    update are saved as initial/<name>, and the first update is judged."""
    x, y = data(256)
    model = mlp()
    model.compile(keras.optimizers.SGD(0.1), keras.losses.SparseCategoricalCrossentropy(True))
    before = {v.path.split("/", 1)[1]: v.numpy().copy() for v in model.trainable_weights}
    hook = job_hook(tmp_path / "t")
    model.fit(x, y, batch_size=32, epochs=1, verbose=0, callbacks=[hook])
    hook.close()
    trial = tt.create_trial(tmp_path / "t")
    initial = trial.tensor_names(collection="initial_weights")
    assert initial == ["initial/dense/kernel", "initial/dense_1/kernel"]  # biases: not judged
    for name in initial:
        value = trial.tensor(name).value(0, mode=TRAIN)
        np.testing.assert_array_equal(value, before[name.removeprefix("initial/")])
    summary = invoke_rule(WeightUpdateRatio(trial))
    assert summary.judged >= 1 and summary.first_step == 0, summary.skip_reasons


def test_batches_that_save_no_gradients_copy_none(tmp_path: Path) -> None:
    """The compiled step copies its gradients only on batches whose gradients are due (a flag
    set before the batch): the copies then hold the last due batch's, and those saved are the
    gradients each due batch applied (plain SGD: the update is -lr * gradient)."""
    x, y = data(160)
    model = mlp()
    model.compile(keras.optimizers.SGD(0.5), keras.losses.SparseCategoricalCrossentropy(True))
    weights: list[list[np.ndarray]] = []

    class Before(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch: int, logs: object = None) -> None:
            weights.append([v.numpy().copy() for v in model.trainable_weights])

    hook = tt.KerasHook(
        tmp_path / "t",
        save_config=tt.SaveConfig(save_interval=3),
        include_collections=["gradients"],
    )
    model.fit(x, y, batch_size=32, epochs=1, verbose=0, shuffle=False, callbacks=[Before(), hook])
    weights.append([v.numpy().copy() for v in model.trainable_weights])
    trial = tt.create_trial(tmp_path / "t")
    assert trial.tensor("gradients/dense/kernel").steps(mode=TRAIN) == [0, 3]
    for step in (0, 3):
        grad = trial.tensor("gradients/dense/kernel").value(step, mode=TRAIN)
        applied = (weights[step][0] - weights[step + 1][0]) / 0.5
        np.testing.assert_allclose(grad, applied, rtol=1e-4, atol=1e-6)
    # the last batch (step 4) was not due: the copy still holds step 3's gradient
    copy = hook._gradients._copies["dense/kernel"].numpy()
    np.testing.assert_allclose(copy, (weights[3][0] - weights[4][0]) / 0.5, rtol=1e-4, atol=1e-6)
    hook.close()


@pytest.mark.parametrize("eager", [False, True])
def test_the_gradient_norm_of_every_batch_is_before_clipping(tmp_path: Path, eager: bool) -> None:
    """vitals/grad_norm: the total L2 norm of the gradients the optimizer was handed, before
    Keras clips them (global_clipnorm: the update's norm is lr * 0.01)."""
    x, y = data(96)
    model = mlp()
    model.compile(
        keras.optimizers.SGD(0.5, global_clipnorm=0.01),
        keras.losses.SparseCategoricalCrossentropy(True),
        run_eagerly=eager,
    )
    hook = tt.KerasHook(
        tmp_path / "t", save_config=tt.SaveConfig(save_interval=1),
        include_collections=["gradients", "weights", "biases", "vitals"],
    )  # fmt: skip
    model.fit(x, y, batch_size=32, epochs=1, verbose=0, shuffle=False, callbacks=[hook])
    hook.close()
    trial = tt.create_trial(tmp_path / "t")
    names = trial.tensor_names(collection="gradients")
    assert len(names) == 4
    for step in trial.steps(TRAIN):
        grads = [trial.tensor(n).value(step, mode=TRAIN) for n in names]
        total = float(np.sqrt(sum(float(np.sum(g.astype(np.float64) ** 2)) for g in grads)))
        saved = float(trial.tensor("vitals/grad_norm").value(step, mode=TRAIN))
        assert saved == pytest.approx(total, rel=1e-5)
        assert saved > 0.05  # well above the clip: the norm before clipping


def test_train_vital_signs_are_read_back_from_the_ring_at_saving_steps_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The job default saves tensors every 10th step: the step writes each batch's vital signs
    into a ring in its own variables, and the host reads it back only around the saving steps
    (before and after each) and at the epoch's end; no TRAIN batch reads its vector alone.
    Every step keeps its number and its own loss."""
    from tensortap.keras import _vitals

    floats = _vitals._floats
    converted: list[int] = []

    def counted(packed: object) -> list[float]:
        converted.append(1)
        return floats(packed)

    monkeypatch.setattr(_vitals, "_floats", counted)
    x, y = data(240)
    model = mlp()
    model.compile(keras.optimizers.SGD(0.1), keras.losses.SparseCategoricalCrossentropy(True))
    hook, truth = job_hook(tmp_path / "t"), BatchLosses(x, y, 8)
    model.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0, callbacks=[truth, hook])
    # step 0 (due: read at its end), steps 10 and 20 (before and at the end), the epoch's end
    assert hook._vitals.ring_reads == 6
    # at the end of a saving batch, the ring is read within its one compiled read
    assert hook._vitals.ring_reads_alone == 3
    assert converted == []  # no batch read its vital signs alone
    hook.close()
    trial = tt.create_trial(tmp_path / "t")
    assert trial.steps(TRAIN) == list(range(30))
    loss = trial.tensor("vitals/loss")
    assert loss.steps(mode=TRAIN) == list(range(30))
    for step, (own_loss, _) in enumerate(truth.seen):
        assert float(loss.value(step, mode=TRAIN)) == pytest.approx(own_loss, rel=1e-6)
    times = [float(trial.tensor("vitals/step_time").value(s, mode=TRAIN)) for s in range(30)]
    assert all(t > 0 for t in times)
    assert trial.tensor("dense/kernel").steps(mode=TRAIN) == [0, 10, 20]


def test_batches_that_capture_nothing_run_the_lean_trace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The job default captures activations, the outcome and gradients every 10th step: those
    batches run the train function's full trace, every other batch its lean one, traced
    without the captures (keras._lean); what is saved is unchanged."""
    from tensortap.keras import _hook, _lean

    runs: list[str] = []
    lean_taps: list[bool] = []  # is_tracing_lean() seen by the taps while tracing
    split = _lean.two_traces

    def counted(full: object, lean: object, capturing: object) -> object:
        def full_run(*args: object) -> object:
            runs.append("full")
            return full(*args)  # type: ignore[operator]

        def lean_run(*args: object) -> object:
            runs.append("lean")
            lean_taps.append(_lean.is_tracing_lean())
            return lean(*args)  # type: ignore[operator]

        return split(full_run, lean_run, capturing)  # type: ignore[arg-type]

    monkeypatch.setattr(_hook, "two_traces", counted)
    x, y = data(240)
    model = mlp()
    model.compile(keras.optimizers.SGD(0.1), keras.losses.SparseCategoricalCrossentropy(True))
    hook = job_hook(tmp_path / "t")
    model.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0, callbacks=[hook])
    hook.close()
    assert [i for i, r in enumerate(runs) if r == "full"] == [0, 10, 20]
    assert runs.count("lean") == 27 and all(lean_taps)
    trial = tt.create_trial(tmp_path / "t")
    assert trial.tensor("dense/relu_output_0").steps(mode=TRAIN) == [0, 10, 20]
    assert trial.tensor("gradients/dense/kernel").steps(mode=TRAIN) == [0, 10, 20]
    assert trial.tensor("labels").steps(mode=TRAIN) == [0, 10, 20]
    assert len(trial.tensor("vitals/loss").steps(mode=TRAIN)) == 30


def test_the_rows_written_since_the_last_read_are_found_by_their_numbers() -> None:
    """Each row of the ring holds its number modulo 2**24 (exact in float32): the count of rows
    written is found from the ring alone, across the numbers' wrap, with rows older than the
    last read left out and more than a ring's worth written between two reads counted."""
    from tensortap.keras._vitals import _NUMBERS, _WIDTH, RING, BatchVitals

    vitals = BatchVitals(None)  # type: ignore[arg-type]  # the count needs no hook

    def ring_of(numbers: list[int]) -> np.ndarray:
        ring = np.full((RING, _WIDTH), np.nan, dtype=np.float32)
        for number in numbers:
            ring[number % RING, _WIDTH - 1] = number % _NUMBERS
        return ring

    assert vitals._rows_written(ring_of([])) == 0  # nothing written yet
    assert vitals._rows_written(ring_of([0, 1, 2])) == 3
    vitals._last_written = _NUMBERS - 3
    old = list(range(_NUMBERS - 40, _NUMBERS - 3))  # read before: not counted again
    assert vitals._rows_written(ring_of(old)) == _NUMBERS - 3
    assert vitals._rows_written(ring_of([*old, *range(_NUMBERS - 3, _NUMBERS + 2)])) == _NUMBERS + 2
    vitals._last_written = 1000
    assert vitals._rows_written(ring_of(list(range(1000, 1000 + 3 * RING)))) == 1000 + 3 * RING


def test_the_ring_is_read_every_half_ring_when_nothing_else_is_due(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, count_submissions: Any
) -> None:
    """With only vital signs saved, the host reads the ring every half ring (8 rows here), so
    no row is overwritten before it is read: 40 batches, 10 reads, every step's own loss. The
    steps a read brings back are handed to the writer as one block (one recorder pass, one
    submission), not one step each."""
    from tensortap.keras import _vital_steps, _vitals

    monkeypatch.setattr(_vitals, "RING", 8)
    monkeypatch.setattr(_vital_steps, "RING", 8)
    x, y = data(320)
    model = mlp()
    model.compile(keras.optimizers.SGD(0.1), keras.losses.SparseCategoricalCrossentropy(True))
    hook = tt.KerasHook(
        tmp_path / "t",
        save_config=tt.SaveConfig(save_steps=[10_000]),
        include_collections=["vitals"],
    )
    handed = count_submissions(hook)
    truth = BatchLosses(x, y, 8)
    model.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0, callbacks=[truth, hook])
    assert hook._vitals.ring_reads == 10  # every 4th batch, the last at the epoch's end
    hook.close()
    assert handed == [4] * 10  # each read's 4 steps at once (40 submissions step by step)
    loss = tt.create_trial(tmp_path / "t").tensor("vitals/loss")
    assert loss.steps(mode=TRAIN) == list(range(40))
    for step, (own_loss, _) in enumerate(truth.seen):
        assert float(loss.value(step, mode=TRAIN)) == pytest.approx(own_loss, rel=1e-6)


def test_under_steps_per_execution_a_step_has_its_last_batchs_vital_signs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """steps_per_execution=4: Keras calls the callbacks once per 4 batches, so a step is 4
    batches and 4 rows of the ring; its vital signs are its last batch's (as a run of the same
    batches one by one saves them), and the ring (8 rows) is read every step, before any row
    of a step is overwritten."""
    from tensortap.keras import _vital_steps, _vitals

    monkeypatch.setattr(_vitals, "RING", 8)
    monkeypatch.setattr(_vital_steps, "RING", 8)
    x, y = data(256)
    losses = {}
    for per_call in (1, 4):
        model = mlp()
        model.compile(
            keras.optimizers.SGD(0.1),
            keras.losses.SparseCategoricalCrossentropy(True),
            steps_per_execution=per_call,
        )
        hook = tt.KerasHook(tmp_path / str(per_call), include_collections=["vitals"])
        model.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0, callbacks=[hook])
        hook.close()
        loss = tt.create_trial(tmp_path / str(per_call)).tensor("vitals/loss")
        losses[per_call] = [float(loss.value(s, mode=TRAIN)) for s in loss.steps(mode=TRAIN)]
    assert len(losses[1]) == 32 and len(losses[4]) == 8
    assert losses[4] == pytest.approx(losses[1][3::4], rel=1e-5)


def _backbone_model(trained: bool) -> keras.Model:
    """A 64-64 backbone (with BatchNormalization, whose moving statistics Keras never trains)
    frozen under a new 10-way head: trained first (frozen on purpose) or not (a copied
    fine-tuning recipe freezing a layer built from scratch)."""
    keras.backend.clear_session()
    keras.utils.set_random_seed(0)
    backbone = keras.Sequential(
        [
            keras.Input((64,)),
            keras.layers.Dense(64),
            keras.layers.BatchNormalization(),
            keras.layers.Activation("relu"),
        ],
        name="backbone",
    )
    if trained:
        x, y = data(256)
        pre = keras.Sequential([backbone, keras.layers.Dense(10)])
        pre.compile(keras.optimizers.Adam(0.01), keras.losses.SparseCategoricalCrossentropy(True))
        pre.fit(x, y, batch_size=32, epochs=8, verbose=0)
    backbone.trainable = False
    inputs = keras.Input((64,))
    return keras.Model(inputs, keras.layers.Dense(10)(backbone(inputs, training=False)))


@pytest.mark.parametrize("trained", [False, True])
def test_a_layer_frozen_at_its_random_initialisation_is_named(
    tmp_path: Path, trained: bool
) -> None:
    """Weights of layers set trainable=False while others train are training-loop facts
    (BatchNormalization's moving statistics, never trained by Keras, are not among them):
    TrainingLoop names them frozen_layer, a certain fault where they still hold their random
    initialisation, and evidence that needs harm where they were trained before."""
    from tensortap.rules import TrainingLoop

    model = _backbone_model(trained)
    model.compile(keras.optimizers.Adam(0.01), keras.losses.SparseCategoricalCrossentropy(True))
    hook = job_hook(tmp_path / "t")
    x, y = data(256)
    model.fit(x, y, batch_size=32, epochs=1, verbose=0, callbacks=[hook])
    hook.close()
    trial = tt.create_trial(tmp_path / "t")
    facts = sorted(n for n in trial.tensor_names(collection="training_loop") if "frozen" in n)
    assert facts == [
        "training_loop/frozen/backbone/batch_normalization/beta",
        "training_loop/frozen/backbone/batch_normalization/gamma",
        "training_loop/frozen/backbone/dense/bias",
        "training_loop/frozen/backbone/dense/kernel",
        "training_loop/frozen_params",
    ]
    summary = invoke_rule(TrainingLoop(trial))
    (finding,) = summary.findings
    assert finding.details["cause"] == "frozen_layer", finding.message
    assert "4 weights belong to layers set trainable=False" in finding.message
    if trained:
        assert finding.details.get("needs_harm") is True, finding.message
        assert "random initialisation" not in finding.message
    else:
        assert "needs_harm" not in finding.details, finding.message
        assert "still hold a random initialisation" in finding.message


@pytest.mark.parametrize("trained", [False, True])
def test_a_recurrent_encoder_frozen_at_its_initialisation_is_named(
    tmp_path: Path, trained: bool
) -> None:
    """A stranger's GRU encoder frozen outside the ``if`` that loads its pre-trained weights:
    Keras starts a recurrent kernel orthogonal, not uniform, so the check for a fresh
    initialisation reads orthonormal rows too (it took the random encoder for a trained one,
    frozen on purpose, and the run was called healthy)."""
    from tensortap.rules import TrainingLoop

    keras.backend.clear_session()
    keras.utils.set_random_seed(0)
    x, y = data(256)
    rows = x.reshape(-1, 8, 8)
    encoder = keras.Sequential(
        [keras.Input((8, 8)), keras.layers.GRU(32)], name="encoder"
    )  # kernel (8, 96): uniform; recurrent kernel (32, 96): orthogonal
    if trained:
        pre = keras.Sequential([encoder, keras.layers.Dense(10)])
        pre.compile(keras.optimizers.Adam(0.01), keras.losses.SparseCategoricalCrossentropy(True))
        pre.fit(rows, y, batch_size=32, epochs=3, verbose=0)
    encoder.trainable = False
    inputs = keras.Input((8, 8))
    model = keras.Model(inputs, keras.layers.Dense(10)(encoder(inputs)))
    model.compile(keras.optimizers.Adam(0.01), keras.losses.SparseCategoricalCrossentropy(True))
    hook = job_hook(tmp_path / "t")
    model.fit(rows, y, batch_size=32, epochs=1, verbose=0, callbacks=[hook])
    hook.close()
    (finding,) = invoke_rule(TrainingLoop(tt.create_trial(tmp_path / "t"))).findings
    assert finding.details["cause"] == "frozen_layer", finding.message
    if trained:
        assert finding.details.get("needs_harm") is True, finding.message
    else:
        assert "needs_harm" not in finding.details, finding.message
        assert "3072 in orthogonal matrices" in finding.message


@pytest.mark.parametrize("decay_steps", [5, 160])
def test_a_schedule_that_runs_out_within_the_first_epoch_is_named(
    tmp_path: Path, decay_steps: int
) -> None:
    """A stranger's ``ExponentialDecay(0.05, decay_steps=5, decay_rate=0.5, staircase=True)``
    meant as "halve every 5 epochs": Keras counts optimizer steps, so the rate is gone within
    the first epoch and the run never learns (it was named not_updating). The rate of each
    TRAIN step (its vital signs) is a training-loop fact, with the schedule's; TrainingLoop
    names scheduler_per_batch. Halving every 160 steps (10 epochs) is not named; the schedule is in the run's configuration either way."""
    from tensortap.rules import TrainingLoop

    x, y = data(256)
    model = mlp()
    schedule = keras.optimizers.schedules.ExponentialDecay(0.05, decay_steps, 0.5, staircase=True)
    model.compile(keras.optimizers.SGD(schedule), keras.losses.SparseCategoricalCrossentropy(True))
    hook = job_hook(tmp_path / "t")
    model.fit(x, y, batch_size=16, epochs=6, verbose=0, callbacks=[hook])  # 96 steps
    hook.close()
    trial = tt.create_trial(tmp_path / "t")
    config = trial.config()["optimizer"]["learning_rate_schedule"]
    assert config["class_name"] == "ExponentialDecay"
    assert config["config"]["decay_steps"] == decay_steps
    lr = trial.tensor("training_loop/lr_low_share/SGD")
    summary = invoke_rule(TrainingLoop(trial))
    causes = [f.details.get("cause") for f in summary.findings]
    if decay_steps == 5:  # 1% of the peak from step 36 (7 halvings): 61 of 96 steps
        assert lr.value(lr.steps()[-1]) >= 0.5
        assert causes == ["scheduler_per_batch"], [f.message for f in summary.findings]
        assert "ExponentialDecay (period 5) counts optimizer steps" in summary.findings[0].message
    else:
        assert lr.value(lr.steps()[-1]) == 0.0
        assert causes == [], [f.message for f in summary.findings]


def test_a_fine_tuning_fit_at_a_lower_rate_is_not_a_schedule_run_out(tmp_path: Path) -> None:
    """A model trained at Adam 0.01, then compiled again to fine-tune under a slowly decaying
    schedule from 1e-5 (a thousandth of the first rate): the second optimizer's rate is its
    own record, never compared with the first one's peak."""
    from tensortap.rules import TrainingLoop

    x, y = data(256)
    model = mlp()
    loss = keras.losses.SparseCategoricalCrossentropy(True)
    hook = job_hook(tmp_path / "t")
    model.compile(keras.optimizers.Adam(0.01), loss)
    model.fit(x, y, batch_size=16, epochs=1, verbose=0, callbacks=[hook])  # 16 steps
    slow = keras.optimizers.schedules.ExponentialDecay(1e-5, 1000, 0.9)
    model.compile(keras.optimizers.Adam(slow), loss)
    model.fit(x, y, batch_size=16, epochs=3, verbose=0, callbacks=[hook])  # 48 steps
    hook.close()
    trial = tt.create_trial(tmp_path / "t")
    share = trial.tensor("training_loop/lr_low_share/Adam")
    assert share.value(share.steps()[-1]) == 0.0
    summary = invoke_rule(TrainingLoop(trial))
    assert [f.details.get("cause") for f in summary.findings] == [], summary.findings


def test_a_fit_of_another_model_or_loss_starts_a_stage(tmp_path: Path) -> None:
    """A script that pre-trains one model and then fits another (a pre-trained encoder under
    a new head, for a second task) has two stages whose losses are not comparable: the fact
    ``training_loop/stage`` marks the first TRAIN step of each new one. The same model fitted
    again, even compiled again with an equal loss (unfrozen, at a lower rate), is not a new
    stage; compiled with another loss, it is."""
    x, y = data(64)
    hook = job_hook(tmp_path / "t")

    def fit(model: keras.Model, loss: keras.losses.Loss, labels: np.ndarray) -> None:
        model.compile(keras.optimizers.Adam(0.01), loss)
        model.fit(x, labels, batch_size=16, epochs=1, verbose=0, callbacks=[hook])

    first = keras.Sequential([keras.Input((64,)), keras.layers.Dense(10)])
    fit(first, keras.losses.SparseCategoricalCrossentropy(True), y)  # TRAIN steps 0-3
    second = keras.Sequential([keras.Input((64,)), keras.layers.Dense(1)])
    binary = (y >= 5).astype("float32")
    fit(second, keras.losses.BinaryCrossentropy(True), binary)  # 4-7: stage 1
    fit(second, keras.losses.BinaryCrossentropy(True), binary)  # 8-11: the same loss
    fit(second, keras.losses.MeanSquaredError(), binary)  # 12-15: stage 2
    hook.close()
    trial = tt.create_trial(tmp_path / "t")
    stage = trial.tensor("training_loop/stage")
    assert stage.steps(mode=TRAIN) == [4, 12]
    assert [int(stage.value(s, mode=TRAIN)) for s in stage.steps(mode=TRAIN)] == [1, 2]
    # each model's kernel before an update of its own, once: the first model's at step 0,
    # the second's at its first step that saves weights (every 10th)
    initial = sorted(
        trial.tensor(n).steps(mode=TRAIN) for n in trial.tensor_names(collection="initial_weights")
    )
    assert initial == [[0], [10]], initial
