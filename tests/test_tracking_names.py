"""What the MLflow tracker names and marks: run names, metric keys, a sweep's
parent run name and its view, the experiment kind, and ``resume=true``
skipping a run that already finished. Real SQLite stores, one per module
(creating one costs seconds), each test under its own experiment name."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from mlflow.tracking import MlflowClient
from omegaconf import OmegaConf

import harness
from plugins.tracking import mlflow_records, mlflow_view
from plugins.tracking.mlflow_names import BOOKKEEPING, core_name, logged_name
from plugins.tracking.mlflow_runs import (
    CONFIG_KEY_TAG,
    REQUEST_KEY_TAG,
    AlreadyFinished,
    request_key,
)
from plugins.tracking.mlflow_store import EXPERIMENT_KIND
from plugins.tracking.mlflow_sweeps import sweep_name
from tests.conftest import game_cfg, run_harness_cli


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    return f"sqlite:///{tmp_path_factory.mktemp('store') / 'mlflow.db'}"


@pytest.fixture(scope="module", autouse=True)
def module_cwd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The module runs in a temporary directory (the store's artifact root,
    ``./mlruns``, is fixed when an in-process client first opens it)."""
    cwd = tmp_path_factory.mktemp("cwd")
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("MLFLOW_TRACKING_URI", raising=False)
        mp.chdir(cwd)
        yield cwd


def tiny(*overrides: str, uri: str, experiment: str, **tracking: Any) -> dict[str, Any]:
    cfg = game_cfg("budget=2000", "checkpoints=2", "engine=python", *overrides)
    cfg["tracking"] = {"enabled": True, "uri": uri, "experiment": experiment, **tracking}
    return cfg


def runs_of(uri: str, experiment: str) -> list[Any]:
    client = MlflowClient(uri)
    found = client.get_experiment_by_name(experiment)
    return [] if found is None else client.search_runs([found.experiment_id])


# --------------------------------------------------------------------------- run names


@pytest.mark.parametrize(("overrides", "expected"), [
    (("constraint.k=20",), "exp4mp s0 k20 breast_cancer"),
    (("p_player=ftrl", "constraint.k=7", "seed=3"), "ftrl s3 k7 breast_cancer"),
    (("solver=sgd", "constraint.k=5", "seed=1"), "sgd s1 k5 breast_cancer"),
], ids=["game", "other-p-player", "solver"])
def test_run_is_named_after_what_ran(store, overrides, expected):
    harness.run(tiny(*overrides, uri=store, experiment=f"names-{expected}"))
    [run] = runs_of(store, f"names-{expected}")
    assert run.info.run_name == expected


def test_a_given_run_name_wins(store):
    harness.run(tiny(uri=store, experiment="names-given", run_name="mine"))
    [run] = runs_of(store, "names-given")
    assert run.info.run_name == "mine"


# --------------------------------------------------------------------------- sweep parents


def hydra_node(task: list[str], experiment: str | None = None,
               params: dict[str, str] | None = None) -> Any:
    return OmegaConf.create({"hydra": {
        "overrides": {"task": task},
        "runtime": {"choices": {"experiment": experiment}},
        "sweeper": {"params": params},
    }})


NOW = datetime(2025, 3, 4, 5, 6)


def test_sweep_of_a_preset_is_named_after_it():
    config = hydra_node(["experiment=problems"], "problems",
                        {"seed": "0,1,2,3,4", "p_player": "exp4mp,ftrl"})
    assert sweep_name(config, NOW) == "sweep problems 2025-03-04 05:06"
    more = hydra_node(["experiment=problems", "budget=6e4", "seed=0,1"], "problems",
                      {"seed": "0,1,2,3,4"})
    assert sweep_name(more, NOW) == "sweep problems seed=0,1 2025-03-04 05:06"


def test_sweep_is_named_after_its_swept_overrides():
    config = hydra_node(["p_player=exp4mp,ftrl", "budget=2000", "seed=0,1",
                         "tracking.uri=sqlite:///x.db"])
    assert sweep_name(config, NOW) == "sweep p_player=exp4mp,ftrl seed=0,1 2025-03-04 05:06"
    nothing_swept = hydra_node(["budget=2000", "tracking.uri=sqlite:///x.db"])
    assert sweep_name(nothing_swept, NOW) == "sweep budget=2000 2025-03-04 05:06"
    assert sweep_name(hydra_node([]), NOW) == "sweep 2025-03-04 05:06"


