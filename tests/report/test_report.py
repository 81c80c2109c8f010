"""The training report: rule findings linked to the steps where they are marked on the curves,
layer health, TensorPlot of the last activations; one page that opens offline in Chromium."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import tensortap as tt
from tensortap.cli import main
from tensortap.exceptions import InvalidConfigError
from tensortap.rules._invoker import RuleSummary

pytest.importorskip("plotly")
from tensortap.report import is_xgboost, training_report, write_report

RELUS = ["layer1/relu_output_0", "layer2/relu_output_0", "layer3/relu_output_0"]


def write_trial(out: Path, dead_from: int = 6, rank5: bool = False) -> tt.Trial:
    """A run whose layer2 ReLUs die at step ``dead_from``; losses in TRAIN and EVAL."""
    rng = np.random.default_rng(0)
    hook = tt.Hook(
        out,
        save_config=tt.SaveConfig(save_interval=1),
        include_collections=["losses", "weights", "gradients", "relu_activations"],
    )
    for step in range(10):
        hook.set_mode(tt.modes.TRAIN)
        hook.save_tensor("loss", np.float32(2.0 / (step + 1)), collections="losses")
        hook.save_tensor("fc.weight", rng.normal(size=(4, 4)) + step, collections="weights")
        for depth, name in enumerate(RELUS):
            hook.save_tensor(
                f"gradient/layer{depth + 1}", rng.normal(size=8), collections="gradients"
            )
            value = np.maximum(rng.normal(size=(6, 3, 4, 4)), 0)
            if name.startswith("layer2") and step >= dead_from:
                value[:] = 0
            hook.save_tensor(name, value.astype(np.float32), collections="relu_activations")
        if rank5:
            hook.save_tensor(
                "odd/relu_output_0", np.ones((1, 1, 1, 1, 2)), collections="relu_activations"
            )
        hook.next_step()
        if step % 3 == 2:
            hook.set_mode(tt.modes.EVAL)
            hook.save_tensor("loss", np.float32(3.0 / (step + 1)), collections="losses")
            hook.next_step()
    hook.close()
    return tt.create_trial(out)


def test_report_sections_and_findings_marked_at_their_steps(tmp_path: Path) -> None:
    trial = write_trial(tmp_path / "t")
    page = training_report(trial)
    for section in ("Rules", "Losses and metrics", "Layer health", "Activations (TensorPlot)"):
        assert f">{section}</h2>" in page
    row = re.search(r"<td class='text'>DeadRelu</td>.*?</tr>", page)
    assert row and "IssuesFound" in row.group(0)
    first = trial.global_step(tt.modes.TRAIN, 6)  # layer2 died at train step 6
    assert f"<a href='#curves'>{first}</a>" in row.group(0)
    assert re.search(
        r"<td class='text'>VanishingGradient</td><td class='text NoIssuesFound'>", page
    )
    assert "stroke-dasharray" in page and ">DeadRelu</text>" in page  # marked on the curve
    # one verdict above the rules' table; units dead for the last 4 of 10 steps are a warning
    verdict = re.search(r"<div class='diagnosis'>.*?</div>", page)
    assert verdict and "Diagnosis: healthy: " in verdict.group(0)
    assert f"<li>step {first}, DeadRelu (warning): " in verdict.group(0)
    assert page.index("<div class='diagnosis'>") < page.index("<td class='text'>DeadRelu</td>")
    assert "loss (TRAIN)" in page and "loss (EVAL)" in page
    assert "log10 gradient norm per layer" in page and "share of zero activations" in page
    assert "Step 12, summed over the batch" in page  # the last saved step (global)
    assert page.count("<svg") >= 3


def test_a_section_that_cannot_be_drawn_spoils_no_other(tmp_path: Path) -> None:
    page = training_report(write_trial(tmp_path / "t", rank5=True), rules=[])
    assert "left out: odd" in page  # TensorPlot draws the other layers

    odd = tmp_path / "odd"
    hook = tt.Hook(odd, save_config=tt.SaveConfig(save_interval=1), include_regex=".*")
    hook.save_tensor("loss", np.float32(1.0), collections="losses")
    hook.save_tensor("odd/relu_output_0", np.ones((1, 1, 1, 1, 2)), collections="relu_activations")
    hook.close()
    page = training_report(odd, rules=[])
    assert "Could not draw this section: TensorPlot has nothing to draw" in page
    assert "share of zero activations" in page and ">losses</text>" in page

    bare = tmp_path / "bare"
    hook = tt.Hook(bare, save_config=tt.SaveConfig(save_interval=1), include_regex="x")
    hook.save_tensor("x", np.zeros(3), collections="all")
    hook.close()
    page = training_report(bare)
    assert "No losses, metrics, vital signs or scalars saved." in page
    assert "No gradients or ReLU activations saved" in page
    assert "No activations saved in full" in page


def test_xgboost_trials_get_their_own_report(tmp_path: Path) -> None:
    hook = tt.Hook(tmp_path / "x", save_config=tt.SaveConfig(save_interval=1), include_regex=".*")
    hook.save_tensor("feature_importance/gain/f0", np.float32(1.0), collections="all")
    hook.close()
    assert is_xgboost(tt.create_trial(tmp_path / "x"))
    assert "<title>XGBoost report" in write_report(tmp_path / "x", tmp_path / "x.html").read_text()
    assert not is_xgboost(write_trial(tmp_path / "t"))


def test_cli_report_opens_in_chromium_with_its_traces(tmp_path: Path, browser, capsys) -> None:
    write_trial(tmp_path / "t")
    assert main(["report", str(tmp_path / "t"), "-o", str(tmp_path / "r.html")]) == 0
    assert "wrote" in capsys.readouterr().out
    page = browser.open(tmp_path / "r.html")
    assert page.title == "Training report: t"
    found = browser.until(  # TensorPlot drawn once the page unpacked plotly.js
        "const d = document.querySelector('.js-plotly-plot');"
        "return [d ? d.data.length : null, document.querySelectorAll('svg.main-svg, h2 + div > svg').length,"
        " performance.getEntriesByType('resource').length];",
        lambda v: v[0] is not None,
    )
    assert found[0] == len(RELUS)  # one TensorPlot trace per ReLU layer
    assert found[1] >= 3 and found[2] == 0  # the SVG charts; nothing loaded from anywhere
    assert browser.errors() == []
    assert (
        main(["report", str(tmp_path / "t"), "--job", "nope", "-o", str(tmp_path / "r.html")]) == 2
    )


def nan_trial(out: Path, nan_from: int, steps: int = 30) -> tt.Trial:
    """Loss NaN from step ``nan_from``, a gradient of norm exactly 0 (a dead layer), one EVAL
    loss (a series of one point), a long tensor name."""
    hook = tt.Hook(
        out,
        save_config=tt.SaveConfig(save_interval=1),
        include_collections=["losses", "gradients", "relu_activations"],
    )
    for step in range(steps):
        hook.set_mode(tt.modes.TRAIN)
        loss = np.nan if step >= nan_from else 2.0 / (step + 1)
        hook.save_tensor("loss", np.float32(loss), collections="losses")
        hook.save_tensor(LONG, np.full(4, 0.1 + step), collections="gradients")
        hook.save_tensor("gradient/dead", np.zeros(4), collections="gradients")
        hook.save_tensor(
            "relu_output_0", np.ones((2, 4), np.float32), collections="relu_activations"
        )
        hook.next_step()
        if step == 10:
            hook.set_mode(tt.modes.EVAL)
            hook.save_tensor("loss", np.float32(0.5), collections="losses")
            hook.next_step()
    hook.close()
    return tt.create_trial(out)


LONG = "gradient/encoder.layers.0.self_attention.out_proj.weight"


def test_report_charts_tell_the_truth_about_nan_one_point_and_dead_layers(tmp_path: Path) -> None:
    page = training_report(nan_trial(tmp_path / "t", nan_from=20), rules=[])
    curves = page[page.index("id='curves'") : page.index("id='health'")]
    assert 'class="nonfinite"' in curves and "NaN from step 21" in curves  # global step 21
    assert "<polyline" in curves  # the finite part is drawn
    assert "loss (EVAL)" in curves and "<circle" in curves  # one point: a dot
    ticks = re.findall(r'text-anchor="end" font-size="10">([^<]+)</text>', curves)
    assert len(ticks) >= 4  # round ticks, not only the min and the max
    health = page[page.index("id='health'") : page.index("id='activations'")]
    dead = re.findall(r"<title>gradient/dead at step \d+: exactly 0</title>", health)
    assert len(dead) == 30 and "exactly 0</text>" in health  # every step, and in the legend
    assert f"<title>{LONG}</title>" in health  # the whole name, on hover
    assert ">0%</text>" in health and ">100%</text>" in health  # an absolute scale

    page = training_report(nan_trial(tmp_path / "all", nan_from=0, steps=5), rules=[])
    curves = page[page.index("id='curves'") : page.index("id='health'")]
    assert "no finite value" in curves and 'class="nonfinite"' in curves
    assert "NaN from step 0" in curves and "no data" not in curves


def test_report_leads_with_the_diagnosis_of_a_nan_run(tmp_path: Path) -> None:
    page = training_report(nan_trial(tmp_path / "t", nan_from=20))
    verdict = re.search(r"<div class='diagnosis'>.*?</div>", page)
    assert verdict  # its layer "dead" has a gradient of exactly 0 from step 0: that comes first
    assert "Diagnosis: gradients vanish: smallest mean |gradient| is 0" in verdict.group(0)
    assert "Also: NaN or infinite values appear: " in verdict.group(0)  # nothing explains it
    assert "Try: find the first operation that made them" in verdict.group(0)


def test_a_resumed_session_is_marked_and_listed(tmp_path: Path) -> None:
    out = tmp_path / "t"
    write_trial(out)
    with tt.Hook(out, save_config=tt.SaveConfig(save_interval=1)) as hook:  # started again
        hook.continue_at(8, source="the checkpoint")  # the first run saved TRAIN 0-9
        hook.set_mode(tt.modes.TRAIN)
        for step in range(8, 12):
            hook.save_tensor("loss", np.float32(1.0 / (step + 1)), collections="losses")
            hook.next_step()
    trial = tt.create_trial(out)
    page = training_report(trial, rules=[])
    first = trial.sessions()[1].first_step
    assert first == 13  # after the first run's 10 TRAIN and 3 EVAL steps
    assert ">session 1 resumed</text>" in page  # marked on the curve, at its first step
    row = re.search(r"<tr><td class='text'>session 1</td>.*?</tr>", page)
    assert row and f"<td class='text'>12</td><td class='text'>{first}-16</td>" in row.group(0)
    assert "TRAIN steps 8-9 counted again" in row.group(0) and "the checkpoint" in row.group(0)
    assert "Training was resumed" in page
    assert "Training was resumed" not in training_report(write_trial(tmp_path / "u"), rules=[])


def test_no_payload_in_a_trial_or_a_job_runs_in_the_report(tmp_path: Path, browser) -> None:
    """The static report (``tensortap report``, a file with no CSP to stop anything): summary
    fields went in unescaped, the TensorPlot legend made tensor names live links. Seven kinds
    of payload in every field: none runs or becomes markup, each is shown as text."""
    from tests.helpers.xss_payloads import PAYLOADS, assert_no_payload_ran, shown, write_hostile_job

    job = write_hostile_job(tmp_path)
    out = tmp_path / "r.html"
    assert main(["report", str(job / "trial"), "--job", str(job), "-o", str(out)]) == 0
    assert "Could not draw" not in out.read_text()  # every section drawn (a step no number)
    browser.open(out)
    browser.until("return !!document.querySelector('.js-plotly-plot');")  # TensorPlot drawn
    text = shown(browser)
    for payload in PAYLOADS.values():
        assert payload in text
    assert_no_payload_ran(browser)
    bare = tmp_path / "bare.html"  # without the job: the rules run here over the trial
    assert main(["report", str(job / "trial"), "-o", str(bare)]) == 0
    browser.open(bare)
    assert_no_payload_ran(browser)


def long_run(out: Path, steps: int, layers: int = 10, nan_from: int | None = None) -> Path:
    """The shape of a long run: a loss, a learning rate and per-layer gradient l2 norms (the
    hook saves the norm, not the gradient) every step; the loss NaN from ``nan_from``."""
    hook = tt.Hook(
        out,
        save_config=tt.SaveConfig(save_interval=1),
        include_collections=["losses", "gradients", "scalars"],
    )
    hook.get_collection("gradients").reduction_config = tt.ReductionConfig(norms=["l2"])
    grads = [np.full(4, 0.1 * (i + 1), np.float32) for i in range(layers)]
    hook.set_mode(tt.modes.TRAIN)
    for step in range(steps):
        loss = np.nan if nan_from is not None and step >= nan_from else 2.0 / (1 + 0.01 * step)
        hook.save_scalar("loss", loss, "losses")
        hook.save_scalar("lr", 1e-3, "scalars")
        for i, grad in enumerate(grads):
            hook.save_tensor(f"gradient/layer{i}.weight", grad * (1 + 1e-4 * step), "gradients")
        hook.next_step()
    hook.close()
    return out


def test_the_page_of_a_long_run_is_no_bigger_than_of_a_short_one(tmp_path: Path) -> None:
    """The heat map drew one rectangle per layer per step (2.4 KB a step: 243 MB at 100k
    steps); its columns are buckets of steps now, at most HEAT_COLUMNS."""
    short = training_report(long_run(tmp_path / "short", 2_000), rules=[])
    long = training_report(long_run(tmp_path / "long", 20_000), rules=[])
    assert len(long) <= 1.2 * len(short), (len(short), len(long))
    from tensortap.report._training import HEAT_COLUMNS

    health = long[long.index("id='health'") : long.index("id='activations'")]
    cells = re.findall(r"<title>gradient/layer3\.weight at steps (\d+) to (\d+): ", health)
    assert 0.9 * HEAT_COLUMNS <= len(cells) <= HEAT_COLUMNS
    assert cells[0][0] == "0" and cells[-1][1] == "19999"  # every step in some column
    assert "(each column: the largest of its steps)" in health


class _Counted:
    """StepBlock constructions per global step (the real constructor, counted)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from tensortap.trials._parts import TrialParts
        from tensortap.trials._step_block import StepBlock

        self.per_step: dict[int, int] = {}
        built = StepBlock.__init__

        def counting(block: StepBlock, trial: TrialParts, step: int) -> None:
            self.per_step[step] = self.per_step.get(step, 0) + 1
            built(block, trial, step)

        monkeypatch.setattr(StepBlock, "__init__", counting)


