"""The MXNet Gluon hook (MXNet 1.9.1 on NumPy 1.23, in .venv-mxnet: `make test` runs these
tests there). Names are Gluon's, values equal what MXNet computed, modes follow autograd or
set_mode, hybridized blocks are handled, rules fire on buggy Gluon models and not their twins,
and seeds 002 and 004 run as examples."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

# A module only MXNet has: where MXNet is missing, examples/mxnet (on sys.path once the Hugging
# Face or Lightning tests put examples/ there) would be imported as a namespace package "mxnet".
pytest.importorskip(
    "mxnet.gluon", reason="MXNet 1.9 lives in .venv-mxnet (make test runs these tests there)"
)
import mxnet as mx
from mxnet import autograd, gluon, nd

import tensortap.mxnet as tt
from tensortap.exceptions import InvalidConfigError
from tensortap.rules import iter_findings
from tensortap.rules.builtin import DeadRelu, VanishingGradient

EXAMPLES = Path(__file__).parents[2] / "examples" / "mxnet"


def cnn(prefix: str) -> gluon.nn.HybridSequential:
    net = gluon.nn.HybridSequential(prefix=prefix)
    with net.name_scope():
        net.add(
            gluon.nn.Conv2D(4, kernel_size=3, padding=1, activation="relu"),
            gluon.nn.MaxPool2D(2),
            gluon.nn.Dense(16),
            gluon.nn.Activation("relu"),
            gluon.nn.Dense(10),
        )
    net.initialize(mx.init.Xavier(), force_reinit=True)
    return net


def batch(seed: int, n: int = 8) -> tuple[nd.NDArray, nd.NDArray]:
    rng = np.random.default_rng(seed)
    return (
        nd.array(rng.uniform(size=(n, 1, 8, 8)), dtype="float32"),
        nd.array(rng.integers(0, 10, n), dtype="float32"),
    )


def test_names_and_values_equal_what_mxnet_computed(tmp_path: Path) -> None:
    mx.random.seed(0)
    net = cnn("net_")
    hook = tt.Hook(tmp_path / "t", save_config=tt.SaveConfig(save_interval=1), include_regex=".*")
    hook.register_block(net)
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss(prefix="xent_")
    hook.register_loss(loss_fn)
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1})
    expected = []
    for step in range(3):
        x, y = batch(step)
        with autograd.record():
            out = net(x)
            loss = loss_fn(out, y)
        loss.backward()
        grads = {n: p.grad().asnumpy().copy() for n, p in net.collect_params().items()}
        trainer.step(len(y))
        weights = {n: p.data().asnumpy().copy() for n, p in net.collect_params().items()}
        expected.append((x.asnumpy(), out.asnumpy(), loss.asnumpy(), grads, weights))
    hook.close()

    trial = tt.create_trial(tmp_path / "t")
    assert trial.steps(mode=tt.modes.TRAIN) == [0, 1, 2]
    names = set(trial.tensor_names())
    assert {"net_input_0", "net_output_0", "net_conv0_output_0", "net_dense1_output_0"} <= names
    assert {"xent_input_0", "xent_input_1", "xent_output_0", "gradient/net_conv0_weight"} <= names
    assert trial.tensor_names(collection="losses") == ["xent_output_0"]
    assert trial.tensor_names(collection="relu_activations") == [
        "net_conv0_relu_input_0",
        "net_conv0_relu_output_0",
        "net_relu0_input_0",
        "net_relu0_output_0",
    ]
    assert "net_conv0_bias" in trial.tensor_names(collection="biases")
    assert "net_conv0_weight" in trial.tensor_names(collection="weights")
    for step, (x, out, loss, grads, weights) in enumerate(expected):
        np.testing.assert_array_equal(trial.tensor("net_input_0").value(step), x)
        np.testing.assert_array_equal(trial.tensor("net_output_0").value(step), out)
        np.testing.assert_array_equal(trial.tensor("xent_output_0").value(step), loss)
        for name, value in grads.items():
            np.testing.assert_array_equal(trial.tensor(f"gradient/{name}").value(step), value)
        for name, value in weights.items():  # after the update of that step
            np.testing.assert_array_equal(trial.tensor(name).value(step), value)
    assert hook.status.healthy


def test_modes_follow_autograd_or_set_mode(tmp_path: Path) -> None:
    net = cnn("modes_")
    hook = tt.Hook(tmp_path / "t", save_config=tt.SaveConfig(save_interval=1), include_regex=".*")
    hook.register_block(net)
    for step in range(2):
        with autograd.record():
            out = net(batch(step)[0])
        out.backward()
    net(batch(5)[0])  # no autograd.record(): EVAL
    net(batch(6)[0])
    hook.set_mode(tt.modes.PREDICT)
    net(batch(7)[0])
    hook.close()
    trial = tt.create_trial(tmp_path / "t")
    assert trial.steps(mode=tt.modes.TRAIN) == [0, 1]
    assert trial.steps(mode=tt.modes.EVAL) == [0, 1]
    assert trial.steps(mode=tt.modes.PREDICT) == [0]
    assert trial.steps() == [0, 1, 2, 3, 4]
    gradient = trial.tensor("gradient/modes_conv0_bias")
    assert gradient.steps(mode=tt.modes.TRAIN) == [0, 1]
    assert gradient.steps(mode=tt.modes.EVAL) == []  # no backward: not saved again
    np.testing.assert_array_equal(
        trial.tensor("modes_input_0").value(1, mode=tt.modes.EVAL), batch(6)[0].asnumpy()
    )


def test_the_first_registered_block_drives_the_steps(tmp_path: Path) -> None:
    encoder, decoder = cnn("enc_"), cnn("dec_")
    hook = tt.Hook(tmp_path / "t", save_config=tt.SaveConfig(save_interval=1), include_regex=".*")
    hook.register_block(encoder)
    hook.register_block(decoder)
    outputs = []
    for step in range(3):
        encoder(batch(step)[0])  # starts the step
        outputs.append(decoder(batch(10 + step)[0]).asnumpy())  # watched within it
    hook.close()
    trial = tt.create_trial(tmp_path / "t")
    assert trial.steps() == [0, 1, 2]
    for step, output in enumerate(outputs):
        np.testing.assert_array_equal(trial.tensor("dec_output_0").value(step), output)


def test_a_hybridized_block_saves_its_own_inputs_and_outputs(tmp_path: Path) -> None:
    net = cnn("hyb_")
    net.hybridize()
    hook = tt.Hook(tmp_path / "t", save_config=tt.SaveConfig(save_interval=1), include_regex=".*")
    hook.register_block(net)
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss(prefix="hloss_")
    hook.register_loss(loss_fn)
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1})
    for step in range(2):
        x, y = batch(step)
        with autograd.record():
            out = net(x)
            loss = loss_fn(out, y)
        loss.backward()
        trainer.step(len(y))
    hook.close()
    trial = tt.create_trial(tmp_path / "t")
    names = set(trial.tensor_names())
    assert {"hyb_input_0", "hyb_output_0", "hloss_output_0", "gradient/hyb_dense0_weight"} <= names
    assert not any(n.startswith("hyb_conv0_") and "_output_" in n for n in names)
    np.testing.assert_array_equal(trial.tensor("hyb_output_0").value(1), out.asnumpy())


def mlp(kind: str, prefix: str) -> gluon.nn.HybridSequential:
    """Twins: 'sigmoid' (12 sigmoid layers: vanishing gradients), 'dead' (ReLUs whose bias
    starts at -20: they never fire), 'healthy' (ReLUs)."""
    net = gluon.nn.HybridSequential(prefix=prefix)
    with net.name_scope():
        for _ in range(12 if kind == "sigmoid" else 2):
            if kind == "sigmoid":
                net.add(gluon.nn.Dense(32, activation="sigmoid"))
            else:
                net.add(gluon.nn.Dense(32), gluon.nn.Activation("relu"))
        net.add(gluon.nn.Dense(10))
    net.initialize(mx.init.Xavier())
    if kind == "dead":
        for name, param in net.collect_params().items():
            if name.endswith("bias") and "dense2" not in name:
                param.set_data(nd.full(param.shape, -20.0))
    return net


@pytest.mark.parametrize(
    ("kind", "rule", "fires"),
    [
        ("sigmoid", VanishingGradient, True),
        ("healthy", VanishingGradient, False),
        ("dead", DeadRelu, True),
        ("healthy", DeadRelu, False),
    ],
)
def test_rules_fire_on_a_buggy_gluon_model_and_not_its_twin(
    tmp_path: Path, kind, rule, fires
) -> None:
    from sklearn.datasets import load_digits

    mx.random.seed(0)
    x, y = load_digits(return_X_y=True)
    data, labels = nd.array(x / 16.0, dtype="float32"), nd.array(y, dtype="float32")
    net = mlp(kind, f"{kind}{rule.__name__.lower()}_")
    hook = tt.Hook(
        tmp_path / "t",
        save_config=tt.SaveConfig(save_interval=5),
        include_collections=["gradients", "relu_activations", "losses"],
    )
    hook.register_block(net)
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    hook.register_loss(loss_fn)
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1})
    for i in range(0, 640, 32):
        with autograd.record():
            loss = loss_fn(net(data[i : i + 32]), labels[i : i + 32])
        loss.backward()
        trainer.step(32)
    hook.close()
    fired = [f.step for f in iter_findings(rule(tt.create_trial(tmp_path / "t"))) if f.triggered]
    assert bool(fired) == fires, fired


def test_bad_registrations_are_refused(tmp_path: Path) -> None:
    hook = tt.Hook(tmp_path / "t")
    with pytest.raises(InvalidConfigError, match="expects a mxnet.gluon.Block, got list"):
        hook.register_block([])
    with pytest.raises(InvalidConfigError, match="expects a Gluon loss block"):
        hook.register_loss(lambda a, b: a)
    hook.close()


def run_example(name: str, tmp_path: Path) -> str:
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / name), "--quick", "--output", str(tmp_path / "trial")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_seed002_tensorplot_of_a_gluon_cnn(tmp_path: Path) -> None:
    out = run_example("seed002_tensorplot.py", tmp_path)
    assert (
        "layers: ['hybridsequential0_conv0_relu_output_0', 'hybridsequential0_conv1_relu_output_0', "
        "'hybridsequential0_dense0_relu_output_0']" in out
    )
    assert "steps: [1, 2, 3]; traces per frame: 4" in out
    assert (tmp_path / "trial.html").stat().st_size > 1_000_000


def test_seed004_autoencoder_followed_live(tmp_path: Path) -> None:
    out = run_example("seed004_autoencoder.py", tmp_path)
    steps = [line.split(":")[0] for line in out.splitlines() if line.startswith("eval step")]
    assert steps == ["eval step   0", "eval step  10", "eval step  20"]
    assert "skipped steps (tensors not saved): none; timed out: False" in out
    trial = tt.create_trial(tmp_path / "trial")
    assert sorted(trial.tensor_names()) == [
        "convolutionalautoencoder0_hybridsequential0_dense0_output_0",
        "convolutionalautoencoder0_input_1",
        "l2loss0_input_0",
        "l2loss0_input_1",
        "l2loss0_output_0",
    ]


def _gluon_hooks(*blocks: gluon.Block) -> list[str]:
    """The Gluon hooks a tensortap hook installed on ``blocks`` and their children."""
    found = []
    for top in blocks:
        stack = [top]
        while stack:
            block = stack.pop()
            stack.extend(block._children.values())
            for attr in ("_forward_pre_hooks", "_forward_hooks"):
                found += [
                    f"{block.name}.{attr}"
                    for fn in getattr(block, attr).values()
                    if "tensortap" in repr(fn)
                ]
    return found


def test_registrations_return_handles_and_close_removes_them(tmp_path: Path) -> None:
    import gc
    import weakref

    net, loss_fn = cnn("net_"), gluon.loss.SoftmaxCrossEntropyLoss(prefix="xent_")
    hook = tt.Hook(tmp_path / "t", save_config=tt.SaveConfig(save_interval=1))
    handle = hook.register_block(net)
    assert hook.register_block(net) is handle
    loss_handle = hook.register_loss(loss_fn)
    with autograd.record():
        x, y = batch(0)
        loss_fn(net(x), y).backward()
    assert _gluon_hooks(net, loss_fn)
    loss_handle.remove()
    assert _gluon_hooks(loss_fn) == [] and _gluon_hooks(net)
    hook.close()
    assert _gluon_hooks(net, loss_fn) == []
    net_ref = weakref.ref(net)
    del net, handle
    gc.collect()
    assert net_ref() is None and hook.closed
