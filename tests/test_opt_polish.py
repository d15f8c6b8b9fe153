"""OPT to machine precision on smooth, strongly convex problems, and the certified
dual gap at the resolution float64 allows (plugins/metrics/optimum.py ``polish``,
harness/gap.py ``polish_strongly_convex``, harness/dual.py ``certified_gap``
and ``enclose_value``).

The references are written here independently of the harness: ``F`` for the
squared loss with the capped-simplex projection by bisection, minimised by
scipy's L-BFGS-B with its own strong-convexity certificate; ``F`` in 80-bit
extended precision (numpy's longdouble) for the rounding of the harness's
evaluation; the exact dual function of a quadratic inner problem by a linear
solve (a ridge regression).
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
from scipy import optimize

import harness
from harness.dual import certified_gap, dual_lower_bound, enclose_value
from harness.gap import polish_strongly_convex, project_ball
from harness.problem import Problem

from conftest import prospect_instance

optimum = pytest.importorskip("plugins.metrics.optimum")
pytest.importorskip("cvxpy")

REGRESSION_SETS = ("yacht", "energy", "concrete", "kin8nm", "power")
#: the accuracy claimed for OPT on a smooth, strongly convex problem
CLAIM_REL, CLAIM_ABS = 1e-13, 1e-15


def _claim(opt) -> float:
    return CLAIM_REL * abs(opt.value) + CLAIM_ABS


def _synthetic(n: int, d: int, seed: int, *, k: int | None = None, mu: float | None = None,
               nu: float = 1.0, radius: float = math.inf) -> Problem:
    """Prospect's problem on random data, mu = 1/n by default (``prospect_instance``)."""
    return prospect_instance(n, d, seed, k, 1.0 / n if mu is None else mu, nu, radius)


def _prospect(dataset: str) -> Problem:
    """The problem of ``experiment=prospect`` on ``dataset``, as the CLI prepares it."""
    from omegaconf import OmegaConf

    cfg = OmegaConf.to_container(harness.compose(
        ["experiment=prospect", f"dataset={dataset}", "solver=full_batch"], quiet=True),
        resolve=True)
    cfg.pop("hydra", None)
    return harness.prepare(cfg).parts.problem


def _solve(P: Problem):
    return optimum.solve(np.asarray(P.X, dtype=np.float64), P.y, P.model,
                         P.constraint.row_caps(), float(P.radius), rtol=1e-8, atol=1e-12,
                         mu=P.mu, nu=P.nu)


@pytest.fixture(scope="module")
def prospect_optima():
    """``{dataset: (problem, Optimum)}`` for the five regression sets, solved once."""
    return {name: (P, _solve(P)) for name in REGRESSION_SETS for P in [_prospect(name)]}


# ---------------------------------------------------------------------------
# independent references
# ---------------------------------------------------------------------------


def _project_by_bisection(v: np.ndarray, cap: float) -> np.ndarray:
    """``argmin_{0 <= q <= cap, sum q = 1} ||q - v||``: ``clip(v - t, 0, cap)`` with
    ``t`` found by 200 bisections (to adjacent floats)."""
    lo, hi = float(v.min()) - cap - 1.0, float(v.max())
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if np.clip(v - mid, 0.0, cap).sum() > 1.0:
            lo = mid
        else:
            hi = mid
    return np.clip(v - 0.5 * (lo + hi), 0.0, 1.0 * cap)


def _independent_F(X, y, cap, mu, nu):
    """``w -> (F(w), grad F(w))`` for L_i = (x_i.w - y_i)^2 / 2 written from the
    definitions: q = the projection of 1/n + L/(nu n) onto the capped simplex."""
    n = X.shape[0]

    def F(w):
        r = X @ w - y
        losses = 0.5 * r * r
        q = _project_by_bisection(1.0 / n + losses / (nu * n), cap)
        value = losses @ q - 0.5 * nu * n * np.sum((q - 1.0 / n) ** 2) + 0.5 * mu * w @ w
        return float(value), X.T @ (q * r) + mu * w

    return F


