"""Integration tests: the Hydra CLI and the Python API with real MLflow stores.

No mocks: every tracked run goes to a temporary SQLite store. Creating a
store costs a few seconds, so the tests below share one module-wide store
(``shared_store``), each under its own experiment name, except the main CLI
test which checks a pristine store of its own.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest
from mlflow.tracking import MlflowClient

import harness
from harness.game import TIMING_METRICS, checkpoint_rounds
from plugins.p_players.exp4mp import Exp4MP
from plugins.tracking.mlflow_names import logged_name

#: the default run's metrics (Boston, a regression: the MSE of the k largest losses)
CHECKPOINT_METRICS = ("dual_gap", "objective", "topk_mse", "max_loss", "theory_bound",
                      "rounds", "wall_time_s")
N_BOSTON = 506  # rows of the default data set
REPO = Path(harness.__file__).resolve().parents[1]


def sqlite_path(uri: str) -> Path:
    assert uri.startswith("sqlite:///")
    return Path(uri[len("sqlite:///"):])


def runs_in(uri: str, experiment: str | None = None) -> list[Any]:
    """All runs in the store (or in one experiment); [] if the store file does not exist.

    Checked before opening: opening a missing SQLite store would create it.
    """
    if not sqlite_path(uri).exists():
        return []
    client = MlflowClient(uri)
    if experiment is None:
        ids = [e.experiment_id for e in client.search_experiments()]
    else:
        found = client.get_experiment_by_name(experiment)
        ids = [] if found is None else [found.experiment_id]
    return client.search_runs(ids) if ids else []


@pytest.fixture(scope="module")
def shared_store(tmp_path_factory: pytest.TempPathFactory) -> str:
    """One SQLite store for the module; tests separate their runs by experiment name."""
    return f"sqlite:///{tmp_path_factory.mktemp('shared_store') / 'mlflow.db'}"


@pytest.fixture(scope="module", autouse=True)
def module_cwd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The whole module runs in a temporary directory, without MLFLOW_TRACKING_URI.

    An in-process MLflow client fixes a store's default artifact root
    (``./mlruns``) when it first opens the store, and caches the store: a
    per-test ``chdir`` would come too late for a store opened by an earlier test.
    """
    cwd = tmp_path_factory.mktemp("cwd")
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("MLFLOW_TRACKING_URI", raising=False)
        mp.chdir(cwd)
        yield cwd


def tracked(cfg: dict[str, Any], uri: str, experiment: str) -> dict[str, Any]:
    return dict(cfg, tracking={"enabled": True, "uri": uri, "experiment": experiment})


# --------------------------------------------------------------------------- the main CLI run


def test_cli_run_is_tracked_in_mlflow(run_cli, tracking_uri):
    # no data set named: the default, Boston at k = 20 (conf/config.yaml)
    budget, k, n_cp = 20000, 20, 5
    proc = run_cli(f"budget={budget}", f"checkpoints={n_cp}", f"tracking.uri={tracking_uri}")
    assert proc.returncode == 0, proc.stderr

    out = proc.stdout
    assert "certified dual gap" in out
    assert "data points processed" in out
    assert f"{budget:,}" in out
    run_id = re.search(r"MLflow run\s+([0-9a-f]{32})", out)
    assert run_id is not None, out
    run_id = run_id.group(1)
    assert f"mlflow ui --backend-store-uri {tracking_uri}" in out

    runs = runs_in(tracking_uri, "minimax-bench")
    assert len(runs) == 1
    run = runs[0]
    assert run.info.run_id == run_id
    assert run.info.status == "FINISHED"
    assert [r.info.run_id for r in runs_in(tracking_uri)] == [run_id]  # nowhere else

    # metrics: one value per checkpoint, step = data points processed
    horizon = budget // k
    rounds = checkpoint_rounds(horizon, n_cp, k)
    client = MlflowClient(tracking_uri)
    for key in CHECKPOINT_METRICS:
        history = client.get_metric_history(run_id, logged_name(key))
        assert len(history) == len(rounds), key
        steps = [m.step for m in history]
        assert steps == sorted(set(steps)), key  # strictly increasing
        assert steps[-1] == budget // k * k, key
        assert steps == [int(r) * k for r in rounds], key
        assert all(math.isfinite(m.value) for m in history), key
    rounds_logged = [m.value for m in client.get_metric_history(run_id, "zz.rounds")]
    assert rounds_logged == [float(r) for r in rounds]

    # params: the Theorem 4.1 defaults at this horizon
    params = run.data.params
    n, T, delta = N_BOSTON, horizon, 0.05
    gamma = math.sqrt(n * math.log(n / k) / (k * T))
    expected = {
        "p_player.gamma": gamma,
        "p_player.eta": k * gamma / (2 * n),
        "p_player.c": math.sqrt(k * math.log(n / delta)),
        "horizon_T": T,
        "w_player.lr": 1.0 * math.sqrt(2.0 / T),
    }
    for key, value in expected.items():
        assert key in params, key
        assert float(params[key]) == pytest.approx(value, rel=1e-12), key
    assert float(params["p_player.delta"]) == delta
    assert params["model.name"] == "linear_mse"
    assert "accuracy" not in run.data.metrics

    tags = run.data.tags
    assert tags["algorithm"] == "exp4mp"
    assert tags["dataset"] == "boston"
    assert tags["constraint"] == "kset"
    assert tags["seed"] == "0"
    assert tags["minimax_bench_version"] == harness.package_version()

    artifacts = [a.path for a in client.list_artifacts(run_id)]
    assert "config.yaml" in artifacts


