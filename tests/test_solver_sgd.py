"""The SGD baseline on the Rockafellar-Uryasev form of F (``plugins.solvers.sgd``): the
identity behind it against the problem's own inner maximisation, unbiasedness
of its stochastic gradient, the kernel against a dense transcription,
convergence to an independent optimum, bitwise resume, counters and refusals."""

from __future__ import annotations

import math
import pickle
from functools import partial

import numpy as np
import pytest
from counting_kernels import counting_problem
from scipy import optimize

import harness
from harness.params import validate
from harness.problem import Problem
from plugins.solvers.row_solver import row_data
from plugins.solvers.sgd import SGD, ru_phi, ru_weight


def yacht_problem(nu: float = 1.0, radius: float = math.inf, model: str = "linear_mse",
                  k: int = 20) -> Problem:
    """Yacht (standardised) rows 0..39, k-set with k = 20, mu = 1/n, linear_mse
    without bias and loss_scale 2 (logistic_cel: target above its median)."""
    return counting_problem(model, nu, radius, k)


def f_star(problem: Problem) -> float:
    """``min F`` by scipy's L-BFGS-B on F (smooth: nu > 0), independent of SGD."""
    res = optimize.minimize(lambda w: problem.value_and_grad(w)[:2], np.zeros(problem.n_params),
                            jac=True, method="L-BFGS-B",
                            options={"maxiter": 20000, "ftol": 1e-16, "gtol": 1e-13, "maxcor": 30})
    return float(res.fun)


def ru_inner(losses: np.ndarray, tau: float, caps: np.ndarray, nu: float) -> float:
    """``tau + sum_i phi_i(l_i - tau)``."""
    return tau + float(np.sum(ru_phi(losses - tau, caps, nu, losses.size)))


def G(problem: Problem, w: np.ndarray, tau: float) -> float:
    """``G(w, tau) = tau + sum_i phi_i(L_i(w) - tau) + (mu/2)||w||^2``."""
    caps = problem.constraint.row_caps()
    return ru_inner(problem.losses(w), tau, caps, problem.nu) + problem.regulariser(w)


# ---------------------------------------------------------------------------
# (a) the Rockafellar-Uryasev identity
# ---------------------------------------------------------------------------


