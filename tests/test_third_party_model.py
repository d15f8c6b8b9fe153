"""Third-party models under every solver and the game, against the exact OPT.

The models of ``tests/third_party/mmb_toy_models`` are registered as an
installed package registers its own: ``huber_linear`` (numpy only, no
compiled form: the row solvers run their kernel templates as plain Python
over its ``value_and_grad``, the game its Python loop) and
``ovr_squared_hinge`` (a compiled form with the batch and the row roles: the
templates are specialised to its kernels, the game plays its compiled
driver). Each run's suboptimality is measured against the exact OPT
(``plugins.metrics.optimum``, cvxpy) on synthetic data (n = 60, d = 4, data
seed 3), the k-set with k = 15, run seed 0.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest

import harness
from plugins.solvers.row_solver import protocol_row_loss

sys.path.insert(0, str(Path(__file__).resolve().parent / "third_party"))
import mmb_toy_models  # noqa: E402

N = 60
#: the regularised, smoothed problem (a ball, strongly convex, smooth)
SMOOTH = {"mu": 0.1, "nu": 1.0, "radius": 2.0}
#: the paper's problem (the game's)
PAPER = {"mu": 0.0, "nu": 0.0, "radius": 1.0}
MODELS = {"huber_linear": "regression", "ovr_squared_hinge": "classification"}
#: relative suboptimality after 60 passes on SMOOTH (measured: 4e-16 to 2e-11,
#: SGD 5e-5 and 9e-5: its schedule is sublinear)
TOLERANCE = {"prospect": 1e-9, "lsvrg": 1e-9, "full_batch": 1e-9, "sgd": 1e-3}


def _registry() -> harness.Registry:
    return harness.Registry(harness.make_plugin_manager([mmb_toy_models]))


def _cfg(solver: dict, model: str, problem: dict, budget: int, **over) -> dict:
    cfg = {"solver": solver, "model": {"name": model},
           "dataset": {"name": "synthetic", "n": N, "d": 4, "seed": 3, "task": MODELS[model]},
           "constraint": {"name": "kset", "k": 15}, "problem": problem, "budget": budget,
           "seed": 0, "checkpoints": 4, "tracking": {"enabled": False}, "state_dir": None,
           "reference": {"exact": "true", "rtol": 1e-9}}
    cfg.update(over)
    return cfg


def _huber_step(prep: harness.Prepared) -> float:
    """``1 / L_F`` for huber_linear on SMOOTH from its protocol: ``L_row +
    G^2 / nu + mu`` with ``G = delta R / scale``, its rows' gradient bound at
    any radius (``|clip(r, -delta, delta)| <= delta``)."""
    model, F = prep.parts.problem.model, prep.parts.problem
    G = model.delta * model.R_ / model.scale_
    return 1.0 / (model.row_smoothness(F.X) + G * G / F.nu + F.mu)


@pytest.mark.parametrize("model", sorted(MODELS))
@pytest.mark.parametrize("solver", ["prospect", "lsvrg", "sgd", "full_batch"])
def test_a_third_party_model_reaches_the_exact_opt_under_every_solver(solver, model):
    # SMOOTH, 60 passes, seed 0: relative suboptimality against the exact OPT
    # below TOLERANCE[solver]. huber_linear declares no row_grad_bound, so
    # full_batch (agd) is given the step 1/L_F its protocol bounds
    pytest.importorskip("cvxpy")
    cfg = _cfg({"name": solver}, model, SMOOTH, 60 * N)
    if solver == "full_batch" and model == "huber_linear":
        with pytest.raises(harness.ConfigError, match="no row_grad_bound: give solver.lr"):
            harness.prepare(cfg, _registry())
        lr = _huber_step(harness.prepare(_cfg({"name": "prospect"}, model, SMOOTH, N),
                                         _registry()))
        cfg["solver"] = {"name": solver, "lr": lr}
    metrics = harness.play(harness.prepare(cfg, _registry()))
    assert metrics["relative_suboptimality"] <= TOLERANCE[solver], metrics


@pytest.mark.parametrize(("model", "budget", "bound"),
                         [("huber_linear", 300_000, 0.01), ("ovr_squared_hinge", 10**6, 0.2)])
def test_a_third_party_model_approaches_the_exact_opt_in_the_game(model, budget, bound):
    # PAPER, EXP4.MP against OGD, seed 0 (ovr_squared_hinge on the compiled
    # driver, huber_linear on the Python loop): normalised suboptimality against
    # the exact OPT below `bound` (measured 0.0036 and 0.090; the game's rate is
    # O(1/sqrt(T))) and below the value at a tenth of the budget
    pytest.importorskip("cvxpy")
    from harness import engine

    final = {}
    for spent in (budget // 10, budget):
        cfg = _cfg({"name": "game"}, model, PAPER, spent, p_player={"name": "exp4mp"},
                   w_player={"name": "ogd"})
        prep = harness.prepare(cfg, _registry())
        # the compiled driver with the model's batch roles, else the Python loop
        compiled = isinstance(engine.forms(prep.parts), engine.Forms)
        assert compiled == (model == "ovr_squared_hinge")
        final[spent] = harness.play(prep)
    assert final[budget]["normalised_suboptimality"] <= bound, final[budget]
    assert (final[budget]["normalised_suboptimality"]
            < final[budget // 10]["normalised_suboptimality"])


@pytest.mark.parametrize("solver", ["prospect", "lsvrg", "sgd"])
def test_the_python_path_takes_the_compiled_paths_steps(solver):
    # ovr_squared_hinge on SMOOTH, 20 passes, seed 0: the solver's kernel
    # template run as plain Python over value_and_grad (the model's methods
    # replaced on the instance, so its compiled form is not used) ends at the
    # iterate of the template compiled on its row roles, to 1e-9 relative
    # (the two evaluate a row by different arithmetic: rounding only)
    ends = {}
    for path in ("compiled", "python"):
        prep = harness.prepare(_cfg({"name": solver}, "ovr_squared_hinge", SMOOTH, 20 * N,
                                    reference={"exact": "false"}), _registry())
        model, problem, solver_ = prep.parts.problem.model, prep.parts.problem, prep.parts.solver
        if path == "python":
            model.value_and_grad = model.value_and_grad  # replaced on the instance
        solver_.setup(problem, 20 * N)
        solver_.advance(problem, np.random.default_rng(0), 20 * N)
        ends[path] = np.array(solver_.w)
        kernels, _ = solver_._kernels(problem)
        assert (kernels.m_row_loss is protocol_row_loss) == (path == "python")
    scale = float(np.max(np.abs(ends["compiled"])))
    assert scale > 0 and math.isfinite(scale)
    assert np.max(np.abs(ends["python"] - ends["compiled"])) <= 1e-9 * scale


@pytest.mark.parametrize("model", sorted(MODELS))
def test_sgd_takes_the_theory_schedule_for_a_third_party_model_on_the_papers_problem(model):
    # PAPER (nu = 0, mu = 0, radius 1), seed 0: the model's declared loss_bound
    # gives SGD the nonsmooth sqrt schedule of its theory (t0 = 1, tau_lr =
    # (U - 0) / (n max_i c_i - 1), U = loss_bound / scale), and 500 passes
    # bring the normalised suboptimality against the exact OPT below 0.05
    # (measured 9e-4 and 0.029: the rate is O(1/sqrt(T)))
    pytest.importorskip("cvxpy")
    from plugins.solvers.sgd import SGD

    prep = harness.prepare(_cfg({"name": "sgd"}, model, PAPER, 500 * N), _registry())
    problem = prep.parts.problem
    toy = problem.model
    assert math.isfinite(toy.loss_bound)
    logged = SGD().setup(problem, 0)
    spread = N * float(np.max(problem.constraint.row_caps()))
    assert logged["t0"] == 1.0
    assert logged["tau_lr"] == pytest.approx(
        toy.loss_bound / problem.scale / (spread - 1.0), rel=1e-12)
    metrics = harness.play(prep)
    assert metrics["normalised_suboptimality"] <= 0.05, metrics
