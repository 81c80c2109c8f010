"""The vital signs' contract (core._vitals): every step, whatever the hook's schedule; never
making the adapters' per-step work due; names checked; values exact."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import tensortap as tt
from tensortap.core._vitals import VITALS, Vital, vital_name
from tensortap.exceptions import InvalidConfigError


def test_names_short_and_full_and_per_group() -> None:
    assert vital_name("loss") == Vital.LOSS == vital_name("vitals/loss")
    assert vital_name("lr/2") == "vitals/lr/2"
    for bad in ("loss2", "lr/0", "lr/x", "vitals/weights"):
        with pytest.raises(InvalidConfigError, match="not a vital sign"):
            vital_name(bad)


def test_saved_every_step_while_other_collections_keep_their_schedule(tmp_path: Path) -> None:
    hook = tt.Hook(tmp_path, save_config=tt.SaveConfig(save_interval=10))
    values = [2.5, np.float32(1.25), 3, np.float64(0.1)]  # float, float32, int, float64
    for step in range(25):
        assert not hook.is_anything_due() or step % 10 == 0  # vitals make nothing else due
        saved = hook.save_vitals({"loss": values[step % 4], "lr": None, "vitals/grad_norm": step})
        assert saved == 2  # None is left out
        hook.save_scalar("other", step, "losses")
        hook.next_step()
    hook.close()
    trial = tt.create_trial(str(tmp_path))
    assert trial.tensor(Vital.LOSS).steps() == list(range(25))
    assert trial.tensor("other").steps() == [0, 10, 20]
    got = [trial.tensor(Vital.LOSS).value(s) for s in range(4)]
    assert [float(v) for v in got] == [2.5, 1.25, 3.0, float(np.float64(0.1))]
    assert float(trial.tensor(Vital.GRAD_NORM).value(24)) == 24.0
    assert Vital.LR not in trial.tensor_names()
    assert Vital.LOSS in trial.tensor_names(collection=VITALS)


def test_a_hook_that_saves_no_loss_saves_no_vitals(tmp_path: Path) -> None:
    hook = tt.Hook(tmp_path, include_collections=["weights"])
    assert hook.save_vitals({"loss": 1.0}) == 0
    hook.close()


def test_a_bad_name_or_value_is_the_callers_error(tmp_path: Path) -> None:
    hook = tt.Hook(tmp_path)
    with pytest.raises(InvalidConfigError, match="not a vital sign"):
        hook.save_vitals({"los": 1.0})
    with pytest.raises(tt.exceptions.InvalidTensorError):
        hook.save_vitals({"loss": "high"})
    hook.close()