def _independent_opt(F, d: int, mu: float) -> tuple[float, float]:
    """``(lower, upper)`` around min F: L-BFGS-B from 0, restarted from its answer
    until it stops improving, and ``F(w) - ||grad F(w)||^2 / (2 mu) <= F*``."""
    w, best = np.zeros(d), math.inf
    for _ in range(6):
        res = optimize.minimize(F, w, jac=True, method="L-BFGS-B",
                                options={"maxiter": 2000, "ftol": 0.0, "gtol": 0.0,
                                         "maxcor": 30})
        value, g = F(res.x)
        if value >= best:
            break
        w, best, grad = res.x, value, g
    return best - float(grad @ grad) / (2.0 * mu), best


def _F_extended(P: Problem, w: np.ndarray) -> np.longdouble:
    """``F(w)`` of the squared loss without bias in 80-bit arithmetic: residuals,
    losses, the projection's threshold (by bisection) and the Lagrangian dual
    value ``tau + sum_i phi_i(L_i - tau)`` at it, exact at the threshold."""
    ld = np.longdouble
    X, y = np.asarray(P.X, dtype=ld), np.asarray(P.y, dtype=ld)
    w_ld = np.asarray(w, dtype=ld)
    r = X @ w_ld - y
    losses = r * r / ld(P.scale)
    n, nu = losses.size, ld(P.nu)
    cap = ld(1) / ld(P.constraint.k)

    def q_at(tau):
        return np.clip(ld(1) / n + (losses - tau) / (nu * n), ld(0), cap)

    lo, hi = losses.min() - nu * n, losses.max() + nu
    for _ in range(200):
        mid = (lo + hi) / 2
        if q_at(mid).sum() > 1:
            lo = mid
        else:
            hi = mid
    tau = (lo + hi) / 2
    q = q_at(tau)
    inner = tau + np.sum(q * (losses - tau) - nu * n / 2 * (q - ld(1) / n) ** 2)
    return inner + ld(P.mu) / 2 * np.sum(w_ld * w_ld)


def _exact_dual(P: Problem, q: np.ndarray) -> float:
    """``D(q)`` for the squared loss without a ball: ``min_w <L(w), q> + (mu/2)||w||^2``
    is a ridge regression, ``(2/s X' diag(q) X + mu I) w = 2/s X' diag(q) y``."""
    X, y, s = np.asarray(P.X, dtype=np.float64), P.y, P.scale
    A = 2.0 / s * (X.T * q) @ X + P.mu * np.eye(X.shape[1])
    w = np.linalg.solve(A, 2.0 / s * X.T @ (q * y))
    shift = q - 1.0 / P.n
    return (float(q @ P.losses(w)) + 0.5 * P.mu * float(w @ w)
            - 0.5 * P.nu * P.n * float(shift @ shift))


# ---------------------------------------------------------------------------
# OPT
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("n,d,seed", [(60, 5, 0), (61, 3, 1)])
def test_polished_opt_matches_an_independent_lbfgs(n, d, seed):
    # data seed 0/1, k = floor(n/2), nu = 1, mu = 1/n, no ball. The polished OPT's
    # interval and the independent one (L-BFGS-B on F written above, certified
    # by strong convexity) overlap within 4 ulps of OPT, and the polished
    # interval is within the claim 1e-13 |OPT| + 1e-15 (the conic interval
    # alone is about 1e-10 wide and its value 1e-10 above the truth).
    P = _synthetic(n, d, seed)
    opt = _solve(P)
    assert opt.polished
    lower, upper = _independent_opt(_independent_F(P.X, P.y, 1.0 / P.constraint.k, P.mu, P.nu),
                                    d, P.mu)
    assert upper - lower <= 1e-12 * upper  # the independent reference is sharp enough
    ulp = 4 * np.spacing(opt.value)
    assert opt.lower <= upper + ulp and lower <= opt.value + ulp, (opt.lower, opt.value,
                                                                  lower, upper)
    assert opt.value - opt.lower <= _claim(opt)
    # the record's value is F at its w (read through the enclosure: within 2e-15 relative)
    assert abs(opt.value - P.value(np.asarray(opt.w))) <= 2e-15 * opt.value


