"""The variance-reduced solvers (``prospect``, ``lsvrg``) and their incremental
best response (``plugins.solvers.best_response``): exactness against brute force and
against dense transcriptions of the algorithms, convergence to an independent
optimum, bitwise resume, counters and refusals."""

from __future__ import annotations

import math
import pickle

import numpy as np
import pytest
from scipy import optimize

import harness
from harness.problem import Problem
from plugins.lib.capped import capped_simplex_euclidean
from plugins.solvers.best_response import BestResponse, best_response_dense
from plugins.solvers.lsvrg import LSVRG
from plugins.solvers.prospect import Prospect
from plugins.solvers.set_form import caps_form
from plugins.solvers.sgd import SGD

SOLVERS = (Prospect, LSVRG)


class _Rows:
    def __init__(self, X, y):
        self.X, self.y, self.n_classes = X, y, int(y.max()) + 1 if y.dtype.kind == "i" else 0


def yacht_problem(n: int = 40, seed: int = 0, nu: float = 1.0, radius: float = math.inf,
                  model: str = "linear_mse") -> Problem:
    """The DRO literature's problem on a subsample of yacht (seeded): k = n/2,
    mu = 1/n, loss_scale 2, no bias."""
    data = harness.build("dataset", "yacht", scale="standard")
    rows = np.random.default_rng(seed).choice(data.y.size, n, replace=False)
    sub = _Rows(data.X[rows], data.y[rows])
    if model == "linear_mse":
        m = harness.build("model", "linear_mse", bias=False, loss_scale=2.0)
    else:  # a two-class problem: target above its median
        sub = _Rows(sub.X, (sub.y > np.median(sub.y)).astype(np.int64))
        m = harness.build("model", "logistic_cel", loss_scale=1.0)
    m.setup(sub, radius)
    K = harness.build("constraint_set", "kset", n=n, k=n // 2)
    return Problem(sub.X, sub.y, m, K, mu=1.0 / n, nu=nu, radius=radius)


def f_star(problem: Problem) -> float:
    """``min F`` by scipy's L-BFGS-B on F (smooth: nu > 0), independent of the solvers."""
    res = optimize.minimize(lambda w: problem.value_and_grad(w)[:2], np.zeros(problem.n_params),
                            jac=True, method="L-BFGS-B",
                            options={"maxiter": 20000, "ftol": 1e-16, "gtol": 1e-13, "maxcor": 30})
    return float(res.fun)


# ---------------------------------------------------------------------------
# (a) the incremental best response against brute force
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("n, caps_kind, nu", [
    (60, "kset", 1.0), (200, "kset", 0.3), (50, "simplex", 1.0), (80, "alpha", 1.0),
    (60, "kset", 0.0), (7, "kset", 1.0),
])
def test_best_response_matches_brute_force(n, caps_kind, nu):
    """Seed 1; 1500 random one-row updates (a third of them copying another
    row's loss: ties), tree leaves of 4 keys and nodes of 4 children (so
    splits and rebuilds happen); after each, q_i
    of a random row and every q_j agree with the dense projection (nu > 0:
    ``capped_simplex_euclidean``, the k-set's own; nu = 0: ``constraint.lmo``
    on the k-set, no ties there) to 1e-12."""
    rng = np.random.default_rng(1)
    losses = rng.random(n) * 3.0
    if caps_kind == "kset":
        caps = np.full(n, 1.0 / (n // 3))
    elif caps_kind == "simplex":
        caps = np.ones(n)
    else:
        caps = np.minimum(rng.random(n) / n * 4.0, 1.0)
    br = BestResponse(losses, caps, nu, block=4, fanout=4)
    K = harness.build("constraint_set", "kset", n=n, k=n // 3)
    worst = 0.0
    for _ in range(1500):
        i = int(rng.integers(n))
        ties = nu > 0 and rng.random() < 0.3
        losses[i] = losses[rng.integers(n)] if ties else 3.0 * rng.random() * rng.random()
        br.update(i, losses[i])
        if nu > 0:
            q = capped_simplex_euclidean(1.0 / n + losses / (nu * n), caps)
        else:
            q = K.lmo(losses)[1]
        j = int(rng.integers(n))
        worst = max(worst, abs(br.weight(j) - q[j]), float(np.max(np.abs(br.q() - q))))
    assert worst <= 1e-12


def test_best_response_is_problem_inner():
    """Seed 2, n = 40: ``q()`` equals ``Problem.inner``'s maximiser on the
    k-set to 1e-12 after 200 updates."""
    problem = yacht_problem()
    rng = np.random.default_rng(2)
    losses = problem.losses(rng.standard_normal(problem.n_params))
    br = BestResponse(losses, problem.constraint.row_caps(), problem.nu)
    for _ in range(200):
        i = int(rng.integers(problem.n))
        losses[i] = rng.random() * 5.0
        br.update(i, losses[i])
    assert np.max(np.abs(br.q() - problem.inner(losses)[1])) <= 1e-12


# ---------------------------------------------------------------------------
# the kernels against dense transcriptions of the algorithms
# ---------------------------------------------------------------------------


def _dense_prospect(problem, lr, rows):
    """Algorithm 1 of Mehta et al. (2024) with a dense best response each step."""
    model, X, y, n = problem.model, problem.X, problem.y, problem.n
    caps = problem.constraint.row_caps()
    w = np.zeros(problem.n_params)
    losses = problem.losses(w)
    G = np.array([model.value_and_grad(w, X[j:j + 1], y[j:j + 1], np.ones(1))[1]
                  for j in range(n)])
    lam = best_response_dense(losses, caps_form(caps), problem.nu)
    rho = lam.copy()
    gbar = G.T @ rho
    for i in rows:
        loss, g = model.value_and_grad(w, X[i:i + 1], y[i:i + 1], np.ones(1))
        v = n * lam[i] * g - n * rho[i] * G[i] + gbar
        w = (w - lr * v) / (1.0 + lr * problem.mu)
        losses[i] = loss
        cur = lam[i]
        lam = best_response_dense(losses, caps_form(caps), problem.nu)
        gbar = gbar + cur * g - rho[i] * G[i]
        rho[i] = cur
        G[i] = g
    return w


def _dense_lsvrg(problem, lr, rows):
    """LSVRG of Mehta et al. (2023), anchors every n steps, dense."""
    model, X, y, n = problem.model, problem.X, problem.y, problem.n
    w = np.zeros(problem.n_params)
    for t, i in enumerate(rows):
        if t % n == 0:
            anchor = w.copy()
            _, ganchor, q = problem.value_and_grad(anchor)
            ganchor = ganchor - problem.mu * anchor
        g = model.value_and_grad(w, X[i:i + 1], y[i:i + 1], np.ones(1))[1]
        ga = model.value_and_grad(anchor, X[i:i + 1], y[i:i + 1], np.ones(1))[1]
        w = w - lr * (n * q[i] * (g - ga) + ganchor + problem.mu * w)
    return w


@pytest.mark.parametrize("model", ["linear_mse", "logistic_cel"])
@pytest.mark.parametrize("cls", SOLVERS)
def test_kernel_matches_dense_transcription(cls, model):
    """Seed 3, n = 40, at least 2.5 epochs of steps: the compiled run and a dense
    numpy transcription fed the same rows (the kernel's draws are
    ``Generator.integers(0, n)``, reproduced here) for as many steps agree to
    1e-10 in w (the transcription evaluates every row it draws, the kernels
    skip the evaluations whose term is zero: the same numbers)."""
    problem = yacht_problem(model=model)
    n = problem.n
    solver = cls(lr=0.02)
    solver.setup(problem, 0)
    rng = np.random.default_rng(3)
    steps = 5 * n // 2
    counter = 3 if cls is LSVRG else 2  # the solver's count of its steps
    while int(solver.counts_[counter]) < steps:
        solver.advance(problem, rng, solver.data_points + 1)
    rows = np.random.default_rng(3).integers(0, n, size=int(solver.counts_[counter]))
    dense = _dense_lsvrg if cls is LSVRG else _dense_prospect
    expected = dense(problem, 0.02, rows)
    assert np.max(np.abs(solver.w - expected)) <= 1e-10 * max(1.0, np.max(np.abs(expected)))


# ---------------------------------------------------------------------------
# (b) convergence, (c) resume, (d) counters, (e) refusals
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("cls", SOLVERS)
def test_converges_to_independent_optimum(cls):
    """Yacht subsample n = 40 (seed 0), k = 20, mu = 1/n, nu = 1, default step,
    run seed 4: after 400 passes ``F(w) - F*`` is at most 1e-8 relative to
    ``|F*|`` (F* by L-BFGS-B on F)."""
    problem = yacht_problem()
    fs = f_star(problem)
    solver = cls()
    solver.setup(problem, 0)
    solver.advance(problem, np.random.default_rng(4), 400 * problem.n)
    assert problem.value(solver.w) - fs <= 1e-8 * abs(fs)
    assert problem.constraint.contains(solver.q)


@pytest.mark.parametrize("cls", SOLVERS)
def test_resume_from_pickle_is_bitwise(cls):
    """Seed 5, n = 40, radius 1 (the projected variant): pickling the solver and
    the generator mid-run and resuming gives the same w, bit for bit, as the
    run without interruption (advanced in other chunks)."""
    problem = yacht_problem(radius=1.0)
    straight = cls()
    straight.setup(problem, 0)
    rng = np.random.default_rng(5)
    for until in (333, 1000, 2501):
        straight.advance(problem, rng, until)
    resumed = cls()
    resumed.setup(problem, 0)
    rng2 = np.random.default_rng(5)
    resumed.advance(problem, rng2, 777)
    _ = resumed.q  # reading the dual iterate changes nothing
    resumed, rng2 = pickle.loads(pickle.dumps((resumed, rng2)))
    resumed.advance(problem, rng2, 2501)
    assert np.array_equal(straight.w, resumed.w)
    assert np.linalg.norm(straight.w) <= 1.0 + 1e-12


def test_counters():
    """n = 40, nu = 1, k = n/2 (exact counts against the row kernels' calls:
    test_counters.py): Prospect's set-up evaluates n losses and forms the
    gradients of the rows with rho_j != 0; its first step is free (at w_0
    from the tables), each later one 1 data point and at most 1 gradient.
    LSVRG's anchor n data points and the gradients of the rows with q~_j !=
    0; each step 2 data points and 2 gradients, or none (q~_i = 0, or the
    first after the anchor)."""
    problem = yacht_problem()
    n = problem.n
    p = Prospect()
    p.setup(problem, 0)
    assert p.data_points == n and p.grad_evals == int(np.count_nonzero(p.rho_))
    setup_grads = p.grad_evals
    p.advance(problem, np.random.default_rng(0), n + 7)
    assert p.data_points == n + 7 and int(p.counts_[2]) == 8
    assert setup_grads <= p.grad_evals <= setup_grads + 7
    assert p.passes == (n + 7) / n
    v = LSVRG()
    v.setup(problem, 0)
    formed = int(np.count_nonzero(v.anchor_q_))
    assert (v.data_points, v.grad_evals) == (n, formed)
    v.advance(problem, np.random.default_rng(0), n + 1)
    spent = v.data_points - n
    assert spent == 2 and v.grad_evals == formed + 2
    assert isinstance(v.data_points, int) and isinstance(p.grad_evals, int)


def test_default_step_and_log():
    """The default step is ``1 / (n max_i c_i L + mu)`` with ``L = 2 max ||x||^2
    / scale`` (linear_mse, no bias) and is what ``setup`` logs; ``lr`` overrides it."""
    problem = yacht_problem()
    X = problem.X
    L = 2.0 * np.max(np.einsum("ij,ij->i", X, X)) / 2.0
    expected = 1.0 / (problem.n * (1.0 / (problem.n // 2)) * L + problem.mu)
    for cls in SOLVERS:
        logged = cls().setup(problem, 0)
        assert logged["smoothness"] == pytest.approx(L, rel=1e-12)
        assert logged["lr"] == pytest.approx(expected, rel=1e-12)
        assert cls(lr=0.5).setup(problem, 0)["lr"] == 0.5


@pytest.mark.parametrize("cls", [*SOLVERS, SGD])
def test_a_model_without_smoothness_needs_a_step(cls):
    """A model whose ``row_smoothness(X)`` is None: without ``lr`` a ConfigError
    naming the solver, the model, the missing constant and ``solver.lr``; with
    it the solver runs (nu = 1, no ball: the default step is the smooth one)."""
    problem = yacht_problem()
    problem.model.row_smoothness = lambda X: None
    with pytest.raises(harness.ConfigError) as err:
        cls().setup(problem, 0)
    text = str(err.value)
    assert all(word in text for word in (cls.name, "linear_mse", "row_smoothness", "solver.lr"))
    solver = cls(lr=1e-3)
    solver.setup(problem, 0)
    solver.advance(problem, np.random.default_rng(0), 3 * problem.n)
    assert solver.data_points >= 3 * problem.n and np.all(np.isfinite(solver.w))


