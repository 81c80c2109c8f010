"""Writes a small smdebug 1.0.34 trial with its MXNet hook, and the values smdebug's own trial
reader returns for it (expected.json beside it).
Run in an environment with smdebug 1.0.34, MXNet 1.9.1 and NumPy < 2."""

import json
import os
import shutil
import sys

import mxnet as mx
import numpy as np
import smdebug.mxnet as smd
from mxnet import autograd, gluon
from smdebug import modes
from smdebug.trials import create_trial


def write(out, worker):
    mx.random.seed(0)
    np.random.seed(worker)
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(5, activation="relu"), gluon.nn.Dense(3))
    net.initialize(mx.init.Xavier())
    hook = smd.Hook(
        out_dir=out,
        save_config=smd.SaveConfig(save_interval=2),
        include_collections=["weights", "gradients", "losses", "norms"],
    )
    norms = hook.get_collection("norms")
    norms.include("dense0_weight")
    norms.reduction_config = smd.ReductionConfig(
        reductions=["min", "max", "mean"], abs_reductions=["max"], norms=["l2"]
    )
    hook.register_block(net)
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    hook.register_block(loss_fn)
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1})
    x = mx.nd.array(np.random.randn(8, 4))
    y = mx.nd.array(np.random.randint(0, 3, 8))
    for _ in range(5):
        hook.set_mode(modes.TRAIN)
        with autograd.record():
            loss = loss_fn(net(x), y)
        loss.backward()
        trainer.step(8)
    for _ in range(2):
        hook.set_mode(modes.EVAL)
        loss_fn(net(x), y)
    hook._cleanup()


def expected(out):
    trial = create_trial(out)
    result = {"steps": trial.steps(), "workers": sorted(trial.workers()), "tensors": {}}
    for name in trial.tensor_names():
        t = trial.tensor(name)
        entry = {}
        for mode in (modes.TRAIN, modes.EVAL):
            for step in t.steps(mode=mode):
                for worker in trial.workers():
                    key = f"{mode.name}:{step}:{worker}"
                    got = {}
                    try:
                        got["value"] = np.asarray(t.value(step, mode=mode, worker=worker)).tolist()
                    except Exception:
                        pass
                    for red in ("min", "max", "mean", "l2"):
                        try:
                            got[red] = float(t.reduction_value(step, red, mode=mode, worker=worker))
                        except Exception:
                            pass
                    try:
                        got["abs_max"] = float(
                            t.reduction_value(step, "max", mode=mode, worker=worker, abs=True)
                        )
                    except Exception:
                        pass
                    if got:
                        entry[key] = got
        result["tensors"][name] = entry
    result["collections"] = {
        c: sorted(trial.tensor_names(collection=c)) for c in ("weights", "gradients", "losses")
    }
    return result


if __name__ == "__main__":
    out = sys.argv[1]
    shutil.rmtree(out, ignore_errors=True)
    write(out, 0)
    with open(os.path.join(os.path.dirname(os.path.abspath(out)), "expected.json"), "w") as f:
        json.dump(expected(out), f, indent=1, sort_keys=True)
    print("written", out)