def test_opt_width_and_evaluation_noise_on_yacht(prospect_optima):
    # yacht, experiment=prospect (deterministic). The interval is within the
    # claim 1e-13 |OPT| + 1e-15 (measured 2.5e-16, 1.2e-15 relative), and F at
    # the polished w evaluated in 80-bit arithmetic (the rounding of the model's
    # losses included) lies inside [lower, value]: the evaluation noise the
    # interval leaves out is below its width. The conic value was 4.3e-10 above
    # the truth: a suboptimality against it would go negative at w*.
    if np.finfo(np.longdouble).eps > 1e-18:
        pytest.skip("no extended precision on this platform")
    P, opt = prospect_optima["yacht"]
    assert opt.polished and opt.value - opt.lower <= _claim(opt)
    w = np.asarray(opt.w)
    exact = _F_extended(P, w)
    assert np.longdouble(opt.lower) <= exact <= np.longdouble(opt.value)
    # the float64 evaluation the harness logs is off by at most a few ulps
    assert abs(float(np.longdouble(P.value(w)) - exact)) <= 2e-15 * opt.value
    conic = optimum.certify(np.asarray(P.X), P.y, P.model, P.constraint.row_caps(),
                            P.radius, w + 1e-6, None, mu=P.mu, nu=P.nu)[0]
    assert conic > opt.value + 1e-12  # a point off w* is measurably above OPT's upper end


@pytest.mark.parametrize("dataset", REGRESSION_SETS)
def test_opt_claim_on_the_five_regression_sets(prospect_optima, dataset):
    # experiment=prospect on each set (deterministic): polished, interval within
    # 1e-13 |OPT| + 1e-15 (measured 1.2e-15 to 2.0e-15 relative), and OPT below
    # the value at any of 20 random points near w* (seed 0)
    P, opt = prospect_optima[dataset]
    assert opt.polished, opt.attempts
    assert 0.0 <= opt.value - opt.lower <= _claim(opt), opt.value - opt.lower
    w = np.asarray(opt.w)
    rng = np.random.default_rng(0)
    for scale in np.logspace(-7, -1, 20):
        assert P.value(w + scale * rng.normal(size=w.size)) >= opt.lower


@pytest.mark.parametrize("radius", [0.3, 1.0, 50.0])
def test_polished_opt_with_a_ball(radius):
    # data seed 3, n = 60, d = 5, k = 30, nu = 1, mu = 1/60; the ball cuts the
    # unconstrained optimum (norm 1.76) off at 0.3 and 1.0, not at 50. OPT's
    # interval is within the claim; the point is in the ball (to rounding); SLSQP
    # on F with ||w||^2 <= B^2 (ftol 1e-15) finds no value below OPT's lower end
    # and agrees to 1e-9 relative (its own accuracy).
    P = _synthetic(60, 5, seed=3, radius=radius)
    opt = _solve(P)
    assert opt.polished and opt.value - opt.lower <= _claim(opt)
    w = np.asarray(opt.w)
    assert float(w @ w) <= radius**2 * (1 + 1e-15)
    F = _independent_F(P.X, P.y, 1.0 / P.constraint.k, P.mu, P.nu)
    res = optimize.minimize(F, np.zeros(5), jac=True, method="SLSQP", constraints=[
        {"type": "ineq", "fun": lambda v: radius**2 - v @ v, "jac": lambda v: -2 * v}],
        options={"ftol": 1e-15, "maxiter": 1000})
    other = F(project_ball(res.x, radius))[0]
    assert other >= opt.lower - 4 * np.spacing(opt.value)
    assert other == pytest.approx(opt.value, rel=1e-9)


