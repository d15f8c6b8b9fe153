"""The tuning protocol (``hydra/sweeper=tune``, ``harness.tune``) on a real sweep:
the selection is checked against the runs' own final objectives read back from
MLflow, the evaluation runs against the seeds and multipliers they must use,
and a relaunch with ``resume=true`` against the store's run count."""

from __future__ import annotations

import json
import math
import statistics
from collections import defaultdict
from pathlib import Path

import pytest

from harness import report, tune
from plugins.tracking.mlflow_sweeps import SWEEP_TAG

from conftest import run_harness_cli

GRID = [1 / 3, 1.0, 3.0]
TUNING_SEEDS = [10, 11, 12]  # three: the median is not the mean
EVAL_SEEDS = [0, 1]
SWEEP = ("--multirun", "hydra/sweeper=tune", "hydra.sweeper.algorithms=[exp4mp,sgd]",
         "hydra.sweeper.grid=[0.3333333333333333,1,3]",
         f"hydra.sweeper.tuning_seeds={TUNING_SEEDS}".replace(" ", ""),
         f"hydra.sweeper.eval_seeds={EVAL_SEEDS}".replace(" ", ""),
         "dataset=breast_cancer", "budget=4000", "checkpoints=4", "constraint.k=10",
         "progress=false", "tracking.experiment=tuning")


def _runs(where: Path):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{where}/mlflow.db")
    exp = client.get_experiment_by_name("tuning")
    return client, client.search_runs([exp.experiment_id], max_results=1000)


