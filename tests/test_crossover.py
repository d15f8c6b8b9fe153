"""The crossover study (``tools/crossover.py``, docs/crossover.md): its report's
cells, certified suboptimalities, tables and verdicts on synthetic run records,
and (``slow``) the whole study end to end on a tiny grid."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from harness.runs import RunRecord

ROOT = Path(__file__).resolve().parents[1]


def _tool():
    spec = importlib.util.spec_from_file_location("crossover_tool", ROOT / "tools" / "crossover.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["crossover_tool"] = module
    spec.loader.exec_module(module)
    return module


xo = _tool()

PROBLEM = {"dataset.name": "synthetic", "dataset.d": "20"}
STEPS = np.array([10.0, 100.0, 1000.0])


def _run(algorithm: str, n: int, budget: float, level: str, objective: float, *,
         scales: dict[str, float] | None = None, lower: list[float] | None = None,
         opt: tuple[float, float] | None = None, passes: float | None = None,
         wall: float = 1.0, seed: int = 0, d: str = "20") -> RunRecord:
    """A finished run's record as the MLflow tracker gives it: params as text, the
    final objective last in its history (an earlier, higher value before it)."""
    game = algorithm in ("exp_ix_m", "exp4mp", "ru_sgd")
    params = {"dataset.name": "synthetic", "dataset.d": d, "dataset.n": str(n),
              "budget_passes": str(budget), "constraint.level": "None" if level == "null"
              else level, "seed": str(seed),
              "solver.name": "game" if game else algorithm}
    if game:
        params.update({"p_player.name": algorithm, "p_player.state": "tree",
                       "p_player.eta_scale": "1.0", "w_player.lr_scale": "1.0"})
        if algorithm == "exp4mp":
            params["p_player.confidence"] = "sampled"
    else:
        params["solver.lr_scale"] = "1.0"
    for key, value in (scales or {}).items():
        params[key] = repr(value)
    if opt is not None:
        params["opt"], params["opt_lower"] = repr(opt[0]), repr(opt[1])
        params["opt_solver"] = "CLARABEL"
    metrics = {"objective": (STEPS, np.array([objective * 3, objective * 2, objective])),
               "wall_time_s": (STEPS, np.array([0.0, wall / 2, wall])),
               "passes": (STEPS, np.array([0.0, 0.0, budget if passes is None else passes]))}
    if lower is not None:
        metrics["inner_min_lower" if game else "dual_lower"] = (STEPS, np.array(lower))
    return RunRecord(id=f"{algorithm}-{n}-{budget}-{level}-{seed}", name=algorithm,
                     status="FINISHED", start_time=0.0, params=params,
                     tags={"algorithm": algorithm}, metrics=metrics)


GRID = xo.Grid(n=[1000, 10000], budgets=[0.1, 1.0], levels=["null", "0.01"],
               algorithms=["exp_ix_m", "sgd"])
#: sgd's selection at 1 pass, k = 20 is lr_scale 3; every other selection is the theory step
SELECTIONS = {("sgd", 1.0, "null"): {"selected": {"solver.lr_scale": 3.0},
                                     "edge": {"solver.lr_scale": False}},
              ("exp_ix_m", 1.0, "null"): {"selected": {"p_player.eta_scale": 1.0,
                                                       "w_player.lr_scale": 1.0},
                                          "edge": {}}}


def _records() -> list[RunRecord]:
    """At 1 pass, k = 20: sgd (tuned) wins at n = 1e3, exp_ix_m at n = 1e4 (a
    crossover); at n = 1e3 OPT is exact, at n = 1e4 the lower end is the largest
    dual bound any run produced (sgd's at 0.1 passes, and not at its last
    checkpoint). At 0.1 passes, k = 20, sgd wins at both n."""
    return [
        _run("exp_ix_m", 1000, 1.0, "null", 0.30, opt=(0.101, 0.100), lower=[0.0, 0.05, 0.04]),
        _run("sgd", 1000, 1.0, "null", 0.40, opt=(0.101, 0.100)),
        _run("sgd", 1000, 1.0, "null", 0.20, opt=(0.101, 0.100),
             scales={"solver.lr_scale": 3.0}),
        # tuned seeds 0, 1, 2 at n = 1e4: the cell is their median (0.30; the mean is 0.307)
        _run("exp_ix_m", 10000, 1.0, "null", 0.25, lower=[0.0, 0.12, 0.11]),
        _run("sgd", 10000, 1.0, "null", 0.50),
        _run("sgd", 10000, 1.0, "null", 0.26, scales={"solver.lr_scale": 3.0}),
        _run("sgd", 10000, 1.0, "null", 0.36, scales={"solver.lr_scale": 3.0}, seed=1),
        _run("sgd", 10000, 1.0, "null", 0.30, scales={"solver.lr_scale": 3.0}, seed=2),
        _run("exp_ix_m", 1000, 0.1, "null", 0.60, opt=(0.101, 0.100)),
        _run("sgd", 1000, 0.1, "null", 0.50, opt=(0.101, 0.100), passes=1.0),
        _run("exp_ix_m", 10000, 0.1, "null", 0.70),
        _run("sgd", 10000, 0.1, "null", 0.65, lower=[0.15, 0.2, 0.19]),
        # left out: multipliers that are neither the theory step nor the selection,
        # another problem (d = 10), an n outside the grid
        _run("sgd", 1000, 1.0, "null", 0.15, scales={"solver.lr_scale": 9.0}),
        _run("sgd", 1000, 1.0, "null", 0.01, opt=(0.0, 0.0), d="10"),
        _run("sgd", 500, 1.0, "null", 0.01),
        # k = n/100 at 1 pass, n = 1e4 only, without any lower bound
        _run("exp_ix_m", 10000, 1.0, "0.01", 0.33),
    ]


def _cells():
    cells, bounds, left_out = xo.collect(_records(), GRID, SELECTIONS, PROBLEM)
    return {(c.algorithm, c.step, c.n, c.budget, c.level): c for c in cells}, bounds, left_out


def test_collect_cells_steps_and_bounds():
    """Runs are grouped by algorithm, step (theory: every multiplier 1; tuned: the
    selection), n, budget and k form, the cell holding the median over seeds of
    the final values; runs at other multipliers or of another problem or n are
    left out; OPT's lower end is the largest certified lower bound of any run on
    the problem (the exact OPT's, else the best dual bound over every checkpoint)
    and its upper end the least objective seen."""
    cells, bounds, left_out = _cells()
    assert left_out == 3
    assert len(cells) == 11
    tuned = cells[("sgd", "tuned", 10000, 1.0, "null")]
    assert tuned.objective == pytest.approx(0.30) and tuned.seeds == 3
    assert cells[("sgd", "theory", 1000, 1.0, "null")].objective == pytest.approx(0.40)
    assert ("exp_ix_m", "tuned", 1000, 1.0, "null") not in cells  # its selection is theory
    # n = 1e3: the exact OPT's lower end beats exp_ix_m's dual bound (0.05)
    assert bounds[(1000, "null")].lower == pytest.approx(0.100)
    assert bounds[(1000, "null")].exact
    assert bounds[(1000, "null")].upper == pytest.approx(0.101)
    # n = 1e4: sgd's dual bound at 0.1 passes, its best checkpoint (0.2, not the last 0.19)
    b = bounds[(10000, "null")]
    assert b.lower == pytest.approx(0.2) and "sgd" in b.source and not b.exact
    assert b.upper == pytest.approx(0.25) and b.width == pytest.approx(0.05)
    assert bounds[(10000, "0.01")].lower is None


def test_table_suboptimality_marks_and_missing_bound():
    """A table cell is objective - OPT's lower end; the tuned row names its
    multipliers, a selection equal to the theory step is one row 'theory=tuned';
    a run that spent more than its budget in passes is marked; a problem with no
    lower end shows the objective, said as such; a refused combination is a row."""
    cells, bounds, _ = xo.collect(_records(), GRID, SELECTIONS, PROBLEM)
    text = xo.table(cells, bounds, GRID, SELECTIONS,
                    {"sgd 0.1 0.01": "needs a pass"}, 1.0, "null")
    rows = {tuple(c.strip() for c in line.split("|")[1:3]): [c.strip() for c in
                                                             line.split("|")[3:-1]]
            for line in text.splitlines() if line.startswith("| ") and "---" not in line}
    assert rows[("sgd", "tuned lr_scale=3")] == [f"{0.20 - 0.100:.3g}", f"{0.30 - 0.2:.3g}"]
    assert rows[("sgd", "theory")] == [f"{0.40 - 0.100:.3g}", f"{0.50 - 0.2:.3g}"]
    assert rows[("exp_ix_m", "theory=tuned")] == rows[("exp_ix_m", "theory")]
    assert rows[("interval width", "")] == [f"{0.001:.3g}", f"{0.05:.3g}"]
    assert "needs a pass" not in text  # refused at another budget and k form
    low = xo.table(cells, bounds, GRID, SELECTIONS, {"sgd 0.1 0.01": "needs a pass"},
                   0.1, "null")
    assert "0.4 †" in low and "†: the run spent more passes" in low  # 0.5 - 0.1 at 1 pass
    nolower = xo.table(cells, bounds, GRID, SELECTIONS, {"sgd 1 0.01": "needs a pass"},
                       1.0, "0.01")
    assert "objective 0.33" in nolower and "no certified lower end" in nolower
    assert "| sgd | not run |" in nolower and "needs a pass" in nolower


def test_summary_finds_the_crossover():
    """The verdicts come from the numbers: at 1 pass, k = 20, sgd (tuned) wins at
    n = 1e3 and exp_ix_m at 1e4, so a bandit p-player wins from 1e4 on; at the
    theory steps alone exp_ix_m wins at both n; at 0.1 passes sgd wins at both n,
    so no bandit p-player wins there."""
    cells, bounds, _ = xo.collect(_records(), GRID, SELECTIONS, PROBLEM)
    text = xo.summary(cells, bounds, GRID)
    blocks = {b.split("**")[1]: b for b in text.split("\n\n") if b.startswith("**")}
    one = blocks["1 pass, k=20"]
    assert "n = 1e3: sgd (tuned, suboptimality 0.1) ahead of exp_ix_m (theory)" in one
    assert "theory or tuned step: a bandit p-player wins at every n >= 1e4" in one
    assert "theory steps only: a bandit p-player wins at every n >= 1e3" in one
    ratio = 0.25 / 0.30  # at n = 1e4: exp_ix_m over the best of the rest (sgd tuned)
    assert f"objective is {ratio:.3g} times sgd's" in one
    # at 0.1 passes sgd's n = 1e3 cell spent a whole pass (†): not ranked, so exp_ix_m
    # wins there; sgd wins at n = 1e4
    tenth = blocks["0.1 passes, k=20"]
    assert "n = 1e3: exp_ix_m (theory" in tenth and "n = 1e4: sgd (theory" in tenth
    assert "a bandit p-player wins at n = 1e3 but not at the largest n (1e4)" in tenth
    assert "1 pass, k=n/100" in blocks and "exp_ix_m (theory)" in blocks["1 pass, k=n/100"]


def test_algorithms_are_told_apart_by_their_params():
    """A run is the study's algorithm whose overrides its params hold (a group's
    option as ``<group>.name``); exp_ix_m only with the tree state."""
    assert xo.spec_of({"solver.name": "game", "p_player.name": "exp_ix_m",
                       "p_player.state": "tree"}) == "exp_ix_m"
    assert xo.spec_of({"solver.name": "game", "p_player.name": "exp_ix_m",
                       "p_player.state": "dense"}) is None
    assert xo.spec_of({"solver.name": "game", "p_player.name": "exp4mp",
                       "p_player.confidence": "sampled", "p_player.state": "tree"}) == "exp4mp"
    assert xo.spec_of({"solver.name": "game", "p_player.name": "exp4mp"}) is None
    assert xo.spec_of({"solver.name": "lsvrg"}) == "lsvrg"


@pytest.mark.slow
def test_tiny_study_end_to_end(tmp_path, monkeypatch):
    """The whole study on a tiny grid (n = 1e3, 1e4; 0.1 and 1 pass; exp_ix_m and
    sgd): tuning, grid, report with both figures; a relaunch skips every sweep."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    args = ["--out", str(tmp_path / "study"), "--n", "1000,10000", "--budgets", "0.1,1",
            "--algorithms", "exp_ix_m,sgd", "--jobs", "2"]
    assert xo.main(args) == 0
    report = tmp_path / "study" / "report"
    assert {"crossover.md", "cells.json", "suboptimality_vs_n.png",
            "wall_time_vs_n.png"} <= {p.name for p in report.iterdir()}
    cells = json.loads((report / "cells.json").read_text())["cells"]
    assert {(c["algorithm"], c["n"]) for c in cells} == {
        (a, n) for a in ("exp_ix_m", "sgd") for n in (1000, 10000)}
    assert all(math.isfinite(c["objective"]) for c in cells)
    text = (report / "crossover.md").read_text()
    assert "## Who wins where" in text and "interval width" in text
    done = sorted((tmp_path / "study" / "sweeps").glob("*/done.json"))
    assert len(done) >= 10
    before = {p: p.stat().st_mtime_ns for p in done}
    assert xo.main(args) == 0  # resumed: nothing is launched again
    assert {p: p.stat().st_mtime_ns for p in done} == before


