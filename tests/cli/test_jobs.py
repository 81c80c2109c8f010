"""``tensortap jobs`` as a runs table (issue 47): one row per job within 100 columns (the
terminal's width when narrower), with the verdict, status, steps, duration, last loss, best
validation metric, key hyperparameters and command; --sort, --filter, --where, --group-by,
--json; a damaged job still listed with its reason.

The jobs are laid out as ``tensortap run`` leaves them (job.json, summary.json, events.jsonl)
over real trials a hook wrote (vital signs, an evaluation metric, the run's configuration):
the documents without the training, as tests/security/test_hostile_jobs.py makes them."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import numpy as np
import pytest

from tensortap.cli import main as cli
from tests.helpers.job_documents import FIRED, LONG, QUIET, make_job


def run_cli(*argv: str, columns: int = 100) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("COLUMNS", str(columns))
        with redirect_stdout(out), redirect_stderr(err):
            code = cli(list(argv))
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Six jobs: three learning rates, two seeds' worth each, one of them failed, one with
    a problem, one still running, one damaged."""
    root = tmp_path_factory.mktemp("runs")
    make_job(root, "sweep-lr0.1-a", lr=0.1, batch=32, losses=[2.0, 1.0, 0.5], accuracy=[0.8, 0.9])
    make_job(root, "sweep-lr0.1-b", lr=0.1, batch=64, losses=[2.0, 1.2, 0.7], created=1.79e9 + 10)
    make_job(
        root,
        "sweep-lr0.001-a",
        lr=0.001,
        batch=32,
        losses=[2.0, 1.9, 1.8],
        rules=[FIRED, QUIET],
        created=1.79e9 + 20,
    )
    make_job(
        root,
        "sweep-lr1.0-crash",
        lr=1.0,
        batch=32,
        losses=[2.0, float("nan")],
        status="Failed",
        failure={"step": 1, "error": "RuntimeError: loss is nan", "text": "training failed"},
        created=1.79e9 + 30,
        seconds=4000.0,
    )
    make_job(
        root,
        "sweep-lr1.0-live",
        lr=1.0,
        batch=32,
        losses=[2.0, 1.5],
        status="InProgress",
        created=1.79e9 + 40,
    )
    bad = make_job(root, "sweep-damaged", lr=0.01, batch=16, losses=[3.0], created=1.79e9 + 50)
    (bad / "summary.json").write_bytes(b"[1, 2, 3]")
    return root


def rows_of(out: str) -> dict[str, str]:
    """The table's rows by job (a damaged job's reason line joined to its row)."""
    lines = out.splitlines()[1:]
    found: dict[str, str] = {}
    for line in lines:
        if line.startswith("  ! "):
            found[list(found)[-1]] += "\n" + line
        else:
            found[line.split()[0]] = line
    return found


def test_one_row_per_job_within_100_columns_verdict_first(runs: Path) -> None:
    code, out, err = run_cli("jobs", "--runs", str(runs), columns=300)
    assert code == 0, err
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= 100  # never wider than 100, even in 300
    header = lines[0].split()
    assert header[:2] == ["JOB", "VERDICT"] and "STATUS" in header and "LOSS" in header
    rows = rows_of(out)
    assert len(rows) == 6
    good = rows["sweep-lr0.1-a"]
    assert good.split()[1:3] == ["healthy", "Completed"]
    assert " 3 " in good and "2m05s" in good and "0.5 " in good  # steps, duration, last loss
    assert "accuracy 0.9" in good  # the best validation metric
    assert good.split()[-1] == "0.1"  # the learning rate: BATCH, OPTIMIZER, COMMAND left out
    assert "problem: loss not decreasing" in rows["sweep-lr0.001-a"].lower() or (
        "problem:" in rows["sweep-lr0.001-a"]
    )
    crash = rows["sweep-lr1.0-crash"]
    assert "failed: RuntimeError" in crash and "1h06m" in crash and "nan" in crash
    assert "running" in rows["sweep-lr1.0-live"] and "InProgress" in rows["sweep-lr1.0-live"]
    damaged = rows["sweep-damaged"]
    assert "Unreadable" in damaged and "summary.json must hold a JSON object" in damaged
    # with shorter verdicts there is room for the batch size and the command (cut)
    _, out, _ = run_cli("jobs", "--runs", str(runs), "--where", "verdict=healthy")
    top, good, _ = out.splitlines()
    assert top.split()[-3:] == ["LR", "BATCH", "COMMAND"]
    assert good.split()[-5:-1] == ["0.1", "32", "python", "train.py"]
    assert good.endswith("…") and len(good) == 100


