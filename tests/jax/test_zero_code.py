"""A JAX + Optax script with no tensortap in it, run as a job (``tensortap run``): every step's
vital signs, numbering restored from the script's own checkpoint, and parameters that are
biases by shape and use whatever their names (issue 43)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("jax")
pytest.importorskip("optax")

import tensortap as tt
from tensortap.jobs._record import JobRecord

SCRIPT = str(Path(__file__).parent / "resume_script.py")


def run_job(where: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], JobRecord]:
    """``tensortap run --output runs -- python resume_script.py ARGS`` in ``where``."""
    where.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tensortap.cli",
            "run",
            "--output",
            "runs",
            "--",
            "python",
            SCRIPT,
            *args,
        ],
        cwd=where,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (job,) = (where / "runs").iterdir()
    return done, JobRecord(job)


def logged(done: subprocess.CompletedProcess[str]) -> dict[int, list[float]]:
    """The script's own per-step loss and gradient norm (its last line of output)."""
    line = [s for s in done.stdout.splitlines() if s.startswith("{")][-1]
    return {int(k): v for k, v in json.loads(line).items()}


def rules(record: JobRecord) -> dict[str, dict[str, Any]]:
    summary = record.summary() or {}
    return {r["RuleConfigurationName"]: r for r in summary.get("rules", [])}


def test_every_step_vital_signs_equal_the_scripts_own(tmp_path: Path) -> None:
    """The loss and the gradient norm of every step (not every 10th) are in the trial and
    equal what the script computed; the update norm and step time too."""
    done, record = run_job(tmp_path, "30", "0", str(tmp_path / "unused.npz"))
    own = logged(done)
    trial = tt.create_trial(record.trial_location)
    train = tt.modes.TRAIN
    assert trial.tensor("vitals/loss").steps(mode=train) == list(range(30))
    for step, (loss, norm) in own.items():
        assert trial.tensor("vitals/loss").value(step, mode=train) == pytest.approx(loss)
        assert trial.tensor("vitals/grad_norm").value(step, mode=train) == pytest.approx(
            norm, rel=1e-5
        )
    assert trial.tensor("vitals/update_norm").steps(mode=train) == list(range(30))
    assert trial.tensor("vitals/step_time").steps(mode=train) == list(range(1, 30))
    assert trial.tensor("gradient/hidden/kernel").steps(mode=train) == [0, 10, 20]


def test_a_script_restarted_from_its_checkpoint_continues_at_its_step(tmp_path: Path) -> None:
    """Trained to step 55 with a checkpoint after step 49, then restarted from it as a new
    job: its TRAIN steps are the optimizer's (50, 51, ...), not 0, 1, ...; restarted again
    into the first job's trial: the optimizer's too (50, ...), not the trial's next (55)."""
    ckpt = str(tmp_path / "ckpt.npz")
    run_job(tmp_path / "first", "55", "50", ckpt)
    done, record = run_job(tmp_path / "second", "70", "0", ckpt, "--restore")
    trial = tt.create_trial(record.trial_location)
    train = tt.modes.TRAIN
    assert trial.tensor("vitals/loss").steps(mode=train) == list(range(50, 70))
    assert trial.tensor("gradient/hidden/kernel").steps(mode=train) == [50, 60]
    own = logged(done)
    assert trial.tensor("vitals/loss").value(50, mode=train) == pytest.approx(own[50][0])
    job = next((tmp_path / "first" / "runs").iterdir())
    out = str(JobRecord(job).trial_location)
    # the same trial again: the restarted script's job writes where the first one did
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tensortap.attach",
            "--config",
            str(job / "hook.json"),
            SCRIPT,
            "70",
            "0",
            ckpt,
            "--restore",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    own = logged(done)
    assert sorted(own) == list(range(50, 70))
    trial = tt.create_trial(out)
    train = tt.modes.TRAIN
    loss = trial.tensor("vitals/loss")
    assert loss.steps(mode=train) == list(range(70))
    for step, (value, _) in own.items():  # this session's values, under the script's steps
        assert loss.value(step, mode=train) == pytest.approx(value)
    assert trial.tensor("gradient/hidden/kernel").steps(mode=train) == [0, 10, 20, 30, 40, 50, 60]


def test_haiku_named_parameters_are_biases_by_shape_and_use(tmp_path: Path) -> None:
    """``linear/b`` and ``b0`` (1-D zeros, each beside a kernel) are biases: a healthy run ends
    healthy, not "the learning rate is too high: update/weight ratio of b0", and AllZero does
    not flag an initial bias."""
    done, record = run_job(tmp_path, "110", "0", str(tmp_path / "unused.npz"), "--names", "haiku")
    found = rules(record)
    for name, status in found.items():
        assert status["RuleEvaluationStatus"] != "NoData", (name, status["StatusDetails"])
        assert status.get("severity") != "problem", (name, status.get("gravest_message"))
    assert "diagnosis: healthy" in done.stdout, done.stdout[-3000:]
    trial = tt.create_trial(record.trial_location)
    assert trial.tensor_names(collection="biases") == ["b0", "linear/b"]
    assert trial.tensor_names(collection="weights") == ["linear/w", "w1"]
    assert trial.tensor_names(collection="initial_weights") == ["initial/linear/w", "initial/w1"]


