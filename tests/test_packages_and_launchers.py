"""The harness among the tools its users already have: a pip-installed plugin
package, parallel and cluster sweeps under one MLflow parent run, a shared
MLflow server over HTTP, and an installed wheel run from an unrelated folder.
All with the real tools (pip, Hydra launchers, mlflow server), no mocks."""

from __future__ import annotations

import importlib.util
import os
import re
import socket
import subprocess
import sys
import sysconfig
import time
import types
import urllib.request
import warnings
from pathlib import Path

import pytest

import harness

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "plugin-package"


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    env.update(extra)
    return env


def _cli(*args: str, cwd: Path, env: dict[str, str] | None = None, exe: list[str] | None = None,
         timeout: float = 300) -> subprocess.CompletedProcess:
    cmd = (exe or [sys.executable, "-m", "harness"]) + list(args)
    return subprocess.run(cmd, cwd=cwd, env=env or _env(), capture_output=True, text=True,
                          timeout=timeout)


def _runs(uri: str):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    return client, {e.name: client.search_runs([e.experiment_id])
                    for e in client.search_experiments()}


@pytest.fixture(scope="module")
def example_plugin(tmp_path_factory) -> Path:
    """The example package, installed with pip into a folder put on PYTHONPATH."""
    target = tmp_path_factory.mktemp("site")
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                    "--target", str(target), str(EXAMPLE)], check=True, timeout=300)
    return target


def test_example_plugin_package_is_used_by_name(example_plugin, tmp_path):
    env = _env(PYTHONPATH=str(example_plugin))
    done = _cli("p_player=epsilon_greedy", "dataset=two_moons", "budget=4000",
                "checkpoints=3", "tracking.enabled=false", cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    assert "epsilon_greedy vs ogd on two_moons" in done.stdout
    if importlib.util.find_spec("cvxpy") is not None:
        # the example's data set (data seed 0) is no degenerate problem: w = 0 is
        # not optimal (its README: relative suboptimality 0.117, printed to 3
        # digits, so within half a unit of the last; the classic moons, gap=0,
        # are solved by w = 0), so the summary gives w = 0's distance, no warning
        trivial = re.search(r"trivial solution w = 0 +\S+ \(relative suboptimality (\S+)\)",
                            done.stdout)
        assert trivial is not None, done.stdout
        assert float(trivial.group(1)) == pytest.approx(0.117, abs=5e-4)
        assert "warning" not in done.stdout
    listed = subprocess.run([sys.executable, "-m", "harness.listing", "p_player", "dataset"],
                            env=env, capture_output=True, text=True, check=True).stdout
    assert "epsilon_greedy  [plugin example, package minimax-bench-example-plugin]" in listed
    assert "two_moons  [plugin example, package minimax-bench-example-plugin]" in listed


def test_example_plugin_passes_the_contract_suite(example_plugin, tmp_path):
    (tmp_path / "test_contract.py").write_text("from harness.contract import *  # noqa\n")
    env = _env(PYTHONPATH=str(example_plugin), MINIMAX_BENCH_CONTRACT_PLUGINS="example")
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           str(tmp_path / "test_contract.py")], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:]
    assert "epsilon_greedy-kset" in subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "--collect-only", "-p", "no:cacheprovider",
         str(tmp_path / "test_contract.py")], cwd=tmp_path, env=env, capture_output=True,
        text=True, timeout=600).stdout
    assert " passed" in done.stdout and "exp4mp" not in done.stdout


def test_autoload_can_be_disabled(example_plugin, monkeypatch):
    monkeypatch.syspath_prepend(str(example_plugin))
    assert "epsilon_greedy" in harness.Registry(harness.make_plugin_manager()).names("p_player")
    monkeypatch.setenv("MINIMAX_BENCH_DISABLE_PLUGIN_AUTOLOAD", "1")
    registry = harness.Registry(harness.make_plugin_manager())
    assert "epsilon_greedy" not in registry.names("p_player")
    assert "exp4mp" in registry.names("p_player")