def test_polished_opt_of_a_softmax_model():
    # breast cancer rows 0..99 (deterministic), logistic_cel (62 parameters, not
    # a quadratic), k = 25, nu = 0.5, mu = 1e-2, no ball, loss scale 1. The
    # interval is within the claim, and scipy's L-BFGS-B on Problem.value_and_grad
    # from 0 finds nothing below OPT's lower end.
    ds = harness.build("dataset", "breast_cancer")
    X, y = np.asarray(ds.X[:100], dtype=np.float64), np.asarray(ds.y[:100])
    model = harness.build("model", "logistic_cel", loss_scale=1.0)
    model.setup(SimpleNamespace(X=X, y=y, n_classes=2), 1.0)
    P = Problem(X, y, model, harness.build("constraint_set", "kset", n=100, k=25),
                1e-2, 0.5, math.inf)
    opt = _solve(P)
    assert opt.polished and opt.value - opt.lower <= _claim(opt), opt.attempts
    res = optimize.minimize(lambda v: P.value_and_grad(v)[:2], np.zeros(P.n_params), jac=True,
                            method="L-BFGS-B", options={"maxiter": 3000, "ftol": 0.0,
                                                        "gtol": 0.0})
    assert P.value(res.x) >= opt.lower


def test_nonsmooth_problems_keep_the_conic_interval():
    # nu = 0 (F not C^1): no polishing; with mu = 0 as well, nothing to polish by
    P = _synthetic(40, 3, seed=4, mu=0.05, nu=0.0, radius=1.0)
    opt = _solve(P)
    assert not opt.polished and opt.polish_time_s == 0.0
    assert not optimum.smooth_and_strongly_convex(0.05, 0.0)
    assert not optimum.smooth_and_strongly_convex(0.0, 1.0)
    with pytest.raises(ValueError, match="mu > 0 and nu > 0"):
        optimum.polish(P, np.zeros(3))


def test_records_of_the_old_format_are_not_reused(tmp_path):
    # a record written before polishing (format 1) under the current key is ignored;
    # one of the current format is read back with its polishing fields
    P = _synthetic(30, 3, seed=5)
    caps = P.constraint.row_caps()
    key = optimum.cache_key(P.X, P.y, P.model, caps, math.inf, mu=P.mu, nu=P.nu)
    found = optimum.Optimum(1.0, 1.0 - 1e-16, "CLARABEL", "optimal", 0.1, [0.0] * 3, [],
                            True, 0.01)
    path = optimum.store(tmp_path, key, found, {})
    assert optimum.load_cached(tmp_path, key) == found
    record = path.read_text().replace(f'"format": {optimum.CACHE_FORMAT}', '"format": 1')
    path.write_text(record)
    assert optimum.CACHE_FORMAT >= 2 and optimum.load_cached(tmp_path, key) is None


# ---------------------------------------------------------------------------
# the minimiser
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("radius", [math.inf, 3.0, 0.5])
def test_polish_strongly_convex_on_a_logistic_objective(radius):
    # seed 7: h(w) = sum_i log(1 + exp(a_i . w)) / m - b . w + (mu/2)||w||^2 (not
    # quadratic; unconstrained minimiser of norm 3.3), mu = 1e-2, d = 6. The
    # interval is at most 64 ulps of |h| wide, and SLSQP (ftol 1e-15) finds no
    # value below its lower end by more than h's own rounding (8 ulps of its
    # largest term), agreeing to 1e-8 (SLSQP's accuracy).
    rng = np.random.default_rng(7)
    A, b, mu = rng.normal(size=(40, 6)), rng.normal(size=6) * 0.1, 1e-2

    def h(w):
        z = A @ w
        s = 1.0 / (1.0 + np.exp(-z))
        return (float(np.logaddexp(0.0, z).mean() - b @ w + 0.5 * mu * w @ w),
                A.T @ s / A.shape[0] - b + mu * w)

    sol = polish_strongly_convex(h, np.zeros(6), mu, radius)
    assert sol.upper - sol.lower <= 64 * np.spacing(abs(sol.upper))
    assert float(sol.w @ sol.w) <= radius**2 * (1 + 1e-15)
    assert h(sol.w)[0] == sol.upper
    cons = [] if math.isinf(radius) else [{"type": "ineq", "fun": lambda v: radius**2 - v @ v,
                                           "jac": lambda v: -2 * v}]
    res = optimize.minimize(lambda v: h(v)[0], np.zeros(6), jac=lambda v: h(v)[1],
                            method="SLSQP", constraints=cons,
                            options={"ftol": 1e-15, "maxiter": 2000})
    other = project_ball(res.x, radius)
    rounding = 8 * np.spacing(max(abs(float(b @ other)), 0.5 * mu * float(other @ other), 1.0))
    assert h(other)[0] >= sol.lower - rounding
    assert h(other)[0] == pytest.approx(sol.upper, rel=1e-8)
    # stopped after 0, 1 or 2 Newton steps from afar, the bound still holds (and is loose)
    for steps in (0, 1, 2):
        early = polish_strongly_convex(h, np.full(6, 4.0), mu, radius, max_newton=steps)
        assert early.lower <= h(other)[0] + rounding <= early.upper + 2 * rounding


