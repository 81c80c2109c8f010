"""One rank of a real 2-process run (gloo, 127.0.0.1) of the tiny MoE with ``router`` saved:
each rank routes its own tokens, and differently (rank r's routers favour experts r), and
writes the counts it routed in each saving window, computed here directly, to
``OUT_DIR/direct_<rank>.json``.

Usage: moe_ddp.py OUT_DIR STEPS (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT in the environment)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: tests.helpers

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

import tensortap.pytorch as tt
from tests.helpers import moe_models
from tests.helpers.ranks import leave_together


def main() -> None:
    out_dir, steps = Path(sys.argv[1]), int(sys.argv[2])
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = moe_models.healthy()
    direct: dict[str, list[list[float]]] = {"moe1.router": [], "moe2.router": []}
    counting: dict[str, torch.Tensor] = {}

    def count(name: str, experts: int):
        def hook(module, inputs, output):
            indices = output[2].reshape(-1)
            counting[name] = counting.get(name, torch.zeros(experts)) + torch.bincount(
                indices, minlength=experts
            )

        return hook

    model.moe1.router.register_forward_hook(count("moe1.router", 4))
    model.moe2.router.register_forward_hook(count("moe2.router", 8))
    hook = tt.Hook(
        out_dir / "trial",
        save_config=tt.SaveConfig(save_interval=2),
        include_collections=["losses", "router"],
    )
    ddp = DistributedDataParallel(model, find_unused_parameters=True)  # experts without tokens
    with torch.no_grad():  # after DDP's broadcast: rank r's routers favour expert r
        for moe in (model.moe1, model.moe2):
            moe.router.gate.bias[rank] = 2.0
    hook.register_module(ddp)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    for step in range(steps):
        x, y = moe_models.data(1000 * rank + step, n=64)
        opt.zero_grad()
        F.cross_entropy(ddp(x), y).backward()
        opt.step()
        if step % 2 == 0:  # the window of a saved step ends with it
            for name in direct:
                direct[name].append(counting.pop(name).tolist())
    hook.close()
    (out_dir / f"direct_{rank}.json").write_text(json.dumps(direct))
    print(f"rank {rank} done as {hook.worker}", flush=True)
    leave_together()


if __name__ == "__main__":
    main()
