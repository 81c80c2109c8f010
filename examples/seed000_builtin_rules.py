"""Seed 000, "built-in rules": train a CNN with the debugger attached and built-in rules
evaluated beside training, then explore the trial and plot its losses.

The seed runs a TensorFlow MNIST script as a SageMaker training job with VanishingGradient and
LossNotDecreasing; here `scripts/cnn_digits.py`, an ordinary PyTorch script that never imports
tensortap, learns scikit-learn's digits as a local training job with the same two rules. The
hook also saves the ReLU activations every 20 steps, so that the report this writes at the end
(rules, curves, layer health, TensorPlot) has them to show.

    .venv/bin/python examples/seed000_builtin_rules.py [--output runs] [--quick]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import tensortap as tt
from tensortap.jobs import CollectionConfig, DebuggerHookConfig, Rule, TrainingJob, rule_configs
from tensortap.report import write_training_report
from tensortap.viz import plot_tensors

HERE = Path(__file__).parent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", default="runs", help="where the job directory goes")
    parser.add_argument("--quick", action="store_true", help="one short epoch (the tests' mode)")
    ns = parser.parse_args(argv)

    rules = [
        Rule.sagemaker(rule_configs.vanishing_gradient()),
        Rule.sagemaker(rule_configs.loss_not_decreasing()),
    ]
    hyperparameters = {"num_epochs": 1, "batches": 30} if ns.quick else {"num_epochs": 3}
    estimator = TrainingJob(
        entry_point=HERE / "scripts" / "cnn_digits.py",
        hyperparameters=hyperparameters,
        output_path=ns.output,
        job_name=f"seed000-cnn-{time.strftime('%Y%m%d-%H%M%S')}",
        debugger_hook_config=DebuggerHookConfig(
            collection_configs=[CollectionConfig("relu_activations", {"save_interval": "20"})]
        ),
        rules=rules,
        script_mode=True,  # the seed's keyword: accepted, and ignored by a local job
    )
    estimator.fit(wait=True, logs=not ns.quick)

    print("rule job summary:")
    for status in estimator.latest_training_job.rule_job_summary():
        print(f"  {status['RuleConfigurationName']}: {status['RuleEvaluationStatus']}")

    trial = tt.create_trial(estimator.latest_job_debugger_artifacts_path())
    print(f"{len(trial.tensor_names())} tensors saved, e.g. {sorted(trial.tensor_names())[:4]}")
    print(f"losses: {trial.tensor_names(collection='losses')}")
    job_dir = Path(estimator.job_dir)
    figure = plot_tensors(trial, collection="losses", ylabel="Loss")
    figure.savefig(job_dir / "losses.png")
    report = write_training_report(trial, job_dir / "report.html", job=job_dir)
    print(f"wrote {job_dir / 'losses.png'} and {report}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
