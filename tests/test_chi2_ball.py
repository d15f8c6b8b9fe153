"""The chi-square ball (plugins/sets/chi2_ball.py; numerics in
plugins/lib/chi2_ball.py): the Euclidean projection, the oracle, the KL
projection and the two best responses against cvxpy (Clarabel) with the ball
written as ``sum_squares(q - 1/n) <= r^2``, against a sort-and-bisect numpy
reference at larger n, and against the KKT conditions; membership, the
support function, the mixing with the uniform distribution, ``subset``,
Lambert's W, the parameters and the players' refusals.

Every reference is computed independently of the code under test. cvxpy's
points are accurate to about 1e-7 and violate the constraints by up to about
1e-9, so each comparison is twofold: the code's point is within 1e-5 of
cvxpy's, and its objective is at least as good (to 1e-12 relative) as that of
cvxpy's point made feasible (``feasible``: clipped, normalised, pulled toward
1/n onto the ball) -- no point of K may beat the optimum, so a code whose
answer is off by more than cvxpy's error fails the second check."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
from scipy.special import lambertw as scipy_lambertw

import harness
import plugins.sets.chi2_ball as chi2_module
from harness import ConfigError
from plugins.lib.chi2_ball import kl_ball_point, least_rows
from plugins.sets.chi2_ball import Chi2Ball

from conftest import game_cfg

cp = pytest.importorskip("cvxpy")

# the exponential cone's "Solution may be inaccurate": the tolerances below allow for it
pytestmark = pytest.mark.filterwarnings("ignore:Solution may be inaccurate")

#: radii: tiny, the default, and large enough that the ball is inactive at every n used
RADII = (1e-3, 1.0, 1e4)
SIZES = (1, 2, 3, 7, 50, 200)


def registry() -> harness.Registry:
    """The built-ins with this module registered (once the package lists it among
    its built-ins, it is already)."""
    pm = harness.make_plugin_manager(load_entrypoints=False)
    if not pm.is_registered(chi2_module):
        pm.register(chi2_module, name=chi2_module.__name__)
    return harness.Registry(pm)


REGISTRY = registry()


def ball(n: int, radius: float = 1.0) -> Chi2Ball:
    return REGISTRY.build("constraint_set", "chi2_ball", n=n, radius=radius)


def solve(problem) -> float:
    """Clarabel at tight tolerances (its defaults if those fail); the optimal value."""
    try:
        problem.solve(solver="CLARABEL", tol_gap_abs=1e-11, tol_gap_rel=1e-11,
                      tol_feas=1e-11, max_iter=400)
    except cp.error.SolverError:
        problem.solve(solver="CLARABEL")
    assert problem.status in ("optimal", "optimal_inaccurate"), problem.status
    return float(problem.value)


def ball_constraints(q, n: int, r_sq: float) -> list:
    return [q >= 0, cp.sum(q) == 1, cp.sum_squares(q - 1.0 / n) <= r_sq]


def feasible(x: np.ndarray, r_sq: float) -> np.ndarray:
    """cvxpy's point ``x`` moved into K: negative entries to 0, normalised, then
    ``1/n + (x - 1/n) min(1, r / ||x - 1/n||)`` (a mix with 1/n: still in the simplex)."""
    x = np.maximum(x, 0.0)
    x /= x.sum()
    u = 1.0 / x.size
    phi = float(np.sum((x - u) ** 2))
    return x if phi <= r_sq else u + (x - u) * (math.sqrt(r_sq / phi) * (1.0 - 1e-15))


def no_better(value: float, ours: float) -> bool:
    """``value`` (a feasible point's objective, minimised) is not below ``ours`` by
    more than 1e-12 relative."""
    return value >= ours - 1e-12 * (1.0 + abs(ours))


def simplex_projection(y: np.ndarray) -> np.ndarray:
    """``argmin_{q in simplex} ||q - y||`` by sorting (Held, Wolfe and Crowder 1974;
    Duchi et al. 2008): ``q = max(y - theta, 0)``."""
    s = np.sort(y)[::-1]
    cums = np.cumsum(s) - 1.0
    j = np.arange(1, y.size + 1)
    rho = np.flatnonzero(s - cums / j > 0)[-1]
    return np.maximum(y - cums[rho] / (rho + 1), 0.0)


def ray_reference(v: np.ndarray, r_sq: float, t_max: float) -> np.ndarray:
    """``proj_simplex(t v)`` at the largest ``t <= t_max`` inside the ball, by
    bisection on ``t`` (``||proj_simplex(t v) - u||`` is non-decreasing in ``t``),
    200 halvings of ``[0, t_max]`` (``t_max = inf``: of ``[0, 1e12 / (1 + max |v|)]``)."""
    inside = lambda t: np.sum((simplex_projection(t * v) - 1.0 / v.size) ** 2) <= r_sq  # noqa: E731
    hi = min(t_max, 1e12 / (1.0 + np.max(np.abs(v))))
    if inside(hi):
        return simplex_projection(hi * v)
    lo = 0.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if inside(mid) else (lo, mid)
    return simplex_projection(lo * v)


def cases(seed: int):
    """(n, radius, v) over SIZES x RADII, v at three scales (most of them outside
    the ball, the smallest often inside)."""
    rng = np.random.default_rng(seed)
    for n in SIZES:
        for radius in RADII:
            for scale in (0.01, 1.0, 10.0):
                yield n, radius, rng.normal(size=n) * scale / math.sqrt(n)


# ---------------------------------------------------------------------------
# the parameters, the protocol members and the refusals
# ---------------------------------------------------------------------------


def test_radius_must_be_positive():
    for bad in (0.0, -1.0):
        with pytest.raises(ConfigError) as err:
            ball(10, bad)
        assert "'radius' parameter of chi2_ball" in str(err.value)
        assert f"Got {bad!r} instead" in str(err.value)


def test_protocol_members_and_refusals():
    K = ball(12, 1.0)
    assert isinstance(K, harness.EuclideanProjection)
    assert K.row_caps() is None and K.compiled() is None and K.sampler == "none"
    assert K.label() == "chi2 ball radius=1"
    assert K.bind(None) == {"k": K.k}
    with pytest.raises(ConfigError, match="'chi2_ball' .* has no sampler"):
        K.sample(np.full(12, 1 / 12), np.random.default_rng(0))
    p, capped = K.project(np.arange(1.0, 13.0), 0.2, return_capped=True)
    assert K.contains(p) and capped.dtype == bool and not capped.any()


@pytest.mark.parametrize("n", [1, 2, 3, 10, 569, 1000])
@pytest.mark.parametrize("radius", [1e-3, 0.5, 1.0, 7.3, 1e4])
def test_k_is_the_fewest_rows_whose_uniform_distribution_is_inside(n, radius):
    # brute force over k: 1_I / k is in K iff (n/k - 1)/2 <= radius
    K = ball(n, radius)
    inside = [k for k in range(1, n + 1) if K.contains(np.r_[np.full(k, 1 / k), np.zeros(n - k)])]
    assert K.k == least_rows(n, radius) == inside[0]


@pytest.mark.parametrize(("n", "radius"), [(1, 1.0), (2, 0.1), (7, 1.0), (50, 0.05),
                                         (50, 1.0), (300, 1e3)])
def test_max_weight_is_the_largest_coordinate_of_a_point_of_the_ball(n, radius):
    """``max_weight`` against cvxpy's ``max q_0`` over K (Clarabel; the closed form
    within 1e-7), and the point that attains it is in K (atol 1e-12)."""
    cp = pytest.importorskip("cvxpy")
    ball = Chi2Ball(n, radius)
    q = cp.Variable(n)
    u = np.full(n, 1.0 / n)
    problem = cp.Problem(cp.Maximize(q[0]), [q >= 0, cp.sum(q) == 1,
                                            cp.sum_squares(q - u) <= 2.0 * radius / n])
    problem.solve(solver="CLARABEL")
    assert ball.max_weight() == pytest.approx(problem.value, abs=1e-7)
    a = ball.max_weight()
    point = np.full(n, (1.0 - a) / max(n - 1, 1))
    point[0] = a
    assert ball.contains(point, atol=1e-12)


def test_subset_is_the_ball_of_the_same_radius_over_m_rows():
    K = ball(100, 0.7)
    S = K.subset(13)
    assert isinstance(S, Chi2Ball) and S.n == 13 and S.radius == 0.7
    assert S.r_sq_ == pytest.approx(2 * 0.7 / 13, rel=1e-15)
    assert S.contains(S.lmo(np.arange(13.0))[1])
    for bad in (0, -1, 2.5):
        with pytest.raises(ValueError, match="m must be an int >= 1"):
            K.subset(bad)


@pytest.mark.parametrize("player", ["exp4mp", "exp_ix_m", "adacvar", "safl"])
def test_players_that_draw_refuse_the_ball(player):
    with pytest.raises(ConfigError) as err:
        harness.prepare(game_cfg("constraint=chi2_ball", f"p_player={player}",
                                 registry=REGISTRY), REGISTRY)
    assert str(err.value) == (
        f"The p_player '{player}' cannot play on constraint 'chi2_ball': it draws its rows "
        "from the constraint set's sampler; 'chi2_ball' has none (sampler 'none'), so only "
        "full-information players (ftrl) and the solvers run on it.")


@pytest.mark.parametrize(("player", "why"), [
    ("exp_ix", "it plays one row per round (k = 1, the simplex)"),
    ("ru_sgd", "it needs a capped simplex"),
    ("soft_cvar", "it needs a capped simplex"),
])
def test_players_that_need_caps_or_one_row_refuse_the_ball(player, why):
    with pytest.raises(ConfigError, match=re.escape(f"'{player}' cannot play on constraint "
                                                    f"'chi2_ball': {why}")):
        harness.prepare(game_cfg("constraint=chi2_ball", f"p_player={player}",
                                 registry=REGISTRY), REGISTRY)


@pytest.mark.parametrize("player", ["ftrl", "uniform"])
def test_full_information_players_run_end_to_end(player):
    # 20 rounds' worth of data points on breast cancer (n = 569), radius 1: the
    # certified gap is finite, non-negative and at most the theory bound (if any)
    cfg = game_cfg("constraint=chi2_ball", f"p_player={player}", budget=20 * 569,
                   registry=REGISTRY)
    result = harness.play(harness.prepare(cfg, REGISTRY))
    assert math.isfinite(result["dual_gap"]) and result["dual_gap"] >= 0.0
    if "theory_bound" in result:
        assert result["dual_gap"] <= result["theory_bound"] + 1e-12


# ---------------------------------------------------------------------------
# the Euclidean projection and the smoothed best response
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1])
def test_euclidean_projection_matches_cvxpy(seed):
    # seeds 0 and 1; n in SIZES, radii tiny/1/huge, v at three scales; the
    # code's point is in K (atol 1e-9), no feasible point is closer to v
    # (cvxpy's, made feasible) and it is within 1e-5 of cvxpy's
    for n, radius, v in cases(seed):
        K = ball(n, radius)
        q = K.euclidean_project(v)
        x = cp.Variable(n)
        solve(cp.Problem(cp.Minimize(cp.sum_squares(x - v)), ball_constraints(x, n, K.r_sq_)))
        assert K.contains(q, atol=1e-9), (n, radius)
        other = feasible(x.value, K.r_sq_)
        assert no_better(float(np.sum((other - v) ** 2)), float(np.sum((q - v) ** 2))), (n, radius)
        np.testing.assert_allclose(q, x.value, atol=1e-5, err_msg=f"n={n} radius={radius}")


def test_euclidean_projection_of_a_point_inside_is_itself():
    # seed 2: points of K (mixes of 1/n with a projected point); exact to 1e-15
    rng = np.random.default_rng(2)
    for n in (2, 7, 200):
        K = ball(n, 1.0)
        for _ in range(5):
            p = 0.5 * K.euclidean_project(rng.normal(size=n)) + 0.5 / n
            np.testing.assert_allclose(K.euclidean_project(p), p, atol=1e-15)


def test_inactive_ball_gives_the_simplex_projection():
    # radius (n - 1)/2 contains the simplex: the projection is the simplex's
    # (sort-based reference), to 1e-12; seed 3
    rng = np.random.default_rng(3)
    for n in (2, 5, 40):
        K = ball(n, (n - 1) / 2)
        for _ in range(5):
            v = rng.normal(size=n)
            np.testing.assert_allclose(K.euclidean_project(v), simplex_projection(v), atol=1e-12)


@pytest.mark.parametrize("n", [3_000, 20_000])
@pytest.mark.parametrize("radius", [1e-2, 1.0, 30.0])
def test_euclidean_projection_matches_bisection_at_larger_n(n, radius):
    # seed 4: v = 1/n + l / (nu n) with l in [0, 1), nu = 0.05 (the smoothed best
    # response's point); reference: bisection on t with a sort-based simplex
    # projection; within 1e-9 (the bisection's t is exact to ~1e-12 relative)
    rng = np.random.default_rng(4)
    v = 1.0 / n + rng.random(n) / (0.05 * n)
    K = ball(n, radius)
    np.testing.assert_allclose(K.euclidean_project(v), ray_reference(v, K.r_sq_, 1.0),
                               atol=1e-9)


@pytest.mark.parametrize("nu", [1e-3, 0.1, 10.0])
def test_smoothed_best_response_matches_cvxpy(nu):
    # seed 5: argmax_{q in K} <l, q> - nu (n/2) ||q - 1/n||^2 as the projection of
    # 1/n + l / (nu n); cvxpy solves the penalised problem itself; no feasible
    # point does better (cvxpy's, made feasible), point within 1e-5 of cvxpy's
    rng = np.random.default_rng(5)
    for n in (1, 4, 60):
        for radius in RADII:
            K = ball(n, radius)
            losses = rng.random(n)
            q = K.euclidean_project(1.0 / n + losses / (nu * n))
            x = cp.Variable(n)
            solve(cp.Problem(
                cp.Maximize(losses @ x - nu * n / 2 * cp.sum_squares(x - 1.0 / n)),
                ball_constraints(x, n, K.r_sq_)))
            def loss(p, losses=losses, n=n):
                return float(nu * n / 2 * np.sum((p - 1.0 / n) ** 2) - losses @ p)

            assert K.contains(q, atol=1e-9)
            assert no_better(loss(feasible(x.value, K.r_sq_)), loss(q)), (n, radius)
            np.testing.assert_allclose(q, x.value, atol=1e-5)


# ---------------------------------------------------------------------------
# the oracle
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1])
def test_lmo_matches_cvxpy(seed):
    # seeds 10 and 11; the oracle's point is in K (atol 1e-9), its value is
    # <l, q> exactly, within 1e-7 of cvxpy's maximum, and no feasible point
    # (cvxpy's, made feasible) has a larger value
    for n, radius, losses in cases(seed + 10):
        K = ball(n, radius)
        value, q = K.lmo(losses)
        x = cp.Variable(n)
        best = solve(cp.Problem(cp.Maximize(losses @ x), ball_constraints(x, n, K.r_sq_)))
        assert K.contains(q, atol=1e-9), (n, radius)
        assert value == float(losses @ q)
        assert value == pytest.approx(best, abs=1e-7), (n, radius)
        assert no_better(-float(losses @ feasible(x.value, K.r_sq_)), -value), (n, radius)


@pytest.mark.parametrize("n", [3_000, 20_000])
@pytest.mark.parametrize("radius", [1e-2, 1.0, 30.0])
def test_lmo_matches_bisection_at_larger_n(n, radius):
    # seed 6: losses rounded to 0.01 (many ties); reference as above; values within 1e-12
    rng = np.random.default_rng(6)
    losses = np.round(rng.random(n), 2)
    K = ball(n, radius)
    value, q = K.lmo(losses)
    assert K.contains(q, atol=1e-12)
    assert value == pytest.approx(float(losses @ ray_reference(losses, K.r_sq_, np.inf)),
                                  abs=1e-12)


def test_lmo_ties_and_equal_losses():
    # exact cases: all equal -> 1/n; a face of tied maxima whose centre is inside
    # -> uniform on it; a single maximum inside -> its vertex; tolerance 1e-15
    n = 9
    K = ball(n, 1.0)  # r^2 = 2/9: 1_I / k inside for k >= 3
    value, q = K.lmo(np.full(n, 0.3))
    np.testing.assert_allclose(q, np.full(n, 1 / n), atol=1e-15)
    assert value == pytest.approx(0.3, abs=1e-15)
    losses = np.array([0.1, 0.9, 0.2, 0.9, 0.5, 0.9, 0.0, 0.9, 0.3])
    value, q = K.lmo(losses)
    np.testing.assert_allclose(q, np.where(losses == 0.9, 0.25, 0.0), atol=1e-15)
    assert value == pytest.approx(0.9, abs=1e-15)
    V = ball(n, 4.0)  # (n - 1)/2 = 4: the vertices are on the sphere
    value, q = V.lmo(np.arange(n, dtype=float))
    np.testing.assert_allclose(q, np.eye(n)[-1], atol=1e-15)
    assert value == n - 1
    # two tied maxima outside the ball: equal weights on them, the rest on the sphere
    value, q = K.lmo(np.array([1.0, 1.0, 0.5, 0.4, 0.3, 0.2, 0.1, 0.0, 0.0]))
    assert q[0] == pytest.approx(q[1], abs=1e-15) and q[7] == pytest.approx(q[8], abs=1e-15)
    assert np.sum((q - 1 / n) ** 2) == pytest.approx(K.r_sq_, rel=1e-12)


def test_lmo_on_a_single_row_and_rejects_nonfinite_losses():
    K = ball(1, 1.0)
    assert K.lmo(np.array([0.7])) == (0.7, pytest.approx(np.ones(1)))
    with pytest.raises(ValueError, match="finite"):
        ball(3).lmo(np.array([0.1, np.nan, 0.2]))


# ---------------------------------------------------------------------------
# the KL projection and the KL-penalised best response
# ---------------------------------------------------------------------------


def kl_reference(log_w: np.ndarray, r_sq: float):
    """cvxpy's ``argmin_{q in K} KL(q || w / sum w)`` as ``sum(-entr(q)) - q @
    log_w`` (the KL up to a constant, weights shifted to max 1); the variable and
    the optimal value."""
    n = log_w.size
    x = cp.Variable(n)
    shifted = log_w - np.max(log_w)
    value = solve(cp.Problem(cp.Minimize(cp.sum(-cp.entr(x)) - x @ shifted),
                             ball_constraints(x, n, r_sq)))
    return x, value


def kl_objective(q: np.ndarray, log_w: np.ndarray) -> float:
    shifted = log_w - np.max(log_w)
    pos = q > 0
    return float(np.sum(q[pos] * np.log(q[pos])) - q @ shifted)


@pytest.mark.parametrize("spread", [1.0, 30.0, 300.0])
def test_kl_projection_matches_cvxpy(spread):
    # seed 7: log-weights spread * U(0, 1) (weights over up to 130 orders of
    # magnitude at spread 300); n in SIZES, radii tiny/1/huge; in K (atol 1e-9),
    # no feasible point (cvxpy's, made feasible) has a smaller KL, and the point
    # is within 1e-5 of cvxpy's
    rng = np.random.default_rng(7)
    for n in SIZES:
        for radius in RADII:
            K = ball(n, radius)
            log_w = spread * rng.random(n)
            q = K.project(log_w, 0.0, log_domain=True)
            x, _ = kl_reference(log_w, K.r_sq_)
            assert K.contains(q, atol=1e-9), (n, radius)
            assert no_better(kl_objective(feasible(x.value, K.r_sq_), log_w),
                             kl_objective(q, log_w)), (n, radius)
            np.testing.assert_allclose(q, x.value, atol=1e-5, err_msg=f"n={n} r={radius}")


def test_kl_projection_of_weights_inside_is_their_normalisation():
    # radius 1, n = 50, weights e^(0.1 N(0, 1)) (seed 8): ||p - u||^2 well below
    # r^2, so the projection is p itself, to 1e-15
    w = np.exp(0.1 * np.random.default_rng(8).normal(size=50))
    K = ball(50, 1.0)
    np.testing.assert_allclose(K.project(w), w / w.sum(), atol=1e-15)


def test_kl_projection_gives_zero_weights_zero_and_refuses_too_few_rows():
    # n = 10, radius 1 (r^2 = 0.2): 1_I/m is inside for m >= 4
    K = ball(10, 1.0)
    w = np.array([5.0, 1.0, 0.0, 3.0, 0.0, 2.0, 0.0, 9.0, 0.0, 0.0])
    q = K.project(w)
    assert K.contains(q) and np.all(q[w == 0] == 0.0)
    x, best = kl_reference(np.log(np.where(w > 0, w, 1e-300)), K.r_sq_)
    np.testing.assert_allclose(q, x.value, atol=1e-5)
    with pytest.raises(ValueError, match="needs at least 4 rows with positive weight; got 3"):
        K.project(np.array([1.0, 2.0, 3.0, 0, 0, 0, 0, 0, 0, 0]))
    with pytest.raises(ValueError, match="log-weights"):
        K.project(np.array([1.0, np.inf]), log_domain=True)


@pytest.mark.parametrize("nu", [1e-2, 0.3, 5.0])
def test_kl_penalised_best_response_matches_cvxpy(nu):
    # seed 9: argmax_{q in K} <l, q> - nu KL(q || 1/n) = project(l / nu, log_domain=True);
    # cvxpy solves the penalised problem (sum q log(n q) = -sum entr(q) + log n);
    # no feasible point (cvxpy's, made feasible) does better; point within 1e-5
    rng = np.random.default_rng(9)
    for n in (2, 9, 120):
        for radius in RADII:
            K = ball(n, radius)
            losses = rng.random(n)
            q = K.project(losses / nu, 0.0, log_domain=True)
            x = cp.Variable(n)
            solve(cp.Problem(
                cp.Maximize(losses @ x + nu * cp.sum(cp.entr(x)) - nu * math.log(n)),
                ball_constraints(x, n, K.r_sq_)))
            def loss(p, losses=losses, n=n):
                return float(nu * np.sum(p * np.log(n * p)) - losses @ p)

            assert K.contains(q, atol=1e-9)
            assert no_better(loss(feasible(x.value, K.r_sq_)), loss(q)), (n, radius)
            np.testing.assert_allclose(q, x.value, atol=1e-5)


@pytest.mark.parametrize("n", [2_000, 50_000])
@pytest.mark.parametrize("spread", [3.0, 300.0, 3e4])
@pytest.mark.parametrize("radius", [1e-2, 1.0])
def test_kl_projection_satisfies_kkt_at_larger_n(n, spread, radius):
    # seed 10: log-weights spread * U(0, 1), 0.5 % of the rows with weight 0.
    # KKT of argmin KL(q || w) on K: q_i = 0 on the zero weights, and on the rest
    # log q_i + s q_i = log w_i - eta with s >= 0; s = 0 (q = w / sum w) if that
    # is inside, else q is on the sphere. s and eta are fitted by least squares
    # on the rows with q_i >= 1e-300 (full precision); the residual is at most
    # 1e-9 relative to the spread; the other rows of positive weight are those
    # whose q_i underflows to 0 or to a subnormal (log w_i - eta below -690);
    # ||q - u||^2 = r^2 within 1e-10 relative
    rng = np.random.default_rng(10)
    log_w = spread * rng.random(n)
    log_w[rng.choice(n, n // 200, replace=False)] = -np.inf
    K = ball(n, radius)
    q = K.project(log_w, 0.0, log_domain=True)
    assert K.contains(q, atol=1e-12)
    zero = np.isinf(log_w)
    assert np.all(q[zero] == 0.0)
    normalised = np.exp(log_w - log_w.max())
    normalised /= normalised.sum()
    if np.sum((normalised - 1 / n) ** 2) <= K.r_sq_:
        np.testing.assert_allclose(q, normalised, rtol=1e-14, atol=0.0)
        return
    pos = q >= 1e-300
    design = np.c_[q[pos], np.ones(int(pos.sum()))]
    target = log_w[pos] - np.log(q[pos])
    (s, eta), *_ = np.linalg.lstsq(design, target, rcond=None)
    assert s > 0.0
    assert np.max(np.abs(design @ [s, eta] - target)) <= 1e-9 * spread
    assert np.all(log_w[~zero & ~pos] - eta < -690.0)
    assert np.sum((q - 1 / n) ** 2) == pytest.approx(K.r_sq_, rel=1e-10)


def lambertw(y: np.ndarray) -> np.ndarray:
    """``W(e^y)`` by the compiled ``lambertw_exp``, through ``kl_ball_point``'s ``w``."""
    w = np.empty(y.size)
    kl_ball_point(np.ascontiguousarray(y, dtype=np.float64), 0.0, w)
    return w


