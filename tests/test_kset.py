"""The k-set S_{n,k} (plugins/sets/kset.py; numerics in plugins/lib/capped.py):
capped KL projection (Algorithm 2 Lines 3-10, Algorithm 4), DepRound
(Algorithm 5), the linear maximisation oracle, membership and parameter
validation.

Every reference here is computed independently of the code under test: the
projection by a generic convex solver (scipy SLSQP), the oracle by a linear
program (scipy linprog), DepRound's marginals by a statistical test whose power
against the two known wrong variants is itself tested.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import optimize, stats

import harness
import plugins.lib.capped as capped_module
from plugins.lib.capped import capped_kl_projection, depround
from plugins.sets.kset import KSet

from reference_solvers import (
    _wrong_projection_no_renormalisation,
    python_depround_core,
    random_weights,
    slsqp_kl_projection,
)

# ---------------------------------------------------------------------------
# independent reference for the KL projection
# ---------------------------------------------------------------------------

# Entry-wise tolerance between the code's projection and the SLSQP solve. SLSQP
# (ftol 1e-15, analytic gradient) stops on the change of the objective, so its
# q is accurate to ~sqrt(ftol): measured 2e-9 median, 6e-8 worst on these
# inputs. 2e-7 leaves room for that and is still 1e5 times below the error of
# the wrong projections in test_reference_rejects_wrong_projections (capping
# the wrong rows, or lambda without renormalisation: errors >= 0.02 here).
PROJ_TOL = 2e-7


def instances(count: int, seed: int):
    """(n, k, w) with n in [5, 60], k in [1, n]."""
    rng = np.random.default_rng(seed)
    for _ in range(count):
        n = int(rng.integers(5, 61))
        k = int(rng.integers(1, n + 1))
        yield n, k, random_weights(rng, n, n_large=int(rng.integers(1, 6)))


# seeds 0-3, 8 instances each
PROJ_CASES = [case for seed in range(4) for case in instances(8, seed)]


def kset(n: int, k: int) -> KSet:
    return harness.build("constraint_set", "kset", n=n, k=k)


@pytest.mark.parametrize(("n", "k", "w"), PROJ_CASES)
def test_capped_kl_projection_matches_convex_solver(n, k, w):
    kappa = 1.0 / k
    q, capped = capped_kl_projection(np.log(w), kappa)
    ref = slsqp_kl_projection(w, kappa)
    np.testing.assert_allclose(q, ref, rtol=0, atol=PROJ_TOL)
    # the capped rows sit at the cap, and are the largest weights
    assert np.all(q[capped] == kappa)
    if capped.any() and not capped.all():
        assert w[capped].min() >= w[~capped].max()


@pytest.mark.parametrize("gamma", [0.0, 0.1, 0.3])
@pytest.mark.parametrize(("n", "k", "w"), PROJ_CASES[::2])
def test_project_is_mixed_projection_on_the_kset(n, k, w, gamma):
    K = kset(n, k)
    p, capped = K.project(w, gamma, return_capped=True)
    p_log, capped_log = K.project(np.log(w), gamma, log_domain=True, return_capped=True)
    np.testing.assert_allclose(p_log, p, rtol=0, atol=1e-13)
    assert np.array_equal(capped_log, capped)

    assert K.contains(p)
    assert np.all(p[capped] == 1.0 / k)  # exactly, not approximately

    kappa = (1.0 / k - gamma / n) / (1.0 - gamma)
    assert K.kappa(gamma) == pytest.approx(kappa, rel=1e-15)
    q = slsqp_kl_projection(w, kappa)
    free = ~capped
    np.testing.assert_allclose(p[free], (1.0 - gamma) * q[free] + gamma / n,
                               rtol=0, atol=PROJ_TOL)
    # rows the reference puts (numerically) at the cap are the capped ones
    np.testing.assert_allclose(q[capped], kappa, rtol=0, atol=PROJ_TOL)
    np.testing.assert_allclose(p, (1.0 - gamma) * q + gamma / n, rtol=0, atol=PROJ_TOL)


def _wrong_projection_smallest_capped(w, kappa):
    """Caps the m smallest rows instead of the m largest (m from the right answer)."""
    q_ok, capped = capped_kl_projection(np.log(w), kappa)
    m = int(capped.sum())
    order = np.argsort(w)
    cap = np.zeros(w.size, dtype=bool)
    cap[order[:m]] = True
    q = np.empty(w.size)
    q[cap] = kappa
    q[~cap] = (1.0 - m * kappa) * w[~cap] / w[~cap].sum()
    return q


@pytest.mark.parametrize("wrong", [_wrong_projection_smallest_capped,
                                   _wrong_projection_no_renormalisation])
def test_reference_rejects_wrong_projections(wrong):
    # power of PROJ_TOL: on every instance where capping is active, each wrong
    # variant is at least 100 * PROJ_TOL away from the convex solve
    active = 0
    for n, k, w in PROJ_CASES:
        kappa = 1.0 / k
        if not capped_kl_projection(np.log(w), kappa)[1].any() or n * kappa <= 1.0 + 1e-12:
            continue
        active += 1
        err = np.max(np.abs(wrong(w, kappa) - slsqp_kl_projection(w, kappa)))
        assert err > 100 * PROJ_TOL
    assert active >= 20


@pytest.mark.parametrize("gamma", [0.0, 0.1, 0.3])
@pytest.mark.parametrize(("n", "k"), [(3, 2), (10, 3), (50, 7), (50, 1), (6, 6)])
def test_log_domain_extreme_range_is_finite_and_in_kset(n, k, gamma):
    # log-weights spanning 2e6: exp() of these over- and underflows everywhere
    base = np.array([1e6, 0.0, -1e6, 1e6 - 1.0, -5e5, 3.0])
    log_w = np.resize(base, n)
    K = kset(n, k)
    p, capped = K.project(log_w, gamma, log_domain=True, return_capped=True)
    assert np.all(np.isfinite(p))
    assert K.contains(p)  # atol 1e-9
    assert np.all(p[capped] == 1.0 / k)
    # the largest log-weight row gets the most mass
    assert p[int(np.argmax(log_w))] == p.max()


def test_log_domain_shift_invariance():
    # the projection depends on w only up to scale: log_w and log_w + 1e6 agree.
    # Seed 5; tolerance 1e-9: a shift by 1e6 costs ~1e6 * 2^-52 = 2e-10 of
    # relative precision in the exponent.
    rng = np.random.default_rng(5)
    K = kset(40, 6)
    w = random_weights(rng, 40)
    for gamma in (0.0, 0.2):
        a = K.project(np.log(w), gamma, log_domain=True)
        b = K.project(np.log(w) + 1e6, gamma, log_domain=True)
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-9)


def test_log_domain_huge_span_between_capped_and_uncapped_rows():
    # seed 2: 3 rows at log-weight 0 (capped), 47 rows near -1e10. Exactly, the
    # answer does not depend on the -1e10 offset (only differences among the
    # uncapped rows matter once the top rows are capped).
    rng = np.random.default_rng(2)
    log_w = np.concatenate(([0.0] * 3, -1e10 + 3.0 * rng.normal(size=47)))
    K = kset(50, 5)
    p = K.project(log_w, 0.1, log_domain=True)
    assert K.contains(p)  # default atol 1e-9


def test_projection_when_one_over_kappa_is_an_integer():
    # Exact answer: rows 0-3 at q = 1/4 (row 3 exactly at the cap), the rest 0, so
    # p = 0.7 q + 0.3 / 12 = (0.2, 0.2, 0.2, 0.2, 0.025, ..., 0.025). The same input
    # with log-weight steps of 50 instead of 1000 does give this answer.
    K = kset(12, 5)
    expected = np.array([0.2] * 4 + [0.025] * 8)
    ok = K.project(-50.0 * np.arange(12.0), 0.3, log_domain=True)
    np.testing.assert_allclose(ok, expected, rtol=0, atol=1e-12)
    p = K.project(-1000.0 * np.arange(12.0), 0.3, log_domain=True)
    np.testing.assert_allclose(p, expected, rtol=0, atol=1e-12)


def test_projection_without_enough_positive_weights_is_an_error():
    # caps 1/2 need at least 2 rows with positive weight (KL is undefined otherwise)
    K = kset(4, 2)
    with pytest.raises(ValueError, match="positive weight"):
        K.project(np.array([5.0, 0.0, 0.0, 0.0]), 0.0)


def test_project_rejects_gamma_outside_unit_interval():
    K = kset(10, 2)
    for gamma in (-0.1, 1.0, 1.5):
        with pytest.raises(ValueError, match="gamma must be in"):
            K.project(np.ones(10), gamma)


# ---------------------------------------------------------------------------
# DepRound
# ---------------------------------------------------------------------------

EPS = 1e-12


def reference_depround(p, k, draws, rng, *, invert_coin=False, normalise_to_one=False):
    """Algorithm 5 (paper, Appendix), vectorised over ``draws`` independent draws.

    Fractional entries are paired in index order (as the paper allows). Returns a
    ``draws x n`` boolean matrix of selected rows. The two flags give the known
    wrong variants: the coin of Line 7 inverted (+alpha with probability
    alpha / (alpha + beta)), and Line 2 stretching p to sum 1 instead of k.
    """
    n = p.size
    scale = 1.0 / p.sum() if normalise_to_one else float(k)
    x = np.tile(np.asarray(p, dtype=np.float64) * scale, (draws, 1))
    u = rng.random((draws, n))
    carry = np.full(draws, -1)
    every = np.arange(draws)
    for j in range(n):
        xj = x[:, j]
        frac = (xj > EPS) & (xj < 1.0 - EPS)
        start = frac & (carry < 0)
        act = frac & ~start
        carry[start] = j
        idx = every[act]
        c = carry[idx]
        xi, xjj = x[idx, c], x[idx, j]
        alpha = np.minimum(1.0 - xi, xjj)
        beta = np.minimum(xi, 1.0 - xjj)
        prob_up = (alpha if invert_coin else beta) / (alpha + beta)
        up = u[idx, j] < prob_up
        xi_new = np.where(up, xi + alpha, xi - beta)
        xj_new = np.where(up, xjj - alpha, xjj + beta)
        x[idx, c], x[idx, j] = xi_new, xj_new
        i_done = (xi_new <= EPS) | (xi_new >= 1.0 - EPS)
        j_frac = (xj_new > EPS) & (xj_new < 1.0 - EPS)
        carry[idx[i_done]] = np.where(j_frac[i_done], j, -1)
    return x > 0.5


# DepRound statistical check. N = 20000 draws, seed 12345 (numpy default_rng).
# Statistic: chi2 = sum_i (c_i - N k p_i)^2 / (N k p_i (1 - k p_i)) over the m
# rows with 0 < k p_i < 1; c_i ~ Binomial(N, k p_i) exactly, so every term has
# mean 1 and chi2 has mean m. Reference distribution: chi-square with df = m;
# reject when the p-value is below 1e-3. (Rows of one draw are dependent, which
# makes Var(chi2) = 2m + 2 sum_{i != j} rho_ij^2 slightly above 2m; measured on
# the p of DEPROUND_CASES it is 1.05-1.13 times 2m, so by a Satterthwaite
# approximation the actual level is 1.2e-3 to 1.8e-3 rather than 1e-3; the seed
# is fixed, so the outcome is deterministic anyway.)
# Rows with k p_i == 1 must be in every draw; every draw must be k distinct rows.
N_DRAWS = 20000
SEED = 12345
P_THRESHOLD = 1e-3


def marginal_stats(selected: np.ndarray, p: np.ndarray, k: int) -> dict[str, object]:
    """The three parts of the check for a ``draws x n`` boolean selection matrix."""
    draws = selected.shape[0]
    kp = k * p
    ones = kp >= 1.0 - EPS
    frac = (kp > EPS) & ~ones
    counts = selected.sum(axis=0)
    m = int(frac.sum())
    expected = draws * kp[frac]
    chi2 = float(np.sum((counts[frac] - expected) ** 2 / (expected * (1.0 - kp[frac]))))
    return {
        "sizes_ok": bool(np.all(selected.sum(axis=1) == k)),
        "ones_ok": bool(np.all(counts[ones] == draws) and np.all(counts[kp <= EPS] == 0)),
        "chi2": chi2,
        "df": m,
        "pvalue": float(stats.chi2.sf(chi2, df=m)),
    }


def marginal_check(selected: np.ndarray, p: np.ndarray, k: int) -> tuple[bool, str]:
    """(passes, details): every draw has k rows, rows with k p_i = 1 (p_i = 0) are
    in every (no) draw, and the chi-square p-value is at least P_THRESHOLD."""
    s = marginal_stats(selected, p, k)
    ok = s["sizes_ok"] and s["ones_ok"] and s["pvalue"] >= P_THRESHOLD
    return ok, str(s)


def indices_to_matrix(rows_per_draw: list[np.ndarray], n: int) -> np.ndarray:
    selected = np.zeros((len(rows_per_draw), n), dtype=bool)
    for d, rows in enumerate(rows_per_draw):
        selected[d, rows] = True
    return selected


def depround_p(n: int, k: int, gamma: float, seed: int) -> np.ndarray:
    """A p from KSet.project of random weights with capping active."""
    rng = np.random.default_rng(seed)
    p = kset(n, k).project(random_weights(rng, n, n_large=3), gamma)
    return p


# (n, k, gamma, seed): capped rows (k p_i = 1) present in each
DEPROUND_CASES = [(30, 5, 0.1, 7), (40, 8, 0.0, 1), (25, 3, 0.3, 2)]


@pytest.mark.parametrize(("n", "k", "gamma", "seed"), DEPROUND_CASES)
def test_reference_depround_passes_the_marginal_check(n, k, gamma, seed):
    p = depround_p(n, k, gamma, seed)
    assert np.any(k * p >= 1.0 - EPS)  # some rows must be in every draw
    sel = reference_depround(p, k, N_DRAWS, np.random.default_rng(SEED))
    ok, why = marginal_check(sel, p, k)
    assert ok, why


@pytest.mark.parametrize("variant", [{"invert_coin": True}, {"normalise_to_one": True}])
@pytest.mark.parametrize(("n", "k", "gamma", "seed"), DEPROUND_CASES)
def test_marginal_check_rejects_wrong_depround_variants(n, k, gamma, seed, variant):
    # power of the check: the same statistic, same N and seed, rejects both
    # known wrong variants of Algorithm 5
    p = depround_p(n, k, gamma, seed)
    sel = reference_depround(p, k, N_DRAWS, np.random.default_rng(SEED), **variant)
    ok, why = marginal_check(sel, p, k)
    assert not ok, f"wrong variant {variant} was not rejected ({why})"
    # the chi-square part alone rejects too (not only the k-rows / k p_i = 1 parts)
    assert marginal_stats(sel, p, k)["pvalue"] < P_THRESHOLD


@pytest.mark.parametrize(("n", "k", "gamma", "seed"), DEPROUND_CASES)
def test_compiled_depround_marginals_are_k_p(n, k, gamma, seed):
    p = depround_p(n, k, gamma, seed)
    K = kset(n, k)
    rng = np.random.default_rng(SEED)
    draws = [K.sample(p, rng).rows for _ in range(N_DRAWS)]
    for rows in draws:
        assert rows.shape == (k,) and np.unique(rows).size == k
    ok, why = marginal_check(indices_to_matrix(draws, n), p, k)
    assert ok, why


def test_real_depround_wrapper_with_inverted_coin_is_rejected(monkeypatch):
    # the real wrapper (stretch by k, coins from rng, the k-row check) with the
    # inverted coin patched into its core: the marginal check must fail
    n, k, gamma, seed = DEPROUND_CASES[0]
    p = depround_p(n, k, gamma, seed)
    monkeypatch.setattr(
        capped_module, "depround_core",
        lambda x, u, kk: python_depround_core(x, u, kk, invert_coin=True))
    rng = np.random.default_rng(SEED)
    draws = [depround(p, k, rng) for _ in range(N_DRAWS // 4)]
    ok, why = marginal_check(indices_to_matrix(draws, n), p, k)
    assert not ok, why


def test_real_depround_core_fed_p_normalised_to_one_is_rejected(monkeypatch):
    # the compiled core given p summing to 1 instead of k cannot end with k rows
    n, k, gamma, seed = DEPROUND_CASES[0]
    p = depround_p(n, k, gamma, seed)
    compiled = capped_module.depround_core
    monkeypatch.setattr(capped_module, "depround_core",
                        lambda x, u, kk: compiled(x / kk, u, kk))
    with pytest.raises(ValueError, match="exactly k"):
        depround(p, k, np.random.default_rng(SEED))


def test_python_core_matches_compiled_core_draw_for_draw():
    # sanity of the monkeypatch stand-in: with the correct coin it is the same
    # function as the compiled core on the same uniforms
    rng = np.random.default_rng(3)
    for n, k, gamma, seed in DEPROUND_CASES:
        p = depround_p(n, k, gamma, seed)
        for _ in range(200):
            u = rng.random(n)
            a = capped_module.depround_core(p * k, u, k)
            b = python_depround_core(p * k, u, k)
            assert np.array_equal(np.sort(a), np.sort(b))


@pytest.mark.parametrize("seed", range(6))
def test_depround_returns_k_distinct_rows_every_draw(seed):
    # seed s: n in [5, 60], k in [1, n], gamma in {0, 0.1, 0.3}; 500 draws each
    rng = np.random.default_rng(seed)
    for _ in range(5):
        n = int(rng.integers(5, 61))
        k = int(rng.integers(1, n + 1))
        gamma = float(rng.choice([0.0, 0.1, 0.3]))
        K = kset(n, k)
        p = K.project(random_weights(rng, n, n_large=int(rng.integers(0, 6))), gamma)
        must = np.flatnonzero(k * p >= 1.0 - EPS)
        for _ in range(500):
            rows = depround(p, k, rng)
            assert rows.shape == (k,)
            assert np.unique(rows).size == k
            assert rows.min() >= 0 and rows.max() < n
            assert np.isin(must, rows).all()


def test_depround_is_reproducible_under_a_seed():
    p = depround_p(30, 5, 0.1, 7)
    a = [depround(p, 5, rng) for rng in [np.random.default_rng(9)] for _ in range(50)]
    b = [depround(p, 5, rng) for rng in [np.random.default_rng(9)] for _ in range(50)]
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))


def test_depround_refuses_p_outside_the_kset():
    p = np.full(10, 0.05)  # sums to 0.5
    with pytest.raises(ValueError, match="exactly k=2"):
        depround(p, 2, np.random.default_rng(0))


# ---------------------------------------------------------------------------
# linear maximisation oracle
# ---------------------------------------------------------------------------


def linprog_max(losses: np.ndarray, k: int) -> float:
    n = losses.size
    res = optimize.linprog(-losses, A_eq=np.ones((1, n)), b_eq=[1.0],
                           bounds=[(0.0, 1.0 / k)] * n, method="highs")
    assert res.status == 0
    return -float(res.fun)


@pytest.mark.parametrize("seed", range(5))
def test_lmo_equals_linear_program(seed):
    # seed s, 10 random (n, k, losses) each; tolerance 1e-9 on the value
    rng = np.random.default_rng(seed)
    for _ in range(10):
        n = int(rng.integers(2, 80))
        k = int(rng.integers(1, n + 1))
        losses = rng.normal(size=n) * rng.choice([1e-3, 1.0, 100.0])
        K = kset(n, k)
        value, p = K.lmo(losses)
        assert value == pytest.approx(linprog_max(losses, k), abs=1e-9, rel=1e-12)
        assert K.contains(p)
        assert float(losses @ p) == pytest.approx(value, abs=1e-12, rel=1e-12)
        assert np.count_nonzero(p) == k


def test_lmo_with_ties():
    K = kset(6, 3)
    losses = np.array([1.0, 2.0, 2.0, 2.0, 2.0, 0.0])
    value, p = K.lmo(losses)
    assert value == 2.0 and K.contains(p) and float(losses @ p) == 2.0


# ---------------------------------------------------------------------------
# property tests
# ---------------------------------------------------------------------------


@st.composite
def weights_and_k(draw):
    n = draw(st.integers(min_value=2, max_value=40))
    k = draw(st.integers(min_value=1, max_value=n))
    w = draw(st.lists(st.floats(min_value=1e-6, max_value=1e6), min_size=n, max_size=n))
    gamma = draw(st.sampled_from([0.0, 0.05, 0.1, 0.3, 0.9]))
    return np.array(w), k, gamma


@settings(max_examples=150, deadline=None)
@given(weights_and_k())
def test_projection_is_in_kset_and_idempotent(case):
    w, k, gamma = case
    K = kset(w.size, k)
    p = K.project(w, gamma)
    assert K.contains(p)
    again = K.project(p, 0.0)
    np.testing.assert_allclose(again, p, rtol=0, atol=1e-9)


@settings(max_examples=150, deadline=None)
@given(weights_and_k(), st.integers(min_value=0, max_value=2**32 - 1))
def test_lmo_value_dominates_every_point_of_the_kset(case, seed):
    w, k, gamma = case
    K = kset(w.size, k)
    p = K.project(w, gamma)
    losses = np.random.default_rng(seed).normal(size=w.size)
    value, _ = K.lmo(losses)
    assert value >= float(losses @ p) - 1e-12
    # and the vertices (1/k) 1_I of any k rows
    rows = np.random.default_rng(seed + 1).choice(w.size, size=k, replace=False)
    assert value >= float(losses[rows].sum()) / k - 1e-12


@settings(max_examples=150, deadline=None)
@given(weights_and_k(), st.integers(min_value=0, max_value=2**32 - 1),
       st.sampled_from(["depround", "systematic"]))
def test_samplers_draw_k_distinct_rows_for_any_point_of_the_kset(case, seed, sampler):
    w, k, gamma = case
    K = harness.build("constraint_set", "kset", n=w.size, k=k, sampler=sampler)
    rows, mult = K.sample(K.project(w, gamma), np.random.default_rng(seed))
    assert rows.size == k and np.unique(rows).size == k and np.all(mult == 1)
    assert rows.min() >= 0 and rows.max() < w.size


@settings(max_examples=150, deadline=None)
@given(st.integers(min_value=2, max_value=40).flatmap(
           lambda n: st.tuples(st.lists(st.floats(min_value=-1000.0, max_value=1000.0),
                                        min_size=n, max_size=n),
                               st.integers(min_value=1, max_value=n))),
       st.sampled_from([0.0, 0.05, 0.5]), st.sampled_from(["kset", "simplex"]),
       st.integers(min_value=0, max_value=2**32 - 1))
def test_log_domain_projection_and_sampler_for_any_log_weights(case, gamma, name, seed):
    # log-weights spanning e^-1000..e^1000 (beyond float64 as plain weights):
    # the projection lands in the set and is idempotent to 1e-9, and the
    # set's sampler draws its k (the simplex: 1) distinct rows
    log_w, k = np.array(case[0]), case[1]
    K = harness.build("constraint_set", name, n=log_w.size,
                      **({"k": k} if name == "kset" else {}))
    p = K.project(log_w, gamma, log_domain=True)
    assert np.all(np.isfinite(p)) and K.contains(p)
    np.testing.assert_allclose(K.project(p, 0.0), p, rtol=0, atol=1e-9)
    rows, mult = K.sample(p, np.random.default_rng(seed))
    assert rows.size == K.k and np.unique(rows).size == K.k and np.all(mult == 1)
    assert rows.min() >= 0 and rows.max() < log_w.size


@settings(max_examples=200, deadline=None)
@given(weights_and_k(), st.integers(min_value=0, max_value=2**32 - 1),
       st.sampled_from([1e-3, 1.0, 1e3]))
def test_euclidean_projection_is_in_kset_idempotent_and_optimal(case, seed, scale):
    # any real input (signs from the seed); optimality by the first-order
    # condition max_{q in K} <v - p, q - p> <= 0, the max taken by the oracle;
    # tolerance 1e-9 relative to the input's scale; membership and idempotence
    # to 1e-12 times that scale (p = v - tau cancels about log2(scale) bits)
    w, k, _ = case
    K = kset(w.size, k)
    v = w / w.max() * scale * np.random.default_rng(seed).choice([-1.0, 1.0], size=w.size)
    p = K.euclidean_project(v)
    tol = 1e-12 * max(1.0, scale)
    assert K.contains(p, atol=tol)
    np.testing.assert_allclose(K.euclidean_project(p), p, rtol=0, atol=tol)
    value, _ = K.lmo(v - p)
    assert value - float((v - p) @ p) <= 1e-9 * max(1.0, scale)


# ---------------------------------------------------------------------------
# membership and validation
# ---------------------------------------------------------------------------


def test_contains_accepts_points_of_the_kset():
    K = kset(5, 2)
    assert K.contains(np.full(5, 0.2))
    assert K.contains(np.array([0.5, 0.5, 0.0, 0.0, 0.0]))


@pytest.mark.parametrize(
    "p",
    [
        np.array([0.5 + 1e-6, 0.5 - 1e-6, 0.0, 0.0, 0.0]),  # entry above 1/k
        np.array([0.6, 0.4, 0.0, 0.0, 0.0]),  # entry well above 1/k
        np.array([0.5, 0.5, 0.2, 0.0, -0.2]),  # negative entry, sum 1
        np.array([0.2, 0.2, 0.2, 0.2, 0.1]),  # sum 0.9
        np.array([0.2, 0.2, 0.2, 0.2, 0.2 + 1e-6]),  # sum 1 + 1e-6
        np.full(4, 0.25),  # wrong length
        np.array([0.2, 0.2, 0.2, 0.2, math.nan]),  # not a number
    ],
)
def test_contains_rejects(p):
    assert not kset(5, 2).contains(p)


def test_kset_k_above_n_is_a_config_error():
    with pytest.raises(harness.ConfigError) as err:
        harness.build("constraint_set", "kset", n=569, k=600)
    assert str(err.value) == (
        "The 'k' parameter of kset must be an int in [1, n=569]. Got 600 instead."
    )


def test_kset_k_zero_is_a_config_error():
    with pytest.raises(harness.ConfigError) as err:
        harness.build("constraint_set", "kset", n=569, k=0)
    assert str(err.value) == (
        "The 'k' parameter of kset must be an int in [1, n=569]. Got 0 instead."
    )
