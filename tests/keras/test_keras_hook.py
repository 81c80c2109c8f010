"""KerasHook on Keras 3 with the TensorFlow backend (and torch, in a subprocess)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
pytest.importorskip("keras")
pytest.importorskip("tensorflow")

import itertools

import keras

import tensortap.keras as tt
from tensortap.core._stop import request_stop
from tensortap.keras._activations import ActivationTaps
from tensortap.rules import VanishingGradient, invoke_rule

HERE = Path(__file__).parent
ALL = ["losses", "metrics", "weights", "biases", "gradients", "optimizer_variables"]


def data(n: int = 48) -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    return (x[:n] / 16.0).astype("float32"), y[:n]


def mlp(depth: int = 1, activation: str = "relu") -> keras.Model:
    keras.backend.clear_session()  # layer names restart at dense, dense_1
    keras.utils.set_random_seed(0)
    layers = [keras.Input((64,))]
    layers += [keras.layers.Dense(16, activation=activation) for _ in range(depth)]
    return keras.Sequential([*layers, keras.layers.Dense(10)])


def hook_at(path: Path, **kwargs: Any) -> tt.KerasHook:
    return tt.KerasHook(
        path, save_config=tt.SaveConfig(save_interval=1), include_collections=ALL, **kwargs
    )


def test_seed_003_flow(tmp_path: Path) -> None:
    """Seed 003 with its import changed (the loss is Keras's "loss": Keras 3 has no
    'CrossEntropyLoss:0' graph tensor)."""
    x, y = data(300)
    out_dir = str(tmp_path / "job")
    hook = tt.KerasHook(out_dir=out_dir)
    keras.backend.clear_session()
    model = keras.models.Sequential([keras.Input((64,)), keras.layers.Dense(10)])
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    model.fit(x, y, epochs=2, callbacks=[hook], verbose=0)
    model.evaluate(x, y, callbacks=[hook], verbose=0)
    trial = tt.create_trial(out_dir=out_dir)
    vitals = ["vitals/grad_norm", "vitals/loss", "vitals/lr"]
    vitals += ["vitals/samples_per_second", "vitals/step_time"]
    assert trial.tensors() == ["loss", *vitals]  # vital signs: every batch (core._vitals)
    assert trial.tensor("loss").steps(tt.modes.TRAIN) == [0]  # the hook's schedule
    assert trial.steps(tt.modes.TRAIN) == list(range(20))
    assert trial.steps(tt.modes.EVAL) == list(range(10))
    assert float(trial.tensor("loss").value(0, mode=tt.modes.EVAL)) > 0


def test_a_trial_opened_right_after_fit_or_evaluate_holds_every_step(
    tmp_path: Path, hold_writer: Any
) -> None:
    """The ends of fit and evaluate wait (boundedly) for the writer to publish their steps, so
    a script that opens the trial next sees all of them with no flush of its own, as with
    smdebug. The writer is held here until someone waits for it, so that a trial opened
    without that wait could not hold them."""
    x, y = data(300)
    out_dir = tmp_path / "t"
    hook = tt.KerasHook(out_dir=out_dir)
    hold_writer(hook)
    model = keras.models.Sequential([keras.Input((64,)), keras.layers.Dense(10)])
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    model.fit(x, y, epochs=2, validation_data=(x[:64], y[:64]), callbacks=[hook], verbose=0)
    trial = tt.create_trial(out_dir=out_dir)
    assert trial.steps(tt.modes.TRAIN) == list(range(20))
    assert trial.steps(tt.modes.EVAL) == list(range(4))  # two validations of 2 batches
    model.evaluate(x, y, callbacks=[hook], verbose=0)
    trial = tt.create_trial(out_dir=out_dir)
    assert trial.steps(tt.modes.EVAL) == list(range(14))
    hook.close()


@pytest.mark.parametrize("eager", [False, True])
def test_saved_values_are_what_keras_computed(tmp_path: Path, eager: bool) -> None:
    """Weights after each batch; gradients of the batch (with plain SGD, the update is
    -lr * gradient exactly)."""
    x, y = data(48)
    model = mlp()
    model.compile(
        keras.optimizers.SGD(0.5),
        keras.losses.SparseCategoricalCrossentropy(True),
        metrics=["accuracy"],
        run_eagerly=eager,
    )

    snapshots: list[list[np.ndarray]] = []

    class Snapshot(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            snapshots.append([w.copy() for w in self.model.get_weights()])

    hook = hook_at(tmp_path / "t")
    model.fit(x, y, batch_size=16, epochs=1, verbose=0, callbacks=[Snapshot(), hook])
    snapshots.append(model.get_weights())
    hook.close()
    trial = tt.create_trial(tmp_path / "t")
    assert trial.steps() == [0, 1, 2]
    names = ["dense/kernel", "dense/bias", "dense_1/kernel", "dense_1/bias"]
    assert set(trial.tensor_names(collection="weights")) == {"dense/kernel", "dense_1/kernel"}
    assert set(trial.tensor_names(collection="biases")) == {"dense/bias", "dense_1/bias"}
    for step in range(3):
        for i, name in enumerate(names):
            after = trial.tensor(name).value(step)
            np.testing.assert_array_equal(after, snapshots[step + 1][i])
            grad = trial.tensor(f"gradients/{name}").value(step)
            np.testing.assert_allclose(snapshots[step][i] - 0.5 * grad, after, rtol=1e-5, atol=1e-6)
    assert trial.tensor("optimizer/learning_rate").value(0) == pytest.approx(0.5)
    assert trial.tensor_names(collection="metrics") == ["accuracy"]


def test_modes_follow_keras(tmp_path: Path) -> None:
    x, y = data(48)
    model = mlp()
    model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(True))
    hook = hook_at(tmp_path / "t")
    model.fit(
        x, y, batch_size=16, epochs=2, verbose=0, callbacks=[hook], validation_data=(x[:32], y[:32])
    )
    model.evaluate(x, y, batch_size=24, verbose=0, callbacks=[hook])
    model.predict(x, batch_size=48, verbose=0, callbacks=[hook])
    hook.close()
    trial = tt.create_trial(tmp_path / "t")
    assert trial.steps(tt.modes.TRAIN) == list(range(6))
    assert trial.steps(tt.modes.EVAL) == list(range(2 * 2 + 2))  # validation, then evaluate
    assert trial.steps(tt.modes.PREDICT) == [0]
    assert trial.steps() == list(range(6 + 6 + 1))
    # epoch 0: TRAIN 0-2, validation EVAL 3-4; epoch 1: TRAIN 5-7, EVAL 8-9; evaluate 10-11
    assert [trial.mode(g).name for g in (2, 3, 5, 8, 10, 12)] == [
        "TRAIN",
        "EVAL",
        "TRAIN",
        "EVAL",
        "EVAL",
        "PREDICT",
    ]
    assert trial.tensor("loss").steps(tt.modes.EVAL) == list(range(6))


def test_stop_request_ends_fit_the_keras_way(tmp_path: Path) -> None:
    x, y = data(160)
    model = mlp()
    model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(True))
    request_stop(tmp_path / "stop", "a rule fired")
    hook = hook_at(tmp_path / "t", stop_file=tmp_path / "stop")
    history = model.fit(x, y, batch_size=16, epochs=5, verbose=0, callbacks=[hook])
    hook.close()
    assert len(history.history["loss"]) == 1  # the first epoch ended early, and the fit
    assert tt.create_trial(tmp_path / "t").steps() == [0]


def test_vanishing_gradients_are_caught_on_a_keras_model(tmp_path: Path) -> None:
    x, y = data(128)
    found = {}
    for label, model in (("sigmoid", mlp(10, "sigmoid")), ("relu", mlp(2, "relu"))):
        model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(True))
        hook = hook_at(tmp_path / label)
        model.fit(x, y, batch_size=32, epochs=2, verbose=0, callbacks=[hook])
        hook.close()
        summary = invoke_rule(VanishingGradient(tt.create_trial(tmp_path / label), threshold=1e-5))
        found[label] = summary.triggered
    assert found["sigmoid"] == 8 and found["relu"] == 0


def test_zero_code_change(tmp_path: Path) -> None:
    script = tmp_path / "plain.py"
    script.write_text(
        "import numpy as np, keras\n"
        "x = np.random.rand(32, 8).astype('float32'); y = np.random.randint(0, 2, 32)\n"
        "m = keras.Sequential([keras.Input((8,)), keras.layers.Dense(2)])\n"
        "m.compile('sgd', keras.losses.SparseCategoricalCrossentropy(from_logits=True))\n"
        "m.fit(x, y, batch_size=16, epochs=1, verbose=0)\n"
        "m.evaluate(x, y, verbose=0)\n"
    )
    config = tmp_path / "hook.json"
    config.write_text(
        '{"out_dir": "%s", "hook_parameters": {"save_interval": "1"},'
        ' "collection_configurations": [{"name": "gradients"}, {"name": "losses"}]}'
        % (tmp_path / "t")
    )
    done = subprocess.run(
        [sys.executable, "-m", "tensortap.attach", "--config", str(config), str(script)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    trial = tt.create_trial(tmp_path / "t")
    assert trial.steps(tt.modes.TRAIN) == [0, 1] and trial.steps(tt.modes.EVAL) == [0]
    assert "gradients/dense/kernel" in trial.tensor_names(collection="gradients")


def test_zero_code_change_with_validation_split(tmp_path: Path) -> None:
    """fit's own validation pass calls evaluate with fit's CallbackList: it is hooked through
    fit (EVAL steps saved), with no "could not attach" traceback per epoch."""
    script = tmp_path / "plain.py"
    script.write_text(
        "import numpy as np, keras\n"
        "x = np.random.rand(64, 8).astype('float32'); y = np.random.randint(0, 2, 64)\n"
        "m = keras.Sequential([keras.Input((8,)), keras.layers.Dense(2)])\n"
        "m.compile('sgd', keras.losses.SparseCategoricalCrossentropy(from_logits=True))\n"
        "m.fit(x, y, batch_size=16, epochs=2, verbose=0, validation_split=0.25)\n"
    )
    config = tmp_path / "hook.json"
    config.write_text(
        '{"out_dir": "%s", "hook_parameters": {"save_interval": "1"},'
        ' "collection_configurations": [{"name": "losses"}]}' % (tmp_path / "t")
    )
    done = subprocess.run(
        [sys.executable, "-m", "tensortap.attach", "--config", str(config), str(script)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "could not attach" not in done.stderr and "Traceback" not in done.stderr
    trial = tt.create_trial(tmp_path / "t")
    assert trial.steps(tt.modes.TRAIN) == list(range(6))  # 3 batches of 16 per epoch
    assert trial.steps(tt.modes.EVAL) == [0, 1]  # one validation batch per epoch
    assert trial.tensor("loss").steps(mode=tt.modes.EVAL) == [0, 1]


def test_torch_backend(tmp_path: Path) -> None:
    """Keras on the torch backend: the same callback gets losses, weights and gradients."""
    pytest.importorskip("torch")
    env = {**os.environ, "KERAS_BACKEND": "torch"}
    done = subprocess.run(
        [sys.executable, str(HERE / "backend_script.py"), str(tmp_path / "t")],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "update_matches True" in done.stdout
    assert "'gradients/dense/kernel'" in done.stdout and "'loss'" in done.stdout


def test_gradient_tape_loop(tmp_path: Path) -> None:
    import tensorflow as tf

    x, y = data(32)
    model = mlp()
    optimizer = keras.optimizers.SGD(0.5)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    hook = hook_at(tmp_path / "t")
    seen = []
    for _ in range(3):
        before = [v.numpy().copy() for v in model.trainable_variables]
        with hook.wrap_tape(tf.GradientTape()) as tape:
            loss = loss_fn(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        seen.append((float(loss), before, [v.numpy().copy() for v in model.trainable_variables]))
    hook.close()
    trial = tt.create_trial(tmp_path / "t")
    assert trial.steps(tt.modes.TRAIN) == [0, 1, 2]
    for step, (loss, before, after) in enumerate(seen):
        assert float(trial.tensor("loss").value(step)) == pytest.approx(loss)
        for i, name in enumerate(["dense/kernel", "dense/bias", "dense_1/kernel", "dense_1/bias"]):
            np.testing.assert_array_equal(trial.tensor(name).value(step), after[i])
            grad = trial.tensor(f"gradients/{name}").value(step)
            np.testing.assert_allclose(before[i] - 0.5 * grad, after[i], rtol=1e-5, atol=1e-6)


def test_save_tensor_inside_tf_function_fails_clearly(tmp_path: Path) -> None:
    import tensorflow as tf

    hook = hook_at(tmp_path / "t")

    @tf.function
    def step(v: tf.Tensor) -> tf.Tensor:
        hook.save_tensor("v", v * 2)
        return v

    # AutoGraph re-raises it as a StagingError that carries our message
    with pytest.raises(Exception, match="InvalidTensorError: tensor 'v' is symbolic") as caught:
        step(tf.constant([1.0]))
    assert "inside a tf.function" in str(caught.value)
    hook.save_tensor("v", tf.constant([1.0]) * 2, "metrics")  # eager tensors are fine
    hook.close()
    assert tt.create_trial(tmp_path / "t").tensor("v").value(0).tolist() == [2.0]


def test_mirrored_strategy_on_two_logical_cpus(tmp_path: Path) -> None:
    """One process, two replicas: one worker, and the gradient saved is the one applied (the
    replicas' copies summed)."""
    done = subprocess.run(
        [sys.executable, str(HERE / "mirrored_script.py"), str(tmp_path / "t")],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "replicas 2 workers ['worker_0']" in done.stdout
    assert "update_matches True" in done.stdout


@pytest.mark.parametrize(
    ("model", "status"), [("sigmoid", "IssuesFound"), ("relu", "NoIssuesFound")]
)
def test_a_plain_keras_script_under_a_job(tmp_path: Path, model: str, status: str) -> None:
    """Zero code change through the job runner: the rule reads what the patched fit saved."""
    from tensortap.jobs import DebuggerHookConfig, Rule, TrainingJob, rule_configs

    job = TrainingJob(
        command=[sys.executable, str(HERE / "keras_train.py"), model],
        output_path=tmp_path,
        debugger_hook_config=DebuggerHookConfig(hook_parameters={"save_interval": "2"}),
        rules=[
            Rule.builtin(rule_configs.vanishing_gradient(), rule_parameters={"threshold": "1e-5"})
        ],
    )
    job.fit(wait=False)
    summary = job.wait(timeout=300, logs=False)
    assert summary["status"] == "Completed", job.logs()[-3000:]
    assert [r["RuleEvaluationStatus"] for r in job.rule_job_summary()] == [status]
    trial = tt.create_trial(job.debugger_artifacts_path())
    assert trial.steps() == list(range(16))  # the vital signs: every step
    assert trial.tensor("gradients/dense/kernel").steps() == list(range(0, 16, 2))


@pytest.mark.parametrize("eager", [False, True])
def test_activations_are_captured_in_the_models_own_pass(tmp_path: Path, eager: bool) -> None:
    x, y = data(48)
    keras.backend.clear_session()
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.Input((64,)),
            keras.layers.Dense(8, activation="relu"),
            keras.layers.Dense(6, activation="tanh"),
            keras.layers.ReLU(),
            keras.layers.Dense(10),
        ]
    )
    model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(True), run_eagerly=eager)
    w0, b0 = (w.copy() for w in model.layers[0].get_weights())
    hook = tt.KerasHook(
        tmp_path / "t",
        save_config=tt.SaveConfig(save_interval=2),
        include_collections=["relu_activations", "losses"],
    )
    model.fit(x, y, batch_size=16, epochs=1, verbose=0, shuffle=False, callbacks=[hook])
    model.evaluate(x, y, batch_size=48, verbose=0, callbacks=[hook])
    hook.close()
    trial = tt.create_trial(tmp_path / "t")
    assert trial.tensor_names(collection="layers") == [
        "dense/relu_input_0",
        "dense/relu_output_0",
        "dense_1/tanh_input_0",
        "dense_1/tanh_output_0",
        "re_lu/relu_input_0",
        "re_lu/relu_output_0",
    ]
    out = trial.tensor("dense/relu_output_0")
    assert out.steps() == [0, 2, 3]  # due TRAIN steps 0 and 2, and the EVAL step
    np.testing.assert_allclose(out.value(0), np.maximum(x[:16] @ w0 + b0, 0), rtol=1e-5, atol=1e-6)
    w, b = model.layers[0].get_weights()
    expected = np.maximum(x @ w + b, 0)
    np.testing.assert_allclose(out.value(0, mode=tt.modes.EVAL), expected, rtol=1e-5, atol=1e-6)


