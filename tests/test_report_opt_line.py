"""The report with the exact optimum: the param ``opt`` reaches MLflow, the
objective figure draws it as a horizontal line, and the final-value table
and ``suboptimality.png`` show the suboptimality."""

from __future__ import annotations

import numpy as np
import pytest

import harness
from harness import report

from conftest import game_cfg

pytest.importorskip("cvxpy")


def test_report_draws_opt_and_tabulates_suboptimality(tmp_path, tracking_uri):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    for p_player in ("ru_sgd", "uniform"):
        harness.run(game_cfg(f"p_player={p_player}", "dataset=boston", "budget=4000",
                             "checkpoints=4", "tracking.enabled=true",
                             f"tracking.uri={tracking_uri}", "tracking.experiment=ref",
                             "reference.exact=true", f"reference.cache_dir={tmp_path / 'cache'}"))
    grouped = report.load(tracking_uri, "ref")
    assert sorted(grouped) == ["ru_sgd", "uniform"]
    opts = report.reference_lines(grouped)
    assert len(opts) == 1 and opts[0] == pytest.approx(0.005952948, rel=1e-6)

    fig, ax = plt.subplots()
    assert report._draw(ax, grouped, "objective")
    flat = [line for line in ax.get_lines()  # OPT dashed; w = 0 is the dotted line
            if np.ptp(line.get_ydata()) == 0 and line.get_linestyle() == "--"]
    assert [line.get_ydata()[0] for line in flat] == [opts[0]]
    plt.close(fig)

    table = report.final_table(grouped)
    header = table.splitlines()[0]
    assert "| suboptimality | relative_suboptimality |" in header
    written = {path.name for path in report.figures(grouped, tmp_path, "ref")}
    assert {"objective.png", "suboptimality.png", "summary.png"} <= written


def test_reference_lines_keep_one_value_per_problem():
    a, b = report.Curves(), report.Curves()
    a.opt = {"r1": 0.25, "r2": 0.25}
    b.opt = {"r3": 0.25 * (1 + 1e-12), "r4": 0.125}
    assert report.reference_lines({"x": a, "y": b}) == [0.125, 0.25]
    assert report.reference_lines({"x": report.Curves()}) == []