def test_lambertw_exp_matches_scipy():
    # y from -745 (e^y subnormal) to 700, the switches at -40 and -20, and y =
    # -inf; relative error at most 1e-14 against scipy's lambertw of e^y; beyond
    # e^709, the residual of w + log w = y within 1e-15 relative
    y = np.r_[-np.inf, np.linspace(-745.0, 700.0, 20_001), -40.0, -39.999, -20.0, -19.999,
              0.0, 1e-300]
    got = lambertw(y)
    want = scipy_lambertw(np.exp(y)).real
    assert got[0] == 0.0
    np.testing.assert_allclose(got[1:], want[1:], rtol=1e-14, atol=0.0)
    big = np.array([710.0, 1e4, 1e8, 1e15])
    w = lambertw(big)
    np.testing.assert_allclose(w + np.log(w), big, rtol=1e-15)


# ---------------------------------------------------------------------------
# mixing with the uniform distribution, membership, the support function
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("gamma", [0.0, 0.1, 0.5, 0.9])
def test_mixing_lands_in_the_set_on_its_sphere(gamma):
    # seed 11, radius 0.01: log-weights N(0, 30^2), the normalised weights outside
    # every ball used (checked); the mix lies in K (atol 1e-12) and on its
    # sphere (within 1e-10 relative): the point before mixing is the KL
    # projection onto the ball of radius r / (1 - gamma), compared with cvxpy's
    # (1e-5); projecting onto the ball of radius r before mixing would leave the
    # mix strictly inside
    rng = np.random.default_rng(11)
    for n in (5, 40):
        K = ball(n, 0.01)
        w = np.exp(rng.normal(0.0, 30.0, n))
        assert np.sum((w / w.sum() - 1 / n) ** 2) > K.r_sq_ / (1 - gamma) ** 2
        p = K.project(w, gamma)
        assert K.contains(p, atol=1e-12)
        assert np.sum((p - 1 / n) ** 2) == pytest.approx(K.r_sq_, rel=1e-10)
        np.testing.assert_allclose(p, K.project(np.log(w), gamma, log_domain=True), atol=1e-15)
        x, _ = kl_reference(np.log(w), K.r_sq_ / (1 - gamma) ** 2)
        np.testing.assert_allclose((p - gamma / n) / (1 - gamma), x.value, atol=1e-5)
    with pytest.raises(ValueError, match="gamma must be in"):
        ball(5).project(np.ones(5), 1.0)