def test_dead_relus_are_caught_on_a_keras_model(tmp_path: Path) -> None:
    from tensortap.rules import DeadRelu

    x, y = data(128)
    fired = {}
    for label, bias in (("dead", -10.0), ("healthy", 0.0)):
        keras.backend.clear_session()
        keras.utils.set_random_seed(0)
        model = keras.Sequential(
            [
                keras.Input((64,)),
                keras.layers.Dense(
                    16, activation="relu", bias_initializer=keras.initializers.Constant(bias)
                ),
                keras.layers.Dense(10),
            ]
        )
        model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(True))
        hook = hook_at(tmp_path / label)
        hook.include_collection("relu_activations")
        model.fit(x, y, batch_size=32, epochs=1, verbose=0, callbacks=[hook])
        hook.close()
        fired[label] = invoke_rule(DeadRelu(tt.create_trial(tmp_path / label))).triggered
    assert fired == {"dead": 4, "healthy": 0}


@pytest.mark.parametrize("eager", [False, True])
def test_layer_outputs_model_io_labels_and_predictions(tmp_path: Path, eager: bool) -> None:
    x, y = data(32)
    model = mlp()
    model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(True), run_eagerly=eager)
    hook = tt.KerasHook(
        tmp_path / "t",
        save_config=tt.SaveConfig(save_interval=1),
        include_collections=["layers", "inputs", "outputs", "labels", "predictions"],
    )
    model.fit(x, y, batch_size=32, epochs=1, verbose=0, shuffle=False, callbacks=[hook])
    hook.close()
    trial = tt.create_trial(tmp_path / "t")
    assert trial.tensor_names(collection="layers") == [
        "dense/relu_input_0",
        "dense/relu_output_0",
        "dense_1_output_0",
        "dense_output_0",
    ]
    np.testing.assert_array_equal(trial.tensor("sequential_input_0").value(0), x)
    logits = trial.tensor("sequential_output_0").value(0)
    np.testing.assert_array_equal(trial.tensor("dense_1_output_0").value(0), logits)
    # what the loss compares, as classes (tensortap.core._outcome: bounded, as the rules read it)
    np.testing.assert_array_equal(trial.tensor("predictions").value(0), logits.argmax(-1))
    np.testing.assert_array_equal(trial.tensor("labels").value(0), y)
    assert trial.tensor("labels").value(0).dtype == np.int32


