"""Running a script as ``torch.distributed`` ranks: real processes meeting on 127.0.0.1 (gloo);
and, inside such a rank, leaving together."""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence
from typing import NoReturn


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


def leave_together() -> NoReturn:
    """In a rank, as the last thing its script does: wait for every rank, destroy the process
    group, run the exit handlers (the hooks left open close there) and leave without
    finalizing the interpreter (``os._exit(0)``, output flushed). A gloo rank can abort while
    the interpreter finalizes ("terminate called without an active exception", SIGABRT:
    pytorch/pytorch#190489): with its group alive (Lightning's and Hugging Face's trainers
    leave it so), and also after ``destroy_process_group`` where a module still refers to the
    group's objects (an FSDP rank aborted so in a clean-clone run). Rank 0 hosts the store the
    others still use, hence the barrier."""
    import atexit
    import os
    import sys

    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
