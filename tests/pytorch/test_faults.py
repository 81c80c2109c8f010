"""A failure inside the PyTorch hook never stops training: it is logged once, counted, and
shown by the trial (also while training still runs)."""

from __future__ import annotations

import logging
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

import tensortap.pytorch as tt
from tensortap.exceptions import StorageError
from tensortap.pytorch._convert import TorchConverter
from tensortap.storage import MemoryStore
from tests.helpers.torch_models import Net, batches, make


def train(hook: tt.Hook, model: nn.Module, steps: int) -> list[float]:
    hook.register_module(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for xb, yb in batches(32, steps):
        opt.zero_grad()
        loss = F.cross_entropy(model(xb), yb)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def test_error_injected_mid_training_is_contained(tmp_path: Path, monkeypatch, caplog) -> None:
    original = TorchConverter.records
    calls = {"n": 0, "failed": 0}

    def flaky(self, name, tensor, plan):
        calls["n"] += 1
        if name == "fc2.weight" and calls["n"] > 8:
            calls["failed"] += 1
            raise RuntimeError("injected failure while converting")
        return original(self, name, tensor, plan)

    monkeypatch.setattr(TorchConverter, "records", flaky)
    store = MemoryStore()
    hook = tt.Hook(
        store, save_config=tt.SaveConfig(save_interval=1), include_collections=["weights", "losses"]
    )
    model, twin = make(Net), make(Net)
    with caplog.at_level(logging.ERROR, logger="tensortap"):
        losses = train(hook, model, 8)
        hook.flush()
        live = tt.create_trial(store)
        assert any("internal hook errors" in p and "injected failure" in p for p in live.problems())
        status = hook.close()
    assert losses == train(tt.Hook(MemoryStore()), twin, 8)  # training was not disturbed
    assert status.internal_errors == calls["failed"] >= 5
    assert "injected failure" in (status.last_internal_error or "")
    logged = [r for r in caplog.records if "injected failure" in r.getMessage()]
    assert len(logged) == 1  # logged once with its traceback, then counted
    assert logged[0].exc_info is not None
    trial = tt.create_trial(store)
    assert trial.steps() == list(range(8))
    # only the failing tensor is missing: the other weights and the losses are all there
    assert trial.tensor("fc1.weight").steps() == trial.tensor("loss").steps() == list(range(8))
    assert 0 < len(trial.tensor("fc2.weight").steps()) < 8
    assert any("internal hook errors" in p for p in trial.problems())


class Complex32Output(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.zeros(2, dtype=torch.complex32)


def test_unsaveable_module_output_does_not_raise_into_training(tmp_path: Path) -> None:
    import warnings

    hook = tt.Hook(
        tmp_path / "run",
        save_config=tt.SaveConfig(save_interval=1),
        include_collections=["outputs"],
    )
    module = Complex32Output()
    hook.register_module(module)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = module(torch.ones(1))
    assert out.dtype == torch.complex32
    assert hook.close().internal_errors == 1


class FullDisk(MemoryStore):
    """Every data object fails to be written after the first few: the disk is full."""

    def __init__(self) -> None:
        super().__init__()
        self.writes = 0

    def open_writer(self, key: str):
        self.writes += 1
        if self.writes > 2:
            raise StorageError("No space left on device (injected)")
        return super().open_writer(key)


def test_full_disk_does_not_stop_training() -> None:
    store = FullDisk()
    options = tt.WriterOptions(flush_secs=0.05, segment_bytes=1)
    hook = tt.Hook(
        store,
        save_config=tt.SaveConfig(save_interval=1),
        include_collections=["weights"],
        writer_options=options,
    )
    losses = train(hook, make(Net), 10)
    status = hook.close()
    assert len(losses) == 10
    assert status.writer.errors > 0 and status.writer.steps_lost > 0
    assert any("No space left" in p for p in tt.create_trial(store).problems())