def test_the_all_collection_saves_everything_including_optimizer_state(tmp_path: Path) -> None:
    x, y = data(32)
    model = mlp()
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(True))
    hook = tt.KerasHook(
        tmp_path / "t", save_config=tt.SaveConfig(save_interval=1), include_collections=["all"]
    )
    model.fit(x, y, batch_size=16, epochs=1, verbose=0, callbacks=[hook])
    hook.close()
    names = set(tt.create_trial(tmp_path / "t").tensor_names())
    assert {"loss", "dense/kernel", "gradients/dense/kernel", "dense/relu_output_0"} <= names
    assert {"labels", "predictions", "sequential_input_0", "optimizer/learning_rate"} <= names
    assert "optimizer/sequential_dense_kernel_momentum" in names  # Adam's first moment


def test_framework_free_hook_in_callbacks_names_keras_hook(tmp_path: Path) -> None:
    import tensortap
    from tensortap.exceptions import FrameworkHookNeeded

    x, y = data()
    model = mlp()
    model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy")
    hook = tensortap.Hook(tmp_path / "run")
    with pytest.raises(FrameworkHookNeeded, match=r"tensortap\.keras\.KerasHook"):
        model.fit(x, y, epochs=1, callbacks=[hook], verbose=0)
    hook.close()


