"""A store and a rule installed as a distribution (entry points of the groups
``tensortap.stores`` and ``tensortap.rules``) are seen by a new process: ``tensortap names``
opens the store's scheme, ``tensortap run --rule`` runs the rule beside real training, and
``tensortap serve`` lists the store's trial. A broken distribution is named in the error and
never hides the others.

The distributions are real: a package and its ``*.dist-info`` (METADATA, entry_points.txt) in
a directory on the child's PYTHONPATH, where importlib.metadata finds them, as pip leaves them
in site-packages."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import tensortap as tt
from tests.helpers.json_get import get_json

SRC = Path(__file__).resolve().parents[2] / "src"
SCRIPT = Path(__file__).resolve().parents[1] / "jobs" / "train_script.py"

#: A SQLite store, written from the Store contract alone: one table of objects.
SQLITE_STORE = """
import builtins
import sqlite3
import threading

from tensortap.exceptions import StorageError
from tensortap.storage import ObjectWriter, Store, StoreCapabilities, validate_key


class _Writer(ObjectWriter):
    def __init__(self, store, key):
        self._store, self._key, self._data = store, key, bytearray()

    def write(self, data):
        self._data += data

    def commit(self):
        self._store.put(self._key, bytes(self._data))

    def abort(self):
        self._data = bytearray()


class SQLiteStore(Store):
    capabilities = StoreCapabilities(lists_trials=True)

    def __init__(self, location):
        self.location = location
        self._db = sqlite3.connect(location[len("sqlite://"):], check_same_thread=False)
        self._lock = threading.Lock()
        with self._lock, self._db:
            self._db.execute("CREATE TABLE IF NOT EXISTS objects (key TEXT PRIMARY KEY, data BLOB)")

    def _rows(self, sql, *args):
        with self._lock:
            return self._db.execute(sql, args).fetchall()

    def get(self, key):
        rows = self._rows("SELECT data FROM objects WHERE key = ?", validate_key(key))
        if not rows:
            raise KeyError(key)
        return bytes(rows[0][0])

    def get_range(self, key, start, length):
        data = self.get(key)
        if start < 0 or length < 0 or start + length > len(data):
            raise StorageError(f"{key}: bytes [{start}, {start + length}) of {len(data)}")
        return bytearray(data[start : start + length])

    def put(self, key, data):
        with self._lock, self._db:
            self._db.execute(
                "INSERT OR REPLACE INTO objects VALUES (?, ?)", (validate_key(key), bytes(data))
            )

    def open_writer(self, key):
        return _Writer(self, validate_key(key))

    def exists(self, key):
        return bool(self._rows("SELECT 1 FROM objects WHERE key = ?", key))

    def list(self, prefix="", start_after=None):
        keys = [k for (k,) in self._rows("SELECT key FROM objects") if k.startswith(prefix)]
        return sorted(k for k in keys if start_after is None or k > start_after)

    def list_dir(self, prefix=""):
        head = prefix if not prefix or prefix.endswith("/") else prefix + "/"
        keys = [k for (k,) in self._rows("SELECT key FROM objects") if k.startswith(head)]
        return sorted({k[len(head):].split("/")[0] for k in keys})

    def delete(self, key):
        with self._lock, self._db:
            self._db.execute("DELETE FROM objects WHERE key = ?", (key,))

    def close(self):
        with self._lock:
            self._db.close()
