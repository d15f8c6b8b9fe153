"""LSVRG and SGD on any constraint set and either penalty (chi-square, KL), and
Prospect's refusal of the others.

A test double (``ProjectionOnly``) shows a capped simplex only through its
oracles (no row caps, no spectrum), so LSVRG's anchors go through
``Problem.inner`` and can be compared with the compiled path on the real set;
LSVRG with the KL penalty against an optimum computed here by L-BFGS on ``F``
written out (softmax / capped KL inner maximiser); SGD's mini-batch estimator
on ``subset(b)`` and its KL forms (Rockafellar-Uryasev on row caps, pooling on a
spectrum) against transcriptions; both on the chi-square ball; refusals."""

from __future__ import annotations

import math
import pickle

import numpy as np
import pytest
from counting_kernels import assert_counters_match_calls
from scipy import optimize
from scipy.special import logsumexp, softmax

import harness
from harness.problem import Problem
from plugins.solvers.lsvrg import LSVRG
from plugins.solvers.prospect import Prospect
from plugins.solvers.sgd import SGD, ru_phi, ru_weight, tau_range

from conftest import OraclesOnly


class _Rows:
    def __init__(self, X, y):
        self.X, self.y, self.n_classes = X, y, 0


def yacht(n: int = 40, seed: int = 0):
    """``n`` rows of yacht (standardised; seeded choice) and linear_mse without
    bias, loss_scale 2: ``L_i(w) = (x_i.w - y_i)^2 / 2``."""
    data = harness.build("dataset", "yacht", scale="standard")
    rows = np.random.default_rng(seed).choice(data.y.size, n, replace=False)
    sub = _Rows(np.asarray(data.X[rows], dtype=np.float64), np.asarray(data.y[rows], dtype=float))
    model = harness.build("model", "linear_mse", bias=False, loss_scale=2.0)
    model.setup(sub, 1.0)
    return sub, model


def problem_on(constraint, n: int = 40, nu: float = 1.0, radius: float = math.inf,
               penalty: str = "chi2", mu: float | None = None, seed: int = 0) -> Problem:
    """``F`` on ``yacht(n, seed)`` over ``constraint``, mu = 1/n unless given."""
    sub, model = yacht(n, seed)
    return Problem(sub.X, sub.y, model, constraint, mu=1.0 / n if mu is None else mu, nu=nu,
                   radius=radius, penalty=penalty)


def kset(n: int, k: int):
    return harness.build("constraint_set", "kset", n=n, k=k)


def simplex(n: int):
    return harness.build("constraint_set", "simplex", n=n)


class ProjectionOnly(OraclesOnly):
    """A test double: the capped simplex ``make(n)`` (a k-set or the simplex)
    through its oracles only (``OraclesOnly``), so the solvers read it through
    ``Problem.inner``; ``max_weight`` its cap, ``subset(m)`` the same double
    over ``make(m)``."""

    name = "projection_only"

    def __init__(self, make, n: int) -> None:
        super().__init__(make(n))
        self.make = make

    def max_weight(self):
        return 1.0 / self.inner.k

    def subset(self, m):
        return ProjectionOnly(self.make, m)


class Bare(ProjectionOnly):
    """``ProjectionOnly`` without ``max_weight`` and ``subset``."""

    name = "bare"
    max_weight = None
    subset = None