def test_long_sweep_names_are_cut():
    datasets = ",".join(["breast_cancer", "boston", "yacht", "energy", "concrete",
                         "kin8nm", "power"] * 3)
    config = hydra_node([f"dataset={datasets}", "seed=0,1,2,3,4", "p_player=exp4mp,ftrl",
                         "constraint.level=null,0.5", "model.loss_scale=1,2,3,4,5,6,7,8,9",
                         "w_player.lr=0.1,0.01,0.001,0.0001", "checkpoints=3,4,5,6"])
    name = sweep_name(config, NOW)
    assert name.startswith("sweep dataset=breast_cancer,boston")
    assert "…" in name and re.search(r" \+\d more 2025-03-04 05:06$", name)
    assert len(name) < 140


@pytest.fixture(scope="module")
def cli_sweep(store, tmp_path_factory) -> subprocess.CompletedProcess[str]:
    """``minimax-bench --multirun seed=0,1`` (2 runs) into the experiment ``sweep-name``."""
    where = tmp_path_factory.mktemp("sweep")
    proc = run_harness_cli("--multirun", "seed=0,1", "dataset=breast_cancer", "budget=2000",
                           "checkpoints=2", f"tracking.uri={store}",
                           "tracking.experiment=sweep-name",
                           f"hydra.sweep.dir={where / 'sweep'}", cwd=where)
    assert proc.returncode == 0, proc.stderr
    return proc


def test_multirun_parent_is_named_after_the_swept_overrides(cli_sweep, store):
    runs = runs_of(store, "sweep-name")
    [parent] = [r for r in runs if r.data.tags.get("minimax_bench_sweep") == "1"]
    assert re.fullmatch(r"sweep seed=0,1 \d{4}-\d\d-\d\d \d\d:\d\d", parent.info.run_name)
    assert sorted(r.info.run_name for r in runs if r is not parent) == [
        "exp4mp s0 k20 breast_cancer", "exp4mp s1 k20 breast_cancer"]


# --------------------------------------------------------------------------- metric keys


def test_bookkeeping_metrics_are_logged_under_a_prefix_that_sorts_them_last(store):
    final = harness.run(tiny(uri=store, experiment="keys"))
    [run] = runs_of(store, "keys")
    keys = sorted(run.data.metrics)  # MLflow's UI orders charts and columns this way
    assert keys == sorted(logged_name(name) for name in final)
    compared = [k for k in keys if not k.startswith("zz.")]
    assert {"dual_gap", "objective", "accuracy"} <= set(compared)
    assert keys == compared + sorted(f"zz.{name}" for name in BOOKKEEPING & set(final))
    assert {"rounds", "data_points", "wall_time_s", "checkpoint_time_s"} <= BOOKKEEPING & set(final)


def test_metric_keys_map_back_to_the_core_names():
    for name in BOOKKEEPING:
        assert core_name(logged_name(name)) == name and logged_name(name) == f"zz.{name}"
    for name in ("dual_gap", "suboptimality", "group_loss.a", "zz.mine", "zz.dual_gap"):
        assert logged_name(name) == name and core_name(name) == name
    assert core_name("rounds") == "rounds"  # a run logged before the prefix


def test_the_report_reads_old_and_new_keys_by_the_core_names(store):
    harness.run(tiny(uri=store, experiment="keys-read"))
    client = MlflowClient(store)
    experiment = client.get_experiment_by_name("keys-read").experiment_id
    old = client.create_run(experiment, run_name="logged before the prefix").info.run_id
    for step, rounds in ((20, 1.0), (40, 2.0)):
        client.log_metric(old, "rounds", rounds, step=step)
        client.log_metric(old, "dual_gap", 0.5 / rounds, step=step)
    records = {r.id: r for r in mlflow_records.read_runs(store, "keys-read", "")}
    new = next(r for key, r in records.items() if key != old)
    assert "rounds" in new.metrics and "zz.rounds" not in new.metrics
    steps, values = new.metrics["rounds"]
    assert list(steps) == [m.step for m in client.get_metric_history(new.id, "zz.rounds")]
    assert values[-1] == 100.0  # budget 2000 at k = 20 rows a round
    steps, values = records[old].metrics["rounds"]
    assert list(steps) == [20.0, 40.0] and list(values) == [1.0, 2.0]
    assert sorted(records[old].metrics) == ["dual_gap", "rounds"]


# --------------------------------------------------------------------------- views


