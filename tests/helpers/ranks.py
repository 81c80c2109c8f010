"""Running a script as ``torch.distributed`` ranks: real processes meeting on 127.0.0.1 (gloo);
and, inside such a rank, leaving together."""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence


def run_ranks(
    cmd: Sequence[object], ranks: int, env: Mapping[str, str], timeout: float
) -> list[subprocess.CompletedProcess[str]]:
    """Run ``ranks`` copies of ``cmd`` at once, each with ``env`` and its rank
    (``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``MASTER_ADDR=127.0.0.1`` and a free
    ``MASTER_PORT``; a single rank runs without them), and wait up to ``timeout`` seconds for
    each; their exit codes and output, by rank. Every rank is killed if one does not finish."""
    from tests.conftest import free_port

    port = str(free_port())
    procs = []
    try:
        for rank in range(ranks):
            rank_env = dict(env)
            if ranks > 1:
                rank_env.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(ranks))
                rank_env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
            procs.append(
                subprocess.Popen(
                    list(map(str, cmd)),
                    env=rank_env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                )
            )
        outputs = [p.communicate(timeout=timeout) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate()
    return [
        subprocess.CompletedProcess(p.args, p.returncode, out, err)
        for p, (out, err) in zip(procs, outputs, strict=True)
    ]


def leave_together() -> None:
    """In a rank, at the end of its script: wait for every rank, then destroy the process
    group. A gloo rank whose process exits with its group alive can abort while the interpreter
    finalizes ("terminate called without an active exception", SIGABRT: pytorch/pytorch#190489),
    and rank 0 hosts the store the others still use. Lightning's and Hugging Face's trainers
    leave the group alive after training, so their rank scripts call this as users are told to."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