def test_membership_in_out_and_on_the_boundary():
    # n = 20, radius 0.01: r = 0.0316 < 1/n, so the sphere's points along d = +-1/sqrt(n)
    # are in the simplex; atol 1e-9 on every condition
    n = 20
    K = ball(n, 0.01)
    r = math.sqrt(K.r_sq_)
    u = np.full(n, 1 / n)
    d = np.where(np.arange(n) % 2 == 0, 1.0, -1.0) / math.sqrt(n)  # unit, sum 0
    assert K.contains(u) and K.contains(u + r * d, atol=1e-12)  # centre; on the sphere
    assert K.contains(u + r * (1 + 1e-9) * d, atol=1e-9)  # outside by 3e-11 < atol
    assert not K.contains(u + r * (1 + 1e-6) * d, atol=1e-9)  # outside by 3e-8
    assert not K.contains(u * 1.01) and not K.contains(u[:-1])  # sum 1.01; wrong length
    assert not K.contains(np.r_[np.nan, u[1:]])
    big = ball(n, 1.0)  # r = 0.316: the sphere leaves the simplex along d
    assert not big.contains(u + math.sqrt(big.r_sq_) * d)
    neg = u.copy()
    neg[0], neg[1] = -1e-6, neg[1] + 1 / n + 1e-6  # sum 1, inside the ball, p_0 < 0
    assert np.sum((neg - u) ** 2) < big.r_sq_ and not big.contains(neg)
    assert big.contains(np.maximum(neg, 0.0) / np.maximum(neg, 0.0).sum())


