"""One rank of a real 2-process gloo run (127.0.0.1): the ranks gather JSON documents
(``tensortap.healing._agreement``), then rank 1 sends one over the byte limit. Prints a JSON
line: what was gathered, and the error each rank raised for the oversized one.

Usage: agreement_ranks.py (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT set).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist

from tensortap.exceptions import FormatError
from tensortap.healing._agreement import gather_documents

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: tests.helpers
from tests.helpers.no_pickle import forbid_pickling_collectives
from tests.helpers.ranks import leave_together


def main() -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    forbid_pickling_collectives()
    rank = dist.get_rank()
    gathered = gather_documents({"rank": rank, "text": "é" * (1 + 40 * rank)}, limit=1000)
    error = None
    try:  # rank 1's is 2,000 bytes: every rank raises, none waits on the other
        gather_documents({"text": "x" * (2000 * rank)}, limit=1000)
    except FormatError as exc:
        error = str(exc)
    print(json.dumps({"gathered": gathered, "error": error}), flush=True)
    leave_together()


if __name__ == "__main__":
    main()
