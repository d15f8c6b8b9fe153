"""What a CLI run costs outside its rounds: the mechanisms that keep it small.

Speed itself is never asserted here (it is measured by hand, see issue 14);
each test checks one mechanism and fails when it is undone:

* importing the harness, its CLI and the built-in plugins loads neither
  mlflow nor its store nor cvxpy (each costs a second or more);
* the early check of a tracking server answers without loading mlflow, and a
  dead server still stops the command before anything is computed, with a
  message naming it;
* MLflow is loaded without cyclic garbage collections; a single run of the
  command freezes MLflow's objects with its own, while the jobs of a
  multirun and a Python API run freeze nothing;
* the command freezes its objects when it starts and again when it ends;
* a cached OPT is read without loading cvxpy;
* every checkpoint is in the store before the next hook of that checkpoint
  runs (live logging).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import harness

from conftest import cli_env, game_cfg

TESTS = Path(__file__).resolve().parent
HEAVY = ("mlflow", "mlflow.store.tracking.sqlalchemy_store", "sqlalchemy", "alembic", "cvxpy")


def _python(code: str, cwd: Path, timeout: float = 300,
            **env: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter in ``cwd``, with ``conftest`` importable
    (its last stdout line is JSON)."""
    environ = cli_env()
    environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(TESTS), environ.get("PYTHONPATH", "")) if p)
    environ.update(env)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=cwd, env=environ,
                          capture_output=True, text=True, timeout=timeout, check=False)


