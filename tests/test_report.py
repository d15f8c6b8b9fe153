"""The report command on the output of a real multirun (Hydra + MLflow, no mocks)."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import harness
from harness import report

from conftest import game_cfg

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """A 2-algorithm x 2-seed sweep in a temporary SQLite store."""
    where = tmp_path_factory.mktemp("sweep")
    uri = f"sqlite:///{where}/mlflow.db"
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    done = subprocess.run(
        [sys.executable, "-m", "harness", "--multirun", "p_player=exp4mp,ftrl", "seed=0,1",
         "budget=6000", "checkpoints=6", "constraint.k=10", f"tracking.uri={uri}",
         "tracking.experiment=tiny", f"hydra.sweep.dir={where}/multirun"],
        cwd=where, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return where, uri


def test_report_writes_figures_and_table_and_logs_them(sweep, capsys):
    where, uri = sweep
    out = where / "report"
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
    logged = [r for r in client.search_runs([exp.experiment_id])
              if r.data.tags.get(report.REPORT_TAG) == "1"]
    assert len(logged) == 1
    names = {a.path for a in client.list_artifacts(logged[0].info.run_id)}
    assert {"dual_gap.png", "summary.png", "final_values.md"} <= names
    # a second report ignores the first report's run and the sweep's parent run
    grouped = report.load(uri, "tiny")
    assert sorted(grouped) == ["exp4mp", "ftrl"]
    assert all(len(c.runs) == 2 for c in grouped.values())


def test_table_values_are_the_median_min_max_of_the_last_checkpoints(sweep):
    _, uri = sweep
    grouped = report.load(uri, "tiny")
    finals = np.array([h["dual_gap"][1][-1] for h in grouped["exp4mp"].runs.values()])
    table = report.final_table(grouped)
    row = next(line for line in table.splitlines() if line.startswith("| exp4mp"))
    assert (f"{np.median(finals):.4g} [{finals.min():.4g}, {finals.max():.4g}]") in row
    steps, med, lo, hi = report.band(grouped["exp4mp"], "dual_gap")
    assert steps[-1] == 6000 and np.all(lo <= med) and np.all(med <= hi)


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
    assert lines[0] == "| algorithm | boston k=253 | yacht k=20 |"
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
    assert header == "| algorithm | yacht minmax k=20 | yacht standard k=20 |"
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
    assert ("| algorithm | yacht standard k=154 | yacht standard k=154 mu=0.00325 nu=1 "
            "no-ball |") in text
    assert "## normalised suboptimality" in text
    row = next(line for line in text.split("## normalised")[1].splitlines()
               if line.startswith("| prospect |"))
    assert float(row.split("|")[3]) < 1e-3  # 19 passes of Prospect: far below w = 0's 1
    figure = out / "problem_yacht.png"
    assert figure.read_bytes().startswith(PNG)
