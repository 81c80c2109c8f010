"""Seed 001, "custom rules": write a rule of your own and have it evaluated beside training.

The seed uploads `my_custom_rule.py` to S3 and names it in a SageMaker `rules_specification`;
here the same specification points at the local file and a local training job runs
`scripts/cnn_digits.py` with it. `CustomGradientRule` (threshold 0.5, as in the seed) fires when
a gradient's mean absolute value passes the threshold: fed pixels 20 times their raw range
(a normalisation bug) the CNN's gradients are huge and it fires; fed pixels in 0..1, the same
job finds no issue.

    .venv/bin/python examples/seed001_custom_rule.py [--output runs] [--quick]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from tensortap.jobs import CollectionConfig, DebuggerHookConfig, TrainingJob

HERE = Path(__file__).parent
CUSTOM_RULE_PATH = HERE / "my_custom_rule.py"


def run(output: str, pixel_scale: float, quick: bool) -> TrainingJob:
    hyperparameters = {"num_epochs": 1, "pixel_scale": pixel_scale}
    if quick:
        hyperparameters["batches"] = 20
    estimator = TrainingJob(
        entry_point=HERE / "scripts" / "cnn_digits.py",
        hyperparameters=hyperparameters,
        output_path=output,
        job_name=f"seed001-pixels-over-{pixel_scale:g}-{time.strftime('%Y%m%d-%H%M%S')}",
        # a custom rule's needs are its own: save the collection it reads
        debugger_hook_config=DebuggerHookConfig(collection_configs=[CollectionConfig("gradients")]),
        debug=True,  # the seed's keyword: accepted, and ignored (a job is always debugged)
        rules_specification=[
            {
                "RuleName": "CustomGradientRule",
                "SourceS3Uri": str(CUSTOM_RULE_PATH),  # a local path stands for the S3 URI
                "InstanceType": "ml.c5.4xlarge",  # accepted and ignored: it runs here
                "RuntimeConfigurations": {"threshold": "0.5"},
            }
        ],
    )
    estimator.fit(wait=True, logs=False)
    return estimator


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", default="runs", help="where the job directories go")
    parser.add_argument("--quick", action="store_true", help="a few batches (the tests' mode)")
    ns = parser.parse_args(argv)
    for pixel_scale, what in ((0.05, "pixels x20, unnormalised"), (16.0, "pixels in 0..1")):
        job = run(ns.output, pixel_scale, ns.quick)
        (described,) = job.describe_rule_execution_jobs()
        print(
            f"{what}: {described['RuleName']} {described['RuleStatus']}"
            f"{' (' + described['FailureReason'] + ')' if described.get('FailureReason') else ''}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