LOWERED = """
import sys
import jax, jax.numpy as jnp, optax
import flax.linen as nn
from flax import serialization
from flax.training import train_state

class MLP(nn.Module):
    @nn.compact
    def __call__(self, x):
        return nn.Dense(3)(nn.relu(nn.Dense(8)(x)))

model = MLP()
params = model.init(jax.random.PRNGKey(0), jnp.zeros((1, 4)))["params"]
tx = optax.inject_hyperparams(optax.adam)(learning_rate=0.1)
state = train_state.TrainState.create(apply_fn=model.apply, params=params, tx=tx)
x = jnp.ones((16, 4))

@jax.jit
def step(state):
    loss, grads = jax.value_and_grad(lambda p: jnp.mean(model.apply({"params": p}, x) ** 2))(
        state.params
    )
    return state.apply_gradients(grads=grads), loss

@jax.jit
def step_without_params(params, opt_state):
    loss, grads = jax.value_and_grad(lambda p: jnp.mean(model.apply({"params": p}, x) ** 2))(params)
    updates, opt_state = tx.update(grads, opt_state)
    return optax.apply_updates(params, updates), opt_state, loss

with_state = step.lower(state).as_text()
without = step_without_params.lower(params, tx.init(params)).as_text()
print("callbacks", "callback" in with_state, "callback" in without)
for _ in range(12):
    state, loss = step(state)
print("lr", float(state.opt_state.hyperparams["learning_rate"]))  # read through the state
restored = serialization.from_bytes(state, serialization.to_bytes(state))
print("restored", jax.tree.structure(restored) == jax.tree.structure(state))
"""