def test_a_refusal_at_one_n_is_shown_in_its_cell_and_under_the_table():
    """A combination the harness refuses at one n only (a key ``algorithm budget
    level n=N`` of ``refused``, as ``check_feasible`` records a game's per-n
    refusal) shows "refused" in its cell and the harness's reason under the table;
    its sweep leaves that n out, and a combination refused at every n has no sweep."""
    grid = xo.Grid(n=[1000, 10**6, 10**7], budgets=[10.0], levels=["null", "0.01"],
                   algorithms=["exp4mp", "sgd"])
    why = "exp4mp's theory gamma needs T >= n log(n/k) / k (Theorem 4.1)"
    refused = {"exp4mp 10 null n=10000000": why}
    run = _run("exp4mp", 1000, 10.0, "null", 0.3, opt=(0.1, 0.1))
    cells, bounds, _ = xo.collect([run], grid, {}, PROBLEM)
    text = xo.table(cells, bounds, grid, {}, refused, 10.0, "null")
    assert "| exp4mp | theory | 0.2 | - | refused ‡ |" in text
    assert f"‡ exp4mp at n = 1e7 refused by the harness: {why}" in text
    # with no run yet, the refused cell still shows
    empty = xo.table([], {}, grid, {}, refused, 10.0, "null")
    assert "| exp4mp | theory | - | - | refused ‡ |" in empty
    # the grid sweep leaves n = 1e7 out; refused at every n: no sweep at all
    args = SimpleNamespace(out=Path("/nowhere"), experiment="crossover", tracking_uri=None)
    feasible = {"exp4mp": [(10.0, "null")]}
    sweeps = xo.grid_sweeps(args, grid, feasible, {}, refused)
    assert [o for o in sweeps[0].overrides if o.startswith("dataset.n=")] == [
        "dataset.n=1000000,1000"]
    everywhere = {f"exp4mp 10 null n={n}": why for n in grid.n}
    assert xo.grid_sweeps(args, grid, feasible, {}, everywhere) == []


