"""One diagnosis per run (tensortap.diagnose): the verdict, the root cause first, its chain in
time order, consequences folded under it, and rules that could not judge never counted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tensortap
from tensortap.diagnosis import CAUSES, RuleOutcome, build, cause_of, job_outcomes
from tensortap.exceptions import InvalidConfigError
from tensortap.rules._verdict import UNEXPLAINED, UNHARMED, cleared, harmed


def fired(rule: str, step: int, cause: str | None = None, severity: str = "problem",
          message: str = "", **details: object) -> RuleOutcome:  # fmt: skip
    if cause is not None:
        details["cause"] = cause
    finding = {
        "rule": rule,
        "step": step,
        "severity": severity,
        "message": message or f"{rule} at {step}",
        "details": details,
    }
    return RuleOutcome(rule, "IssuesFound", finding)


def quiet(rule: str) -> RuleOutcome:
    return RuleOutcome(rule, "NoIssuesFound")


def no_data(rule: str, why: str = "nothing was judged: no gradients") -> RuleOutcome:
    return RuleOutcome(rule, "NoData", None, why)


def test_a_run_no_rule_faults_is_healthy_and_says_who_could_not_judge() -> None:
    found = build([quiet("LossNotDecreasing"), quiet("DeadRelu"), no_data("ClassImbalance"),
                   fired("Overtraining", 40, severity="advice")])  # fmt: skip
    assert found.verdict == "healthy" and found.healthy and found.cause is None
    assert found.judged == ("LossNotDecreasing", "DeadRelu", "Overtraining")
    assert found.not_judged == (("ClassImbalance", "nothing was judged: no gradients"),)
    assert found.headline() == (
        "healthy: 3 rules judged the run and found no problem (1 could not judge it)"
    )
    assert [w.rule for w in found.warnings] == ["Overtraining"]
    assert "could not judge (not counted as healthy): ClassImbalance" in str(found)


def test_rules_that_could_not_judge_never_make_a_run_healthy() -> None:
    found = build([no_data("LossNotDecreasing"), RuleOutcome("DeadRelu", "Error", None, "boom")])
    assert found.verdict == "unknown" and not found.healthy
    assert found.headline().startswith("unknown: no rule could judge the run")
    assert build([]).verdict == "unknown"


def test_the_learning_rate_leads_and_what_followed_is_folded_under_it_in_time_order() -> None:
    found = build([
        fired("DeadRelu", 12),
        fired("VanishingGradient", 12),
        fired("ExplodingTensor", 10, message="fc1.weight holds NaN"),
        fired("AllZero", 10, nonfinite=True),
        fired("WeightUpdateRatio", 0, "lr_too_high", message="the first update was 0.15 of the "
              "weight norm"),
        fired("Overfit", 30),
    ])  # fmt: skip
    assert found.verdict == "problem" and found.cause is CAUSES["lr_too_high"]
    assert len(found.problems) == 1  # one diagnosis: the rest are its consequences
    problem = found.problems[0]
    assert [e.step for e in problem.consequences] == [10, 10, 12, 12, 30]
    # at one step, the rule whose subject the cause is speaks first (NaN: ExplodingTensor)
    assert problem.consequences[0].rule == "ExplodingTensor"
    assert found.headline() == (
        "the learning rate is too high: the first update was 0.15 of the weight norm; then "
        "NaN or infinite values appear at step 10 (ExplodingTensor), ReLU units are dead at "
        "step 12 (DeadRelu), gradients vanish at step 12 (VanishingGradient) and 1 more"
    )
    assert found.causes[0] == "lr_too_high" and "nonfinite" in found.causes
    chain = str(found).split("\n", 1)[1]  # after the headline: the evidence, in time order
    assert (
        chain.index("WeightUpdateRatio") < chain.index("ExplodingTensor") < chain.index("Overfit")
    )
    assert "try: lower the learning rate" in chain


def test_a_fact_about_the_loop_is_the_cause_even_after_its_symptoms() -> None:
    found = build([fired("GradientNormSpike", 5), fired("LossNotDecreasing", 8, diverging=True),
                   fired("TrainingLoop", 20, "grads_not_cleared")])  # fmt: skip
    assert found.cause is CAUSES["grads_not_cleared"]
    assert {e.cause for e in found.problems[0].consequences} == {"exploding_gradient", "diverging"}


def test_symptoms_alone_chain_from_the_first_one() -> None:
    found = build([fired("ExplodingTensor", 30, nonfinite=True), fired("GradientNormSpike", 12)])
    assert found.cause is CAUSES["exploding_gradient"]
    assert [e.cause for e in found.problems[0].consequences] == ["nonfinite"]


def test_independent_causes_are_listed_after_the_root_gravest_first() -> None:
    found = build([fired("ExplodingTensor", 3, nonfinite=True), fired("ClassImbalance", 50)])
    assert [p.cause.id for p in found.problems] == ["class_imbalance", "nonfinite"]
    assert "also: NaN or infinite values appear" in str(found)


def test_a_custom_rule_that_names_no_cause_is_its_own_problem() -> None:
    found = build([fired("MyRule", 7)])
    assert found.cause is not None and found.cause.id == "rule:MyRule"
    assert found.headline() == "MyRule found a problem: MyRule at 7"


def test_causes_of_the_builtin_rules_findings() -> None:
    assert cause_of({"rule": "LossNotDecreasing", "details": {"diverging": True}}).id == (  # type: ignore[union-attr]
        "diverging"
    )
    assert cause_of({"rule": "WeightUpdateRatio", "details": {"direction": "large"}}).id == (  # type: ignore[union-attr]
        "lr_too_high"
    )
    assert cause_of({"rule": "Anything", "details": {"nonfinite": True}}).id == "nonfinite"  # type: ignore[union-attr]
    assert cause_of({"rule": "Named", "rule_class": "DeadRelu"}).id == "dead_relu"  # type: ignore[union-attr]
    assert cause_of({"rule": "Unknown", "details": {"cause": "no such cause"}}) is None
    for cause in CAUSES.values():  # the vocabulary is closed: what a cause explains is a cause
        assert cause.explains <= set(CAUSES), cause.id


def test_a_jobs_rule_statuses_old_and_new_give_the_same_diagnosis() -> None:
    new = {"RuleConfigurationName": "Lr", "RuleEvaluationStatus": "IssuesFound",
           "gravest": {"rule": "Lr", "rule_class": "WeightUpdateRatio", "step": 0,
                       "severity": "problem", "message": "big", "details": {"direction": "large"}}}  # fmt: skip
    old = {"RuleConfigurationName": "Spike", "RuleEvaluationStatus": "IssuesFound",
           "rule_class": "LossNotDecreasing", "gravest_step": 4, "gravest_message": "flat",
           "severity": "problem"}  # fmt: skip
    found = build(job_outcomes([new, old, {"RuleConfigurationName": "X",
                                           "RuleEvaluationStatus": "NoData"}]))  # fmt: skip
    assert found.cause is CAUSES["lr_too_high"]
    assert [e.rule for e in found.problems[0].consequences] == ["Spike"]
    assert found.not_judged == (("X", "NoData"),)
    json.dumps(found.to_dict())


_RULES = ["A", "B", "C", "D", "E", "F"]


@st.composite
def outcomes(draw: st.DrawFn) -> list[RuleOutcome]:
    out = []
    for rule in draw(st.lists(st.sampled_from(_RULES), unique=True, max_size=6)):
        kind = draw(st.sampled_from(["quiet", "nodata", "problem", "warning"]))
        if kind == "quiet":
            out.append(quiet(rule))
        elif kind == "nodata":
            out.append(no_data(rule))
        else:
            cause = draw(st.sampled_from(sorted(CAUSES)))
            out.append(fired(rule, draw(st.integers(0, 100)), cause, kind))
    return out


@settings(max_examples=200, deadline=None)
@given(outcomes())
def test_every_problem_is_told_once_and_roots_are_not_explained_by_graver_causes(
    given_outcomes: list[RuleOutcome],
) -> None:
    found = build(given_outcomes)
    problems = [o for o in given_outcomes if o.finding and o.finding["severity"] == "problem"]
    gated: list[RuleOutcome] = []
    if not harmed(given_outcomes):  # symptoms are warnings in a run without harm
        gated = [o for o in problems if CAUSES[o.finding["details"]["cause"]].symptom]  # type: ignore[index]
        problems = [o for o in problems if o not in gated]
        assert {o.rule for o in gated} <= {w.rule for w in found.warnings}
    judged = [o for o in given_outcomes if o.status in ("IssuesFound", "NoIssuesFound")]
    told = [e.rule for p in found.problems for e in (*p.evidence, *p.consequences)]
    assert sorted(told) == sorted(o.rule for o in problems)
    # symptoms in a run no outcome rule cleared leave it unknown, never healthy
    undecided = gated and not cleared(given_outcomes)
    healthy = "unknown" if undecided or not judged else "healthy"
    assert found.verdict == ("problem" if problems else healthy)
    roots = [p.cause for p in found.problems]
    for i, root in enumerate(roots):
        assert not any(root.id in r.explains for r in roots[:i])
        for e in found.problems[i].evidence + found.problems[i].consequences:
            assert e.step >= 0
    for p in found.problems:  # each chain is in time order
        steps = [e.step for e in p.consequences]
        assert steps == sorted(steps)
    json.dumps(found.to_dict())


def test_diagnose_a_trial_written_by_the_hook(tmp_path: Path) -> None:
    import torch
    from torch import nn

    import tensortap.pytorch as tt

    torch.manual_seed(0)
    hook = tt.Hook(tmp_path / "t", save_config=tt.SaveConfig(save_interval=1),
                   include_collections=["losses", "gradients", "weights"])  # fmt: skip
    model = nn.Linear(4, 1)
    hook.register_module(model)
    loss_fn = nn.MSELoss()
    hook.register_loss(loss_fn)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(64, 4)
    y = x @ torch.tensor([[1.0], [2.0], [0.5], [-1.0]])
    for _ in range(30):
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()
    with torch.no_grad():
        model.weight.fill_(float("nan"))
    opt.zero_grad()
    loss_fn(model(x), y).backward()
    opt.step()
    hook.close()
    found = tensortap.diagnose(str(tmp_path / "t"))
    assert found.verdict == "problem" and found.cause is CAUSES["nonfinite"]
    # weights are saved as their step ends (when the next forward begins): step 29's hold NaN
    assert found.problems[0].first_step == 29
    assert tensortap.diagnose(found) is found
    with pytest.raises(InvalidConfigError, match="diagnose\\(\\) takes a trial"):
        tensortap.diagnose(42)


def test_the_reports_diagnosis_escapes_what_names_and_messages_carry() -> None:
    from tensortap.report._page import diagnosis_block

    hostile = "<script>alert(1)</script>"
    found = build([fired(f"Rule{hostile}", 3, "nonfinite", message=f"{hostile} holds NaN"),
                   fired("Other", 5, "overfitting", severity="warning", message=hostile)])  # fmt: skip
    page = diagnosis_block(found)
    assert "<script>" not in page and page.count("&lt;script&gt;") == 4


def test_a_symptom_is_a_problem_only_in_a_harmed_run() -> None:
    # a tiny attention gradient at initialisation in a run that learns: a warning that says so
    vanishing = fired("VanishingGradient", 0, "vanishing_gradient", message="mean |grad| 8.5e-08")
    learns = build([vanishing, quiet("LossNotDecreasing"), quiet("AccuracyAtChance")])
    assert learns.verdict == "healthy" and learns.cause is None
    [told] = learns.warnings
    assert (told.rule, told.severity) == ("VanishingGradient", "warning")
    assert told.message == "mean |grad| 8.5e-08" + UNHARMED
    # the same finding where the loss makes no progress is evidence of the harm, and its cause
    stuck = build([vanishing, fired("LossNotDecreasing", 40, "no_progress")])
    assert stuck.cause is CAUSES["vanishing_gradient"]
    assert [e.rule for e in stuck.problems[0].consequences] == ["LossNotDecreasing"]
    # non-finite values are harm wherever they were seen
    nan = build([vanishing, fired("AllZero", 5, "nonfinite")])
    assert nan.verdict == "problem" and "VanishingGradient" in {
        e.rule for p in nan.problems for e in (*p.evidence, *p.consequences)
    }
    # a run that did not finish is harmed
    assert build([vanishing], failed=True).cause is CAUSES["vanishing_gradient"]
    # a fact about the loop and a fault of the set-up stand on their own
    for rule, cause in (
        ("TrainingLoop", "grads_not_cleared"),
        ("WeightUpdateRatio", "lr_too_high"),
    ):
        assert build([fired(rule, 0, cause)]).cause is CAUSES[cause]
    # a warning of an outcome rule is not harm, nor does it clear the run: see below
    warned = build([vanishing, fired("LossNotDecreasing", 40, "no_progress", "warning")])
    assert warned.verdict == "unknown" and not warned.problems


def test_symptoms_in_a_run_no_outcome_rule_cleared_leave_it_unknown_never_healthy() -> None:
    """The demo's rule set once called a 12-layer sigmoid net at accuracy 0.088 healthy: its
    gradients vanished (VanishingGradient, WeightsNotUpdating) and its only outcome rule said
    "too early to tell". Symptoms are warnings until harm is seen, but a run is *healthy* only
    when a rule that judges what training achieves cleared it."""
    vanishing = fired("VanishingGradient", 0, "vanishing_gradient", message="mean |grad| 6e-13")
    stuck = fired("WeightsNotUpdating", 5, "not_updating", message="6 of 26 did not change")
    early = fired("LossNotDecreasing", 41, "no_progress", "warning", message="too early")
    found = build([vanishing, stuck, early, quiet("ExplodingTensor")])
    assert found.verdict == "unknown" and not found.healthy and not found.problems
    assert found.undecided == ("vanishing_gradient", "not_updating")
    assert found.headline().startswith(
        "unknown: gradients vanish and weights are not updating (VanishingGradient at step 0), "
        "but no rule that judges what training achieves"
    )
    assert found.demoted() == {
        "VanishingGradient": "no rule judged harm",
        "WeightsNotUpdating": "no rule judged harm",
    }
    assert found.to_dict()["undecided"] == ["vanishing_gradient", "not_updating"]
    # ExplodingTensor's silence clears nothing (it sees only non-finite values); an outcome
    # rule that judged and found nothing, or only advice, clears the run
    for clearing in (quiet("AccuracyAtChance"), fired("Overtraining", 60, severity="advice")):
        assert build([vanishing, stuck, early, clearing]).verdict == "healthy"
    # a configuration named otherwise is known by its rule class
    renamed = RuleOutcome("my-acc", "NoIssuesFound", kind="AccuracyAtChance")
    assert build([vanishing, renamed]).verdict == "healthy"
    assert build([vanishing, RuleOutcome("my-acc", "NoIssuesFound")]).verdict == "unknown"
    # with harm seen, the same symptoms are the cause
    harm = fired("AccuracyAtChance", 92, "no_learnable_signal")
    assert build([vanishing, stuck, early, harm]).cause is CAUSES["vanishing_gradient"]


def test_evidence_that_needs_harm_is_a_problem_only_where_it_explains_the_harm() -> None:
    """A param group at learning rate 0 (TrainingLoop's frozen_layer, ``needs_harm``) may be a
    layer frozen on purpose: a problem, and the cause, only where the harm is one a frozen
    layer explains; a warning that says so otherwise, even in a run harmed another way."""
    frozen = fired("TrainingLoop", 10, "frozen_layer", message="12 parameters at lr 0",
                   needs_harm=True)  # fmt: skip
    alone = build([frozen, quiet("LossNotDecreasing")])
    assert alone.verdict == "healthy"
    assert [w.message for w in alone.warnings] == ["12 parameters at lr 0" + UNEXPLAINED]
    stuck = build([frozen, fired("AccuracyAtChance", 40, "no_learnable_signal")])
    assert stuck.cause is CAUSES["frozen_layer"]
    assert [e.rule for e in stuck.problems[0].consequences] == ["AccuracyAtChance"]
    nan = build([frozen, fired("ExplodingTensor", 20, "nonfinite")])
    assert nan.cause is CAUSES["nonfinite"] and [w.rule for w in nan.warnings] == ["TrainingLoop"]
    # ranked after every other cause, and never explaining a fault of the set-up away: a
    # fine-tuned backbone frozen on purpose, in a run whose learning rate is far too low
    low = fired("TrainingLoop", 0, "lr_too_low")
    both = build([frozen, low, fired("LossNotDecreasing", 40, "no_progress")])
    assert [p.cause.id for p in both.problems] == ["lr_too_low", "frozen_layer"]
    # without the mark, a fact about the loop stands on its own as before
    assert build([fired("TrainingLoop", 10, "frozen_layer")]).cause is CAUSES["frozen_layer"]


def test_an_early_loss_burst_that_kills_the_units_is_the_learning_rate() -> None:
    """A stranger's Keras MLP under Adam at 3e-1 (a typo for 3e-4): loss 1.8 to 626 in five
    steps, then every ReLU dead, gradients vanishing and accuracy at chance. It was "gradients
    vanish" first; the burst (PoorWeightInitialization's, evidence that needs harm) names the
    learning rate, which explains the dead units and the model left at chance."""
    burst = fired("PoorWeightInitialization", 5, "lr_too_high", "warning", needs_harm=True)
    after = [
        fired("VanishingGradient", 40),
        fired("AllZero", 40),
        fired("DeadRelu", 50),
        fired("AccuracyAtChance", 1184, "no_learnable_signal"),
    ]
    found = build([burst, *after])
    assert found.verdict == "problem" and found.cause is not None
    assert found.cause.id == "lr_too_high"
    # without harm a burst is a warning: a run may recover from it
    alone = build([burst, quiet("LossNotDecreasing")])
    assert alone.verdict == "healthy"
    assert alone.warnings[0].message.endswith(UNEXPLAINED)


def test_evidence_behind_a_rules_earlier_warning_is_weighed_too() -> None:
    """A CNN of the generated development split at SGD x100: WeightUpdateRatio warned of a
    large first update at step 0 (its gravest finding, the first of its gravest severity),
    then saw the weights grow 17x by step 30 (evidence that needs harm); the units died and the
    model ended at chance. The diagnosis read the gravest finding alone and said "gradients
    vanish". A rule's other findings that need harm are weighed too (``evidence``), from a
    rule's summary as from a job's status files."""
    first = {"rule": "WeightUpdateRatio", "step": 0, "severity": "warning",
             "message": "a large first update", "details": {"cause": "lr_too_high"}}  # fmt: skip
    grown = {"rule": "WeightUpdateRatio", "step": 30, "severity": "warning",
             "message": "the weights grew 17.4 times",
             "details": {"cause": "lr_too_high", "growth": True, "needs_harm": True}}  # fmt: skip
    ratio = RuleOutcome("WeightUpdateRatio", "IssuesFound", first, evidence=(grown,))
    after = [
        fired("VanishingGradient", 20),
        fired("AllZero", 30),
        fired("AccuracyAtChance", 200, "no_learnable_signal"),
    ]
    found = build([ratio, *after])
    assert found.cause is CAUSES["lr_too_high"]
    assert [e.message for e in found.problems[0].evidence] == ["the weights grew 17.4 times"]
    assert {e.rule for e in found.problems[0].consequences} >= {"AccuracyAtChance", "AllZero",
                                                                "VanishingGradient"}  # fmt: skip
    hidden = build([RuleOutcome("WeightUpdateRatio", "IssuesFound", first), *after])
    assert hidden.cause is CAUSES["vanishing_gradient"]  # what it was
    # without harm the evidence is a warning that says so
    alone = build([ratio, quiet("AccuracyAtChance")])
    assert alone.verdict == "healthy"
    assert "the weights grew 17.4 times" + UNEXPLAINED in [w.message for w in alone.warnings]
    # as a job's status files carry it (an item that is no finding is passed over)
    status = {"RuleConfigurationName": "WeightUpdateRatio", "RuleEvaluationStatus": "IssuesFound",
              "rule_class": "WeightUpdateRatio", "gravest": first,
              "evidence": [grown, "not a finding"]}  # fmt: skip
    read = job_outcomes([status])
    assert read[0].evidence == (grown,)
    assert build([*read, *after]).cause is CAUSES["lr_too_high"]