def test_zero_code_change_puts_no_host_callback_in_a_step_given_params(tmp_path: Path) -> None:
    """The compiled step of a Flax Linen loop (its update is given the parameters) has no host
    callback in it (they cost a fixed share of every step): the values travel in the optimizer
    state, which the script still reads (``opt_state.hyperparams``) and checkpoints with
    flax.serialization; the learning rate is saved. An update not given the parameters keeps
    the host callbacks."""
    pytest.importorskip("flax")
    (tmp_path / "train.py").write_text(LOWERED)
    config = tmp_path / "hook.json"
    config.write_text(
        json.dumps(
            {
                "out_dir": str(tmp_path / "t"),
                "hook_parameters": {"save_interval": "10"},
                "collection_configurations": [{"name": n} for n in ("losses", "gradients")],
            }
        )
    )
    done = subprocess.run(
        [sys.executable, "-m", "tensortap.attach", "--config", str(config), "train.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "callbacks False True" in done.stdout
    assert "lr 0.1" in done.stdout and "restored True" in done.stdout
    trial = tt.create_trial(tmp_path / "t")
    train = tt.modes.TRAIN
    assert trial.tensor("vitals/lr").steps(mode=train) == list(range(12))
    assert trial.tensor("vitals/lr").value(11, mode=train) == pytest.approx(0.1)
    assert trial.tensor("gradient/Dense_0/kernel").steps(mode=train) == [0, 10]


EAGER = """
import jax, jax.numpy as jnp, optax
p = {"w": jnp.ones((4, 3)), "b": jnp.zeros(3)}
tx = optax.adam(0.01)
s = tx.init(p)
x = jnp.ones((8, 4))
for i in range(300):
    loss, g = jax.value_and_grad(lambda q: jnp.mean((x @ q["w"] + q["b"]) ** 2))(p)
    u, s = tx.update(g, s, p)
    p = optax.apply_updates(p, u)
"""


def test_an_eager_loop_saves_every_step(tmp_path: Path) -> None:
    """Without ``jit`` no compiled step hands the state back: each update's state is read
    where it is made, and all 300 steps (more than the state's ring of 256) are saved."""
    (tmp_path / "train.py").write_text(EAGER)
    config = tmp_path / "hook.json"
    config.write_text(
        json.dumps(
            {
                "out_dir": str(tmp_path / "t"),
                "hook_parameters": {"save_interval": "100"},
                "collection_configurations": [{"name": n} for n in ("losses", "gradients")],
            }
        )
    )
    done = subprocess.run(
        [sys.executable, "-m", "tensortap.attach", "--config", str(config), "train.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    trial = tt.create_trial(tmp_path / "t")
    train = tt.modes.TRAIN
    assert trial.tensor("vitals/loss").steps(mode=train) == list(range(300))
    assert trial.tensor("gradient/w").steps(mode=train) == [0, 100, 200]


COUNTED = """
import jax, jax.numpy as jnp, optax
import flax.linen as nn

class MLP(nn.Module):
    @nn.compact
    def __call__(self, x):
        return nn.Dense(3)(nn.relu(nn.Dense(8)(x)))

model = MLP()
params = model.init(jax.random.PRNGKey(0), jnp.zeros((1, 4)))["params"]
tx = optax.adam(0.01)
opt_state = tx.init(params)
x = jnp.ones((16, 4))

@jax.jit
def step(params, opt_state):
    loss, grads = jax.value_and_grad(lambda p: jnp.mean(model.apply({"params": p}, x) ** 2))(params)
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss

# the test's own counter (not training code): the steps at which device arrays are read back
reads, device_get = [], jax.device_get
def counted(tree):
    if any(isinstance(leaf, jax.Array) for leaf in jax.tree_util.tree_leaves(tree)):
        reads.append(i)
    return device_get(tree)
jax.device_get = counted
for i in range(100):
    params, opt_state, loss = step(params, opt_state)
print("reads", reads)
"""


def test_a_compiled_loop_reads_the_device_once_per_saving_step(tmp_path: Path) -> None:
    """Ordinary steps of a compiled loop cost the host no read from the device (each read
    waits for the step): of 100 steps saving gradients and weights every 10th, the state is
    read once after each saving step, in one transfer (the ring of vital signs and the
    arrays together; it was two), and every step's vital signs are still saved."""
    pytest.importorskip("flax")
    (tmp_path / "train.py").write_text(COUNTED)
    config = tmp_path / "hook.json"
    config.write_text(
        json.dumps(
            {
                "out_dir": str(tmp_path / "t"),
                "hook_parameters": {"save_interval": "10"},
                "collection_configurations": [
                    {"name": n} for n in ("losses", "gradients", "weights")
                ],
            }
        )
    )
    done = subprocess.run(
        [sys.executable, "-m", "tensortap.attach", "--config", str(config), "train.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"reads {list(range(0, 100, 10))}" in done.stdout
    trial = tt.create_trial(tmp_path / "t")
    train = tt.modes.TRAIN
    assert trial.tensor("vitals/loss").steps(mode=train) == list(range(100))
    assert trial.tensor("vitals/grad_norm").steps(mode=train) == list(range(100))
    every_10th = list(range(0, 100, 10))
    assert trial.tensor("gradient/Dense_0/kernel").steps(mode=train) == every_10th
    assert trial.tensor("Dense_0/kernel").steps(mode=train) == every_10th


SUBMITS = (
    COUNTED.replace(
        "for i in range(100):",
        """# the test's own counter: what the writer is handed (steps one by one, blocks of steps)
from tensortap.writer._trial_writer import TrialWriter
handed = {"steps": 0, "blocks": 0, "block_steps": 0}
submit, submit_steps = TrialWriter.submit, TrialWriter.submit_steps
def one(self, batch):
    handed["steps"] += 1
    submit(self, batch)
def many(self, block):
    handed["blocks"] += 1
    handed["block_steps"] += len(block)
    submit_steps(self, block)
TrialWriter.submit, TrialWriter.submit_steps = one, many
for i in range(100):""",
    )
    .replace(
        'print("reads", reads)',
        """from tensortap.attach import _jax_state
_jax_state.reader.flush()  # the steps not read back yet, saved now (as at exit)
print("handed", json.dumps(handed))""",
    )
    .replace("import jax,", "import json, jax,", 1)
)


def test_a_compiled_loops_vital_signs_reach_the_writer_in_blocks(tmp_path: Path) -> None:
    """The steps a read brings back that save nothing but their vital signs are handed to
    the writer as one block per read (one recorder pass, one submission), not one step
    each, and every step's vital signs are still in the trial."""
    pytest.importorskip("flax")
    (tmp_path / "train.py").write_text(SUBMITS)
    config = tmp_path / "hook.json"
    config.write_text(
        json.dumps(
            {
                "out_dir": str(tmp_path / "t"),
                "hook_parameters": {"save_interval": "10"},
                "collection_configurations": [
                    {"name": n} for n in ("losses", "gradients", "weights")
                ],
            }
        )
    )
    done = subprocess.run(
        [sys.executable, "-m", "tensortap.attach", "--config", str(config), "train.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    line = [s for s in done.stdout.splitlines() if s.startswith("handed ")][-1]
    handed = json.loads(line[len("handed ") :])
    # reads after steps 0, 10, ..., 90 and at the end: the saving steps one by one, the nine
    # steps between two of them as one block, 91-98 as one (99 stays open until close); it
    # was 99 submissions of one step each
    assert handed == {"steps": 10, "blocks": 10, "block_steps": 89}
    trial = tt.create_trial(tmp_path / "t")
    train = tt.modes.TRAIN
    assert trial.tensor("vitals/loss").steps(mode=train) == list(range(100))
    assert trial.tensor("vitals/step_time").steps(mode=train) == list(range(1, 100))
