"""The same training written three ways, so that their saved statistics can be compared: one
process on the whole batch, or one rank of two (gloo, 127.0.0.1) on half of it, under DDP and
under FSDP2 (``fully_shard``, registered with the hook after sharding and, in ``fsdp_early``,
before it).

Usage: sharded_train.py OUT_DIR STEPS [mismatch] (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT in the
environment for two ranks). Writes OUT_DIR/single, or OUT_DIR/{ddp,fsdp,fsdp_early}; with
``mismatch``, only OUT_DIR/fsdp, where rank 1 saves fewer statistics of gradients.
"""

from __future__ import annotations

import os
import sys

import torch
import torch.distributed as dist
from torch import nn

import tensortap.pytorch as tt

STATS = tt.ReductionConfig(
    reductions=[
        *("min", "max", "mean", "std", "variance", "sum", "prod", "amax"),
        *("dynamic_range", "nonfinite", "underflow_bf16", "overflow_fp16"),
    ],
    abs_reductions=["min", "max", "mean"],
    norms=["l1", "l2"],
    save_raw_tensor=True,
)
BATCH = 8


def make_model() -> nn.Module:
    torch.manual_seed(0)  # odd widths: the shards of two ranks differ in size
    return nn.Sequential(nn.Linear(6, 7), nn.ReLU(), nn.Linear(7, 5), nn.Tanh(), nn.Linear(5, 3))


FEWER = tt.ReductionConfig(reductions=["max"], norms=["l2"], save_raw_tensor=True)


def train(
    out_dir: str, model: nn.Module, wrap, rank: int, world: int, steps: int, odd: bool = False
) -> None:
    hook = tt.Hook(
        out_dir,
        save_config=tt.SaveConfig(save_interval=2),
        include_collections=["weights", "biases", "gradients", "losses"],
    )
    for name in ("weights", "biases", "gradients"):
        hook.get_collection(name).reduction_config = STATS
    if odd:  # a rank configured unlike the others: fewer statistics of gradients
        hook.get_collection("gradients").reduction_config = FEWER
    model = wrap(model, hook)
    opt = torch.optim.SGD(model.parameters(), lr=0.2)
    data = torch.Generator().manual_seed(1)
    share = BATCH // world
    for _ in range(steps):
        x = torch.randn(BATCH, 6, generator=data)
        y = torch.randn(BATCH, 3, generator=data)
        rows = slice(rank * share, (rank + 1) * share)
        opt.zero_grad()
        nn.functional.mse_loss(model(x[rows]), y[rows]).backward()
        opt.step()
    hook.close()


def registered(model: nn.Module, hook: tt.Hook) -> nn.Module:
    hook.register_module(model)
    return model


def main() -> None:
    out_dir, steps = sys.argv[1], int(sys.argv[2])
    torch.set_num_threads(1)
    if int(os.environ.get("WORLD_SIZE", "1")) == 1:
        train(os.path.join(out_dir, "single"), make_model(), registered, 0, 1, steps)
        return
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    mesh = init_device_mesh("cpu", (world,))

    def shard(model: nn.Module) -> nn.Module:
        for layer in model:  # type: ignore[attr-defined]  # an nn.Sequential
            if isinstance(layer, nn.Linear) and layer.out_features != 3:
                fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)  # the last layer's parameters stay with the root
        return model

    def ddp(model: nn.Module, hook: tt.Hook) -> nn.Module:
        return registered(nn.parallel.DistributedDataParallel(model), hook)

    def fsdp(model: nn.Module, hook: tt.Hook) -> nn.Module:
        model = registered(shard(model), hook)
        sharded = [n for n, p in model.named_parameters() if type(p.data).__name__ == "DTensor"]
        print(f"rank {rank}: {len(sharded)} DTensor parameters", flush=True)
        return model

    def fsdp_early(model: nn.Module, hook: tt.Hook) -> nn.Module:
        return shard(registered(model, hook))

    if sys.argv[3:] == ["mismatch"]:
        train(os.path.join(out_dir, "fsdp"), make_model(), fsdp, rank, world, steps, rank == 1)
    else:
        for name, wrap in (("ddp", ddp), ("fsdp", fsdp), ("fsdp_early", fsdp_early)):
            train(os.path.join(out_dir, name), make_model(), wrap, rank, world, steps)
    dist.barrier()  # rank 0 hosts the store: nobody leaves while another still uses it
    dist.destroy_process_group()
    print(f"rank {rank} done", flush=True)


if __name__ == "__main__":
    main()