# ---------------------------------------------------------------------------
# the certified dual gap
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("dataset", REGRESSION_SETS)
def test_certified_gap_resolution_at_the_optimum(prospect_optima, dataset):
    # experiment=prospect on each set (deterministic): at the polished optimum the
    # certified gap F(w) - D(q(w)) is at most 1e-14 |F| (measured 1.5e-15 to
    # 2.1e-15 relative), never negative, and its lower end is a lower bound of
    # OPT: below OPT's upper end
    P, opt = prospect_optima[dataset]
    w = np.asarray(opt.w)
    result = certified_gap(P, w)
    assert 0.0 <= result.gap <= 1e-14 * abs(opt.value), result.gap / opt.value
    assert result.lower <= opt.value
    # warm-started from its own inner point it gives the same resolution
    again = certified_gap(P, w, w_inner=result.w_inner)
    assert 0.0 <= again.gap <= 1e-14 * abs(opt.value)


def test_certified_gap_holds_away_from_the_optimum(prospect_optima):
    # yacht, experiment=prospect; seed 8. At 30 points at distances 1e-9 .. 10
    # from w*, with the closed-form q(w) alone and with a random q in K (a
    # solver's dual iterate, repaired from 1e-9 off the set), the certified gap
    # is >= F(w) - OPT's upper end (so >= F(w) - F*), and each dual bound is
    # below the exact D(q) of a ridge solve (to 1e-15 rounding)
    P, opt = prospect_optima["yacht"]
    w_star = np.asarray(opt.w)
    rng = np.random.default_rng(8)
    k = P.constraint.k
    for scale in np.logspace(-9, 1, 30):
        w = w_star + scale * rng.normal(size=w_star.size)
        value = P.value(w)
        q_solver = rng.dirichlet(np.ones(P.n))
        q_solver = P.constraint.euclidean_project(q_solver) + 1e-9 * rng.normal(size=P.n) / P.n
        for q in (None, q_solver):
            result = certified_gap(P, w, q)
            assert result.gap >= value - opt.value, (scale, result.gap, value - opt.value)
            assert result.value >= value - 4 * np.spacing(value)
            assert result.lower <= _exact_dual(P, result.q) + 1e-15
            assert np.all(result.q >= 0) and np.all(result.q <= 1.0 / k)
            assert abs(result.q.sum() - 1.0) <= 1e-15
        # near w* the closed form is sharp: the gap is second order in the distance
        if scale <= 1e-6:
            assert result.gap <= 1e-12 * abs(opt.value) + 1e3 * scale**2


def test_certified_gap_takes_the_better_dual_point(prospect_optima):
    # concrete, experiment=prospect; seed 11. Far from w* (distance 0.3) the
    # closed-form q(w) is a poor dual point; given the optimal q* = q(w*) as a
    # solver's iterate, the gap is F(w) - F* itself (to 1e-14 |F|), far below
    # the gap from q(w) alone
    P, opt = prospect_optima["concrete"]
    w_star = np.asarray(opt.w)
    q_star = P.inner(P.losses(w_star))[1]
    w = w_star + 0.3 * np.random.default_rng(11).normal(size=w_star.size)
    alone, both = certified_gap(P, w), certified_gap(P, w, q_star)
    truth = P.value(w) - opt.lower
    assert truth <= both.gap <= truth + 1e-14 * abs(P.value(w))
    assert alone.gap > 1.05 * truth