def test_close_puts_back_every_method_the_hook_wrapped(tmp_path: Path) -> None:
    x, y = data()
    model = mlp(depth=2)
    model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy")
    dense = [layer for layer in model.layers if isinstance(layer, keras.layers.Dense)]
    activations = [layer.activation for layer in dense]
    collections = [*ALL, "relu_activations", "layers", "inputs", "outputs", "labels"]
    hook = tt.KerasHook(
        tmp_path / "run",
        save_config=tt.SaveConfig(save_interval=1),
        include_collections=collections,
    )
    model.fit(x, y, epochs=1, batch_size=16, callbacks=[hook], verbose=0)
    wrapped = [layer for layer in (model, *dense) if "call" in vars(layer)]
    assert wrapped and "apply" in vars(model.optimizer)  # wrapped while the hook is open
    hook.close()
    assert [layer.name for layer in (model, *dense) if "call" in vars(layer)] == []
    assert "compute_loss" not in vars(model) and "apply" not in vars(model.optimizer)
    assert [layer.activation for layer in dense] == activations
    model.fit(x, y, epochs=1, batch_size=16, verbose=0)  # trains on without the hook

    keras.backend.clear_session()
    relu = keras.layers.ReLU()  # its call is wrapped twice: its output, and as a ReLU
    model = keras.Sequential(
        [keras.Input((64,)), keras.layers.Dense(16), relu, keras.layers.Dense(10)]
    )
    model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy")
    hook = tt.KerasHook(tmp_path / "relu", include_collections=collections)
    model.fit(x, y, epochs=1, batch_size=16, callbacks=[hook], verbose=0)
    assert "call" in vars(relu)
    hook.close()
    assert "call" not in vars(relu)


