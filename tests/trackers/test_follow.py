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
