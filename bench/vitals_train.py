"""The training process of bench_vitals.py: one model trained under the job's default hook
(the recommended rules' collections, every 10th step, as ``tensortap run`` attaches it) or
without a hook; times its own steps after a warm-up and writes to ``--output`` (JSON) the mean
wall time per step and the process CPU time per step (every thread, closing the hook included).
Which tensortap it imports is the caller's ``PYTHONPATH``."""

import argparse
import json
import tempfile
import time

import torch
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--model", default="small")
parser.add_argument("--steps", type=int, default=200)
parser.add_argument("--warmup", type=int, default=20)
parser.add_argument("--hook", action="store_true")
parser.add_argument("--no-vitals", action="store_true", help="the job's hook less vitals")
parser.add_argument("-o", "--output", required=True)
args = parser.parse_args()
torch.manual_seed(0)
torch.set_num_threads(1)

if args.model == "small":  # bench/job_train.py's
    model: nn.Module = nn.Sequential(
        nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, 10)
    )
    shape: tuple[int, ...] = (128, 256)
elif args.model == "mlp":  # bench/bench_pytorch.py's, 2.4M parameters
    model = nn.Sequential(
        nn.Linear(1024, 1536), nn.ReLU(), nn.Linear(1536, 512), nn.ReLU(), nn.Linear(512, 10)
    )
    shape = (64, 1024)
else:  # bench/bench_pytorch.py's CNN, 0.8M parameters
    model = nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(64, 128, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(128 * 4 * 4, 384), nn.ReLU(), nn.Linear(384, 10),
    )  # fmt: skip
    shape = (64, 3, 32, 32)
xs = torch.randn(8, *shape)
ys = torch.randint(0, 10, (8, shape[0]))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
loss_fn = nn.CrossEntropyLoss()
out = tempfile.mkdtemp()
hook = None
if args.hook:
    import tensortap.pytorch as tt
    from tensortap.jobs._specs import Rule, hook_config
    from tensortap.rules import rule_configs

    specs = [Rule.builtin(c) for c in rule_configs.recommended()]
    hook = hook_config(out, None, specs, None).create_hook(tt.Hook)
    if args.no_vitals:
        hook._recorder.include_collections.discard("vitals")
    hook.register_module(model)
    hook.register_loss(loss_fn)
times = []
cpu = 0.0
for step in range(args.warmup + args.steps):
    if step == args.warmup:
        cpu = time.process_time()
    start = time.perf_counter()
    optimizer.zero_grad()
    loss = loss_fn(model(xs[step % 8]), ys[step % 8])
    loss.backward()
    optimizer.step()
    times.append(time.perf_counter() - start)
if hook is not None:
    hook.close()  # everything written: the writer's work counts too
cpu = (time.process_time() - cpu) / args.steps
timed = times[args.warmup :]
with open(args.output, "w") as f:
    json.dump({"mean": sum(timed) / len(timed), "cpu": cpu}, f)
