"""Slot statistics across ranks: the same training as one process on the whole batch, or as one
rank of two (gloo, 127.0.0.1) on half of it, so that merged statistics can be compared with
those of the union of the data.

Usage: slots_train.py OUT_DIR STEPS (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT in the environment
for two ranks). Writes OUT_DIR/single, or OUT_DIR/{replicated,fsdp}:

- ``replicated``: every rank holds the whole model; gradients are summed across ranks by hand
  (each rank's loss is its share of the whole batch's), so weights, gradients, activations and
  their gradients all equal the single process's;
- ``fsdp``: FSDP2 (``fully_shard``), weights and gradients only (FSDP2 averages gradients, so
  the rank's loss is scaled by the world size to match).

Each rank prints how many SUM and MAX all-reduces the hook issued (``torch.distributed.all_reduce``
wrapped) and how many steps it saved.
"""

from __future__ import annotations

import os
import sys

import torch
import torch.distributed as dist
from torch import nn

import tensortap.pytorch as tt

STATS = tt.ReductionConfig(
    reductions=["min", "max", "mean", "std", "variance", "sum", "nonfinite"],
    abs_reductions=["max", "mean", "sum"],
    norms=["l1", "l2"],
)
BATCH = 8
ACTIVATIONS = ["relu_activations", "activation_gradients"]


def make_model() -> nn.Module:
    torch.manual_seed(0)  # odd widths: the shards of two ranks differ in size
    return nn.Sequential(nn.Linear(6, 7), nn.ReLU(), nn.Linear(7, 5), nn.Tanh(), nn.Linear(5, 3))


def train(out_dir: str, model: nn.Module, rank: int, world: int, steps: int, kind: str) -> None:
    collections = ["weights", "biases", "gradients"]
    if kind != "fsdp":
        collections += ACTIVATIONS
    hook = tt.Hook(
        out_dir,
        statistics="slots",
        save_config=tt.SaveConfig(save_interval=2),
        reduction_config=STATS,
        include_collections=collections,
    )
    original = dist.all_reduce if dist.is_initialized() else None
    counts = {"SUM": 0, "MAX": 0}

    def counted(tensor, op=dist.ReduceOp.SUM, *args, **kwargs):
        counts["MAX" if op == dist.ReduceOp.MAX else "SUM"] += 1
        return original(tensor, op, *args, **kwargs)  # type: ignore[misc]

    if kind == "fsdp":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        mesh = init_device_mesh("cpu", (world,))
        for layer in model.children():  # a Sequential's layers
            if isinstance(layer, nn.Linear) and layer.out_features != 3:
                fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
    hook.register_module(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.2)
    data = torch.Generator().manual_seed(1)
    share = BATCH // world
    if original is not None:
        dist.all_reduce = counted  # the hook's all-reduces from here on
    saved = 0
    for step in range(steps):
        x = torch.randn(BATCH, 6, generator=data)
        y = torch.randn(BATCH, 3, generator=data)
        rows = slice(rank * share, (rank + 1) * share)
        opt.zero_grad()
        out = model(x[rows])
        # This rank's share of the whole batch's mean loss (FSDP2 averages over the ranks).
        loss = nn.functional.mse_loss(out, y[rows], reduction="sum") / (BATCH * out.shape[1])
        (loss * world if kind == "fsdp" else loss).backward()
        if kind == "replicated":
            for p in model.parameters():
                original(p.grad)  # type: ignore[misc]  # by hand, not counted: the sum
        opt.step()
        saved += step % 2 == 0
    hook.close()
    if original is not None:
        dist.all_reduce = original
    print(f"rank {rank} {kind}: SUM {counts['SUM']} MAX {counts['MAX']} saved {saved}", flush=True)


def main() -> None:
    out_dir, steps = sys.argv[1], int(sys.argv[2])
    torch.set_num_threads(1)
    if int(os.environ.get("WORLD_SIZE", "1")) == 1:
        train(os.path.join(out_dir, "single"), make_model(), 0, 1, steps, "single")
        return
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    for kind in ("replicated", "fsdp"):
        train(os.path.join(out_dir, kind), make_model(), rank, world, steps, kind)
    dist.barrier()  # rank 0 hosts the store: nobody leaves while another still uses it
    dist.destroy_process_group()
    print(f"rank {rank} done", flush=True)


if __name__ == "__main__":
    main()