"""

#: A rule that names no registry: its entry point registers it.
LOSS_ABOVE = '''
from tensortap.rules import Rule


class PluginLossAbove(Rule):
    """Fires at a step whose loss is above ``threshold``."""

    collections_needed = ("losses",)

    def __init__(self, base_trial, threshold: float = 100.0) -> None:
        super().__init__(base_trial)
        self.threshold = threshold

    def invoke_at_step(self, step: int) -> bool:
        names = self.base_trial.tensor_names(collection="losses", step=step)
        if not names:
            raise self.skip("no loss saved at this step")
        loss = float(self.base_trial.tensor(names[0]).value(step))
        self.explain(f"the loss is {loss:.3g}", names[0], loss, self.threshold)
        return loss > self.threshold
'''


def _distribution(site: Path, name: str, modules: dict[str, str], entry_points: str) -> None:
    """A distribution as pip installs one: its modules and its dist-info beside them."""
    for module, text in modules.items():
        (site / f"{module}.py").write_text(text)
    info = site / f"{name}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(entry_points)


@pytest.fixture
def site(tmp_path: Path) -> Path:
    """A directory holding tt-sqlite (a store), tt-loss-rules (a rule) and tt-broken (a store
    and a rule whose modules are not there)."""
    site = tmp_path / "site"
    site.mkdir()
    _distribution(
        site,
        "tt_sqlite",
        {"tt_sqlite": SQLITE_STORE},
        "[tensortap.stores]\nsqlite = tt_sqlite:SQLiteStore\n",
    )
    _distribution(
        site,
        "tt_loss_rules",
        {"tt_loss_rules": LOSS_ABOVE},
        "[tensortap.rules]\nPluginLossAbove = tt_loss_rules:PluginLossAbove\n",
    )
    _distribution(
        site,
        "tt_broken",
        {},
        "[tensortap.rules]\nBroken = tt_broken_gone:Broken\n\n"
        "[tensortap.stores]\nsqlite = tt_broken_gone:Store\nbroken = tt_broken_gone:Store\n",
    )
    return site


def _env(site: Path) -> dict[str, str]:
    path = [str(site), str(SRC), os.environ.get("PYTHONPATH", "")]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in path if p)}


def tensortap(site: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tensortap.cli", *args],
        cwd=cwd,
        env=_env(site),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _sqlite_trial(tmp_path: Path) -> Path:
    """A trial written on local disk, then copied object by object into a SQLite file."""
    local = tmp_path / "local"
    with tt.Hook(local, save_config=tt.SaveConfig(save_interval=1)) as hook:
        for step in range(3):
            hook.save_tensor("loss", np.float32(1.0 / (step + 1)), collections="losses")
            hook.next_step()
    db = tmp_path / "trial.db"
    with sqlite3.connect(db) as connection:
        connection.execute("CREATE TABLE objects (key TEXT PRIMARY KEY, data BLOB)")
        for path in sorted(p for p in local.rglob("*") if p.is_file()):
            key = path.relative_to(local).as_posix()
            connection.execute("INSERT INTO objects VALUES (?, ?)", (key, path.read_bytes()))
    connection.close()
    return db


def test_names_opens_an_installed_stores_scheme_a_broken_one_is_named(
    tmp_path: Path, site: Path
) -> None:
    db = _sqlite_trial(tmp_path)
    done = tensortap(site, "names", f"sqlite://{db}", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "loss" in done.stdout
    # tt_broken also declares sqlite: its failure is logged, and tt_sqlite still opens it
    assert "tt_broken 0.1" in done.stderr and "ModuleNotFoundError" in done.stderr
    # a scheme only the broken distribution declares: the error names it and what failed
    broken = tensortap(site, "names", "broken://x", cwd=tmp_path)
    assert broken.returncode != 0
    assert "no storage backend for broken://" in broken.stderr
    assert "of the distribution tt_broken 0.1 failed: ModuleNotFoundError" in broken.stderr
    assert "known schemes: broken, file, memory, s3, sqlite" in broken.stderr
    # without the distributions, the scheme is unknown (nothing else registers it)
    bare = subprocess.run(
        [sys.executable, "-m", "tensortap.cli", "names", f"sqlite://{db}"],
        cwd=tmp_path,
        env=_env(tmp_path / "nothing-installed"),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert bare.returncode != 0 and "no storage backend for sqlite://" in bare.stderr


def test_run_runs_an_installed_rule_by_name_beside_real_training(
    tmp_path: Path, site: Path
) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("sklearn")
    done = tensortap(
        site,
        "run",
        "--output",
        str(tmp_path / "runs"),
        "--rule",
        "plugin_loss_above:threshold=0",
        "--rule",
        "vanishing_gradient",
        "--",
        sys.executable,
        str(SCRIPT),
        "--steps",
        "12",
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    from tensortap.jobs import TrainingJob

    (job_dir,) = [p for p in (tmp_path / "runs").iterdir() if p.is_dir()]
    statuses = {
        r["RuleConfigurationName"]: r["RuleEvaluationStatus"]
        for r in TrainingJob.attach(job_dir).rule_job_summary()
    }
    assert statuses["PluginLossAbove"] == "IssuesFound", statuses
    assert "VanishingGradient" in statuses
    # a name no installed rule has: the broken distribution is named, the others listed
    wrong = tensortap(
        site, "run", "--rule", "plugin_loss_abov", "--", sys.executable, "x.py", cwd=tmp_path
    )
    assert wrong.returncode != 0
    assert "did you mean 'plugin_loss_above'?" in wrong.stderr
    assert "of the distribution tt_broken 0.1 failed: ModuleNotFoundError" in wrong.stderr


def test_serve_lists_a_trial_in_an_installed_store(tmp_path: Path, site: Path) -> None:
    pytest.importorskip("starlette")
    pytest.importorskip("uvicorn")
    db = _sqlite_trial(tmp_path)
    child = subprocess.Popen(
        [sys.executable, "-m", "tensortap.cli", "serve", f"sqlite://{db}", "--port", "0"],
        cwd=tmp_path,
        env=_env(site),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert child.stdout is not None
        ready = child.stdout.readline()
        assert ready.startswith("tensortap serve: http://"), ready
        url = ready.split()[2]
        status, body = get_json(url + "api/runs")
        assert status == 200 and not body["errors"], body
        (run,) = body["runs"]
        assert run["last_step"] == 2, run
        status, curves = get_json(f"{url}api/run/{run['id']}/curves")
        assert status == 200 and [s["name"] for s in curves["series"]] == ["loss"], curves
    finally:
        child.terminate()
        child.wait(timeout=60)


def test_a_registered_rule_is_known_but_not_built_in() -> None:
    from tensortap.rules import Rule, known_rules, register_rule, unregister_rule
    from tensortap.rules.builtin import BUILTIN_RULES

    @register_rule
    class NotOurs(Rule):
        def invoke_at_step(self, step: int) -> bool:
            return False

    try:
        assert known_rules()["NotOurs"] is NotOurs
        assert "NotOurs" not in BUILTIN_RULES and "VanishingGradient" in BUILTIN_RULES
        assert all(
            c.__module__.startswith("tensortap.rules.builtin.") for c in BUILTIN_RULES.values()
        )
    finally:
        unregister_rule("NotOurs")