@pytest.mark.parametrize("n", [1, 3, 25])
@pytest.mark.parametrize("radius", RADII)
def test_support_function_is_the_lmo_value(n, radius):
    # seed 12: min over the expression's own variables equals lmo(v)'s value within
    # 1e-7 (Clarabel); the expression is convex in v
    rng = np.random.default_rng(12)
    K = ball(n, radius)
    for _ in range(3):
        v = rng.normal(size=n)
        expression = K.support_function(cp, v)
        assert expression.is_convex()
        assert solve(cp.Problem(cp.Minimize(expression))) == pytest.approx(K.lmo(v)[0],
                                                                           abs=1e-7)


def test_support_function_of_a_variable_has_the_projection_as_its_prox():
    # Moreau: argmin_v sigma_K(v) + ||v - a||^2 / 2 = a - proj_K(a); seed 13, n = 30,
    # radius 1; within 1e-6 (Clarabel)
    rng = np.random.default_rng(13)
    K = ball(30, 1.0)
    a = rng.normal(size=30) * 0.3
    v = cp.Variable(30)
    solve(cp.Problem(cp.Minimize(K.support_function(cp, v) + cp.sum_squares(v - a) / 2)))
    np.testing.assert_allclose(v.value, a - K.euclidean_project(a), atol=1e-6)
