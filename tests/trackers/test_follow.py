"""A followed TensorBoard logdir (issue 47): a source that vanishes whole is said on each of
its runs, which stay as last imported; when it comes back unchanged the problem is gone and
nothing is written again. Bad input to the follower is refused with what to give."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tensortap.exceptions import InvalidConfigError

pytest.importorskip("tensorboard")


def _logdir(root: Path) -> Path:
    from tensorboard.summary import Writer

    for name in ("a", "b"):
        writer = Writer(str(root / name))
        for step in range(30):
            writer.add_scalar("loss", 1.0 / (step + 1), step)
        writer.close()
    return root


def test_a_vanished_source_is_said_on_every_run_until_it_comes_back(tmp_path: Path) -> None:
    from tensortap.trackers import FollowedImport

    logdir = _logdir(tmp_path / "logs")
    follower = FollowedImport(logdir, tmp_path / "imported", tmp_path / "next")
    result = follower.start()
    trials = {run.name: run.trial for run in result.runs}
    assert not follower.check(force=True)  # unchanged: nothing to say
    moved_away = tmp_path / "away"
    shutil.move(logdir, moved_away)
    changes = follower.check(force=True)
    said = f"{logdir} no longer exists; shown as last imported"
    assert changes.problems == {trials["a"]: (said,), trials["b"]: (said,)}
    assert not changes.moved and not changes.added
    assert not follower.check(force=True)  # said once, not at every check
    shutil.move(moved_away, logdir)
    changes = follower.check(force=True)
    assert changes.problems == {trials["a"]: (), trials["b"]: ()}  # cleared
    assert not changes.moved and (follower.reads, follower.writes) == (2, 2)
    assert all(Path(trial).is_dir() for trial in trials.values())


def test_bad_settings_are_refused_with_what_to_give(tmp_path: Path) -> None:
    from tensortap.trackers import FollowedImport

    with pytest.raises(InvalidConfigError, match="at least 0.05; got 0"):
        FollowedImport(tmp_path, tmp_path / "in", tmp_path / "next", interval=0)
    with pytest.raises(InvalidConfigError, match="inside .*give a directory outside it"):
        FollowedImport(tmp_path, tmp_path / "in", tmp_path / "in" / "next")


def test_a_growing_wandb_run_is_imported_again_and_only_it(tmp_path: Path) -> None:
    """Another format than TensorBoard's, followed alike: a W&B history that grows is
    imported again (its trial moved to one holding the new steps), the other run is not
    written again, and a run directory that appears is added."""
    import json

    from tensortap.trackers import FollowedImport
    from tensortap.trials import create_trial
    from tests.trackers.test_import import STEPS, write_wandb_run

    source = tmp_path / "wandb"
    grows = write_wandb_run(source, "grows001", lambda s: 2.0 / (1 + s))
    write_wandb_run(source, "still002", lambda s: 1.0 / (1 + s))
    follower = FollowedImport(source, tmp_path / "imported", tmp_path / "next", format="wandb")
    result = follower.start()
    assert len(result.runs) == 2 and not follower.check(force=True)
    (first,) = [run.trial for run in result.runs if "grows001" in run.name]
    with create_trial(first) as trial:
        before = len(trial.steps(mode="TRAIN"))
    with (grows / "files" / "wandb-history.jsonl").open("a") as out:
        for step in range(STEPS, STEPS + 20):
            out.write(json.dumps({"_step": step, "_timestamp": 1.79e9 + step, "loss": 0.01}) + "\n")
    changes = follower.check(force=True)
    assert len(changes.moved) == 1 and not changes.added
    (moved_to,) = changes.moved.values()
    with create_trial(moved_to) as trial:
        assert len(trial.steps(mode="TRAIN")) == before + 20  # the 20 steps written since
    assert follower.writes == 3  # two at the start, the grown run once
    write_wandb_run(source, "new00003", lambda s: 3.0 / (1 + s))
    changes = follower.check(force=True)
    assert len(changes.added) == 1 and not changes.moved