class _LooksBack(tt.rules.Rule):
    """A rule that reads the block of the step before the one it judges (a custom rule
    comparing with the last step, say)."""

    def invoke_at_step(self, step: int) -> bool:
        steps = self.base_trial.steps()
        before = steps[steps.index(step) - 1] if steps.index(step) else step
        return "loss" not in self.base_trial.step_block(before)


class _Sees(tt.rules.Rule):
    """Records the block object it reads at each step."""

    def __init__(self, base_trial: tt.Trial) -> None:
        super().__init__(base_trial)
        self.seen: dict[int, object] = {}

    def invoke_at_step(self, step: int) -> bool:
        self.seen[step] = self.base_trial.step_block(step)
        return False


def test_the_rules_walk_builds_each_steps_block_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every rule judging a step reads one block of it, built once, even when a rule in
    between reads another step's; the report's rules and ``rules_that_find_problems`` walk
    once for all rules (it walked once per rule: each step's block built again by each)."""
    from tensortap.diagnosis import judge_trial
    from tensortap.report._training import default_rules, rules_that_find_problems

    trial = write_trial(tmp_path / "t")
    first, second = _Sees(trial), _Sees(trial)
    counted = _Counted(monkeypatch)
    judge_trial(trial, [first, _LooksBack(trial), *default_rules(trial), second])
    steps = trial.steps()
    assert all(first.seen[s] is second.seen[s] for s in steps)
    # the step held once, and at most once more when the next step looked back at it
    assert max(counted.per_step.values()) <= 2 and set(counted.per_step) == set(steps)

    counted = _Counted(monkeypatch)
    found = rules_that_find_problems(tmp_path / "t")
    assert "DeadRelu" in found
    # once at most: the rules judging in bulk read no block where the saved numbers answer
    assert set(counted.per_step) <= set(steps) and set(counted.per_step.values()) == {1}


def test_the_report_builds_a_steps_block_once_at_most(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rules' walk builds each step's block once; the heat map reads at most
    HEAT_COLUMNS more (it read every step again)."""
    run = long_run(tmp_path / "t", 400, layers=4)
    counted = _Counted(monkeypatch)
    page = training_report(run)
    assert sum(counted.per_step.values()) <= 400 + 160
    assert "LossNotDecreasing" in page and "(each column: the largest of its steps)" in page


def _findings(summaries: list[RuleSummary]) -> list[tuple[object, ...]]:
    return [
        (
            s.rule,
            s.status,
            s.evaluated,
            s.judged,
            s.triggered,
            s.skipped,
            s.details,
            [(f.step, f.outcome, f.message, f.severity) for f in s.findings],
        )
        for s in summaries
    ]


@pytest.mark.parametrize("faulty", [False, True])
def test_the_shared_walk_finds_what_each_rule_walked_alone_finds(
    tmp_path: Path, faulty: bool
) -> None:
    """The report's one walk for all rules gives each rule the findings it gives walked on
    its own (a fresh trial, nothing shared), on a healthy run and on one whose loss turns NaN
    (and on the test run with dead ReLUs, EVAL passes and raw gradients)."""
    from tensortap.diagnosis import judge_trial
    from tensortap.report._training import default_rules
    from tensortap.rules._invoker import iter_findings

    runs: list[Path | str] = [
        long_run(tmp_path / "run", 600, layers=3, nan_from=400 if faulty else None)
    ]
    runs.append(write_trial(tmp_path / "t").path if faulty else nan_trial(tmp_path / "n", 20).path)
    for run in runs:
        shared = judge_trial(tt.create_trial(run), default_rules(tt.create_trial(run)))
        alone = []
        for rule in default_rules(tt.create_trial(run)):
            summary = RuleSummary(rule.rule_name)
            for finding in iter_findings(rule, timeout=0):
                summary.add(finding)
            alone.append(summary.finish(rule.no_data_reason()))
        assert _findings(shared) == _findings(alone)
        if faulty and run == runs[0]:
            assert {s.rule for s in shared if s.triggered} >= {"NaNInfRootCause", "LossSpike"}


def test_a_loss_history_judged_as_an_array_gives_the_same_numbers() -> None:
    """LossNotDecreasing reads its history as an array now (a list built again at every
    comparison made a long run quadratic): change() and noise() give the same bits."""
    from tensortap.rules.builtin._series import change, noise

    rng = np.random.default_rng(3)
    values = (2.0 / (1 + 0.01 * np.arange(5_000)) + rng.normal(0, 0.05, 5_000)).tolist()
    values[700] = float("nan")
    values[900] = float("inf")
    as_list, as_array = change(values), change(np.asarray(values))
    assert as_list == as_array and as_list is not None
    assert noise(values) == noise(np.asarray(values))
    assert change(np.asarray(values[:1])) is None and change(values[:1]) is None


def test_judge_steps_bounds_the_rules_a_report_runs(tmp_path: Path) -> None:
    """The dashboard's budget (issue 45): over a trial of more saved steps than
    ``judge_steps`` the page says the rules were not run, and how to have them judged; within
    it they run as before; a budget that is no count is refused with what it takes."""
    trial = write_trial(tmp_path / "trial")
    saved = len(trial.steps())
    over = training_report(trial, judge_steps=saved - 1)
    assert f"Rules were not run for this page: the trial holds {saved} saved steps" in over
    assert "tensortap report" in over and "Diagnosis:" not in over
    within = training_report(trial, judge_steps=saved)
    assert "Rules were not run" not in within and "Diagnosis:" in within
    with pytest.raises(InvalidConfigError, match="judge_steps is the most saved steps"):
        training_report(trial, judge_steps=-1)


def test_a_rule_that_judged_nothing_is_counted_none_in_the_report() -> None:
    """A NoData rule's "steps judged" is "none" beside its "nothing was judged", whatever
    count its summary carries."""
    from tensortap.report._page import summary_rows
    from tensortap.rules._invoker import RuleStatus

    walked = RuleSummary("Walked", RuleStatus.NO_DATA, evaluated=3, judged=3)
    walked.details = "nothing was judged: no matching activation saved"
    judged = RuleSummary("Judged", RuleStatus.NO_ISSUES_FOUND, evaluated=3, judged=3)
    rows = {row[0]: row for row in summary_rows([walked, judged])}
    assert rows["Walked"][3] == "none" and rows["Judged"][3] == "3"