def test_check_feasible_prepares_games_at_every_n(monkeypatch):
    """``check_feasible`` prepares a game accepted at the smallest n at every other n
    too, and records a refusal there per n; a whole-algorithm solver is prepared at
    the smallest n only."""
    import harness

    prepared = []

    def compose(overrides, quiet=True):
        return dict(o.split("=", 1) for o in overrides)

    def prepare(cfg):
        prepared.append((cfg.get("solver"), int(cfg["dataset.n"])))
        if cfg.get("p_player") == "exp4mp" and int(cfg["dataset.n"]) > 10**5:
            raise harness.ConfigError("gamma > 1: T below n log(n/k) / k (Theorem 4.1)")
        return object()

    monkeypatch.setattr(harness, "compose", compose)
    monkeypatch.setattr(harness, "prepare", prepare)
    grid = xo.Grid(n=[1000, 10**6, 10**5], budgets=[10.0], levels=["null"],
                   algorithms=["exp4mp", "sgd"])
    feasible, refused = xo.check_feasible(grid, progress=lambda text: None)
    assert feasible == {"exp4mp": [(10.0, "null")], "sgd": [(10.0, "null")]}
    assert refused == {"exp4mp 10 null n=1000000":
                       "gamma > 1: T below n log(n/k) / k (Theorem 4.1)"}
    assert sorted(prepared) == [("game", 1000), ("game", 10**5), ("game", 10**6),
                                ("sgd", 1000)]


