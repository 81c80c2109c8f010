"""The batch targets an evaluation without a loss is judged on (pytorch/_batch_targets.py): what
is taken for targets and scores, that a batch's targets serve one forward only, and that looking
at a batch never fails the script's loop. The loaders are not patched here (that is process-wide:
tests/jobs/test_outcome.py runs it under ``tensortap run``); the wrapper is tried on its own."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from torch import nn

import tensortap.pytorch as tt
from tensortap.pytorch import _batch_targets as batch_targets

X = torch.zeros(4, 3)
Y = torch.tensor([0, 2, 1, 2])


@pytest.mark.parametrize(
    ("batch", "expected"),
    [
        ((X, Y), Y),
        ([X, torch.ones(4), Y], Y),
        ({"input_ids": X, "labels": Y}, Y),
        ({"x": X, "target": Y}, Y),
        ((X, Y.float()), None),  # regression targets
        ((X, Y.bool()), None),
        ((X, Y.reshape(2, 2)), None),  # not one class a sample
        ((X, torch.zeros(0, dtype=torch.long)), None),
        ((X,), None),
        (X, None),
        ({"x": X}, None),
    ],
)
def test_the_targets_of_a_batch_are_one_integer_class_a_sample(
    batch: Any, expected: torch.Tensor | None
) -> None:
    assert batch_targets.batch_target(batch) is expected


class _Hostile(tuple):
    def __getitem__(self, index: Any) -> Any:
        raise RuntimeError("a batch of the script's own kind")


def test_a_fetched_batch_is_returned_as_is_and_its_targets_serve_one_forward() -> None:
    batches = iter([(X, Y), _Hostile((X, Y)), (X, Y.float())])
    fetch = batch_targets._watched(lambda _self: next(batches))
    batch_targets.take()  # whatever an earlier test left
    first = fetch(None)
    assert first[1] is Y
    assert batch_targets.take() is Y
    assert batch_targets.take() is None  # taken once: the next forward gets nothing
    hostile = fetch(None)  # looking at it raises: the loop still gets its batch
    assert isinstance(hostile, _Hostile)
    assert batch_targets.take() is None
    fetch(None)
    assert batch_targets.take() is None  # no classes in it


def test_scores_are_a_row_per_target_and_a_column_per_class() -> None:
    scores = torch.randn(4, 3)
    assert batch_targets.class_scores(scores, Y) is scores
    assert batch_targets.class_scores(SimpleNamespace(logits=scores), Y) is scores
    assert batch_targets.class_scores(torch.randn(4, 1), Y) is None  # one column: no classes
    assert batch_targets.class_scores(torch.randn(5, 3), Y) is None  # another batch's rows
    assert batch_targets.class_scores(torch.ones(4, 3, dtype=torch.long), Y) is None
    assert batch_targets.class_scores((scores,), Y) is None


class _Unreadable:
    """A model output whose ``logits`` cannot be read."""

    @property
    def logits(self) -> torch.Tensor:
        raise RuntimeError("not this output")


class _Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(3, 3)
        self.unreadable = False

    def forward(self, x: torch.Tensor) -> Any:
        out = self.fc(x)
        return _Unreadable() if self.unreadable else out


def test_an_evaluation_forward_after_a_fetch_saves_its_scores_once_and_never_fails(
    tmp_path: Path,
) -> None:
    """The hook takes the fetched batch's targets at the model's forward: an EVAL forward saves
    them beside its predicted classes; the next forward, with no batch fetched, saves nothing;
    an output that cannot be read fails neither the forward nor the hook."""
    torch.manual_seed(0)
    model = _Model().eval()
    hook = tt.Hook(
        str(tmp_path),
        include_collections=["labels", "predictions"],
        save_config=tt.SaveConfig(save_interval=1),
    )
    hook.register_module(model)
    fetch = batch_targets._watched(lambda _self: (X, Y))
    batch_targets.take()
    with torch.no_grad():
        fetch(None)
        expected = model(X).argmax(1)  # EVAL step 0: the fetched batch's
        model(X)  # step 1: no batch fetched since
        fetch(None)
        model.unreadable = True
        assert isinstance(model(X), _Unreadable)  # step 2: contained
    hook.close()
    trial = tt.create_trial(str(tmp_path))
    assert trial.tensor("labels").steps() == [0]
    assert trial.tensor("labels").value(0).tolist() == Y.tolist()
    assert trial.tensor("predictions").value(0).tolist() == expected.tolist()