def _last_json(proc: subprocess.CompletedProcess[str]) -> Any:
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    assert lines, proc.stderr
    return json.loads(lines[-1])


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    """One SQLite store for the module, created once (creating one costs seconds)."""
    folder = tmp_path_factory.mktemp("store")
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    proc = _python(f"""
        from mlflow.tracking import MlflowClient
        MlflowClient("{uri}").search_experiments()
        print("{{}}")
    """, folder)
    assert proc.returncode == 0, proc.stderr
    return uri


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_importing_the_cli_and_the_plugins_loads_no_heavy_package(tmp_path):
    proc = _python(f"""
        import json, sys
        import harness, harness.cli
        from harness.registry import default_registry
        default_registry()
        import plugins.tracking.mlflow_runs, plugins.tracking.mlflow_records
        import plugins.metrics.reference
        print(json.dumps({{m: m in sys.modules for m in {HEAVY!r}}}))
    """, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert _last_json(proc) == dict.fromkeys(HEAVY, False)


def test_a_dead_tracking_server_stops_the_command_without_loading_mlflow(tmp_path):
    uri = f"http://127.0.0.1:{_free_port()}"
    proc = _python(f"""
        import json, sys
        import harness.cli
        from plugins.metrics import reference
        solves = []
        reference.compute = lambda *a, **k: solves.append(1)
        sys.argv = ["minimax-bench", "tracking.uri={uri}", "tracking.connect_timeout_s=0",
                    "budget=2000", "progress=false", "state_dir=null", "reference.exact=true"]
        try:
            harness.cli.main()
        except SystemExit as stop:
            code = stop.code
        print(json.dumps({{"code": code, "solves": len(solves),
                          "mlflow": "mlflow" in sys.modules}}))
    """, tmp_path)
    assert _last_json(proc) == {"code": 2, "solves": 0, "mlflow": False}, proc.stderr
    assert f"The MLflow tracking server at {uri} is unreachable" in proc.stderr
    assert "tracking.enabled=false" in proc.stderr


@pytest.mark.parametrize("source", ["environment", "set_tracking_uri"])
def test_the_dead_server_check_without_a_uri_asks_what_mlflow_would(tmp_path, source):
    uri = f"http://127.0.0.1:{_free_port()}"
    # mlflow.set_tracking_uri also sets $MLFLOW_TRACKING_URI; a loaded mlflow's own
    # setting decides even when the variable is gone
    given = (f"import mlflow, os; mlflow.set_tracking_uri({uri!r}); "
             "del os.environ['MLFLOW_TRACKING_URI']" if source == "set_tracking_uri" else "")
    proc = _python(f"""
        import json, sys
        {given}
        from conftest import game_cfg
        import harness
        cfg = game_cfg("budget=2000", tracking={{"enabled": True, "uri": None,
                                                 "connect_timeout_s": 0}})
        try:
            harness.run(cfg)
        except harness.SetupError as err:
            message = str(err)
        print(json.dumps({{"message": message, "mlflow": "mlflow" in sys.modules}}))
    """, tmp_path, **({"MLFLOW_TRACKING_URI": uri} if source == "environment" else {}))
    out = _last_json(proc)
    assert f"The MLflow tracking server at {uri} is unreachable" in out["message"], proc.stderr
    assert out["mlflow"] is (source == "set_tracking_uri")


def test_mlflow_is_loaded_without_collections(tmp_path, store):
    proc = _python(f"""
        import gc, json
        from plugins.tracking import mlflow_store
        gc.freeze()  # as the command does; outside a Hydra run nothing more is frozen
        frozen = gc.get_freeze_count()
        collections = []
        gc.callbacks.append(lambda phase, info: phase == "start" and collections.append(1))
        client = mlflow_store.client("{store}")
        during = len(collections)
        print(json.dumps({{"collections": during, "enabled": gc.isenabled(),
                          "frozen more": gc.get_freeze_count() > frozen}}))
    """, tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = _last_json(proc)
    # none while loading (hundreds otherwise); one may come as collecting resumes
    assert out.pop("collections") <= 1
    assert out == {"enabled": True, "frozen more": False}


# a task wrapper that records, per job, the freeze count at its start and
# whether mlflow's objects are frozen (out of gc.get_objects()) at its end
WATCH_TASK = """
    import atexit, gc, json, sys
    import harness.cli
    jobs = []
    task = harness.cli.task
    def watched(cfg):
        start = gc.get_freeze_count()
        result = task(cfg)
        module = sys.modules["mlflow.store.tracking.sqlalchemy_store"]
        tracked = any(o is module.__dict__ for o in gc.get_objects())
        jobs.append({"frozen at start": start, "end": gc.get_freeze_count(),
                     "store frozen": not tracked})
        return result
    harness.cli.task = watched
    atexit.register(lambda: print(json.dumps(jobs)))
"""


def test_a_single_command_run_freezes_mlflow_with_its_objects(tmp_path, store):
    # harness.cli.main starts no helper process (harness.command.main does,
    # tests/test_mlflow_helper.py): mlflow loads in this process
    proc = _python(WATCH_TASK + f"""
    sys.argv = ["minimax-bench", "budget=2000", "checkpoints=2", "progress=false",
                "state_dir=null", "reference.exact=false", "tracking.uri={store}"]
    harness.cli.main()
    """, tmp_path)
    assert proc.returncode == 0, proc.stderr
    (job,) = _last_json(proc)
    assert job["frozen at start"] > 0 and job["end"] > job["frozen at start"]
    assert job["store frozen"] is True


def test_the_jobs_of_a_multirun_freeze_nothing(tmp_path, store):
    # jobs that share a process must leave what they drop collectable
    proc = _python(WATCH_TASK + f"""
    sys.argv = ["minimax-bench", "--multirun", "seed=0,1", "budget=2000", "checkpoints=2",
                "progress=false", "state_dir=null", "reference.exact=false",
                "tracking.uri={store}", "tracking.experiment=multirun"]
    harness.cli.main()
    """, tmp_path)
    assert proc.returncode == 0, proc.stderr
    jobs = _last_json(proc)
    assert len(jobs) == 2
    # frozen objects may be freed (the count falls); a freeze would add MLflow's
    counts = [count for job in jobs for count in (job["frozen at start"], job["end"])]
    assert counts == sorted(counts, reverse=True)
    assert jobs[-1]["store frozen"] is False


def test_a_python_api_run_freezes_nothing(tmp_path, store):
    proc = _python(f"""
        import gc, json
        from conftest import game_cfg
        import harness
        cfg = game_cfg("budget=2000", "checkpoints=2", tracking={{"enabled": True,
                       "uri": "{store}", "experiment": "api"}})
        harness.run(cfg)
        print(json.dumps({{"frozen": gc.get_freeze_count(), "enabled": gc.isenabled()}}))
    """, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert _last_json(proc) == {"frozen": 0, "enabled": True}


def test_the_command_freezes_its_objects_at_start_and_at_exit(tmp_path):
    proc = _python("""
        import atexit, gc, json, sys
        import harness.cli
        counts = {}
        task = harness.cli.task
        def counted(cfg):
            counts["in task"] = gc.get_freeze_count()
            return task(cfg)
        harness.cli.task = counted
        atexit.register(lambda: print(json.dumps(
            {**counts, "at exit": gc.get_freeze_count()})))
        sys.argv = ["minimax-bench", "budget=2000", "checkpoints=2", "progress=false",
                    "state_dir=null", "tracking.enabled=false", "reference.exact=false"]
        harness.cli.main()
    """, tmp_path)
    assert proc.returncode == 0, proc.stderr
    counts = _last_json(proc)
    assert counts["in task"] > 0  # frozen when the command started
    assert counts["at exit"] > counts["in task"]  # and what the run made, before exit


def test_a_cached_optimum_is_read_without_loading_cvxpy(tmp_path):
    pytest.importorskip("cvxpy")
    code = f"""
        import json, sys
        from conftest import game_cfg
        import harness
        cfg = game_cfg("budget=2000", "checkpoints=1", reference={{"exact": "true",
                       "cache_dir": "{tmp_path / 'cache'}"}})
        metrics = harness.run(cfg)
        print(json.dumps({{"cvxpy": "cvxpy" in sys.modules,
                          "suboptimality": "suboptimality" in metrics}}))
    """
    first = _python(code, tmp_path)
    assert first.returncode == 0, first.stderr
    assert _last_json(first) == {"cvxpy": True, "suboptimality": True}  # solved and cached
    second = _python(code, tmp_path)
    assert second.returncode == 0, second.stderr
    assert _last_json(second) == {"cvxpy": False, "suboptimality": True}


class StoreWatcher:
    """At each checkpoint, after every other plugin's hook (the tracker's
    included), reads the steps the MLflow store holds for the run."""

    def __init__(self, uri: str) -> None:
        self.uri = uri
        self.seen: list[tuple[int, list[int]]] = []

    @harness.hookimpl(trylast=True)
    def on_checkpoint(self, context, step, metrics):
        from mlflow.tracking import MlflowClient

        run_id = context.state["mlflow"]["run_id"]
        history = MlflowClient(self.uri).get_metric_history(run_id, "dual_gap")
        self.seen.append((int(step), sorted(m.step for m in history)))


def test_every_checkpoint_is_in_the_store_when_its_hooks_return(tmp_path, store, monkeypatch):
    # with tracking.send_every_s=0 each checkpoint is sent at once (by default
    # they are journalled and sent in batches: tests/test_faults.py)
    monkeypatch.chdir(tmp_path)  # where this process's client puts the run's artifacts
    watcher = StoreWatcher(store)
    cfg = game_cfg("budget=20000", "checkpoints=6",
                   tracking={"enabled": True, "uri": store, "experiment": "live",
                             "send_every_s": 0.0})
    harness.run(cfg, plugins=[watcher])
    assert len(watcher.seen) >= 6
    logged: list[int] = []
    for step, steps in watcher.seen:
        logged.append(step)
        assert steps == logged, f"checkpoint {step} was not in the store at its own hook"