def test_cli_breast_cancer_uses_logistic_cel(run_cli, shared_store):
    proc = run_cli("dataset=breast_cancer", "budget=20000", "checkpoints=3",
                   f"tracking.uri={shared_store}", "tracking.experiment=cli-cancer")
    assert proc.returncode == 0, proc.stderr
    assert "model logistic_cel" in proc.stdout

    runs = runs_in(shared_store, "cli-cancer")
    assert len(runs) == 1
    run = runs[0]
    assert run.info.status == "FINISHED"
    assert run.data.params["model.name"] == "logistic_cel"
    assert run.data.params["dataset.name"] == "breast_cancer"
    assert run.data.params["n"] == "569"
    assert "accuracy" in run.data.metrics
    assert "topk_mse" not in run.data.metrics
    assert 0.0 <= run.data.metrics["accuracy"] <= 1.0


def test_cli_multirun_over_seeds(run_cli, shared_store, tmp_path):
    proc = run_cli("--multirun", "seed=0,1", "budget=2000", "checkpoints=2",
                   f"tracking.uri={shared_store}", "tracking.experiment=cli-multirun")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("certified dual gap") == 2

    everything = runs_in(shared_store, "cli-multirun")
    parents = [r for r in everything if r.data.tags.get("minimax_bench_sweep") == "1"]
    assert len(parents) == 1  # the sweep's parent run
    runs = [r for r in everything if r is not parents[0]]
    assert len(runs) == 2
    assert {r.data.tags["mlflow.parentRunId"] for r in runs} == {parents[0].info.run_id}
    assert {r.info.status for r in runs} == {"FINISHED"}
    assert sorted(r.data.tags["seed"] for r in runs) == ["0", "1"]
    # each job's folder keeps its own summary in its log
    logs = sorted((tmp_path / "multirun").glob("*/*/[01]/cli.log"))
    assert [log.parent.name for log in logs] == ["0", "1"]
    for seed, log in enumerate(logs):
        text = log.read_text()
        assert f", seed {seed})" in text and f", seed {1 - seed})" not in text
        assert text.count("certified dual gap") == 1


# --------------------------------------------------------------------------- the run's log


def _logged(folder: Path) -> list[str]:
    """The messages of the run folder's ``cli.log`` (Hydra's job log), without their
    time, logger and level."""
    (log,) = folder.glob("outputs/*/*/cli.log")
    return [line.split("] - ", 1)[1] for line in log.read_text().splitlines()]


def test_the_run_folder_log_holds_what_the_terminal_shows(run_cli, tmp_path):
    done = run_cli("budget=2000", "checkpoints=2", "tracking.enabled=false",
                   "reference.exact=false")
    assert done.returncode == 0, done.stderr
    printed = done.stdout.splitlines()
    assert printed[0].startswith("minimax-bench: exp4mp vs ogd on ")
    assert _logged(tmp_path) == printed  # every line, once, and the terminal unchanged

    failed = tmp_path / "failed"
    failed.mkdir()
    done = run_cli("constraint.k=100000", "tracking.enabled=false", cwd=failed)
    assert done.returncode == 2
    (error,) = done.stderr.splitlines()
    assert error.startswith("minimax-bench: error: The 'k' parameter of kset must be")
    assert _logged(failed) == [error]


# --------------------------------------------------------------------------- bad input