def test_a_cached_check_without_per_n_checks_is_redone():
    """``study.json`` of an older check (no version: no per-n checks) or of another
    grid is not reused."""
    grid = xo.Grid(n=[1000, 10000], budgets=[1.0], levels=["null"], algorithms=["sgd"])
    saved = {"grid": {"n": [1000, 10000], "budgets": [1.0], "levels": ["null"],
                      "algorithms": ["sgd"], "seeds": [0]}, "feasible": {}, "refused": {}}
    assert not xo.cached_check_valid(saved, grid)
    assert xo.cached_check_valid({**saved, "version": xo.CHECK_VERSION}, grid)
    other = xo.Grid(n=[1000, 10**5], budgets=[1.0], levels=["null"], algorithms=["sgd"])
    assert not xo.cached_check_valid({**saved, "version": xo.CHECK_VERSION}, other)


def test_an_over_budget_cell_does_not_win():
    """A cell whose run spent more passes than its budget (the full-batch baseline
    at 0.1 passes spends a whole pass) stays in the table (†) but is not ranked,
    said once in the summary."""
    grid = xo.Grid(n=[1000], budgets=[0.1], levels=["null"],
                   algorithms=["exp_ix_m", "full_batch"])
    runs = [_run("exp_ix_m", 1000, 0.1, "null", 0.5, opt=(0.1, 0.1)),
            _run("full_batch", 1000, 0.1, "null", 0.2, opt=(0.1, 0.1), passes=1.0)]
    cells, bounds, _ = xo.collect(runs, grid, {}, PROBLEM)
    assert "| full_batch | theory | 0.1 † |" in xo.table(cells, bounds, grid, {}, {},
                                                       0.1, "null")
    text = xo.summary(cells, bounds, grid, {})
    assert "n = 1e3: exp_ix_m (theory" in text and "ahead of" not in text
    assert "full_batch (theory" not in text
    assert text.count("left out of every ranking: full_batch at 0.1 passes") == 1
    assert "the paper's claim holds here" in text