def test_certified_gap_without_strong_convexity():
    # seed 12, n = 60, d = 4, k = 30, nu = 0.5, mu = 0, ball 0.5 (Frank-Wolfe inner
    # bounds to 1e-9 relative): the gap holds at 5 points (>= F(w) - OPT's upper
    # end), and with a solver's q it is that q's bound alone, q moved into K by
    # at most 1e-15 (the closed form's would cost another Frank-Wolfe solve)
    P = _synthetic(60, 4, seed=12, mu=0.0, nu=0.5, radius=0.5)
    opt = _solve(P)
    assert not opt.polished
    rng = np.random.default_rng(12)
    for _ in range(5):
        w = project_ball(rng.normal(size=4), 0.5)
        q = P.inner(P.losses(0.9 * w))[1]
        for given in (None, q):
            result = certified_gap(P, w, given)
            assert result.gap >= P.value(w) - opt.value
        assert result.lower == dual_lower_bound(P, result.q, w)[0]
        np.testing.assert_allclose(result.q, q, rtol=0, atol=1e-15)  # (repaired to sum 1)


@pytest.mark.parametrize("radius", [math.inf, 0.4])
def test_dual_lower_bound_is_below_the_exact_dual_function(radius):
    # seed 9, n = 50, d = 4, nu = 1, mu = 1/50; for 10 random q in K: the bound
    # with the default tolerances and polished to the floor (tolerances 0) are
    # below the exact D(q) (ridge solve; with the ball by the multiplier with
    # ||w|| = B, Brent) and the polished one within 1e-14 relative of it
    P = _synthetic(50, 4, seed=9, radius=radius)
    rng = np.random.default_rng(9)
    X, y, s = P.X, P.y, P.scale
    for _ in range(10):
        q = P.constraint.euclidean_project(rng.dirichlet(np.ones(50) * 0.5))
        A, rhs = 2.0 / s * (X.T * q) @ X, 2.0 / s * X.T @ (q * y)

        def w_at(lam, A=A, rhs=rhs):
            return np.linalg.solve(A + (P.mu + lam) * np.eye(4), rhs)

        lam = 0.0
        if np.linalg.norm(w_at(0.0)) > radius:
            lam = optimize.brentq(lambda m: np.linalg.norm(w_at(m)) - radius, 0.0, 1e6,
                                  xtol=1e-16, rtol=8.9e-16)
        w = project_ball(w_at(lam), radius)
        exact = (float(q @ P.losses(w)) + 0.5 * P.mu * float(w @ w)
                 - 0.5 * P.nu * 50 * float((q - 1 / 50) @ (q - 1 / 50)))
        loose, _ = dual_lower_bound(P, q, np.zeros(4))
        sharp, _ = dual_lower_bound(P, q, np.zeros(4), abs_tol=0.0, rel_tol=0.0)
        assert loose <= exact + 1e-15 and sharp <= exact + 1e-15
        assert exact - sharp <= 1e-14 * abs(exact), (exact - sharp) / exact


def test_enclosure_holds_the_extended_precision_value(prospect_optima):
    # yacht and power, experiment=prospect; seed 10: at w* and at 10 random points
    # (distances 1e-8 .. 1), enclose_value's [low, high] holds F computed in
    # 80-bit arithmetic, is at most 1e-14 |F| wide, and the maximiser q is in K
    if np.finfo(np.longdouble).eps > 1e-18:
        pytest.skip("no extended precision on this platform")
    rng = np.random.default_rng(10)
    for name in ("yacht", "power"):
        P, opt = prospect_optima[name]
        w_star = np.asarray(opt.w)
        for scale in [0.0, *np.logspace(-8, 0, 10)]:
            w = w_star + scale * rng.normal(size=w_star.size)
            low, high, q = enclose_value(P, w)
            exact = _F_extended(P, w)
            assert np.longdouble(low) <= exact <= np.longdouble(high), (name, scale)
            assert high - low <= 1e-14 * abs(high)
            assert P.constraint.contains(q, atol=1e-12)