def test_a_sweep_prints_the_url_of_its_view(cli_sweep, store):
    client = MlflowClient(store)
    experiment = client.get_experiment_by_name("sweep-name")
    [parent] = [r for r in runs_of(store, "sweep-name")
                if r.data.tags.get("minimax_bench_sweep") == "1"]
    key = mlflow_view.view_key(mlflow_view.sweep_filter(parent.info.run_id))
    lines = cli_sweep.stdout.splitlines()
    start = lines.index("MLflow view of the sweep's 2 runs: dual_gap and suboptimality "
                        "against data points, log axes")
    assert lines[start + 1:start + 3] == [
        f"  open it with:  mlflow ui --backend-store-uri {store}  then",
        f"  http://127.0.0.1:5000/#/experiments/{experiment.experiment_id}/runs"
        f"?viewStateShareKey={key}&compareRunsMode=CHART&workflowType=machine_learning"]
    state = json.loads(experiment.tags[mlflow_view.SHARED_VIEW_TAG + key])
    assert state["searchFilter"] == f"tags.`mlflow.parentRunId` = '{parent.info.run_id}'"
    assert (state["orderByKey"], state["orderByAsc"]) == ("metrics.`dual_gap`", True)
    [chart] = state["compareRunCharts"]
    assert chart["selectedMetricKeys"] == ["dual_gap", "suboptimality"]
    assert (chart["xAxisKey"], chart["xAxisScaleType"], chart["scaleType"]) == (
        "step", "log", "log")
    assert [s["uuid"] for s in state["compareRunSections"]] == [chart["metricSectionId"]]
    assert state["runsHiddenMode"] == "SHOW_ALL"  # MLflow charts its first 10 runs otherwise


def test_a_view_charts_what_the_runs_log_and_says_when_they_overflow_a_page(store):
    client = MlflowClient(store)
    experiment = client.create_experiment("view-page")
    parent = client.create_run(experiment, run_name="sweep").info.run_id
    for i in range(mlflow_view.PAGE_SIZE + 1):
        run = client.create_run(experiment, run_name=f"a s{i} k1 x",
                                tags={"mlflow.parentRunId": parent}).info.run_id
        client.log_metric(run, "objective", 1.0 / (i + 1), step=1)
    lines = mlflow_view.view_lines(client, experiment, mlflow_view.sweep_filter(parent),
                                   "the sweep's")
    assert lines[0] == ("MLflow view of the sweep's 101 runs: objective against data "
                        "points, log axes")
    assert lines[-1].startswith("  the chart draws the 100 runs of smallest objective")
    key = mlflow_view.view_key(mlflow_view.sweep_filter(parent))
    state = json.loads(client.get_experiment(experiment).tags[mlflow_view.SHARED_VIEW_TAG + key])
    assert state["compareRunCharts"][0]["selectedMetricKeys"] == ["objective"]
    assert state["selectedColumns"] == ["metrics.`objective`"]


# --------------------------------------------------------------------------- experiment kind


def test_experiments_are_marked_model_training(store):
    tag, kind = EXPERIMENT_KIND
    harness.run(tiny(uri=store, experiment="kind-new"))
    client = MlflowClient(store)
    assert client.get_experiment_by_name("kind-new").tags[tag] == kind

    old = client.create_experiment("kind-old")  # made before the tracker marked them
    assert tag not in client.get_experiment(old).tags
    harness.run(tiny(uri=store, experiment="kind-old"))
    assert client.get_experiment(old).tags[tag] == kind

    own = client.create_experiment("kind-own", tags={tag: "genai_development"})
    harness.run(tiny(uri=store, experiment="kind-own"))
    assert client.get_experiment(own).tags[tag] == "genai_development"  # a user's kind stays


# --------------------------------------------------------------------------- resume


def test_resume_does_not_play_a_finished_run_again(store):
    first = harness.run(tiny("seed=5", uri=store, experiment="resume-skip"))
    [done] = runs_of(store, "resume-skip")
    assert done.info.status == "FINISHED" and done.data.tags[CONFIG_KEY_TAG]

    with pytest.raises(AlreadyFinished) as info:
        harness.run(dict(tiny("seed=5", uri=store, experiment="resume-skip"), resume=True))
    assert info.value.run_id == done.info.run_id
    assert done.info.run_id in str(info.value)
    assert info.value.metrics["dual_gap"] == pytest.approx(first["dual_gap"])
    assert [r.info.run_id for r in runs_of(store, "resume-skip")] == [done.info.run_id]

    # another seed is another run; without resume=true the same one is run again
    harness.run(dict(tiny("seed=6", uri=store, experiment="resume-skip"), resume=True))
    harness.run(tiny("seed=5", uri=store, experiment="resume-skip"))
    runs = runs_of(store, "resume-skip")
    assert sorted(r.data.tags["seed"] for r in runs) == ["5", "5", "6"]
    assert len({r.data.tags[CONFIG_KEY_TAG] for r in runs}) == 2