def quarter(m: int):
    """The k-set over m rows with k = max(1, m // 4)."""
    return kset(m, max(1, m // 4))


def trajectory(solver, problem: Problem, targets, seed: int = 3) -> list[np.ndarray]:
    """``solver``'s iterate after each target of data points (one generator)."""
    solver.setup(problem, targets[-1])
    rng = np.random.default_rng(seed)
    out = []
    for until in targets:
        solver.advance(problem, rng, until)
        out.append(np.array(solver.w, copy=True))
    return out


# ---------------------------------------------------------------------------
# F written out (independent of harness.problem and of the sets' projections)
# ---------------------------------------------------------------------------


def row_losses_grads(X, y, w):
    """``L_i(w) = (x_i.w - y_i)^2 / 2`` and their gradients ``(x_i.w - y_i) x_i``."""
    r = X @ w - y
    return 0.5 * r * r, r[:, None] * X


def kl_inner(losses: np.ndarray, cap: float, nu: float) -> tuple[float, np.ndarray]:
    """``max_{0 <= q <= cap, sum q = 1} <l, q> - nu sum q log(n q)``: ``q_i =
    min(cap, exp((l_i - tau)/nu - 1) / n)``, tau the root of ``sum q = 1``
    (brentq); the softmax of ``l / nu`` when ``cap >= 1``."""
    n = losses.size
    if cap >= 1.0:
        q = softmax(losses / nu)
        return float(nu * (logsumexp(losses / nu) - math.log(n))), q

    def q_at(tau):
        return np.minimum(cap, np.exp((losses - tau) / nu - 1.0 - math.log(n)))

    tau = optimize.brentq(lambda t: float(np.sum(q_at(t))) - 1.0,
                          float(losses.min()) - nu * (2.0 + math.log(n)),
                          float(losses.max()) + nu, xtol=1e-15, rtol=1e-15)
    q = q_at(tau)
    return float(losses @ q - nu * np.sum(q * np.log(n * q))), q


def kl_objective(X, y, cap: float, nu: float, mu: float):
    """``w -> (F(w), grad F(w))`` with the KL penalty over the capped simplex."""
    def f(w):
        losses, grads = row_losses_grads(X, y, w)
        value, q = kl_inner(losses, cap, nu)
        return value + 0.5 * mu * w @ w, grads.T @ q + mu * w
    return f


def kl_opt(X, y, cap: float, nu: float, mu: float) -> float:
    """``min F`` by scipy's L-BFGS-B on ``kl_objective`` (smooth, strongly convex)."""
    res = optimize.minimize(kl_objective(X, y, cap, nu, mu), np.zeros(X.shape[1]), jac=True,
                            method="L-BFGS-B",
                            options={"maxiter": 20000, "ftol": 1e-16, "gtol": 1e-12,
                                     "maxcor": 30})
    return float(res.fun)


def test_written_out_losses_are_the_models():
    """Seed 1: ``row_losses_grads`` equals the problem's losses to 1e-12 (the
    written-out F below is the one the solvers solve)."""
    problem = problem_on(kset(40, 10))
    w = np.random.default_rng(1).standard_normal(problem.n_params)
    np.testing.assert_allclose(row_losses_grads(problem.X, problem.y, w)[0], problem.losses(w),
                               rtol=0, atol=1e-12)


# ---------------------------------------------------------------------------
# LSVRG through the set's protocol
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(("nu", "radius"), [(1.0, math.inf), (0.3, 1.0), (0.0, 1.0)])
def test_lsvrg_through_the_protocol_is_the_compiled_path(nu, radius):
    # yacht n = 40, the k-set with k = 10, seed 3: the compiled path on the k-set's row
    # caps and the Python anchors (Problem.inner) on ProjectionOnly of the same set take
    # the same default step (sigma_max = max_weight() = 1/k) and give the same iterates
    # within 1e-10 (max abs) at each of 3 checkpoints over 30 passes, the same anchor
    # q~ within 1e-12 and the same counters
    capped = problem_on(kset(40, 10), nu=nu, radius=radius)
    general = problem_on(ProjectionOnly(quarter, 40), nu=nu, radius=radius)
    targets = [capped.n + 5, 5 * capped.n, 30 * capped.n]
    a, b = LSVRG(), LSVRG()
    assert a.setup(capped, targets[-1]) == b.setup(general, targets[-1])
    assert not a.general_ and b.general_
    for wa, wb in zip(trajectory(a, capped, targets), trajectory(b, general, targets),
                      strict=True):
        np.testing.assert_allclose(wa, wb, rtol=0, atol=1e-10)
    np.testing.assert_allclose(a.q, b.q, rtol=0, atol=1e-12)
    assert (a.data_points, a.grad_evals, a.counts_[3]) == (b.data_points, b.grad_evals,
                                                           b.counts_[3])


def test_lsvrg_without_max_weight_takes_sigma_max_one():
    """``Bare`` offers no ``max_weight``: sigma_max = 1 and the default step
    ``1 / (n L + mu)``, L = max_i ||x_i||^2 (linear_mse, loss_scale 2), to 1e-12."""
    problem = problem_on(Bare(quarter, 40))
    L = float(np.max(np.einsum("ij,ij->i", problem.X, problem.X)))
    logged = LSVRG().setup(problem, 0)
    assert logged["sigma_max"] == 1.0
    assert logged["lr"] == pytest.approx(1.0 / (problem.n * L + problem.mu), rel=1e-12)


@pytest.mark.parametrize(("make", "cap"), [(simplex, 1.0), (quarter, 0.1)])
def test_lsvrg_with_kl_reaches_the_optimum(make, cap):
    # yacht n = 40, mu = 1, nu = 0.5 (KL; the capped maximiser has rows at the cap),
    # no ball, seed 3, the default step: after 200 passes F(w) - F* <= 1e-9 relative
    # to F* (measured: 2.7e-11 on the simplex, 3e-16 on the k-set), F written out here
    # (softmax, or the capped KL maximiser by a root of sum q = 1) and F* by L-BFGS-B on
    # it; the anchor's q~ is the written-out maximiser at the anchor to 1e-9
    problem = problem_on(make(40), nu=0.5, penalty="kl", mu=1.0)
    f = kl_objective(problem.X, problem.y, cap, 0.5, problem.mu)
    f_star = kl_opt(problem.X, problem.y, cap, 0.5, problem.mu)
    solver = LSVRG()
    assert solver.setup(problem, 0)["sigma_max"] == cap
    assert solver.general_
    solver.advance(problem, np.random.default_rng(3), 200 * problem.n)
    assert (f(solver.w)[0] - f_star) / f_star <= 1e-9
    losses = row_losses_grads(problem.X, problem.y, solver.anchor_)[0]
    np.testing.assert_allclose(solver.q, kl_inner(losses, cap, 0.5)[1], rtol=0, atol=1e-9)


def test_lsvrg_general_path_resumes_bitwise():
    """Seed 5, ProjectionOnly of the k-set (n = 40, k = 10), KL with nu = 0.5, radius
    1: pickled mid-run with its generator and resumed, the run ends at the same w,
    bit for bit, as the run without a break."""
    problem = problem_on(ProjectionOnly(quarter, 40), nu=0.5, radius=1.0, penalty="kl")
    straight = LSVRG()
    straight.setup(problem, 0)
    rng = np.random.default_rng(5)
    for until in (333, 1000, 2501):
        straight.advance(problem, rng, until)
    resumed = LSVRG()
    resumed.setup(problem, 0)
    rng2 = np.random.default_rng(5)
    resumed.advance(problem, rng2, 777)
    resumed, rng2 = pickle.loads(pickle.dumps((resumed, rng2)))
    resumed.advance(problem, rng2, 2501)
    assert np.array_equal(straight.w, resumed.w)


# ---------------------------------------------------------------------------
# SGD: the mini-batch estimator on subset(b)
# ---------------------------------------------------------------------------


def _batch_draws(rng, n, batch, steps):
    """The kernel's draws: b distinct rows per step by a partial Fisher-Yates
    shuffle of one kept permutation."""
    perm = np.arange(n)
    out = []
    for _ in range(steps):
        for d in range(batch):
            k = d + int(rng.integers(0, n - d))
            perm[[d, k]] = perm[[k, d]]
        out.append(perm[:batch].copy())
    return out


def _batch_weights(losses, n, nu, penalty, cap):
    """The batch's weights written out: chi2 with the authors' shift cost ``nu n``
    unchanged, ``argmin_{0 <= q <= cap, sum q = 1} ||q - (1/b + l/(nu n))||``
    (bisection on the threshold); kl with ``nu`` unchanged (``kl_inner``)."""
    if penalty == "kl":
        return kl_inner(losses, cap, nu)[1]
    v = 1.0 / losses.size + losses / (nu * n)
    lo, hi = float(v.min()) - 1.0, float(v.max())
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if np.sum(np.clip(v - mid, 0.0, cap)) > 1.0 else (lo, mid)
    return np.clip(v - 0.5 * (lo + hi), 0.0, cap)


@pytest.mark.parametrize(("make", "penalty", "nu", "batch"), [
    (quarter, "chi2", 1.0, 8), (quarter, "kl", 0.5, 8), (simplex, "kl", 0.5, 5),
    (quarter, "chi2", 0.0, 8), (simplex, "chi2", 1.0, 40)])
def test_sgd_on_a_subset_forms_the_batch_gradient(make, penalty, nu, batch):
    # yacht n = 40, mu = 1/n, ball of radius 1, seed 4, constant step 0.05, last
    # iterate: 6 steps of the solver on ProjectionOnly against a numpy transcription
    # fed the same draws, with the batch's weights written out (chi2: the projection
    # of 1/b + l/(nu n) onto the capped simplex over b rows, the authors' shift cost
    # nu n unchanged; kl: nu unchanged; nu = 0: the k-set's top rows): w within 1e-12
    # after each step
    n, lr, steps = 40, 0.05, 6
    problem = problem_on(ProjectionOnly(make, n), n=n, nu=nu, radius=1.0, penalty=penalty)
    cap = 1.0 / make(batch).k
    solver = SGD(lr=lr, batch=batch, schedule="constant", average=False)
    solver.setup(problem, 0)
    assert solver.mode_ == "subset" and math.isnan(solver.tau)
    rng = np.random.default_rng(4)
    draws = _batch_draws(np.random.default_rng(4), n, batch, steps)
    w = np.zeros(problem.n_params)
    for t, rows in enumerate(draws):
        solver.advance(problem, rng, (t + 1) * batch)
        losses, grads = row_losses_grads(problem.X[rows], problem.y[rows], w)
        if nu == 0.0:
            q = np.zeros(batch)
            q[np.argsort(losses)[-make(batch).k:]] = cap
        else:
            q = _batch_weights(losses, n, nu, penalty, cap)
        w = w - lr * (grads.T @ q + problem.mu * w)
        w = w / max(1.0, float(np.linalg.norm(w)))
        np.testing.assert_allclose(solver.w, w, rtol=0, atol=1e-12)
    assert int(solver.counts_[2]) == steps and solver.data_points == steps * batch


def test_sgd_on_a_subset_resumes_bitwise():
    """Seed 6, ProjectionOnly of the k-set (n = 40), chi2 nu = 1, batch 8, radius 1,
    the default schedule: pickled mid-run with its generator and resumed, the same
    w bit for bit."""
    problem = problem_on(ProjectionOnly(quarter, 40), nu=1.0, radius=1.0)
    straight = SGD(batch=8)
    straight.setup(problem, 0)
    rng = np.random.default_rng(6)
    for until in (200, 800, 2000):
        straight.advance(problem, rng, until)
    resumed = SGD(batch=8)
    resumed.setup(problem, 0)
    rng2 = np.random.default_rng(6)
    resumed.advance(problem, rng2, 500)
    resumed, rng2 = pickle.loads(pickle.dumps((resumed, rng2)))
    resumed.advance(problem, rng2, 2000)
    assert np.array_equal(straight.w, resumed.w)


# ---------------------------------------------------------------------------
# SGD with the KL penalty on row caps (Rockafellar-Uryasev) and on a spectrum
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("cap_k", [1, 10])
def test_ru_form_with_kl_is_the_inner_maximum(cap_k):
    # seed 8, n = 40, nu = 0.3, losses in [0, 2): min over tau in [tau_lo, tau_hi]
    # (tau_range with the loss bound 2) of tau + sum_i phi_i(l_i - tau) (ru_phi, kl)
    # equals the written-out KL inner maximum (kl_inner) to 1e-9, at a tau strictly
    # inside the range; ru_weight is n times the central difference of ru_phi
    # (h = 1e-6) to 1e-6
    rng = np.random.default_rng(8)
    n, nu, cap = 40, 0.3, 1.0 / cap_k
    caps = np.full(n, cap)
    lo, hi = tau_range(nu, n * cap, 2.0, True)
    for _ in range(5):
        losses = 2.0 * rng.random(n)
        res = optimize.minimize_scalar(
            lambda t, losses=losses: t + float(np.sum(ru_phi(losses - t, caps, nu, n, True))),
            bounds=(lo, hi), method="bounded", options={"xatol": 1e-12})
        assert lo + 1e-6 < res.x < hi - 1e-6
        assert res.fun == pytest.approx(kl_inner(losses, cap, nu)[0], abs=1e-9)
        for z in rng.normal(0.0, 1.0, size=5):
            h = 1e-6
            fd = (ru_phi(np.array([z + h]), caps[:1], nu, n, True)[0]
                  - ru_phi(np.array([z - h]), caps[:1], nu, n, True)[0]) / (2 * h)
            assert ru_weight(z, cap, nu, n, True) == pytest.approx(n * fd, abs=1e-6)


def test_sgd_ru_kernel_with_kl_is_its_transcription():
    # yacht n = 40, k = 10, nu = 0.5 (KL), radius 1, seed 13, batch 3 (drawn with
    # replacement), constant steps lr = 0.01, tau_lr = 0.03, 200 steps: w and tau of
    # the kernel equal a numpy transcription with the KL weight written out, s_i =
    # min(n c, exp((L_i - tau)/nu - 1)), and tau kept in [-nu (1 + log(n c)), U - nu],
    # to 1e-10
    problem = problem_on(kset(40, 10), nu=0.5, radius=1.0, penalty="kl")
    n, nu, c, batch, steps = 40, 0.5, 0.1, 3, 200
    solver = SGD(lr=0.01, tau_lr=0.03, batch=batch, schedule="constant", average=False)
    solver.setup(problem, 0)
    bound = problem.model.loss_bound / problem.scale
    assert (solver.tau_lo_, solver.tau_hi_) == (-nu * (1 + math.log(n * c)), bound - nu)
    rng = np.random.default_rng(13)
    while int(solver.counts_[2]) < steps:
        solver.advance(problem, rng, solver.data_points + 1)
    rows = np.random.default_rng(13).integers(0, n, size=steps * batch)
    w, tau = np.zeros(problem.n_params), 0.0
    for t in range(steps):
        batch_rows = rows[t * batch:(t + 1) * batch]
        losses, grads = row_losses_grads(problem.X[batch_rows], problem.y[batch_rows], w)
        s = np.minimum(n * c, np.exp((losses - tau) / nu - 1.0))
        w = w - 0.01 * (grads.T @ s / batch + problem.mu * w)
        w = w / max(1.0, float(np.linalg.norm(w)))
        tau = min(max(tau - 0.03 * (1.0 - s.mean()), -nu * (1 + math.log(n * c))), bound - nu)
    np.testing.assert_allclose(solver.w, w, rtol=0, atol=1e-10)
    assert solver.tau == pytest.approx(tau, abs=1e-10)


def test_sgd_ru_with_kl_approaches_the_optimum():
    # yacht n = 40, k = 10, mu = 1, nu = 0.5 (KL), no ball, seed 3, the default (sqrt)
    # schedule and average, 400 passes: F(w_bar) - F* <= 1e-3 relative to F* (measured
    # 6.8e-5; an unbiased estimator: it approaches F*, at SGD's rate); F and F*
    # written out
    problem = problem_on(kset(40, 10), nu=0.5, penalty="kl", mu=1.0)
    f_star = kl_opt(problem.X, problem.y, 0.1, 0.5, problem.mu)
    solver = SGD()
    solver.setup(problem, 0)
    solver.advance(problem, np.random.default_rng(3), 400 * problem.n)
    value = kl_objective(problem.X, problem.y, 0.1, 0.5, problem.mu)(solver.w)[0]
    assert 0.0 <= (value - f_star) / f_star <= 1e-3


@pytest.mark.filterwarnings("ignore:Solution may be inaccurate")
def test_sgd_spectral_kernel_with_kl_is_the_kl_projection():
    # yacht n = 60, the extremile (r = 2), nu = 0.4 (KL), no ball, seed 4, batch 7,
    # constant step 0.01, last iterate, 20 steps: the kernel's w equals a transcription
    # whose batch weights are argmax_{q in P(sigma_7)} <l, q> - nu KL(q || 1/7) solved
    # by cvxpy (Clarabel at gap and feasibility tolerances 1e-12; P(sigma) by its
    # majorisation constraints) to 1e-8 (the weights agree to 6e-10 but in two of the
    # 20 solves, which Clarabel calls inaccurate, to 6e-8)
    cp = pytest.importorskip("cvxpy")
    K = harness.build("constraint_set", "spectral", n=60, risk="extremile")
    problem = problem_on(K, n=60, nu=0.4, penalty="kl")
    n, nu, batch, steps, lr = 60, 0.4, 7, 20, 0.01
    sigma = K.spectrum(batch)[::-1]  # descending
    solver = SGD(lr=lr, batch=batch, schedule="constant", average=False)
    solver.setup(problem, 0)
    assert solver.mode_ == "spectral"
    solver.advance(problem, np.random.default_rng(4), steps * batch)
    w = np.zeros(problem.n_params)
    for rows in _batch_draws(np.random.default_rng(4), n, batch, steps):
        losses, grads = row_losses_grads(problem.X[rows], problem.y[rows], w)
        q = cp.Variable(batch)
        cons = [cp.sum(q) == 1, q >= 0]
        cons += [cp.sum_largest(q, j) <= float(np.sum(sigma[:j])) for j in range(1, batch)]
        objective = losses @ q + nu * cp.sum(cp.entr(q)) - nu * math.log(batch)
        cp.Problem(cp.Maximize(objective), cons).solve(
            solver="CLARABEL", tol_gap_abs=1e-12, tol_gap_rel=1e-12, tol_feas=1e-12)
        w = w - lr * (grads.T @ q.value + problem.mu * w)
    np.testing.assert_allclose(solver.w, w, rtol=0, atol=1e-8)


# ---------------------------------------------------------------------------
# counters
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(("make", "penalty", "nu"), [
    (LSVRG, "chi2", 1.0), (LSVRG, "kl", 0.5), (LSVRG, "chi2", 0.0),
    (lambda: SGD(batch=5), "chi2", 1.0), (lambda: SGD(batch=5), "kl", 0.5),
    (lambda: SGD(batch=5), "chi2", 0.0)])
def test_counters_through_the_protocol_equal_the_row_kernels_calls(make, penalty, nu):
    # ProjectionOnly of the k-set (n = 40, k = 10), ball of radius 1, seed 7 (nu = 0:
    # weights 0 whose gradients are not formed): the template run as plain Python
    # through counting wrappers (tests/counting_kernels.py); after setup and each
    # target, data_points and grad_evals equal the row evaluations and gradients seen,
    # and the compiled run has the same counters and iterate (1e-12)
    problem = problem_on(ProjectionOnly(quarter, 40), nu=nu, radius=1.0, penalty=penalty)
    assert_counters_match_calls(make, problem)


# ---------------------------------------------------------------------------
# what each solver declares and refuses
# ---------------------------------------------------------------------------


def test_declared_penalties():
    assert LSVRG.penalties == ("chi2", "kl")
    assert SGD.penalties == ("chi2", "kl")
    assert Prospect.penalties == ("chi2",)


def test_prospect_refuses_kl_and_a_set_without_caps_or_spectrum():
    """kl with nu > 0 and a set seen only through its projection are refused,
    naming the parameter and what to use; kl with nu = 0 (the penalty plays no
    part) runs."""
    with pytest.raises(harness.ConfigError, match=r"'prospect' solves the chi-square shift "
                                                  r"cost only .*problem\.penalty='kl' with "
                                                  r"nu=0\.5: use solver=lsvrg"):
        Prospect().setup(problem_on(kset(40, 10), nu=0.5, penalty="kl"), 0)
    with pytest.raises(harness.ConfigError, match=r"solver 'prospect' needs a constraint set "
                                                  r"with row caps or a spectrum; "
                                                  r"'projection_only'.*specific to those two "
                                                  r"forms.*solver=lsvrg"):
        Prospect().setup(problem_on(ProjectionOnly(quarter, 40)), 0)
    Prospect().setup(problem_on(kset(40, 10), nu=0.0, radius=1.0, penalty="kl"), 0)


def test_sgd_refusals_without_caps():
    """A set with no row caps, spectrum nor subset; a batch above n, and a tau step,
    on a set without row caps."""
    with pytest.raises(harness.ConfigError, match=r"solver 'sgd' needs a constraint set with "
                                                  r"row caps .*subset\(m\).*; 'bare' has none"):
        SGD().setup(problem_on(Bare(quarter, 40)), 0)
    with pytest.raises(harness.ConfigError, match=r"'batch' parameter of sgd must be an int "
                                                  r"in \[1, n=40\] .*Got 41 instead"):
        SGD(batch=41).setup(problem_on(ProjectionOnly(quarter, 40)), 0)
    with pytest.raises(harness.ConfigError, match="'tau_lr' parameter of sgd"):
        SGD(tau_lr=0.1).setup(problem_on(ProjectionOnly(quarter, 40)), 0)
    assert SGD().setup(problem_on(ProjectionOnly(quarter, 40)), 0)["batch"] == 40


# ---------------------------------------------------------------------------
# the chi-square ball (plugins.sets.chi2_ball): no caps, no spectrum, subset(m)
# ---------------------------------------------------------------------------


def ball(n: int, radius: float):
    from plugins.sets.chi2_ball import Chi2Ball

    return Chi2Ball(n, radius)


def f_star(problem: Problem) -> float:
    """``min F`` by scipy's L-BFGS-B on ``Problem.value_and_grad`` (the set's own
    projections; independent of the solvers)."""
    res = optimize.minimize(lambda w: problem.value_and_grad(w)[:2], np.zeros(problem.n_params),
                            jac=True, method="L-BFGS-B",
                            options={"maxiter": 20000, "ftol": 1e-16, "gtol": 1e-12,
                                     "maxcor": 30})
    return float(res.fun)


@pytest.mark.parametrize(("penalty", "nu"), [("chi2", 1.0), ("kl", 0.5)])
def test_lsvrg_on_the_chi2_ball_reaches_the_optimum(penalty, nu):
    # yacht n = 40, the chi-square ball of radius 0.05 (binding at the optimum), mu = 1,
    # no ball on w, seed 3, the default step (sigma_max from the set's max_weight):
    # after 200 passes F(w) - F* <= 1e-9 relative to F*, F* by L-BFGS-B on F (LSVRG may
    # end a few ulps below L-BFGS-B's F*: -1e-14 relative allowed)
    problem = problem_on(ball(40, 0.05), nu=nu, penalty=penalty, mu=1.0)
    target = f_star(problem)
    solver = LSVRG()
    solver.setup(problem, 0)
    assert solver.general_
    solver.advance(problem, np.random.default_rng(3), 200 * problem.n)
    assert -1e-14 <= (problem.value(solver.w) - target) / target <= 1e-9
    assert problem.constraint.contains(solver.q, atol=1e-9)


@pytest.mark.parametrize(("penalty", "nu"), [("chi2", 1.0), ("kl", 0.5)])
def test_sgd_on_the_chi2_ball_with_every_row_is_gradient_descent(penalty, nu):
    # yacht n = 40, radius 0.05, mu = 1/n, ball of radius 1 on w, seed 5: with b = n the
    # batch is every row (in the draw's order), subset(n) is the set itself and the
    # batch's coefficient nu n / b = nu, so the constant schedule with the last iterate
    # is projected gradient descent on F: 30 steps at lr 0.05 equal it to 1e-10
    problem = problem_on(ball(40, 0.05), nu=nu, penalty=penalty, radius=1.0)
    solver = SGD(lr=0.05, batch=40, schedule="constant", average=False)
    solver.setup(problem, 0)
    assert solver.mode_ == "subset"
    solver.advance(problem, np.random.default_rng(5), 30 * 40)
    w = np.zeros(problem.n_params)
    for _ in range(30):
        w = problem.project(w - 0.05 * problem.value_and_grad(w)[1])
    np.testing.assert_allclose(solver.w, w, rtol=0, atol=1e-10)


@pytest.mark.parametrize(("penalty", "nu"), [("chi2", 1.0), ("kl", 0.5)])
def test_sgd_on_the_chi2_ball_weighs_a_batch_as_the_authors(penalty, nu):
    # yacht n = 40, radius 0.05, mu = 1/n, no ball on w, seed 6, batch 8, constant
    # step 0.05, last iterate: 3 steps against a transcription whose batch weights
    # solve, by cvxpy (Clarabel at tolerances 1e-12), max <l_b, q> - P(q) over the
    # simplex on 8 rows with (8/2)||q - 1/8||^2 <= 0.05 (the same radius), P the
    # authors' batch penalty: chi2 (nu n / 2)||q - 1/8||^2 (their shift cost nu n
    # unchanged), kl nu sum q log(8 q); w within 1e-8
    cp = pytest.importorskip("cvxpy")
    n, b, lr, radius = 40, 8, 0.05, 0.05
    problem = problem_on(ball(n, radius), nu=nu, penalty=penalty)
    solver = SGD(lr=lr, batch=b, schedule="constant", average=False)
    solver.setup(problem, 0)
    solver.advance(problem, np.random.default_rng(6), 3 * b)
    w = np.zeros(problem.n_params)
    for rows in _batch_draws(np.random.default_rng(6), n, b, 3):
        losses, grads = row_losses_grads(problem.X[rows], problem.y[rows], w)
        q = cp.Variable(b)
        if penalty == "chi2":
            objective = losses @ q - 0.5 * nu * n * cp.sum_squares(q - 1.0 / b)
        else:
            objective = losses @ q + nu * cp.sum(cp.entr(q)) - nu * math.log(b)
        cons = [cp.sum(q) == 1, q >= 0, 0.5 * b * cp.sum_squares(q - 1.0 / b) <= radius]
        cp.Problem(cp.Maximize(objective), cons).solve(
            solver="CLARABEL", tol_gap_abs=1e-12, tol_gap_rel=1e-12, tol_feas=1e-12)
        w = w - lr * (grads.T @ q.value + problem.mu * w)
    np.testing.assert_allclose(solver.w, w, rtol=0, atol=1e-8)


def test_sgd_on_the_chi2_ball_steps_by_the_batch_set():
    """The mini-batch estimator's default smooth step is ``1 / (b sigma_b L + mu)``
    with ``sigma_b`` the largest weight of ``subset(b)`` (exact; yacht n = 40,
    radius 1, batch 8, the constant schedule so the step is the default itself)."""
    problem = problem_on(ball(40, 1.0), nu=1.0, mu=1.0)
    solver = SGD(batch=8, schedule="constant")
    logged = solver.setup(problem, 40 * 50)
    sigma_b = ball(8, 1.0).max_weight()
    assert logged["sigma_batch"] == sigma_b
    assert logged["lr_default"] == pytest.approx(
        1.0 / (8 * sigma_b * solver.smoothness_ + 1.0), rel=1e-15)