def _constraint(kind: str, n: int, rng: np.random.Generator):
    if kind == "kset":
        return harness.build("constraint_set", "kset", n=n, k=n // 4)
    k = 6  # caps k alpha_i in {1, ..., 6}: alpha_i in {1/6, ..., 1}, three sizes at least
    caps = rng.integers(1, k + 1, size=n)
    caps[:3] = (1, 2, k)
    return harness.build("constraint_set", "alphaset", n=n, k=k, caps={"rows": caps.tolist()})


@pytest.mark.parametrize("kind", ["kset", "alphaset"])
@pytest.mark.parametrize("nu", [0.0, 0.05, 1.0, 7.0])
def test_ru_identity_matches_inner(kind, nu):
    """Seed 10, n = 30, 20 random loss vectors (some with ties, some negative):
    ``min_tau tau + sum phi_i(l_i - tau)``, by brute force over a fine grid of
    tau on a bracket that holds the minimiser and every breakpoint (where the
    minimum of the piecewise-linear nu = 0 case lies), then scipy's bounded
    Brent search (xatol 1e-13) between the best candidate's neighbours, equals
    ``Problem.inner(l)[0]`` (the set's LMO for nu = 0, its Euclidean projection
    otherwise) to 1e-9."""
    rng = np.random.default_rng(10)
    n = 30
    K = _constraint(kind, n, rng)
    caps = K.row_caps()
    problem = Problem(np.zeros((n, 1)), np.zeros(n), None, K, nu=nu)
    for trial in range(20):
        losses = rng.standard_normal(n) * (1.0 + trial)
        if trial % 3 == 0:
            losses[: n // 2] = losses[0]
        # the multiplier lies in [min l - nu (n max c - 1), max l + nu] (sum q crosses 1);
        # the candidates: a fine grid and every breakpoint tau = l_i - kink of phi_i
        lo, hi = losses.min() - nu * n - 1.0, losses.max() + nu + 1.0
        kinks = [losses] if nu == 0 else [losses + nu, losses - nu * (n * caps - 1.0)]
        grid = np.sort(np.concatenate([np.linspace(lo, hi, 4001), *kinks]))
        vals = np.array([ru_inner(losses, t, caps, nu) for t in grid])
        j = int(np.argmin(vals))
        res = optimize.minimize_scalar(partial(ru_inner, losses, caps=caps, nu=nu),
                                       bounds=(grid[max(j - 1, 0)],
                                               grid[min(j + 1, grid.size - 1)]),
                                       method="bounded", options={"xatol": 1e-13})
        best = min(float(res.fun), float(vals[j]))
        assert best == pytest.approx(problem.inner(losses)[0], abs=1e-9)


def test_ru_weight_is_derivative_of_phi():
    """Seed 11: ``ru_weight`` (the kernel) equals ``n`` times the central finite
    difference of ``ru_phi`` (h = 1e-6) to 1e-6, away from phi's kinks, for
    nu = 0 and nu > 0."""
    rng = np.random.default_rng(11)
    n = 25
    h = 1e-6
    for nu in (0.0, 0.4, 3.0):
        for _ in range(300):
            z = 3.0 * rng.standard_normal()
            cap = rng.uniform(1.0 / n, 1.0)
            kinks = (0.0,) if nu == 0 else (-nu, nu * (n * cap - 1.0))
            if min(abs(z - kk) for kk in kinks) < 1e-3:
                continue
            caps = np.array([cap])
            fd = (ru_phi(np.array([z + h]), caps, nu, n)[0]
                  - ru_phi(np.array([z - h]), caps, nu, n)[0]) / (2 * h)
            assert ru_weight(z, cap, nu, n) == pytest.approx(n * fd, abs=1e-6)


# ---------------------------------------------------------------------------
# (b) the stochastic gradient is unbiased
# ---------------------------------------------------------------------------


def _row_gradients(problem: Problem, w: np.ndarray, tau: float) -> tuple[np.ndarray, np.ndarray]:
    """The kernel's per-row estimates: w-gradients (n x p) and tau-gradients (n)."""
    solver = SGD()
    solver.setup(problem, 0)
    X, y = row_data(problem)
    kernels, ms = solver._kernels(problem)
    n, p = problem.n, problem.n_params
    gw, gt = np.empty((n, p)), np.empty(n)
    g, z = np.empty(p), np.empty(kernels.m_row_scratch(ms))
    for i in range(n):
        s = kernels.sgd_row_grad(ms, X, y, i, w, tau, solver.caps_, solver.nu_, g, z)
        gw[i] = g + problem.mu * w
        gt[i] = 1.0 - s
    return gw, gt


@pytest.mark.parametrize("model", ["linear_mse", "logistic_cel"])
@pytest.mark.parametrize("nu", [0.0, 1.0, 0.2])
def test_stochastic_gradient_is_unbiased(nu, model):
    """Seed 12, yacht n = 40, k = 20, mu = 1/n, 5 random points (w, tau) with no
    ``L_i(w) - tau`` within 1e-3 of a kink of phi (so G is differentiable
    there): the mean over all n rows of the kernel's per-row gradient equals
    the central finite-difference gradient of G (h = 1e-6) to 1e-6."""
    problem = yacht_problem(nu=nu, model=model)
    rng = np.random.default_rng(12)
    n, p = problem.n, problem.n_params
    h = 1e-6
    caps = problem.constraint.row_caps()
    kinks = np.array([0.0]) if nu == 0 else np.array([-nu, nu * (n * caps[0] - 1.0)])
    checked = 0
    while checked < 5:
        w = 0.5 * rng.standard_normal(p)
        losses = problem.losses(w)
        tau = float(rng.uniform(losses.min(), losses.max()))
        if np.min(np.abs((losses - tau)[:, None] - kinks[None, :])) < 1e-3:
            continue
        gw, gt = _row_gradients(problem, w, tau)
        fd_w = np.array([(G(problem, w + h * e, tau) - G(problem, w - h * e, tau)) / (2 * h)
                         for e in np.eye(p)])
        fd_t = (G(problem, w, tau + h) - G(problem, w, tau - h)) / (2 * h)
        assert np.max(np.abs(gw.mean(axis=0) - fd_w)) <= 1e-6
        assert abs(gt.mean() - fd_t) <= 1e-6
        checked += 1


# ---------------------------------------------------------------------------
# the kernel against a dense transcription
# ---------------------------------------------------------------------------


def _dense_sgd(problem, lr, tau_lr, batch, rows, schedule="constant", t0=math.inf):
    """The step of ``plugins.solvers.sgd.SGD`` in numpy, rows in batches of ``batch``:
    step t (from 0) scaled by 1, ``sqrt(t0 / (t0 + t))`` or ``t0 / (t0 + t)``;
    tau kept in the solver's bracket; the average of the points where the
    gradients are taken, uniform or (inverse) with weights ``t + t0 - 1``."""
    model, X, y, n = problem.model, problem.X, problem.y, problem.n
    caps = problem.constraint.row_caps()
    lo, hi = -math.inf, math.inf
    if math.isfinite(problem.radius):
        lo = -problem.nu * (n * caps.max() - 1.0)
        hi = model.loss_bound / model.scale_ + problem.nu
    w, tau = np.zeros(problem.n_params), 0.0
    avg, total = np.zeros_like(w), 0.0
    for t, start in enumerate(range(0, rows.size, batch)):
        f = {"constant": 1.0, "sqrt": math.sqrt(t0 / (t0 + t)) if t0 < math.inf else 1.0,
             "inverse": t0 / (t0 + t)}[schedule]
        weight = t + t0 - 1.0 if schedule == "inverse" else 1.0
        total += weight
        avg += (weight / total) * (w - avg)
        gw, st = np.zeros_like(w), 0.0
        for i in rows[start:start + batch]:
            loss, g = model.value_and_grad(w, X[i:i + 1], y[i:i + 1], np.ones(1))
            z = loss - tau
            if problem.nu > 0:
                s = n * min(max(1.0 / n + z / (problem.nu * n), 0.0), caps[i])
            else:
                s = n * caps[i] * (z > 0)
            gw += s * g
            st += s
        w = problem.project(w - lr * f * (gw / batch + problem.mu * w))
        tau = min(max(tau - tau_lr * f * (1.0 - st / batch), lo), hi)
    return w, tau, avg


@pytest.mark.parametrize("model, nu, batch, radius, schedule", [
    ("linear_mse", 1.0, 1, math.inf, "constant"), ("linear_mse", 0.0, 3, 0.3, "constant"),
    ("logistic_cel", 0.5, 2, math.inf, "constant"), ("linear_mse", 1.0, 2, math.inf, "sqrt"),
    ("linear_mse", 0.0, 3, 0.3, "sqrt"), ("linear_mse", 1.0, 1, math.inf, "inverse"),
])
def test_kernel_matches_dense_transcription(model, nu, batch, radius, schedule):
    """Seed 13, n = 40, 300 steps: the compiled run and a numpy transcription fed
    the same rows (the kernel draws ``Generator.integers(0, n)`` one row at a
    time, reproduced here) agree to 1e-10 in w, tau and the average, for each
    schedule with the solver's own t0 (a row drawn twice in a step is
    evaluated once by the kernel, twice here: the same numbers)."""
    problem = yacht_problem(nu=nu, model=model, radius=radius)
    solver = SGD(lr=0.01, tau_lr=0.03, batch=batch, schedule=schedule)
    solver.setup(problem, 0)
    steps = 300
    rows = np.random.default_rng(13).integers(0, problem.n, size=steps * batch)
    rng = np.random.default_rng(13)
    while int(solver.counts_[2]) < steps:
        solver.advance(problem, rng, solver.data_points + 1)
    assert int(solver.counts_[2]) == steps
    w, tau, avg = _dense_sgd(problem, 0.01, 0.03, batch, rows, schedule, solver.t0_)
    scale = max(1.0, float(np.max(np.abs(w))))
    assert np.max(np.abs(solver.iterate_ - w)) <= 1e-10 * scale
    assert np.max(np.abs(solver.w - avg)) <= 1e-10 * scale
    assert solver.tau == pytest.approx(tau, abs=1e-10 * max(1.0, abs(tau)))


# ---------------------------------------------------------------------------
# (c) convergence, (d) resume, (e) counters, refusals
# ---------------------------------------------------------------------------


def test_default_schedule_converges_to_independent_optimum():
    """Yacht rows 0..39, k = 20, mu = 1/n, nu = 1, no ball (F* by L-BFGS-B on F,
    independent of SGD). The default (``sqrt``: the smooth step for a pass,
    then 1/sqrt(t), averaged), run seeds 0..4: after 2e5 data points ``F(w) -
    F*`` is at most 1e-4 of ``|F*|`` for every seed (observed 4e-6 .. 2.2e-5)
    and the mean over the seeds is at most a quarter of the mean after 2e4
    (observed a tenth). The constant step of the same size with the same
    average stalls at 1.2e-3 .. 1.7e-3 (it fails both)."""
    problem = yacht_problem()
    fs = f_star(problem)

    def errors(budget, **kw):
        out = []
        for seed in range(5):
            solver = SGD(**kw)
            solver.setup(problem, budget)
            solver.advance(problem, np.random.default_rng(seed), budget)
            out.append((problem.value(solver.w) - fs) / abs(fs))
        return np.array(out)

    late, early = errors(200_000), errors(20_000)
    assert np.all(late <= 1e-4), late
    assert late.mean() <= 0.25 * early.mean()
    assert SGD().setup(problem, 0)["schedule"] == "sqrt"


def test_inverse_schedule_converges_to_independent_optimum():
    """The same instance with ``schedule=inverse`` (2 / (mu (t + a)), the average
    weighted by t + a - 1), seeds 0..4, 2e5 data points: ``F(w) - F*`` at most
    1e-4 of ``|F*|`` (observed 3.4e-6 .. 3.1e-5)."""
    problem = yacht_problem()
    fs = f_star(problem)
    for seed in range(5):
        solver = SGD(schedule="inverse")
        solver.setup(problem, 0)
        solver.advance(problem, np.random.default_rng(seed), 200_000)
        assert problem.value(solver.w) - fs <= 1e-4 * abs(fs)


def test_papers_problem_schedule_converges_to_independent_optimum():
    """Yacht rows 0..39, k = 5, nu = 0, radius 1, mu = 1/n (nonsmooth, in a
    ball: the default is D / (G sqrt(t)) per block with the uniform average).
    F* by cvxpy (the Rockafellar-Uryasev form as a conic program, Clarabel).
    Seeds 0..4: after 2e5 data points the mean of ``F(w) - F*`` over the seeds
    is at most 1e-2 of ``|F*|`` (observed 4e-3) and at most a fifth of the
    mean after 2e4 (observed 0.07: the 1 / sqrt(t) steps keep converging)."""
    cp = pytest.importorskip("cvxpy")
    problem = yacht_problem(nu=0.0, radius=1.0, k=5)
    w, t = cp.Variable(problem.n_params), cp.Variable()
    losses = cp.square(problem.X @ w - problem.y) / problem.scale
    program = cp.Problem(cp.Minimize(t + cp.sum(cp.pos(losses - t)) / 5
                                     + 0.5 * problem.mu * cp.sum_squares(w)),
                         [cp.norm(w) <= 1.0])
    program.solve(solver="CLARABEL", tol_gap_abs=1e-10, tol_gap_rel=1e-10, tol_feas=1e-10)
    fs = problem.value(np.asarray(w.value))  # F at the conic solution: an upper bound on F*
    assert fs <= program.value + 1e-9

    def mean_error(budget):
        out = []
        for seed in range(5):
            solver = SGD()
            solver.setup(problem, budget)
            solver.advance(problem, np.random.default_rng(seed), budget)
            out.append((problem.value(solver.w) - fs) / abs(fs))
        return float(np.mean(out))

    late = mean_error(200_000)
    assert late <= 1e-2 and late <= 0.2 * mean_error(20_000)


def test_objective_decreases_in_expectation():
    """Same instance, constant step 1e-3, last iterate, 40 runs (seeds
    100..139): the mean of F(w_t) over the runs at 0, 50, 200, 800 and 3200
    data points decreases, each drop larger than 3 standard errors of the
    paired differences; the mean at 3200 is within 5e-2 of F*."""
    problem = yacht_problem()
    checkpoints = (0, 50, 200, 800, 3200)
    values = np.empty((40, len(checkpoints)))
    for r in range(40):
        solver = SGD(lr=1e-3, schedule="constant", average=False)
        solver.setup(problem, 0)
        rng = np.random.default_rng(100 + r)
        for j, until in enumerate(checkpoints):
            solver.advance(problem, rng, until)
            values[r, j] = problem.value(solver.w)
    drops = values[:, :-1] - values[:, 1:]
    se = drops.std(axis=0, ddof=1) / math.sqrt(values.shape[0])
    assert np.all(drops.mean(axis=0) > 3.0 * se)
    fs = f_star(problem)
    assert values[:, -1].mean() - fs <= 5e-2 * abs(fs)


def test_resume_from_pickle_is_bitwise():
    """Seed 5, n = 40, radius 0.3 (projected), nu = 0, batch 3, the default
    schedule and average (their state: the step count and the average's
    weight): pickling the solver and the generator mid-run and resuming gives
    the same w, last iterate and tau, bit for bit, as the run without
    interruption (advanced in other chunks)."""
    problem = yacht_problem(nu=0.0, radius=0.3)
    straight = SGD(lr=0.05, batch=3, average=True)
    straight.setup(problem, 0)
    rng = np.random.default_rng(5)
    for until in (333, 1000, 2501):
        straight.advance(problem, rng, until)
    resumed = SGD(lr=0.05, batch=3, average=True)
    resumed.setup(problem, 0)
    rng2 = np.random.default_rng(5)
    resumed.advance(problem, rng2, 777)
    resumed, rng2 = pickle.loads(pickle.dumps((resumed, rng2)))
    resumed.advance(problem, rng2, 2501)
    assert np.array_equal(straight.w, resumed.w)
    assert np.array_equal(straight.iterate_, resumed.iterate_)
    assert straight.tau == resumed.tau
    assert straight.data_points == resumed.data_points >= 2501
    assert np.linalg.norm(straight.iterate_) <= 0.3 + 1e-12
    assert not np.array_equal(straight.w, straight.iterate_)


def test_counters():
    """n = 40 (exact counts against the row kernels' calls: test_counters.py):
    no set-up cost; each step of batch b costs at most b data points (a row
    drawn twice in a step counts once) and forms at most as many gradients; a
    target is overshot by less than b; a target already reached runs nothing;
    no dual iterate."""
    problem = yacht_problem()
    solver = SGD(batch=3)
    solver.setup(problem, 0)
    assert (solver.data_points, solver.grad_evals) == (0, 0)
    solver.advance(problem, np.random.default_rng(0), 7)
    assert 7 <= solver.data_points < 10 and int(solver.counts_[2]) == 3
    assert 0 < solver.grad_evals <= solver.data_points
    before = (solver.data_points, solver.grad_evals)
    solver.advance(problem, np.random.default_rng(0), 7)
    assert (solver.data_points, solver.grad_evals) == before
    assert solver.passes == solver.data_points / problem.n
    assert isinstance(solver.data_points, int) and isinstance(solver.grad_evals, int)
    assert getattr(solver, "q", None) is None
    one = SGD()
    one.setup(problem, 0)
    one.advance(problem, np.random.default_rng(0), 5)
    assert one.data_points == 5 and int(one.counts_[2]) == 5


def test_default_steps_and_log():
    """The default schedule is sqrt. Without a ball (nu = 1): its first step is
    ``1 / (n max_i c_i L + mu)`` with ``L = 2 max ||x||^2 / scale`` (linear_mse,
    no bias), ``tau_lr`` the same, ``t0 = n / b``. With nu = 0 in a ball of
    radius B: ``lr = 2B / (n max_i c_i G + mu B)``, ``tau_lr = (U - 0) / max(1,
    n max_i c_i - 1)`` (U the model's loss bound over its scale), ``t0 = 1``.
    Inverse: t0 = 2 / (mu lr). All logged and overridable; a given lr moves
    the default tau_lr with it."""
    problem = yacht_problem()
    X = problem.X
    L = 2.0 * np.max(np.einsum("ij,ij->i", X, X)) / 2.0
    expected = 1.0 / (problem.n * (1.0 / 20) * L + problem.mu)
    logged = SGD().setup(problem, 0)
    assert logged["lr"] == pytest.approx(expected, rel=1e-12)
    assert logged["tau_lr"] == logged["lr"] and logged["t0"] == problem.n
    assert SGD(batch=4).setup(problem, 0)["t0"] == problem.n / 4
    inverse = SGD(schedule="inverse").setup(problem, 0)
    assert inverse["t0"] == pytest.approx(2.0 / (problem.mu * expected), rel=1e-12)
    paper = yacht_problem(nu=0.0, radius=1.0, k=5)
    model = paper.model
    logged = SGD().setup(paper, 0)
    assert logged["lr"] == pytest.approx(2.0 / (8 * model.grad_bound + paper.mu), rel=1e-12)
    assert logged["tau_lr"] == pytest.approx(model.loss_bound / model.scale_ / 7, rel=1e-12)
    assert logged["t0"] == 1.0
    logged = SGD(lr=0.5, tau_lr=0.1, batch=4).setup(problem, 0)
    assert (logged["lr"], logged["tau_lr"], logged["batch"]) == (0.5, 0.1, 4)
    assert SGD(lr=0.5).setup(problem, 0)["tau_lr"] == 0.5
    with pytest.raises(harness.ConfigError, match="'inverse'.*mu = 0"):
        SGD(schedule="inverse").setup(Problem(paper.X, paper.y, model, paper.constraint,
                                              radius=1.0), 0)


def test_params_are_validated():
    """The declared table refuses a batch of 0 and a non-positive step, with the
    project's message shape."""
    with pytest.raises(harness.ConfigError, match="The 'batch' parameter of sgd"):
        validate("sgd", SGD.params, {"batch": 0})
    with pytest.raises(harness.ConfigError, match="The 'lr' parameter of sgd"):
        validate("sgd", SGD.params, {"lr": 0.0})
    assert validate("sgd", SGD.params, {})["batch"] is None  # the set's form decides: 1 here


def test_registers_as_sgd():
    """The module's hook registers the class under the name "sgd"."""
    import plugins.solvers.sgd

    got = []
    plugins.solvers.sgd.register_solvers(got.append)
    assert got == [SGD] and SGD.name == "sgd"
