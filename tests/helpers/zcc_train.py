"""A training script that knows nothing of tensortap (run by the zero-code-change tests).

Usage: zcc_train.py STEPS {functional,module,functional-undivided,module-summed} ACCUMULATE
[compile]
Prints one line per optimizer step: "step <i> loss <value>". functional-undivided back-propagates
each micro-batch's whole F.cross_entropy (the accumulation bug: gradients summed, not averaged);
module-summed adds the micro-batches' whole CrossEntropyLoss outputs into one total and
back-propagates it once (the same bug, written as a running total).
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: tests.helpers
from tests.helpers.torch_models import Net, batches, make


def main() -> None:
    steps, loss_kind, accumulate = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    model = make(Net)
    runner = torch.compile(model, backend="eager") if sys.argv[4:] == ["compile"] else model
    criterion = nn.CrossEntropyLoss()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = batches(16)
    for i in range(steps):
        model.train()
        opt.zero_grad()
        total = 0.0
        summed: torch.Tensor | float = 0.0
        for _ in range(accumulate):
            xb, yb = next(data)
            out = runner(xb)
            module = loss_kind.startswith("module")
            loss = criterion(out, yb) if module else F.cross_entropy(out, yb)
            if loss_kind == "module-summed":
                summed = summed + loss
            else:
                (loss if loss_kind == "functional-undivided" else loss / accumulate).backward()
            total += loss.item() / accumulate
        if isinstance(summed, torch.Tensor):
            summed.backward()
        opt.step()
        print(f"step {i} loss {total:.6f}", flush=True)
    model.eval()
    with torch.no_grad():
        runner(next(data)[0])


if __name__ == "__main__":
    main()