def test_a_missing_competitor_suppresses_the_verdict_at_its_n():
    """At an n where an algorithm of the grid that is not refused there has no
    finished cell, the summary names it and gives no verdict resting on that n; an
    algorithm refused at that n is not missing."""
    grid = xo.Grid(n=[1000, 10000], budgets=[1.0], levels=["null"],
                   algorithms=["exp_ix_m", "sgd"])
    runs = [_run("exp_ix_m", 1000, 1.0, "null", 0.5, opt=(0.1, 0.1)),
            _run("sgd", 1000, 1.0, "null", 0.3, opt=(0.1, 0.1)),
            _run("exp_ix_m", 10000, 1.0, "null", 0.2)]  # sgd at n = 1e4: not finished
    cells, bounds, _ = xo.collect(runs, grid, {}, PROBLEM)
    text = xo.summary(cells, bounds, grid, {})
    assert "n = 1e4: exp_ix_m (theory" in text and "without sgd (no finished run)" in text
    assert "wins at every n" not in text and "claim holds" not in text
    assert "no verdict on the paper's claim: at the largest n (1e4) there is no " \
           "finished run of sgd" in text
    # sgd refused at n = 1e4: exp_ix_m wins there against every algorithm that runs
    text = xo.summary(cells, bounds, grid, {"sgd 1 null n=10000": "refused"})
    assert "without sgd" not in text
    assert "a bandit p-player wins at every n >= 1e4: the paper's claim holds here" in text
    # missing at the smaller n only: the claim at the largest n holds, the crossover is open
    runs = [_run("exp_ix_m", 1000, 1.0, "null", 0.5, opt=(0.1, 0.1)),
            _run("exp_ix_m", 10000, 1.0, "null", 0.2),
            _run("sgd", 10000, 1.0, "null", 0.3)]
    cells, bounds, _ = xo.collect(runs, grid, {}, PROBLEM)
    text = xo.summary(cells, bounds, grid, {})
    assert "the paper's claim holds at the largest n; where the crossover lies is open " \
           "(at n = 1e3 there is no finished run of sgd)" in text
    assert "every n >= 1e3" not in text


