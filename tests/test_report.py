"""The report command on the output of a real multirun (Hydra + MLflow, no mocks)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import harness
from harness import report
from plugins.tracking import mlflow_view
from plugins.tracking.mlflow_records import REPORT_TAG
from plugins.tracking.mlflow_sweeps import SWEEP_TAG

from conftest import game_cfg

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """A 2-algorithm x 2-seed sweep on breast cancer in a temporary SQLite store."""
    where = tmp_path_factory.mktemp("sweep")
    uri = f"sqlite:///{where}/mlflow.db"
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    done = subprocess.run(
        [sys.executable, "-m", "harness", "--multirun", "p_player=exp4mp,ftrl", "seed=0,1",
         "dataset=breast_cancer", "budget=6000", "checkpoints=6", "constraint.k=10",
         f"tracking.uri={uri}",
         "tracking.experiment=tiny", f"hydra.sweep.dir={where}/multirun"],
        cwd=where, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return where, uri


def test_report_of_a_sweep_writes_figures_and_tables_and_logs_them_to_its_parent_run(
        sweep, capsys, monkeypatch):
    # the store holds one sweep: the report covers it (and says so), and its files
    # become artifacts of the sweep's parent run, not of a separate summary run
    where, uri = sweep
    out = where / "report"
    monkeypatch.setenv("COLUMNS", "80")  # the terminal's width
    assert report.main(["--tracking-uri", uri, "--experiment", "tiny", "--out", str(out)]) == 0
    for name in ("dual_gap", "objective", "accuracy", "max_loss", "theory_bound", "summary"):
        data = (out / f"{name}.png").read_bytes()
        assert data.startswith(PNG) and len(data) > 10_000, name
    table = (out / "final_values.md").read_text()
    rows = [line for line in table.splitlines() if line.startswith("| exp4mp") or
            line.startswith("| ftrl")]
    assert len(rows) == 2 and all("| 2 |" in row for row in rows)

    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("tiny")
    everything = client.search_runs([exp.experiment_id])
    parent = next(r for r in everything if r.data.tags.get(SWEEP_TAG) == "1")
    printed = capsys.readouterr().out
    assert f"reporting sweep {parent.info.run_name!r} (parent run {parent.info.run_id})" \
        in printed
    # the terminal's final table: the medians, a row per metric, within 80 columns
    shown = printed[printed.index("# tiny\n"):printed.index("# tiny: time to accuracy")]
    assert "| " not in shown and " [" not in shown and max(map(len, shown.splitlines())) <= 80
    assert "\ndual_gap " in shown and "(with the min and max: final_values.md)" in shown
    # last, the URL of the sweep's runs side by side in MLflow's UI: the sweep's own view
    key = mlflow_view.view_key(mlflow_view.sweep_filter(parent.info.run_id))
    assert printed.splitlines()[-3:] == [
        "MLflow view of the sweep's 4 runs: dual_gap and suboptimality against data points, "
        "log axes", f"  open it with:  mlflow ui --backend-store-uri {uri}  then",
        f"  {mlflow_view.view_url(mlflow_view.LOCAL_UI, exp.experiment_id, key)}"]
    assert mlflow_view.SHARED_VIEW_TAG + key in client.get_experiment(exp.experiment_id).tags
    names = {a.path for a in client.list_artifacts(parent.info.run_id, "report")}
    assert {"report/dual_gap.png", "report/summary.png", "report/final_values.md",
            "report/time_to_accuracy.md"} <= names
    assert not [r for r in everything if REPORT_TAG in r.data.tags]
    # a second report ignores the sweep's parent run, which now holds artifacts
    grouped = report.load(uri, "tiny")
    assert sorted(grouped) == ["exp4mp", "ftrl"]
    assert all(len(c.runs) == 2 for c in grouped.values())


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    """The issue's mixed store, scaled down: one run at budget 20000, seed 0 (made
    twice: the same configuration and seed), then the CLI's 2 x 2 sweep
    ``seed=0,1 p_player=exp4mp,ru_sgd budget=4000``."""
    where = tmp_path_factory.mktemp("mixed")
    uri = f"sqlite:///{where}/mlflow.db"
    common = ("checkpoints=4", "constraint.k=10", "tracking.enabled=true",
              f"tracking.uri={uri}", "tracking.experiment=mixed")
    for _ in range(2):
        harness.run(game_cfg("budget=20000", "seed=0", *common))
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    done = subprocess.run(
        [sys.executable, "-m", "harness", "--multirun", "seed=0,1", "p_player=exp4mp,ru_sgd",
         "dataset=breast_cancer", "budget=4000", *common[:2], f"tracking.uri={uri}",
         "tracking.experiment=mixed",
         f"hydra.sweep.dir={where}/multirun"],
        cwd=where, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return where, uri


def _rows(table: str) -> dict[str, str]:
    """Data rows of a markdown table by their first cell."""
    return {line.split(" | ")[0][2:]: line for line in table.splitlines()
            if line.startswith("| ") and not line.startswith("| configuration")}


def test_mixed_store_reports_the_latest_sweep_by_default(mixed, capsys):
    # the single runs (budget 20000) are not part of the sweep: left out, and said so
    where, uri = mixed
    out = where / "default"
    assert report.main(["--tracking-uri", uri, "--experiment", "mixed", "--out", str(out),
                        "--no-log"]) == 0
    printed = capsys.readouterr().out
    assert "reporting sweep 'sweep " in printed
    assert "2 other finished runs of the experiment are left out" in printed
    rows = _rows((out / "final_values.md").read_text())
    assert sorted(rows) == ["exp4mp", "ru_sgd"]
    assert all(row.startswith(f"| {name} | 2 |") for name, row in rows.items())
    assert "20000" not in (out / "final_values.md").read_text()
    # one problem: no performance profile, and the report says why
    assert "no performance profile" in printed
    assert not (out / "performance_profile.png").exists()


def test_mixed_store_with_all_has_one_line_per_budget_and_counts_a_seed_once(mixed, capsys):
    # --all: the two budgets of exp4mp are two lines, labelled by the budget alone
    # (not by the step sizes derived from it); the run made twice counts once, the later
    where, uri = mixed
    out = where / "all"
    assert report.main(["--tracking-uri", uri, "--experiment", "mixed", "--out", str(out),
                        "--no-log", "--all"]) == 0
    captured = capsys.readouterr()
    assert "reporting all 5 finished runs" in captured.out
    # the view holds every game run (the one made twice too), not the sweep's parent run
    assert "MLflow view of the experiment's 6 runs: dual_gap" in captured.out
    rows = _rows((out / "final_values.md").read_text())
    assert sorted(rows) == ["exp4mp budget=20000", "exp4mp budget=4000", "ru_sgd"]
    assert rows["exp4mp budget=20000"].startswith("| exp4mp budget=20000 | 1 |")
    assert rows["exp4mp budget=4000"].startswith("| exp4mp budget=4000 | 2 |")
    assert "have the same configuration and seed 0: keeping the later one" in captured.err
    assert sorted(_rows((out / "time_to_accuracy.md").read_text())) == sorted(rows)

    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("mixed")
    singles = sorted((r for r in client.search_runs([exp.experiment_id])
                      if r.data.params.get("budget") == "20000"),
                     key=lambda r: r.info.start_time)
    kept = report.load(uri, "mixed", sweep="all")["exp4mp budget=20000"].runs
    assert len(singles) == 2 and [name[-8:] for name in kept] == [singles[1].info.run_id[:8]]


def test_sweep_option_and_filter_select_runs_and_a_wrong_id_is_an_error(mixed):
    _, uri = mixed
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("mixed")
    parent = next(r for r in client.search_runs([exp.experiment_id])
                  if r.data.tags.get(SWEEP_TAG) == "1")
    grouped = report.load(uri, "mixed", "tags.algorithm = 'ru_sgd'", sweep=parent.info.run_id)
    assert sorted(grouped) == ["ru_sgd"] and len(grouped["ru_sgd"].runs) == 2
    with pytest.raises(SystemExit, match="no run 'nope' in the experiment"):
        report.load(uri, "mixed", sweep="nope")


def test_report_of_every_run_logs_a_summary_run_not_the_parent(mixed):
    # --all covers more than one sweep: a separate summary run holds the files
    where, uri = mixed
    assert report.main(["--tracking-uri", uri, "--experiment", "mixed", "--all",
                        "--out", str(where / "logged")]) == 0
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("mixed")
    runs = client.search_runs([exp.experiment_id])
    summary = [r for r in runs if r.data.tags.get(REPORT_TAG) == "1"]
    assert len(summary) == 1
    assert "final_values.md" in {a.path for a in client.list_artifacts(summary[0].info.run_id)}
    parent = next(r for r in runs if r.data.tags.get(SWEEP_TAG) == "1")
    assert not client.list_artifacts(parent.info.run_id)


def test_labels_name_the_fewest_params_that_tell_configurations_apart():
    small = {"budget": "4000", "p_player.eta": "0.1", "p_player.name": "exp4mp", "k": "10"}
    large = {**small, "budget": "20000", "p_player.eta": "0.03"}
    other = {**small, "k": "20"}  # another problem: nothing to tell apart
    ftrl = {**small, "p_player.name": "ftrl"}
    labels = report.config_labels([("exp4mp", "p1", small), ("exp4mp", "p1", large),
                                   ("exp4mp", "p2", other), ("ftrl", "p1", ftrl)])
    # budget and the eta derived from it separate the same pair: the top-level name wins
    assert labels == ["exp4mp budget=4000", "exp4mp budget=20000", "exp4mp budget=4000",
                      "ftrl"]
    # a param the sweep overrode wins over a top-level one
    assert report.config_labels([("exp4mp", "p1", small), ("exp4mp", "p1", large)],
                                frozenset({"p_player.eta"})) == [
        "exp4mp p_player.eta=0.1", "exp4mp p_player.eta=0.03"]
    # seeds of one configuration are one line, not a pair to tell apart
    assert report.config_labels([("exp4mp", "p1", small)] * 2) == ["exp4mp", "exp4mp"]
    # a param with the same values on every problem (a block size) wins over one
    # whose value differs per problem (the block count it gives), though it is longer
    runs = [("drago", problem, {"solver.block_size": size, "solver.blocks": str(n // int(size))})
            for problem, n in (("p1", 240), ("p2", 960)) for size in ("1", "16")]
    assert report.config_labels(runs) == ["drago solver.block_size=1",
                                          "drago solver.block_size=16"] * 2
    assert report.configuration({"seed": "0", "opt_status": "cached", "opt": "0.1",
                                 "trivial_objective": "1", "reference.cache_dir": "/x",
                                 "budget": "4000"}) == {"budget": "4000"}


def _history(steps, rel, wall, norm=None):
    h = {"relative_suboptimality": (np.array(steps, float), np.array(rel, float)),
         "wall_time_s": (np.array(steps, float), np.array(wall, float))}
    if norm is not None:
        h["normalised_suboptimality"] = (np.array(steps, float), np.array(norm, float))
    return h


def test_time_to_accuracy_cells_are_medians_of_first_reaches_with_the_partial_rule():
    steps = [1000, 2000, 3000, 4000]
    a, b = report.Curves(), report.Curves()
    a.runs = {"s0": _history(steps, [0.5, 0.05, 0.01, 0.0005], [1, 2, 3, 4],
                             [0.5, 1e-3, 1e-5, 1e-7]),
              "s1": _history(steps, [0.5, 0.2, 0.05, 0.008], [1.5, 3, 4.5, 6],
                             [0.5, 0.1, 1e-3, 1e-4]),
              "s2": _history(steps, [0.5, 0.5, 0.5, 0.5], [1, 2, 3, 4], [1, 1, 1, 1])}
    # (b's runs start above every target at their first checkpoint: a target met
    # at the first checkpoint of a run that logged no start is no time)
    b.runs = {"s0": _history([100, 500, 1000], [0.5, 0.08, 0.009], [0.1, 0.5, 1]),
              "s1": _history([100, 500, 1000], [0.5, 0.2, 0.05], [0.1, 0.7, 1.4])}
    table = report.time_to_accuracy_table({"a": a, "b": b})
    assert table.splitlines()[0] == (
        "| configuration | seeds | relative <= 10 % | relative <= 1 % | relative <= 0.1 % "
        "| normalised <= 1e-02 | normalised <= 1e-04 | normalised <= 1e-06 |")
    rows = _rows(table)
    # a, 10 %: seeds reach at 2000 (2 s) and 3000 (4.5 s), one never: median of
    # (2000, 3000, inf) = 3000, of (2, 4.5, inf) = 4.5; 1 %: 0.01 counts (<=) at 3000;
    # 0.1 %: one seed of three reaches; normalised: 1e-2 at 2000 and 3000, 1e-4 at
    # 3000 and 4000 (1e-4 counts), 1e-6 by one seed only
    assert rows["a"] == ("| a | 3 | 3,000 (4.5 s), 2/3 seeds | 4,000 (6 s), 2/3 seeds "
                         "| not reached (1/3 seeds) | 3,000 (4.5 s), 2/3 seeds "
                         "| 4,000 (6 s), 2/3 seeds | not reached (1/3 seeds) |")
    # b: both seeds reach 10 % (500 and 1000: median 750; 0.5 and 1.4 s: 0.95);
    # 1 % by one seed of two is not more than half; no normalised metric: blank
    assert rows["b"] == ("| b | 2 | 750 (0.95 s) | not reached (1/2 seeds) | not reached |"
                         "  |  |  |")
    assert report.first_reach(a.runs["s2"], "relative_suboptimality", 0.1) == np.inf


def _profile_curves(problem: str, reach: dict[str, list[float]]) -> dict[str, report.Curves]:
    """Per label, one seed per entry of ``reach``: relative suboptimality 1 until
    that step, 0 from it (inf: never); the first checkpoint (500) is above the
    target, so a reach at 1000 is a time to accuracy."""
    steps = np.array([500.0, 1000.0, 2000.0, 3000.0, 4000.0])
    out = {}
    for label, firsts in reach.items():
        c = report.Curves()
        for seed, first in enumerate(firsts):
            c.runs[f"{label}{seed}"] = {"relative_suboptimality": (
                steps, np.where(steps >= first, 0.0, 1.0))}
            c.problem[f"{label}{seed}"] = problem
        out[label] = c
    return out


def test_performance_profile_fractions_on_two_problems(tmp_path):
    inf = np.inf
    split = {"p1": _profile_curves("p1", {"A": [1000], "B": [4000], "C": [1000, inf, inf]}),
             "p2": _profile_curves("p2", {"A": [3000], "B": [1000], "C": [2000, 2000]})}
    labels, costs = report.profile_costs(split)
    # C on p1: one seed of three reaches: not reached (inf)
    assert labels == ["A", "B", "C"]
    np.testing.assert_array_equal(costs, [[1000, 4000, inf], [3000, 1000, 2000]])
    ratios = report.performance_ratios(costs)
    np.testing.assert_array_equal(ratios, [[1, 4, inf], [3, 1, 2]])
    rho = report.performance_profile(ratios, np.array([1, 2, 3, 4, 100]))
    np.testing.assert_array_equal(rho, [[0.5, 0.5, 0.0], [0.5, 0.5, 0.5], [1.0, 0.5, 0.5],
                                        [1.0, 1.0, 0.5], [1.0, 1.0, 0.5]])
    path = report.profile_figure(split, tmp_path, "t", "relative_suboptimality", 0.01,
                                 "data_points")
    assert path.name == "performance_profile.png" and path.read_bytes().startswith(PNG)


def test_table_values_are_the_median_min_max_of_the_last_checkpoints(sweep):
    _, uri = sweep
    grouped = report.load(uri, "tiny")
    finals = np.array([h["dual_gap"][1][-1] for h in grouped["exp4mp"].runs.values()])
    table = report.final_table(grouped)
    row = next(line for line in table.splitlines() if line.startswith("| exp4mp"))
    assert (f"{np.median(finals):.4g} [{finals.min():.4g}, {finals.max():.4g}]") in row
    steps, med, lo, hi = report.band(grouped["exp4mp"], "dual_gap")
    assert steps[-1] == 6000 and np.all(lo <= med) and np.all(med <= hi)


def test_band_compares_runs_whose_checkpoints_fall_on_different_data_points():
    """Two seeds checkpointed at different data points (as a solver whose steps
    process a varying number of rows): the band has every step either logged
    within the span both cover, each seed read at its last checkpoint at or before
    it (exact values, no tolerance)."""
    a = (np.array([10.0, 30.0, 52.0, 100.0]), np.array([1.0, 0.1, 0.01, 0.001]))
    b = (np.array([12.0, 31.0, 50.0, 99.0]), np.array([2.0, 0.2, 0.02, 0.002]))
    curves = report.Curves(runs={"0": {"m": a}, "1": {"m": b}})
    steps, med, lo, hi = report.band(curves, "m")
    np.testing.assert_array_equal(steps, [12.0, 30.0, 31.0, 50.0, 52.0, 99.0])
    np.testing.assert_array_equal(lo, [1.0, 0.1, 0.1, 0.02, 0.01, 0.002])
    np.testing.assert_array_equal(hi, [2.0, 2.0, 0.2, 0.1, 0.02, 0.01])
    # a counter on the x-axis (wall time) is each run's, interpolated at the band's
    # steps, then the median: increasing, where reading only exact hits zigzags
    wall = {"0": (a[0], a[0] / 10.0), "1": (b[0], b[0] / 5.0)}
    for seed, history in wall.items():
        curves.runs[seed]["wall_time_s"] = history
    steps, _, _, _ = report.band(curves, "m")
    x = report.x_values(curves, steps, "wall_time_s")
    np.testing.assert_allclose(x, 0.15 * steps, rtol=1e-15)
    # the same checkpoints: exactly those
    same = report.Curves(runs={"0": {"m": a}, "1": {"m": (a[0], 2 * a[1])}})
    steps, med, _, _ = report.band(same, "m")
    np.testing.assert_array_equal(steps, a[0])
    np.testing.assert_array_equal(med, 1.5 * a[1])


def test_report_on_a_missing_experiment_says_so(tmp_path):
    with pytest.raises(SystemExit, match="no experiment named 'nope'"):
        report.main(["--tracking-uri", f"sqlite:///{tmp_path}/m.db", "--experiment", "nope",
                     "--out", str(tmp_path / "r")])


def _curves(problem: str, where: tuple[str, int], finals: list[float], opt: float,
            trivial: float) -> report.Curves:
    c = report.Curves()
    for seed, value in enumerate(finals):
        label = f"s{seed}-{problem}"
        steps = np.array([10.0, 100.0])
        c.runs[label] = {"relative_suboptimality": (steps, np.array([1.0, value])),
                         "objective": (steps, opt * (1 + np.array([1.0, value])))}
        c.opt[label], c.trivial[label] = opt, trivial
        c.problem[label], c.where[label] = problem, where
    return c


def _merge(*parts: report.Curves) -> report.Curves:
    out = report.Curves()
    for part in parts:
        for attr in ("runs", "opt", "trivial", "problem", "where"):
            getattr(out, attr).update(getattr(part, attr))
    return out


def test_problem_table_has_one_column_per_problem_and_a_row_for_w0():
    grouped = {
        "exp4mp": _merge(_curves("yacht k=20", ("yacht", 20), [0.1, 0.3, 0.2], 0.5, 1.0),
                         _curves("boston k=253", ("boston", 253), [0.01, 0.03], 1.0, 1.002)),
        "uniform": _curves("yacht k=20", ("yacht", 20), [0.7], 0.5, 1.0),
    }
    table = report.problem_table(grouped)
    lines = table.splitlines()
    assert lines[0] == "| configuration | boston k=253 | yacht k=20 |"
    assert lines[2] == "| exp4mp | 0.02 | 0.2 |"
    assert lines[3] == "| uniform |  | 0.7 |"
    # w = 0: (1.002 - 1) / 1 is within 5 % of OPT (flagged), (1 - 0.5) / 0.5 = 1 is not
    assert lines[4] == "| w = 0 (trivial) | 0.002 (!) | 1 |"
    split = report.split_by_problem(grouped)
    assert list(split) == ["boston k=253", "yacht k=20"]
    assert sorted(split["yacht k=20"]) == ["exp4mp", "uniform"]


def test_trivial_solution_is_a_line_on_the_objective_and_suboptimality_figures(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    grouped = {"exp4mp": _curves("yacht k=20", ("yacht", 20), [0.1, 0.3], 0.5, 1.0)}
    assert report.trivial_lines(grouped, "objective") == [1.0]
    assert report.trivial_lines(grouped, "suboptimality") == [0.5]
    assert report.trivial_lines(grouped, "relative_suboptimality") == [1.0]
    for metric, want in (("objective", 1.0), ("relative_suboptimality", 1.0)):
        fig, ax = plt.subplots()
        assert report._draw(ax, grouped, metric)
        flat = [line.get_ydata()[0] for line in ax.get_lines()
                if np.ptp(line.get_ydata()) == 0 and line.get_linestyle() == ":"]
        assert flat == [want], metric
        plt.close(fig)
    written = report.problem_figures(grouped, tmp_path, "t")
    assert [p.name for p in written] == ["problem_yacht.png"]
    assert written[0].read_bytes().startswith(PNG)


def test_runs_of_two_preparations_of_one_data_set_are_two_problems(tmp_path):
    # yacht min-max and yacht standardised have different optima: the report keeps
    # them apart (two columns, two sections of final_values.md, no pooled figure)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    for scale in ("minmax", "standard"):
        harness.run(game_cfg("dataset=yacht", f"dataset.scale={scale}", "p_player=uniform",
                             "budget=4000", "checkpoints=3", "tracking.enabled=true",
                             f"tracking.uri={uri}", "tracking.experiment=prep",
                             "reference.exact=true",
                             f"reference.cache_dir={tmp_path / 'cache'}"))
    out = tmp_path / "report"
    assert report.main(["--tracking-uri", uri, "--experiment", "prep", "--out", str(out),
                        "--no-log"]) == 0
    header = (out / "problems.md").read_text().splitlines()[2]
    assert header == "| configuration | yacht minmax k=20 | yacht standard k=20 |"
    sections = [line for line in (out / "final_values.md").read_text().splitlines()
                if line.startswith("## ")]
    assert sections == ["## yacht minmax k=20", "## yacht standard k=20"]
    assert not (out / "objective.png").exists() and (out / "problem_yacht.png").exists()


def test_solver_runs_report_normalised_suboptimality_against_passes(tmp_path):
    # Prospect's problem on yacht (regularised, no ball) beside the paper's problem:
    # two problems, a normalised-suboptimality table, figures against passes
    pytest.importorskip("cvxpy")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    common = ("dataset=yacht", "dataset.scale=standard", "budget=6000", "checkpoints=4",
              "tracking.enabled=true", f"tracking.uri={uri}", "tracking.experiment=solvers",
              "reference.exact=true", f"reference.cache_dir={tmp_path / 'cache'}")
    regularised = ("model=linear_mse", "model.bias=false", "model.loss_scale=2.0",
                   "constraint.level=0.5", "problem.mu_times_n=1.0", "problem.nu=1.0",
                   "problem.ball=false")
    for solver in ("prospect", "lsvrg"):
        harness.run(game_cfg(*common, *regularised, f"solver={solver}"))
    harness.run(game_cfg(*common, "constraint.level=0.5", "p_player=uniform"))
    out = tmp_path / "report"
    assert report.main(["--tracking-uri", uri, "--experiment", "solvers", "--out", str(out),
                        "--no-log", "--x", "passes"]) == 0
    text = (out / "problems.md").read_text()
    assert ("| configuration | yacht standard k=154 | yacht standard k=154 mu=0.00325 nu=1 "
            "no-ball |") in text
    assert "## normalised suboptimality" in text
    row = next(line for line in text.split("## normalised")[1].splitlines()
               if line.startswith("| prospect |"))
    assert float(row.split("|")[3]) < 1e-3  # 19 passes of Prospect: far below w = 0's 1
    figure = out / "problem_yacht.png"
    assert figure.read_bytes().startswith(PNG)


def test_passes_table_gives_each_problem_the_median_passes_to_the_target():
    def run(problem, passes, norm):
        steps = np.array([100.0, 200.0, 300.0])
        return problem, {"passes": (steps, np.array(passes, float)),
                         "normalised_suboptimality": (steps, np.array(norm, float))}

    prospect, sgd = report.Curves(), report.Curves()
    for curves, runs in ((prospect, [run("yacht esrm", [1, 2, 3], [1e-2, 1e-7, 1e-9]),
                                     run("yacht esrm", [1, 2, 3], [1e-2, 1e-5, 5e-7]),
                                     run("power esrm", [0.5, 1, 1.5], [1e-3, 1e-6, 0])]),
                         (sgd, [run("yacht esrm", [1, 2, 3], [1e-2, 1e-3, 1e-4])])):
        for seed, (problem, history) in enumerate(runs):
            name = f"s{seed}"
            curves.runs[name], curves.problem[name] = history, problem
            curves.where[name] = (problem.split()[0], 0)
    table = report.passes_table({"prospect": prospect, "sgd": sgd})
    assert table.splitlines()[0] == "| configuration | power esrm | yacht esrm |"
    rows = _rows(table)
    # prospect: power 1e-6 met (<=) at 1 pass; yacht: the seeds at 2 and 3 passes, median 2.5
    assert rows["prospect"] == "| prospect | 1 | 2.5 |"
    # sgd never gets there on yacht and did not run on power
    assert rows["sgd"] == "| sgd |  | not reached |"
    assert report.passes_table({"sgd": report.Curves()}) == ""


def test_a_set_that_names_itself_names_the_problem_and_a_split_is_part_of_it():
    params = {"dataset.scale": "standard", "dataset.split": "train", "constraint.k": "3",
              "problem.mu": "0.004", "problem.nu": "1", "problem.radius": "inf"}
    name, _ = report.problem_of(params, {"dataset": "yacht",
                                         "constraint_label": "extremile r=2"})
    assert name == "yacht standard train extremile r=2 mu=0.004 nu=1 no-ball"
    # a set without a label: its k; every row (split=all) is said by nothing
    name, _ = report.problem_of({**params, "dataset.split": "all"}, {"dataset": "yacht"})
    assert name == "yacht standard k=3 mu=0.004 nu=1 no-ball"


def _finals(values: dict[str, list[float]]) -> dict[str, report.Curves]:
    """Per configuration, one run per value: every table metric ends at value + its index."""
    grouped = {}
    for name, finals in values.items():
        curves = grouped[name] = report.Curves()
        for seed, value in enumerate(finals):
            curves.runs[f"s{seed}"] = {
                metric: (np.array([1.0, 2.0]), np.array([99.0, value + i]))
                for i, metric in enumerate(report.TABLE_METRICS)}
    return grouped


def test_the_terminal_shows_the_final_table_transposed_with_medians_the_file_keeps_all():
    grouped = _finals({"exp4mp": [0.1, 0.2, 0.3], "ru_sgd": [0.4, 0.5, 0.6]})
    kept = report.final_table(grouped)
    assert len(kept.splitlines()[0].split(" | ")) == 2 + len(report.TABLE_METRICS)
    assert "| 3 | 0.2 [0.1, 0.3] | 1.2 [1.1, 1.3] |" in kept
    shown = report.terminal_text(report.final_table(grouped, spread=False), width=80)
    lines = shown.splitlines()
    assert max(map(len, lines)) <= 80 and "|" not in shown and "[" not in shown.split("\n\n")[0]
    # one row per metric, one column per configuration, the medians aligned
    assert lines[:4] == ["configuration             exp4mp  ru_sgd",
                         "------------------------  ------  ------",
                         "seeds                          3       3",
                         "dual_gap                     0.2     0.5"]
    assert lines[2 + len(report.TABLE_METRICS)] == "wall_time_s                 12.2    12.5"
    assert "(with the min and max: final_values.md)" in shown


def test_a_table_wider_than_the_terminal_is_cut_into_blocks_that_fit():
    problems = [f"dataset{i} minmax k=20" for i in range(14)]
    grouped = {f"exp4mp eta_scale=3^{j}": _merge(*(
        _curves(p, (p.split()[0], 20), [0.01 * (j + 1)], 0.5, 1.0) for p in problems))
        for j in range(12)}
    table = report.problem_table(grouped)
    shown = report.terminal_text(table, width=80).split("\n\n")
    blocks = [b.splitlines() for b in shown if b.startswith("configuration")]
    assert len(blocks) > 2
    assert all(len(line) <= 80 for block in blocks for line in block)
    # each block repeats the first column; together they hold every cell once
    firsts = [[line.split("  ")[0] for line in block] for block in blocks]
    assert all(first == firsts[0] for first in firsts)
    cells = [line.split() for block in blocks for line in block[2:]]
    assert sorted(v for row in cells for v in row if v.startswith("0.")) == sorted(
        f"{0.01 * (j + 1):.3g}" for j in range(12) for _ in problems)


def test_each_figure_has_one_title_naming_the_metric_and_the_problem(tmp_path, monkeypatch):
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    titles = {}
    save = Figure.savefig

    def record(fig, path, *args, **kwargs):
        titles[Path(path).name] = (fig.get_suptitle(), [ax.get_title() for ax in fig.axes])
        return save(fig, path, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", record)
    one = {"exp4mp": _curves("yacht minmax k=20", ("yacht", 20), [0.1, 0.3], 0.5, 1.0)}
    report.figures(one, tmp_path, "paper")
    report.problem_figures(one, tmp_path, "paper")
    assert titles["relative_suboptimality.png"] == (
        "", ["paper: relative suboptimality on yacht minmax k=20"])
    assert titles["summary.png"] == ("paper: yacht minmax k=20", ["", ""])
    assert titles["problem_yacht.png"] == (
        "paper: relative suboptimality on yacht minmax k=20", [""])
    # panels of one data set: the title says what they share, each panel the rest
    two = {"exp4mp": _merge(one["exp4mp"], _curves("yacht minmax k=154", ("yacht", 154),
                                                   [0.2], 0.4, 1.0))}
    report.problem_figures(two, tmp_path, "paper")
    assert titles["problem_yacht.png"] == (
        "paper: relative suboptimality on yacht minmax", ["k=20", "k=154"])
    # too long for one line: a line per part
    assert report.figure_title(["paper: normalised suboptimality (F - F*) / (F(w_0) - F*)",
                                "on yacht minmax k=20"], 5.2, 10.0) == (
        "paper: normalised suboptimality (F - F*) / (F(w_0) - F*)\non yacht minmax k=20")