def test_the_job_default_reads_the_model_once_per_saving_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What ``tensortap run`` attaches (the recommended rules' collections, every 10th step):
    a saving step reads its weights, gradients and captured activations back with one compiled
    call (the initial weights with one more, once); other steps read none of them, nor ask the
    schedule collection by collection (one cached question a step)."""
    from tensortap.core._recorder import StepRecorder
    from tensortap.jobs._specs import Rule as RuleSpec
    from tensortap.jobs._specs import hook_config
    from tensortap.keras import _convert
    from tensortap.rules import rule_configs

    specs = [RuleSpec.builtin(config) for config in rule_configs.recommended()]
    hook = hook_config(str(tmp_path / "job"), None, specs, None).create_hook(tt.KerasHook)
    reads: list[int] = []
    conversions: list[int] = []
    read_all, to_numpy = tt.KerasHook._read_all, _convert.to_numpy

    def counted_read(self: tt.KerasHook, *args: Any) -> Any:
        reads.append(self.step)
        return read_all(self, *args)

    def counted_numpy(value: Any) -> Any:
        conversions.append(hook.step)
        return to_numpy(value)

    asked: set[int] = set()
    is_collection_due = StepRecorder.is_collection_due

    def counted_due(self: StepRecorder, name: str) -> bool:
        asked.add(hook.step)
        return is_collection_due(self, name)

    monkeypatch.setattr(StepRecorder, "is_collection_due", counted_due)
    monkeypatch.setattr(tt.KerasHook, "_read_all", counted_read)
    monkeypatch.setattr(_convert, "to_numpy", counted_numpy)
    x, y = data(240)
    model = mlp()
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(True))
    model.fit(x, y, batch_size=8, epochs=1, verbose=0, callbacks=[hook])
    hook.close()
    assert reads == [0, 0, 10, 20]  # the initial weights, then each saving step's
    assert conversions == []  # nothing read one by one
    assert asked == {0, 10, 20}
    trial = tt.create_trial(tmp_path / "job")
    assert trial.tensor("dense/relu_output_0").steps() == [0, 10, 20]
    assert trial.tensor("labels").value(10).shape == (8,)
    assert len(trial.tensor("vitals/loss").steps()) == 30


def test_a_batch_due_only_for_the_outcome_reads_the_labels_and_predictions_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under the job's save budget the tensors' interval widens, and the outcome sample's up to
    8 times only (every 80th step): a batch due only for the outcome reads back the labels and
    predictions (two captured values and their two written flags) with the ring of vital
    signs, not every activation the job taps; a batch that saves the tensors reads them all."""
    from tensortap.jobs._specs import DebuggerHookConfig, hook_config
    from tensortap.jobs._specs import Rule as RuleSpec
    from tensortap.rules import rule_configs

    specs = [RuleSpec.builtin(config) for config in rule_configs.recommended()]
    tiny = DebuggerHookConfig(hook_parameters={"save_budget": "1e-9"})  # widens at once
    hook = hook_config(str(tmp_path / "job"), tiny, specs, None).create_hook(tt.KerasHook)
    reads: dict[int, int] = {}  # TRAIN step -> values read back at its end (taps, variables)
    read_all = tt.KerasHook._read_all
    cleared: list[int] = []  # steps whose read cleared the taps' mask (no write next batch)
    clear = ActivationTaps.cleared

    def counted_clear(taps: ActivationTaps) -> None:
        cleared.append(hook.step)
        clear(taps)

    monkeypatch.setattr(ActivationTaps, "cleared", counted_clear)

    def counted_read(self: tt.KerasHook, sources: list[Any], *args: Any) -> Any:
        if self.mode == tt.modes.ModeKeys.TRAIN and self.step not in reads:
            reads[self.step] = len(sources)
        return read_all(self, sources, *args)

    monkeypatch.setattr(tt.KerasHook, "_read_all", counted_read)
    x, y = data(1600)
    model = mlp()
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(True))
    model.fit(x, y, batch_size=8, epochs=4, verbose=0, callbacks=[hook])  # 800 steps
    hook.close()
    trial = tt.create_trial(tmp_path / "job")
    tapped = trial.tensor("dense/relu_output_0").steps()
    outcome = trial.tensor("labels").steps()
    assert trial.tensor("predictions").steps() == outcome
    assert tapped[:5] == [0, 10, 20, 30, 40] and tapped[-1] - tapped[-2] > 80  # widened
    gaps = [b - a for a, b in itertools.pairwise(outcome)]
    assert max(gaps) == 80 and gaps[-3:] == [80] * 3  # the outcome: at most 8 times wider
    assert set(tapped) <= set(outcome)
    outcome_only = [s for s in outcome if s not in tapped]
    assert outcome_only and all(reads[s] == 5 for s in outcome_only), reads  # ring + 4
    assert all(reads[s] > 5 for s in tapped[1:]), reads  # the tensors' batches read them all
    assert len(trial.tensor("vitals/loss").steps()) == 800
    assert cleared == outcome  # each due batch's read cleared the mask


def test_taps_due_at_every_step_keep_their_mask(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Activations saved at every step: the read of a batch leaves the taps' mask set for the
    next (clearing it would cost a host write at every batch); every batch's are saved."""
    cleared: list[int] = []
    clear = ActivationTaps.cleared

    def counted_clear(taps: ActivationTaps) -> None:
        cleared.append(1)
        clear(taps)

    monkeypatch.setattr(ActivationTaps, "cleared", counted_clear)
    hook = tt.KerasHook(
        tmp_path / "t",
        save_config=tt.SaveConfig(save_interval=1),
        include_collections=["relu_activations", "labels", "predictions"],
    )
    x, y = data(80)
    model = mlp()
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(True))
    model.fit(x, y, batch_size=8, epochs=1, verbose=0, callbacks=[hook])
    hook.close()
    trial = tt.create_trial(tmp_path / "t")
    assert trial.tensor("dense/relu_output_0").steps() == list(range(10))
    assert trial.tensor("labels").steps() == list(range(10))
    assert cleared == []