def test_a_plugin_that_fails_to_import_warns_and_the_rest_load(tmp_path, monkeypatch):
    dist = tmp_path / "broken_plugin-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-plugin\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[minimax_bench]\nbroken = broken_plugin_mod\n")
    (tmp_path / "broken_plugin_mod.py").write_text("raise ImportError('missing dependency')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.warns(RuntimeWarning, match="'broken' from package 'broken-plugin'"):
        registry = harness.Registry(harness.make_plugin_manager())
    assert "exp4mp" in registry.names("p_player")
    monkeypatch.setenv("MINIMAX_BENCH_DISABLE_PLUGIN_AUTOLOAD", "1")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        harness.Registry(harness.make_plugin_manager())


def _check_sweep(uri: str, experiment: str, children: int) -> None:
    """All runs in ``experiment``: one FINISHED parent, ``children`` FINISHED
    runs whose parent it is; nothing misfiled into another experiment."""
    _, by_experiment = _runs(uri)
    assert set(by_experiment) - {experiment, "Default"} == set()
    assert by_experiment.get("Default", []) == []
    runs = by_experiment[experiment]
    parents = [r for r in runs if r.data.tags.get("minimax_bench_sweep") == "1"]
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    kids = [r for r in runs if r is not parents[0]]
    assert len(kids) == children
    assert {r.data.tags.get("mlflow.parentRunId") for r in kids} == {parents[0].info.run_id}
    assert {r.info.status for r in kids} == {"FINISHED"}


def test_joblib_multirun_files_every_run_under_one_parent(tmp_path):
    # 5 repetitions of a 2 x 2 sweep with 2 parallel joblib workers: 0 misfiled
    for rep in range(5):
        uri = f"sqlite:///{tmp_path}/rep{rep}.db"
        done = _cli("--multirun", "p_player=exp4mp,uniform", "seed=0,1", "budget=2000",
                    "checkpoints=3", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2",
                    f"tracking.uri={uri}", "tracking.experiment=sweep",
                    f"hydra.sweep.dir={tmp_path}/multirun{rep}", cwd=tmp_path)
        assert done.returncode == 0, done.stderr[-3000:]
        _check_sweep(uri, "sweep", 4)


def test_submitit_local_launcher(tmp_path):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    done = _cli("--multirun", "seed=0,1", "budget=2000", "checkpoints=3",
                "hydra/launcher=submitit_local", "hydra.launcher.timeout_min=5",
                f"tracking.uri={uri}", "tracking.experiment=cluster",
                f"hydra.sweep.dir={tmp_path}/multirun", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    _check_sweep(uri, "cluster", 2)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_sweep_against_a_live_mlflow_server(tmp_path):
    port = _free_port()
    mlflow_exe = Path(sys.executable).with_name("mlflow")
    server = subprocess.Popen(
        [str(mlflow_exe), "server", "--host", "127.0.0.1", "--port", str(port),
         "--backend-store-uri", f"sqlite:///{tmp_path}/server.db",
         "--artifacts-destination", str(tmp_path / "artifacts"), "--workers", "1"],
        cwd=tmp_path, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True)
    uri = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"{uri}/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline, "mlflow server did not become healthy"
            assert server.poll() is None, "mlflow server exited"
            time.sleep(0.5)
        done = _cli("--multirun", "seed=0,1", "budget=2000", "checkpoints=3",
                    f"tracking.uri={uri}", "tracking.experiment=team",
                    f"hydra.sweep.dir={tmp_path}/multirun", cwd=tmp_path)
        assert done.returncode == 0, done.stderr[-3000:]
        _check_sweep(uri, "team", 2)
        client, by_experiment = _runs(uri)
        child = next(r for r in by_experiment["team"] if "algorithm" in r.data.tags)
        assert len(client.get_metric_history(child.info.run_id, "dual_gap")) >= 3
        assert "config.yaml" in [a.path for a in client.list_artifacts(child.info.run_id)]
    finally:
        os.killpg(server.pid, 15)
        server.wait(timeout=30)


def test_installed_wheel_runs_from_an_unrelated_folder(tmp_path):
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                    "-w", str(wheels), str(REPO)], check=True, timeout=300)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = venv / "bin" / "python"
    subprocess.run([str(py), "-m", "pip", "install", "--quiet", "--no-deps",
                    *map(str, wheels.glob("*.whl"))], check=True, timeout=300)
    # dependencies come from this test environment; its own .pth files (the
    # editable install of this checkout) are not processed from there
    site = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                          capture_output=True, text=True, check=True).stdout.strip()
    Path(site, "deps.pth").write_text(sysconfig.get_path("purelib") + "\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    where = subprocess.run([str(py), "-c", "import harness; print(harness.__file__)"],
                           cwd=elsewhere, capture_output=True, text=True, check=True).stdout
    assert where.startswith(site), where
    exe = [str(venv / "bin" / "minimax-bench")]
    done = _cli("budget=2000", "checkpoints=3", "tracking.enabled=false", cwd=elsewhere, exe=exe)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "exp4mp vs ogd on boston" in done.stdout  # the default data set
    # a user's own config folder with an experiment preset, added by hydra.searchpath
    mine = tmp_path / "myconf" / "experiment"
    mine.mkdir(parents=True)
    (mine / "mine.yaml").write_text("# @package _global_\ndefaults:\n"
                                    "  - override /dataset: breast_cancer\nbudget: 3000\n")
    done = _cli(f"hydra.searchpath=[file://{tmp_path / 'myconf'}]", "experiment=mine",
                "checkpoints=3", "tracking.enabled=false", cwd=elsewhere, exe=exe)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "on breast_cancer" in done.stdout and "3,000" in done.stdout


def test_the_sweeper_composes_one_job_of_each_shape_before_launching():
    # a composition error depends on the keys a job overrides and the option
    # of each group it picks, not on the values of plain keys
    from hydra_plugins.minimax_bench.sweeper import job_shapes, validate_shapes

    groups = {"p_player", "dataset"}
    batch = [[f"seed={s}", f"p_player={p}"] for p in ("exp4mp", "ftrl") for s in range(500)]
    batch += [["seed=0", "p_player=ftrl", "+p_player.eta=1"], ["seed=1", "dataset=boston"]]
    shapes = job_shapes(batch, groups.__contains__)
    assert shapes == [batch[0], batch[500], batch[1000], batch[1001]]
    composed: list[list[str]] = []

    class Loader:
        def get_group_options(self, key):
            return ["x"] if key in groups else []

        def load_sweep_config(self, master_config, sweep_overrides):
            composed.append(sweep_overrides)

    sweeper = types.SimpleNamespace(hydra_context=types.SimpleNamespace(config_loader=Loader()),
                                    config=None)
    validate_shapes(sweeper, batch)
    assert composed == shapes


def test_the_command_sweeps_with_its_own_basic_sweeper():
    # conf/hydra/sweeper/basic.yaml stands in for Hydra's entry, and a preset's
    # own sweeper (experiment=tune) still wins
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from harness.config import config_dir, register_options

    register_options()
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=config_dir(), version_base="1.3"):
        for overrides, target in (([], "MinimaxBenchSweeper"),
                                  (["hydra/sweeper=basic"], "MinimaxBenchSweeper"),
                                  (["experiment=tune"], "TuneSweeper")):
            cfg = compose("config", overrides, return_hydra_config=True)
            assert cfg.hydra.sweeper._target_.endswith(target), overrides