@pytest.fixture(scope="module")
def bad_input_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Working directory and store shared by the bad-input cases (none may create a run)."""
    return tmp_path_factory.mktemp("bad_input")


BAD_INPUTS = [
    ("constraint.k=0",
     ["The 'k' parameter of kset must be an int in [1, n=569]. Got 0 instead."]),
    ("constraint.k=600",
     ["The 'k' parameter of kset must be an int in [1, n=569]. Got 600 instead."]),
    ("p_player.name=nope",
     ["Unknown p_player 'nope'", "Registered p_player names:", "exp4mp"]),
    ("budget=-5",
     ["The 'budget' parameter", "must be an int in [20, inf)", "Got -5 instead."]),
    ("p_player.delta=2",
     ["The 'delta' parameter of exp4mp must be a float in (0, 1).", "Got 2"]),
    ("+p_player.foo=1",
     ["Unknown parameter(s) ['foo'] for exp4mp", "Allowed parameters:", "'delta'"]),
]


@pytest.mark.parametrize(("override", "expected"), BAD_INPUTS,
                         ids=[o for o, _ in BAD_INPUTS])
def test_cli_bad_input_is_one_clear_error(run_cli, bad_input_dir, override, expected):
    uri = f"sqlite:///{bad_input_dir / 'mlflow.db'}"
    proc = run_cli("dataset=breast_cancer", "budget=20000", "checkpoints=5",
                   f"tracking.uri={uri}", override, cwd=bad_input_dir)

    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr  # one message, no traceback
    assert lines[0].startswith("minimax-bench: error: ")
    for text in expected:
        assert text in lines[0]
    assert "certified dual gap" not in proc.stdout

    assert [r.info.run_id for r in runs_in(uri)] == []  # in particular none RUNNING


# --------------------------------------------------------------------------- Python API


class NaNData:
    """A data set with one NaN feature, at row 7, column 2."""

    name: ClassVar[str] = "acme_nan"
    params: ClassVar[dict[str, harness.Param]] = {}
    task: ClassVar[str] = "classification"
    n_classes: ClassVar[int] = 2
    default_model: ClassVar[str] = "logistic_cel"
    provenance: ClassVar[dict[str, str]] = {"source": "tests/test_cli.py"}

    def __init__(self) -> None:
        self.X = np.linspace(0.0, 1.0, 30 * 3).reshape(30, 3)
        self.X[7, 2] = np.nan
        self.y = (np.arange(30) % 2).astype(np.int64)


class NaNPlugin:
    @harness.hookimpl
    def register_datasets(self, register):
        register(NaNData)


def test_dataset_with_nan_is_a_config_error_and_no_run(tiny_cfg, shared_store):
    cfg = tracked(dict(tiny_cfg, dataset={"name": "acme_nan"}), shared_store, "api-nan")
    with pytest.raises(harness.ConfigError) as info:
        harness.run(cfg, plugins=[NaNPlugin()])

    message = str(info.value)
    assert "'acme_nan'" in message
    assert "row 7" in message
    assert "column 2" in message
    assert "nan" in message.lower()
    assert runs_in(shared_store, "api-nan") == []


class Failing(Exp4MP):
    """EXP4.MP that fails in round ``FAIL_AT`` (after several checkpoints)."""

    name: ClassVar[str] = "acme_failing"
    FAIL_AT: ClassVar[int] = 60
    error: ClassVar[type[BaseException]] = RuntimeError

    def observe(self, losses):
        self.rounds_seen_ = getattr(self, "rounds_seen_", 0) + 1
        if self.rounds_seen_ == self.FAIL_AT:
            raise self.error(f"{self.name} failed in round {self.FAIL_AT}")
        return super().observe(losses)


class Interrupted(Failing):
    name: ClassVar[str] = "acme_interrupted"
    error: ClassVar[type[BaseException]] = KeyboardInterrupt


class FailingPlugin:
    @harness.hookimpl
    def register_p_players(self, register):
        register(Failing)
        register(Interrupted)


@pytest.mark.parametrize(
    ("player", "exception", "status"),
    [("acme_failing", RuntimeError, "FAILED"), ("acme_interrupted", KeyboardInterrupt, "KILLED")],
    ids=["exception-FAILED", "interrupt-KILLED"],
)
def test_game_ending_early_keeps_its_checkpoints(tiny_cfg, shared_store,
                                                 player, exception, status):
    experiment = f"api-{status.lower()}"
    cfg = tracked(dict(tiny_cfg, p_player={"name": player}), shared_store, experiment)
    k = cfg["constraint"]["k"]
    reached = [int(r) for r in checkpoint_rounds(cfg["budget"] // k, cfg["checkpoints"], k)
               if r < Failing.FAIL_AT]
    assert len(reached) >= 1  # the failure comes after at least one checkpoint

    with pytest.raises(exception, match="round 60"):
        harness.run(cfg, plugins=[FailingPlugin()])

    runs = runs_in(shared_store, experiment)
    assert len(runs) == 1
    run = runs[0]
    assert run.info.status == status
    assert run.info.end_time is not None
    assert str(REPO) not in run.info.artifact_uri  # nothing written into the checkout
    history = MlflowClient(shared_store).get_metric_history(run.info.run_id, "dual_gap")
    assert [m.step for m in history] == [r * k for r in reached]


# --------------------------------------------------------------------------- reproducibility


def test_same_seed_same_numbers_other_seed_other_numbers(tiny_cfg):
    first = harness.run(tiny_cfg)
    again = harness.run(dict(tiny_cfg))
    other = harness.run(dict(tiny_cfg, seed=1))

    def strip(metrics):
        return {k: v for k, v in metrics.items() if k not in TIMING_METRICS}

    assert strip(first) == strip(again)
    assert set(first) == set(again)
    assert other["dual_gap"] != first["dual_gap"]


class FailingTracker:
    """A second tracker whose start fails after MLflow's has created its run."""

    @harness.hookimpl(trylast=True)
    def on_run_start(self, context):
        raise RuntimeError("the other tracker could not start")


def test_failure_while_starting_does_not_leave_a_running_run(tiny_cfg, shared_store):
    cfg = tracked(tiny_cfg, shared_store, "api-start-failure")
    with pytest.raises(RuntimeError, match="could not start"):
        harness.run(cfg, plugins=[FailingTracker()])

    runs = runs_in(shared_store, "api-start-failure")
    assert [r.info.status for r in runs] == ["FAILED"]  # ended, not left RUNNING