#: runs of the first sweep deleted before the relaunch: as if it had stopped before them
LOST = 3


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """A tuning sweep of OL-EXP.4M (two multipliers) and SGD (one) on breast
    cancer; then ``LOST`` of its runs are deleted (an interrupted sweep) and the
    same command is relaunched with ``resume=true``."""
    where = tmp_path_factory.mktemp("tune")
    done = run_harness_cli(*SWEEP, f"hydra.sweep.dir={where}/first", cwd=where, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    record = json.loads((where / "first" / tune.TUNING_FILE).read_text())
    client, runs = _runs(where)
    lost = [r for r in runs if r.data.tags.get(tune.ROLE_TAG) == "tune"][:LOST]
    for run in lost:
        client.delete_run(run.info.run_id)
    again = run_harness_cli(*SWEEP, "resume=true", f"hydra.sweep.dir={where}/again", cwd=where,
                            timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    return where, record, runs, done.stdout, again, lost


def _scale(run, key: str) -> float:
    return float(run.data.params[key])


def test_the_selection_is_the_lowest_median_final_objective_over_the_tuning_seeds(sweep):
    # independent of the sweeper's bookkeeping: the finished runs on the tuning seeds,
    # read back from MLflow, grouped by multiplier; the median of their final objective
    where, record, runs, _, _, _ = sweep
    tuning = [r for r in runs if r.data.tags.get(tune.ROLE_TAG) == "tune"]
    assert {int(r.data.params["seed"]) for r in tuning} == set(TUNING_SEEDS)
    by_config = {c["algorithm"]: c for c in record["configurations"]}
    assert by_config["exp4mp"]["keys"] == ["p_player.eta_scale", "w_player.lr_scale"]
    assert by_config["sgd"]["keys"] == ["solver.lr_scale"]
    for algorithm, config in by_config.items():
        mine = [r for r in tuning if r.data.tags["algorithm"] == algorithm]
        fixed: dict[str, float] = {}
        for i, key in enumerate(config["keys"]):
            later = config["keys"][i + 1:]
            objectives = defaultdict(list)
            for run in mine:
                if all(math.isclose(_scale(run, k), v) for k, v in fixed.items()) and \
                        all(_scale(run, k) == 1.0 for k in later):
                    objectives[_scale(run, key)].append(run.data.metrics["objective"])
            assert sorted(objectives) == pytest.approx(GRID)
            assert all(len(v) == len(TUNING_SEEDS) for v in objectives.values())
            medians = {m: statistics.median(v) for m, v in objectives.items()}
            best = min(medians, key=medians.get)
            assert config["selected"][key] == pytest.approx(best), (algorithm, key, medians)
            assert config["edge"][key] == (best in (min(GRID), max(GRID)))
            for m, value in medians.items():
                assert config["scores"][key][repr(min(GRID, key=lambda g, m=m: abs(g - m)))] \
                    == pytest.approx(value, rel=1e-12)
            fixed[key] = best
        # coordinate search: 3 points for the first multiplier, 2 more for the second
        assert len(mine) == len(TUNING_SEEDS) * (2 * len(config["keys"]) + 1)


def test_the_theory_and_selected_steps_are_rerun_on_the_fresh_evaluation_seeds(sweep):
    _, record, runs, _, _, _ = sweep
    for config in record["configurations"]:
        mine = [r for r in runs if r.data.tags.get("algorithm") == config["algorithm"]
                and r.data.tags.get(tune.ROLE_TAG) in ("theory", "tuned", "both")]
        theory = {k: 1.0 for k in config["keys"]}
        roles = {"both": theory} if config["selected"] == theory else \
            {"theory": theory, "tuned": config["selected"]}
        for role, values in roles.items():
            found = [r for r in mine if r.data.tags[tune.ROLE_TAG] == role]
            assert sorted(int(r.data.params["seed"]) for r in found) == EVAL_SEEDS
            for run in found:
                assert {k: _scale(run, k) for k in values} == pytest.approx(values)
            finals = [r.data.metrics["relative_suboptimality"] for r in found]
            logged = config["evaluation"][role]["metrics"]
            assert sorted(m["relative_suboptimality"] for m in logged) == pytest.approx(
                sorted(finals), rel=1e-12)
        assert len(mine) == len(EVAL_SEEDS) * len(roles)


def test_the_parent_run_holds_the_rule_and_the_record_and_the_report_tables_it(sweep, capsys):
    where, record, runs, stdout, _, _ = sweep
    assert record["rule"].startswith(
        f"median over tuning seeds {TUNING_SEEDS} of the final objective")
    assert "Selection rule: the lowest median" in stdout  # printed at the end of the sweep
    parent = next(r for r in runs if r.data.tags.get(SWEEP_TAG) == "1")
    assert parent.data.tags[tune.TUNING_TAG] == "1"
    assert parent.data.tags["tuning_rule"] == record["rule"]
    uri = f"sqlite:///{where}/mlflow.db"
    out = where / "report"
    assert report.main(["--tracking-uri", uri, "--experiment", "tuning", "--out", str(out),
                        "--sweep", parent.info.run_id, "--no-log"]) == 0
    said = capsys.readouterr().out
    tuning_runs = sum(r.data.tags.get(tune.ROLE_TAG) == "tune" for r in runs)
    assert f"{tuning_runs} runs on the tuning seeds left out" in said
    table = (out / "tuning.md").read_text()
    # the cells, ranks and edge marks against the evaluation runs read back from MLflow
    medians = {}
    for config in record["configurations"]:
        mine = [r for r in runs if r.data.tags.get("algorithm") == config["algorithm"]]
        for step, roles in (("theory", ("theory", "both")), ("tuned", ("tuned", "both"))):
            medians[config["algorithm"], step] = statistics.median(
                r.data.metrics["relative_suboptimality"] for r in mine
                if r.data.tags.get(tune.ROLE_TAG) in roles)
    for config in record["configurations"]:
        algorithm = config["algorithm"]
        cells = [c.strip() for c in next(
            line for line in table.splitlines() if line.startswith(f"| {algorithm} |")
        ).split("|")[1:-1]]
        assert cells[2] == f"{medians[algorithm, 'theory']:.3g}"
        assert cells[4] == f"{medians[algorithm, 'tuned']:.3g}"
        for column, step in ((3, "theory"), (5, "tuned")):
            others = [medians[a, step] for a in ("exp4mp", "sgd")]
            assert int(cells[column]) == 1 + sum(v < medians[algorithm, step] for v in others)
        assert ("(edge)" in cells[1]) == any(config["edge"].values())
    assert "Ranking at the theory step:" in table
    # the curves and tables hold the evaluation runs only, labelled by step
    final = (out / "final_values.md").read_text()
    labels = {line.split("|")[1].strip() for line in final.splitlines()
              if line.startswith("| exp4mp") or line.startswith("| sgd")}
    assert labels and labels <= {f"{a} step={s}" for a in ("exp4mp", "sgd")
                                 for s in ("theory", "tuned", "theory=tuned")}
    assert {label.split()[0] for label in labels} == {"exp4mp", "sgd"}
    assert all(f"| {len(EVAL_SEEDS)} |" in line for line in final.splitlines()
               if line.startswith("| exp4mp") or line.startswith("| sgd"))


def test_a_relaunch_with_resume_plays_the_lost_runs_and_reuses_the_others(sweep):
    where, record, runs, _, again, lost = sweep
    _, after = _runs(where)
    assert len(after) == len(runs)  # the lost ones again, nothing twice, the parent reused
    assert again.stdout.count("already finished as MLflow run") == record["jobs"] - LOST
    names = {r.info.run_name for r in after}
    assert {r.info.run_name for r in lost} <= names
    parents = {r.data.tags.get("mlflow.parentRunId") for r in after} - {None}
    assert len(parents) == 1
    second = json.loads((where / "again" / tune.TUNING_FILE).read_text())
    assert [c["selected"] for c in second["configurations"]] == \
        [c["selected"] for c in record["configurations"]]


# -- the rule and its errors, without a sweep ------------------------------------------


def test_run_names_say_the_multipliers_and_the_role(sweep):
    _, _, runs, _, _, _ = sweep
    names = [r.info.run_name for r in runs if tune.ROLE_TAG in r.data.tags]
    assert len(set(names)) == len(names)  # every grid point and seed apart
    assert "exp4mp s10 eta_scale=3 tune k10 breast_cancer" in names
    assert any(n.startswith("sgd s0 ") and n.endswith(" theory k10 breast_cancer")
               for n in names)


def test_a_failing_grid_point_scores_inf_and_the_sweep_goes_on(tmp_path):
    # SGD without a ball at 1e6 times its step overflows (a guard stops that run)
    done = run_harness_cli(
        "--multirun", "hydra/sweeper=tune", "hydra.sweeper.algorithms=[sgd]",
        "hydra.sweeper.grid=[1,1000000]", "hydra.sweeper.tuning_seeds=[5]",
        "hydra.sweeper.eval_seeds=[6]", "dataset=boston", "budget=3000", "checkpoints=3",
        "problem.ball=false", "problem.mu_times_n=1", "model.loss_scale=2",
        "tracking.enabled=false", "progress=false", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    record = json.loads(next(tmp_path.glob("multirun/*/*/tuning.json")).read_text())
    (config,) = record["configurations"]
    assert config["scores"]["solver.lr_scale"][repr(1e6)] == math.inf
    assert math.isfinite(config["scores"]["solver.lr_scale"][repr(1.0)])
    assert config["selected"] == {"solver.lr_scale": 1.0}
    # the guard names the overflow: a non-finite metric, or the averaged iterate's loss
    assert "non-finite" in done.stderr or "gave loss inf" in done.stderr


def test_the_default_grid_is_powers_of_three_with_an_exact_one():
    grid = tune.default_grid(3.0, -4, 4)
    assert len(grid) == 9 and grid[4] == 1.0
    assert grid == pytest.approx([3.0 ** e for e in range(-4, 5)], rel=1e-15)


def test_ties_go_to_the_multiplier_closest_to_one_and_failures_never_win():
    assert tune.select({1 / 3: 0.5, 1.0: 0.5, 3.0: 0.5}) == 1.0
    assert tune.select({1 / 9: 0.2, 3.0: 0.2, 9.0: 0.3}) == 3.0
    assert tune.score([0.1, None], "median") == math.inf
    assert tune.score([0.1, float("nan")], "median") == math.inf
    assert tune.score([0.3, 0.1, 0.2], "median") == pytest.approx(0.2)
    assert tune.score([0.3, 0.1, 0.2], "max") == pytest.approx(0.3)
    assert tune.select({0.5: math.inf, 1.0: 0.4, 2.0: 0.3}) == 2.0


def test_the_summary_says_whether_tuning_changes_the_ranking():
    def config(name, theory, tuned):
        both = {"seeds": [0], "metrics": [{"relative_suboptimality": theory}]}
        other = {"seeds": [0], "metrics": [{"relative_suboptimality": tuned}]}
        return {"algorithm": name, "label": name, "problem": "dataset=x", "keys": ["a.b"],
                "selected": {"a.b": 3.0}, "edge": {"a.b": True},
                "scores": {"a.b": {repr(1.0): 0.5, repr(3.0): 0.4}},
                "evaluation": {"theory": both, "tuned": other}}

    record = {"rule": "median", "search": "coordinate", "grid": [1.0, 3.0],
              "eval_seeds": [0], "tuning_seeds": [1], "statistic": "median",
              "metric": "objective"}
    changed = tune.summary_table({**record, "configurations": [config("a", 0.1, 0.1),
                                                               config("b", 0.2, 0.05)]})
    assert "tuning changes the ranking" in changed and "(edge)" in changed
    kept = tune.summary_table({**record, "configurations": [config("a", 0.1, 0.05),
                                                            config("b", 0.2, 0.1)]})
    assert "does not change the ranking" in kept


@pytest.mark.parametrize(("override", "said"), [
    ("seed=1,2", "remove 'seed=1,2'"),
    ("hydra.sweeper.eval_seeds=[1]", "eval_seeds must be fresh: disjoint from tuning_seeds. "
                                     "Got both with [1]"),
    ("hydra.sweeper.algorithms=[exp4mp,nope]", "unknown algorithm 'nope'. Allowed: p-players"),
    ("hydra.sweeper.algorithms=[sgd,sgd]", "names ['sgd'] more than once"),
    ("p_player.eta_scale=2", "The tuning sweep sets p_player.eta_scale itself; remove "
                             "p_player.eta_scale=2"),
    ("hydra.sweeper.grid=[0,1]", "multipliers > 0. Got [0, 1]"),
    ("hydra.sweeper.max_batch_size=x", "an int >= 1 or null. Got 'x'"),
    ("hydra.sweeper.rule=mode", "must be one of ['max', 'mean', 'median']. Got 'mode'"),
    ("+hydra.sweeper.tune.exp4mp=[p_player.gamma]", "cannot tune 'p_player.gamma'"),
    ("+hydra.sweeper.tune.sgdd=[solver.lr_scale]", "names ['sgdd'], which the sweep does not"),
    ("hydra.sweeper.metric=objectiv", "metric the runs log: one of"),
])
def test_a_bad_tuning_config_is_one_line_and_exit_2(tmp_path, override, said):
    done = run_harness_cli("--multirun", "hydra/sweeper=tune", "budget=2000", "checkpoints=2",
                           "hydra.sweeper.grid=[1]", "hydra.sweeper.tuning_seeds=[1]",
                           "hydra.sweeper.eval_seeds=[2]", "tracking.enabled=false",
                           override, cwd=tmp_path)
    assert done.returncode == 2, done.stderr[-2000:]
    assert said in done.stderr and "Traceback" not in done.stderr


def test_a_refused_tuning_sweep_leaves_no_running_parent_for_the_report(tmp_path, capsys):
    ok = run_harness_cli("budget=2000", "checkpoints=2", "progress=false", cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr[-2000:]
    done = run_harness_cli("--multirun", "hydra/sweeper=tune", "budget=2000",
                           "hydra.sweeper.algorithms=[nope]", cwd=tmp_path)
    assert done.returncode == 2
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    exp = client.get_experiment_by_name("minimax-bench")
    parents = [r for r in client.search_runs([exp.experiment_id])
               if r.data.tags.get(SWEEP_TAG) == "1"]
    assert [p.info.status for p in parents] == ["FAILED"]
    # the empty sweep is not "the latest sweep": the report falls back to the runs
    assert report.main(["--tracking-uri", f"sqlite:///{tmp_path}/mlflow.db", "--out",
                        str(tmp_path / "rep"), "--no-log"]) == 0
    assert "reporting all 1 finished runs" in capsys.readouterr().out