def test_resume_finds_a_finished_run_before_preparing_anything(store, monkeypatch):
    # the composed config's key (tag request_key) is looked up before the data
    # set is loaded; a config spelled otherwise (a step size given as the
    # value its null resolves to) is found after preparing, by its resolved
    # parameters
    from harness import api

    cfg = tiny("seed=9", uri=store, experiment="resume-early")
    harness.run(cfg)
    [done] = runs_of(store, "resume-early")
    assert done.data.tags[REQUEST_KEY_TAG] == request_key(cfg)
    built: list[str] = []
    real = api._group
    monkeypatch.setattr(api, "_group", lambda conf, key: built.append(key) or real(conf, key))
    with pytest.raises(AlreadyFinished) as info:
        harness.prepare(dict(cfg, resume=True))
    assert info.value.run_id == done.info.run_id and built == []
    with pytest.raises(AlreadyFinished):
        harness.run(dict(cfg, resume=True, progress=False, state_dir=None))
    assert built == []  # what steers the run is not part of the key
    gamma = harness.prepare(dict(cfg, tracking={"enabled": False})).context.params[
        "p_player.gamma"]
    built.clear()
    assert cfg["p_player"]["gamma"] is None
    spelled = dict(cfg, resume=True, p_player={**cfg["p_player"], "gamma": gamma})
    assert request_key(spelled) != request_key(cfg)
    with pytest.raises(AlreadyFinished) as info:
        harness.run(spelled)
    assert info.value.run_id == done.info.run_id and built  # found after preparing


def test_resume_plays_a_config_whose_run_did_not_finish(store):
    harness.run(tiny("seed=7", uri=store, experiment="resume-killed"))
    [run] = runs_of(store, "resume-killed")
    MlflowClient(store).set_terminated(run.info.run_id, status="KILLED")
    harness.run(dict(tiny("seed=7", uri=store, experiment="resume-killed"), resume=True))
    assert sorted(r.info.status for r in runs_of(store, "resume-killed")) == [
        "FINISHED", "KILLED"]


def test_cli_resume_of_a_finished_run_says_so(run_cli, store, tmp_path):
    args = ("budget=4000", "seed=5", "resume=true", "checkpoints=2",
            f"tracking.uri={store}", "tracking.experiment=resume-cli",
            f"state_dir={tmp_path / 'state'}")
    assert run_cli(*args).returncode == 0
    [run] = runs_of(store, "resume-cli")

    again = run_cli(*args)
    assert "already finished" in again.stdout + again.stderr
    assert run.info.run_id in again.stdout + again.stderr
    assert "certified dual gap" not in again.stdout  # nothing was played
    assert [r.info.run_id for r in runs_of(store, "resume-cli")] == [run.info.run_id]
    assert again.returncode == 0, again.stderr


def test_resumed_sweep_skips_finished_jobs_and_goes_on(run_cli, store, tmp_path):
    args = ("--multirun", "seed=0,1", "budget=2000", "checkpoints=2", "resume=true",
            f"tracking.uri={store}", "tracking.experiment=resume-sweep",
            f"state_dir={tmp_path / 'state'}")
    assert run_cli(*args, "hydra.sweep.dir=first").returncode == 0
    again = run_cli(*args, "hydra.sweep.dir=second")
    assert again.returncode == 0, again.stderr
    assert (again.stdout + again.stderr).count("already finished") == 2
    runs = runs_of(store, "resume-sweep")
    kids = [r for r in runs if r.data.tags.get("minimax_bench_sweep") != "1"]
    assert len(kids) == 2
    # the relaunch finishes the sweep under its first parent run: one sweep, all its runs
    parents = [r for r in runs if r.data.tags.get("minimax_bench_sweep") == "1"]
    assert len(parents) == 1
    assert {r.data.tags["mlflow.parentRunId"] for r in kids} == {parents[0].info.run_id}