def test_a_run_of_another_k_or_problem_is_not_pooled():
    """A run of another k than the study's (the logged, resolved ``constraint.k``),
    radius, loss scale or split is left out of the cells and of OPT's bounds; a key
    a run does not log does not leave it out."""
    grid = xo.Grid(n=[1000], budgets=[1.0], levels=["null", "0.01"], algorithms=["sgd"])
    problem = {**PROBLEM, "problem.radius": "1.0", "model.loss_scale": xo.AUTO_SCALE,
               "dataset.split": "all"}

    def run(objective, level="null", **params):
        r = _run("sgd", 1000, 1.0, level, objective, opt=(objective, objective))
        r.params.update({"constraint.k": "20" if level == "null" else "10",
                         "problem.radius": "1.0", "model.loss_scale": "18.4",
                         "model.loss_bound": "18.4", **params})
        return r

    runs = [run(0.3), run(0.4, level="0.01"),
            run(0.01, **{"constraint.k": "50"}),        # another k at level null
            run(0.02, level="0.01", **{"constraint.k": "20"}),  # not floor(0.01 n)
            run(0.03, **{"problem.radius": "10.0"}),
            run(0.04, **{"model.loss_scale": "2.0"}),
            run(0.05, **{"dataset.split": "train"})]
    bare = _run("sgd", 1000, 1.0, "null", 0.35)  # logs none of the new keys: kept
    cells, bounds, left_out = xo.collect(runs + [bare], grid, {}, problem)
    assert left_out == 5
    by = {(c.level): c for c in cells}
    assert by["null"].objective == pytest.approx(0.325) and by["null"].seeds == 2
    assert by["0.01"].objective == pytest.approx(0.4)
    assert bounds[(1000, "null")].lower == pytest.approx(0.3)
    assert bounds[(1000, "0.01")].lower == pytest.approx(0.4)
    assert {"constraint.k", "problem.radius", "model.loss_scale", "dataset.split"} <= (
        set(xo.PROBLEM_KEYS) | {"constraint.k"})