@pytest.mark.parametrize("columns", [100, 80, 60, 40])
def test_every_line_fits_the_terminal(runs: Path, columns: int) -> None:
    code, out, _ = run_cli("jobs", "--runs", str(runs), columns=columns)
    assert code == 0
    assert all(len(line) <= columns for line in out.splitlines()), out
    assert len(rows_of(out)) == 6  # every job still has its row
    code, out, _ = run_cli("jobs", "--runs", str(runs), "--group-by", "lr", columns=columns)
    assert code == 0 and all(len(line) <= columns for line in out.splitlines()), out


def test_sort_by_a_column_or_a_hyperparameter(runs: Path) -> None:
    _, out, _ = run_cli("jobs", "--runs", str(runs), "--sort", "loss")
    assert list(rows_of(out)) == [  # ascending, NaN after the numbers
        "sweep-lr0.1-a",
        "sweep-lr0.1-b",
        "sweep-lr1.0-live",
        "sweep-lr0.001-a",
        "sweep-damaged",
        "sweep-lr1.0-crash",
    ]
    _, out, _ = run_cli("jobs", "--runs", str(runs), "--sort=-lr")
    assert list(rows_of(out))[:2] == ["sweep-lr1.0-crash", "sweep-lr1.0-live"]
    _, out, _ = run_cli("jobs", "--runs", str(runs), "--sort=-lr", "--json")
    values = [r["hyperparameters"]["learning_rate"] for r in json.loads(out)]
    assert values == sorted(values, reverse=True)
    _, out, _ = run_cli("jobs", "--runs", str(runs), "--sort", "best")
    assert list(rows_of(out)) == [  # the only one with a metric, then the rest by start
        "sweep-lr0.1-a",
        "sweep-lr0.1-b",
        "sweep-lr0.001-a",
        "sweep-lr1.0-crash",
        "sweep-lr1.0-live",
        "sweep-damaged",
    ]
    _, out, _ = run_cli("jobs", "--runs", str(runs), "--sort", "verdict")
    assert list(rows_of(out)) == [  # the gravest first
        "sweep-lr1.0-crash",
        "sweep-lr0.001-a",
        "sweep-damaged",
        "sweep-lr1.0-live",
        "sweep-lr0.1-a",
        "sweep-lr0.1-b",
    ]
    code, _, err = run_cli("jobs", "--runs", str(runs), "--sort", "momentum")
    assert code == 2 and "no job has a value for 'momentum'" in err and "batch_size" in err


def test_sort_by_loss_puts_nan_after_the_numbers(runs: Path) -> None:
    _, out, _ = run_cli("jobs", "--runs", str(runs), "--sort", "loss", "--json")
    shown = [(r["name"], r["last_loss"]) for r in json.loads(out)]
    numbers = [loss for _, loss in shown if isinstance(loss, float)]
    assert numbers == sorted(numbers) and len(numbers) == 5
    assert shown[5] == ("sweep-lr1.0-crash", "NaN")


def test_filter_and_where(runs: Path) -> None:
    _, out, _ = run_cli("jobs", "--runs", str(runs), "--filter", "CRASH")
    assert list(rows_of(out)) == ["sweep-lr1.0-crash"]
    _, out, _ = run_cli("jobs", "--runs", str(runs), "--where", "lr=1e-3")
    assert list(rows_of(out)) == ["sweep-lr0.001-a"]
    _, out, _ = run_cli("jobs", "--runs", str(runs), "--where", "lr=0.1", "--where", "bs=64")
    assert list(rows_of(out)) == ["sweep-lr0.1-b"]
    _, out, _ = run_cli("jobs", "--runs", str(runs), "--where", "verdict=problem")
    assert list(rows_of(out)) == ["sweep-lr0.001-a"]
    _, out, _ = run_cli(
        "jobs", "--runs", str(runs), "--where", "optimizer=adamw", "--where", "seed=7"
    )
    assert len(rows_of(out)) == 6  # the damaged job's trial has them too
    code, _, err = run_cli("jobs", "--runs", str(runs), "--where", "lr")
    assert code == 2 and "--where takes key=value" in err


