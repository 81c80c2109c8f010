"""``trial.series(name)``: ``"loss"`` is the run's loss, and a name never saved says which
series there are (the README's quick start returned no rows, silently, on a PyTorch loss
module whose series is ``CrossEntropyLoss_output_0``)."""

from __future__ import annotations

import numpy as np
import pytest

import tensortap as tt
from tensortap.exceptions import SeriesUnavailable, TensorUnavailable


def _quick_start(out_dir: str) -> None:
    """The README's PyTorch quick start, on a tiny model."""
    torch = pytest.importorskip("torch")
    import tensortap.pytorch as ttp

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    loss_fn = torch.nn.CrossEntropyLoss()
    hook = ttp.Hook(
        out_dir,
        save_config=ttp.SaveConfig(save_interval=10),
        include_collections=["weights", "gradients", "losses", "relu_activations"],
    )
    hook.register_module(model)
    hook.register_loss(loss_fn)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(30):
        x, y = torch.randn(16, 4), torch.randint(0, 3, (16,))
        loss = loss_fn(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    hook.close()


def test_the_readme_quick_starts_series_loss_reads_the_loss(tmp_path) -> None:
    _quick_start(str(tmp_path / "job1"))
    trial = tt.create_trial(tmp_path / "job1")
    losses = trial.series("loss")
    assert losses.rows > 0
    real = set(losses["tensor"].tolist())
    assert real <= {"vitals/loss", "CrossEntropyLoss_output_0"}
    expected = trial.series(sorted(real))
    assert np.array_equal(losses["value"], expected["value"])
    assert trial.series_buckets("loss", count=4).rows > 0


def test_a_name_never_saved_lists_the_series_the_loss_first(tmp_path) -> None:
    _quick_start(str(tmp_path / "job1"))
    trial = tt.create_trial(tmp_path / "job1")
    with pytest.raises(SeriesUnavailable) as caught:
        trial.series(["loss", "val_loss"])
    message = str(caught.value)
    assert message.startswith("no series 'val_loss' in this trial: it has '")
    loss_name = trial.series("loss")["tensor"][0]
    assert message.index(f"{loss_name!r} (the loss)") < message.index("'gradient/")
    assert isinstance(caught.value, TensorUnavailable | LookupError)
    assert trial.series(regex="^val_loss$").rows == 0  # a pattern matches nothing quietly


def test_a_tensor_named_loss_is_itself_and_an_empty_trial_says_so(tmp_path) -> None:
    hook = tt.Hook(tmp_path / "t", save_config=tt.SaveConfig(save_interval=1))
    for step in range(3):
        hook.save_scalar("loss", 1.0 / (step + 1))
        hook.next_step()
    hook.close()
    trial = tt.create_trial(tmp_path / "t")
    assert set(trial.series("loss")["tensor"].tolist()) == {"loss"}
    empty = tt.create_trial(tmp_path / "nothing")
    with pytest.raises(SeriesUnavailable, match="the trial has saved nothing yet"):
        empty.series("loss")
