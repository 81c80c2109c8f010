"""The framework-free hook: steps and modes, collections, reductions, lifecycle."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import numpy as np
import pytest

import tensortap as tt
from tensortap import modes
from tensortap.exceptions import InvalidConfigError, InvalidTensorError
from tensortap.storage import MemoryStore


def hook_on(store: MemoryStore, **kwargs) -> tt.Hook:
    kwargs.setdefault("save_config", tt.SaveConfig(save_interval=1))
    return tt.Hook(store, **kwargs)


def test_step_and_mode_counting() -> None:
    store = MemoryStore()
    with hook_on(store) as hook:
        assert (hook.mode, hook.step, hook.mode_step) == (modes.GLOBAL, 0, 0)
        hook.set_mode(modes.TRAIN)  # nothing saved yet: step 0 becomes TRAIN step 0
        for i in range(3):
            hook.save_scalar("loss", float(i))
            hook.next_step()
        hook.set_mode("eval")
        for i in range(2):
            hook.save_scalar("loss", 10.0 + i)
            hook.next_step()
        hook.set_mode(modes.TRAIN)
        hook.save_scalar("loss", 3.0)
        hook.set_mode(modes.EVAL)  # something was saved: the TRAIN step closes first
        hook.save_scalar("loss", 12.0)
    trial = tt.create_trial(store)
    assert trial.steps() == [0, 1, 2, 3, 4, 5, 6]
    assert trial.steps(modes.TRAIN) == [0, 1, 2, 3]
    assert trial.steps(modes.EVAL) == [0, 1, 2]
    assert trial.global_step(modes.EVAL, 1) == 4
    assert trial.global_step(modes.TRAIN, 3) == 5
    assert (trial.mode(6), trial.mode_step(6)) == (modes.EVAL, 2)
    assert trial.modes() == [modes.TRAIN, modes.EVAL]
    loss = trial.tensor("loss")
    assert loss.value(1, mode=modes.EVAL) == 11.0
    assert loss.value(4) == 11.0
    assert loss.values(mode=modes.TRAIN) == {0: 0.0, 1: 1.0, 2: 2.0, 3: 3.0}


def test_save_interval_per_mode_and_collection() -> None:
    store = MemoryStore()
    save = tt.SaveConfig(mode_save_configs={modes.TRAIN: tt.SaveConfigMode(save_interval=3)})
    with hook_on(store, save_config=save, include_collections=["weights", "losses"]) as hook:
        hook.get_collection("losses").save_config = tt.SaveConfig(save_interval=1)
        hook.set_mode(modes.TRAIN)
        for i in range(7):
            hook.save_tensor("w", np.full(2, i), collections="weights")
            hook.save_tensor("loss", float(i), collections="losses")
            hook.next_step()
    trial = tt.create_trial(store)
    assert trial.tensor("w").steps(modes.TRAIN) == [0, 3, 6]
    assert trial.tensor("loss").steps(modes.TRAIN) == list(range(7))
    assert trial.tensor_names(collection="weights") == ["w"]
    assert trial.tensor_names(collection="losses") == ["loss"]


def test_include_regex_and_exclude() -> None:
    store = MemoryStore()
    with hook_on(store, include_regex=["relu"], include_collections=["default"]) as hook:
        hook.get_collection("default").exclude("input")
        for name in ["a/relu_output", "a/relu_input", "a/tanh"]:
            hook.save_tensor(name, np.ones(2), collections=[])
        hook.next_step()
    assert tt.create_trial(store).tensor_names() == ["a/relu_output"]


def test_not_included_collection_is_not_saved() -> None:
    store = MemoryStore()
    with hook_on(store, include_collections=["losses"]) as hook:
        assert not hook.save_tensor("w", np.ones(2), collections="weights")
        assert hook.save_tensor("l", 1.0, collections="losses")
        hook.next_step()
    assert tt.create_trial(store).tensor_names() == ["l"]


def test_reductions_raw_and_shape_together() -> None:
    store = MemoryStore()
    rc = tt.ReductionConfig(
        reductions=["min", "max", "mean"],
        abs_reductions=["max"],
        norms=["l1", "l2"],
        save_raw_tensor=True,
        save_shape=True,
    )
    value = np.array([[-3.0, 1.0], [2.0, 0.5]], np.float32)
    with hook_on(store, reduction_config=rc) as hook:
        hook.save_tensor("x", value)
        hook.next_step()
    tensor = tt.create_trial(store).tensor("x")
    np.testing.assert_array_equal(tensor.value(0), value)
    assert tensor.shape(0) == (2, 2)
    assert tensor.reduction_value(0, "min") == -3.0
    assert tensor.reduction_value(0, "max", abs=True) == 3.0
    assert tensor.reduction_value(0, "l2") == pytest.approx(np.sqrt(14.25))
    assert tensor.reduction_values(0)[("mean", False)] == pytest.approx(0.125)
    # a reduction that was not saved is computed from the raw tensor
    assert tensor.reduction_value(0, "std") == pytest.approx(float(np.std(value)))


def test_reductions_only_then_value_is_unavailable() -> None:
    store = MemoryStore()
    with hook_on(store, reduction_config=tt.ReductionConfig(norms=["l2"])) as hook:
        hook.save_tensor("g", np.array([3.0, 4.0]))
        hook.next_step()
    tensor = tt.create_trial(store).tensor("g")
    assert tensor.reduction_value(0, "l2") == 5.0
    with pytest.raises(tt.exceptions.TensorUnavailableForStep, match="only reductions"):
        tensor.value(0)
    with pytest.raises(tt.exceptions.TensorUnavailableForStep, match="saved reductions: l2"):
        tensor.reduction_value(0, "mean")


def test_same_name_twice_in_a_step_keeps_last() -> None:
    store = MemoryStore()
    with hook_on(store) as hook:
        hook.save_tensor("x", 1.0)
        hook.save_tensor("x", 2.0)
        hook.next_step()
    assert tt.create_trial(store).tensor("x").value(0) == 2.0


def test_collections_recorded_and_updated_later() -> None:
    store = MemoryStore()
    hook = hook_on(store, include_collections=["weights"])
    hook.save_tensor("w1", np.ones(1), collections="weights")
    hook.next_step()
    hook.flush()
    trial = tt.create_trial(store)
    assert trial.collection("weights").tensor_names == {"w1"}
    hook.save_tensor("w2", np.ones(1), collections="weights")
    hook.get_collection("custom").include("w")
    hook.next_step()
    hook.close()
    trial.refresh()
    assert trial.collection("weights").tensor_names == {"w1", "w2"}
    assert trial.collection("custom").include_regex == ["w"]
    assert trial.tensor_names(collection="custom") == ["w1", "w2"]


def test_bad_values_raise_at_the_call() -> None:
    with hook_on(MemoryStore()) as hook:
        with pytest.raises(InvalidTensorError, match=r"dtype <U1 \(strings\)"):
            hook.save_tensor("s", np.array(["a"]))
        with pytest.raises(InvalidTensorError, match="Python objects"):
            hook.save_tensor("o", np.array([object()]))
        with pytest.raises(InvalidTensorError, match="real number"):
            hook.save_scalar("s", np.ones(3))
        with pytest.raises(InvalidTensorError, match="real number"):
            hook.save_scalar("s", "1.0")
        with pytest.raises(InvalidConfigError, match="unknown mode"):
            hook.set_mode("TRAINING")
        with pytest.raises(InvalidConfigError, match="tensor name"):
            hook.save_tensor("", 1.0)
        assert hook.save_scalar("ok", np.float32(2.0))


def test_bad_hook_arguments() -> None:
    with pytest.raises(InvalidConfigError, match="num_workers"):
        tt.Hook(MemoryStore(), num_workers=0)
    with pytest.raises(InvalidConfigError, match="worker name"):
        tt.Hook(MemoryStore(), worker="../evil")
    with pytest.raises(InvalidConfigError, match="save_config must be a SaveConfig"):
        tt.Hook(MemoryStore(), save_config={"save_interval": 1})  # type: ignore[arg-type]
    with pytest.raises(InvalidConfigError, match="when_full"):
        tt.WriterOptions(when_full="wait")  # type: ignore[arg-type]
    with pytest.raises(InvalidConfigError, match="flush_secs"):
        tt.WriterOptions(flush_secs=0)
    with pytest.raises(InvalidConfigError, match="invalid include_regex"):
        tt.Hook(MemoryStore(), include_regex="(")


def test_close_is_idempotent_and_later_saves_are_ignored(caplog) -> None:
    store = MemoryStore()
    hook = hook_on(store)
    hook.save_scalar("x", 1.0)
    status = hook.close()
    assert status.healthy and status.writer.steps_written == 1
    with caplog.at_level(logging.WARNING):
        assert not hook.save_scalar("x", 2.0)
    assert "after hook.close()" in caplog.text
    assert hook.close().writer.steps_written == 1
    trial = tt.create_trial(store)
    assert trial.loaded_all_steps
    worker = trial.worker_status("worker_0")
    assert worker is not None and worker["status"]["steps_written"] == 1


def test_is_anything_due() -> None:
    with hook_on(MemoryStore(), save_config=tt.SaveConfig(save_interval=2)) as hook:
        assert hook.is_anything_due()
        hook.next_step()
        assert not hook.is_anything_due()


def test_stop_request_ends_training_at_a_step_boundary(tmp_path: Path) -> None:
    """A job's stop request (a file) makes the hook raise TrainingStopped (a SystemExit with
    code 0) when the step after it ends; every step saved before is kept."""
    from tensortap.core._stop import request_stop
    from tensortap.exceptions import TrainingStopped

    stop = tmp_path / "stop"
    hook = tt.Hook(tmp_path / "t", save_config=tt.SaveConfig(save_interval=1), stop_file=stop)
    assert hook._stop is not None
    hook._stop.interval = 0  # look at every step boundary (the default throttles to 0.1 s)
    for step in range(3):
        hook.save_scalar("loss", float(step))
        hook.next_step()
    request_stop(stop, "LossNotDecreasing fired at step 2")
    hook.save_scalar("loss", 3.0)
    with pytest.raises(TrainingStopped, match="LossNotDecreasing fired") as stopped:
        hook.next_step()
    assert stopped.value.code == 0 and isinstance(stopped.value, SystemExit)
    hook.close()
    assert tt.create_trial(tmp_path / "t").steps() == [0, 1, 2, 3]


def test_writing_on_after_this_processs_own_session_is_not_warned_as_another_run(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A trainer's ``evaluate()`` after ``train()`` opens a new session of the same trial: it
    was told "a separate run belongs in its own out_dir". A session left by another process
    (here: forgotten by this one) is still warned of."""
    from tensortap.hook import _session_steps

    caplog.set_level(logging.INFO, logger="tensortap.hook")
    out = str(tmp_path / "trial")
    for _ in range(2):
        with tt.Hook(out) as hook:
            hook.save_scalar("loss", 1.0)
            hook.next_step()
    warned = [r for r in caplog.records if "belongs in its own out_dir" in r.getMessage()]
    assert warned == []
    assert any("writes on after this process" in r.getMessage() for r in caplog.records)
    _session_steps._WRITTEN_HERE.discard((os.path.abspath(out), "worker_0"))
    with tt.Hook(out) as hook:
        hook.save_scalar("loss", 1.0)
    warned = [r for r in caplog.records if "belongs in its own out_dir" in r.getMessage()]
    assert len(warned) == 1 and "2 earlier session(s)" in warned[0].getMessage()