def test_group_by_a_hyperparameter(runs: Path) -> None:
    code, out, err = run_cli("jobs", "--runs", str(runs), "--group-by", "lr")
    assert code == 0, err
    header, *lines = out.splitlines()
    assert header.split()[:3] == ["LR", "JOBS", "VERDICTS"]
    by_value = {line.split()[0]: line for line in lines}
    assert set(by_value) == {"0.001", "0.01", "0.1", "1"}
    assert "2 healthy" in by_value["0.1"]
    assert "1 failed, 1 running" in by_value["1"]
    _, out, _ = run_cli("jobs", "--runs", str(runs), "--group-by", "lr", "--json")
    groups = {g["value"]: g for g in json.loads(out)}
    assert groups[0.1]["runs"] == 2 and groups[0.1]["losses"] == 2
    assert groups[0.1]["jobs"] == ["sweep-lr0.1-a", "sweep-lr0.1-b"]
    assert groups[0.1]["loss_mean"] == pytest.approx(0.6)
    assert groups[0.1]["loss_sd"] == pytest.approx(float(np.std([0.5, 0.7], ddof=1)))
    assert groups[1.0]["losses"] == 1  # the NaN loss is left out of the mean
    assert groups[1.0]["verdicts"] == {"failed": 1, "running": 1}


def test_json_keeps_every_field(runs: Path) -> None:
    code, out, _ = run_cli("jobs", "--runs", str(runs), "--json")
    assert code == 0
    rows = {r["name"]: r for r in json.loads(out)}
    good = rows["sweep-lr0.1-a"]
    assert good["command"].endswith(f"{LONG} --lr 0.1 --batch 32")  # whole, not cut
    assert good["best_metric"] == {"name": "accuracy", "value": 0.9, "higher_is_better": True}
    assert good["steps"] == 3 and good["duration"] == 125.0 and good["last_loss"] == 0.5
    assert good["hyperparameters"] == {
        "learning_rate": 0.1,
        "batch_size": 32,
        "optimizer": "AdamW",
    }
    fired = rows["sweep-lr0.001-a"]["rules"][0]  # the rules, gravest first, as before
    assert fired["name"] == "LossNotDecreasing" and fired["step"] == 2
    assert fired["text"] == "IssuesFound (problem) at step 2"
    assert rows["sweep-damaged"]["status"] == "Unreadable"
    assert "summary.json" in rows["sweep-damaged"]["problems"][0]


def test_a_summary_without_a_status_it_can_keep_is_unreadable_not_starting(
    tmp_path: Path,
) -> None:
    """A summary.json whose fields are all of the wrong kind (status an object, rules not a
    list) decodes to nothing but its problems: the job is unreadable, with why, never a job
    just starting (the supervisor writes a status in every summary)."""
    bad = make_job(tmp_path, "hostile", lr=0.1, batch=8, losses=[1.0])
    (bad / "summary.json").write_text(
        json.dumps({"rules": "not a list", "status": {"x": 1}, "training": {"status": 5}})
    )
    code, out, _ = run_cli("jobs", "--runs", str(tmp_path), "--json")
    assert code == 0
    (row,) = json.loads(out)
    assert row["status"] == "Unreadable", row
    assert any("'rules' must be a list" in p for p in row["problems"]), row["problems"]


def test_a_name_that_is_no_text_for_a_terminal_is_drawn_safely(tmp_path: Path) -> None:
    make_job(tmp_path, "run\x1b[2Jx-日本語の名前-" + "y" * 60, lr=0.1, batch=8, losses=[1.0])
    code, out, _ = run_cli("jobs", "--runs", str(tmp_path))
    assert code == 0 and "\x1b" not in out
    from tensortap.cli._jobs import text_width

    assert all(text_width(line) <= 100 for line in out.splitlines())
    # a terminal whose encoding has no "…" nor the name's characters: "?" for them
    raw = io.BytesIO()
    latin = io.TextIOWrapper(raw, encoding="latin-1")
    with redirect_stdout(latin):
        assert cli(["jobs", "--runs", str(tmp_path)]) == 0
    latin.flush()
    shown = raw.getvalue().decode("latin-1")
    row = shown.splitlines()[1]
    assert row.startswith("run?[2Jx-??") and row.split()[1:3] == ["healthy", "Completed"]
