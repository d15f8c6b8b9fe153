"""The alpha-set K_alpha (plugins/sets/alphaset.py): per-row-cap KL projection,
linear maximisation oracle, multiset sampler, Euclidean projection, caps from
the config, equality with the k-set under uniform caps, and the p-players and
per-group metrics on it.

References are independent of the code under test: the KL projection by a
generic convex solver (scipy SLSQP), the oracle by a linear program (scipy
linprog), the sampler's mean multiplicities by a chi-square test whose power
against a wrong sampler is itself tested.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import optimize, stats

import harness
from plugins.lib.capped import (
    alpha_kl_projection,
    capped_simplex_euclidean,
    multiset_round,
    multiset_round_core,
)
from plugins.sets.alphaset import AlphaSet, check_caps
from plugins.sets.kset import KSet

from conftest import game_cfg
from reference_solvers import (
    _wrong_projection_no_renormalisation,
    bisect_euclidean,
    python_depround_core,
    random_weights,
    slsqp_kl_projection,
    threadpool_limits,
)


def alphaset(n: int, k: int, caps=None) -> AlphaSet:
    spec = None if caps is None else {"rows": np.asarray(caps).tolist()}
    return harness.build("constraint_set", "alphaset", n=n, k=k, caps=spec)


def kset(n: int, k: int) -> KSet:
    return harness.build("constraint_set", "kset", n=n, k=k)


def units(A: AlphaSet) -> np.ndarray:
    """The caps ``k alpha_i`` of ``A``, from its public ``row_caps()``."""
    return np.rint(A.row_caps() * A.k).astype(np.int64)


def random_caps(rng: np.random.Generator, n: int, k: int) -> np.ndarray:
    """Integer caps k alpha_i in [1, k], about half of them 1, with sum >= k."""
    caps = np.where(rng.random(n) < 0.5, 1, rng.integers(1, k + 1, size=n))
    while caps.sum() < k:
        caps[rng.integers(n)] += 1
        caps = np.minimum(caps, k)
    return caps


def instances(count: int, seed: int):
    """(n, k, caps, w) with n in [5, 60], k in [2, n], heterogeneous caps."""
    rng = np.random.default_rng(seed)
    for _ in range(count):
        n = int(rng.integers(5, 61))
        k = int(rng.integers(2, n + 1))
        yield n, k, random_caps(rng, n, k), random_weights(rng, n, int(rng.integers(1, 6)))


# seeds 100-103, 8 instances each
PROJ_CASES = [case for seed in range(100, 104) for case in instances(8, seed)]

# ---------------------------------------------------------------------------
# KL projection against an independent convex solve
# ---------------------------------------------------------------------------

# Entry-wise tolerance between the code's projection and the SLSQP solve.
# SLSQP (ftol 1e-15, analytic gradient) stops on the change of the objective,
# so its q is accurate to about sqrt(ftol); measured on PROJ_CASES: median
# 7e-10, worst 1.1e-8. 2e-7 leaves room for that and is 7e4 times below the
# smallest error of the wrong projections in
# test_reference_rejects_wrong_projections (0.014).
PROJ_TOL = 2e-7

def kappa_of(caps: np.ndarray, k: int, gamma: float) -> np.ndarray:
    return (caps / k - gamma / caps.size) / (1.0 - gamma)


@pytest.mark.parametrize(("n", "k", "caps", "w"), PROJ_CASES)
def test_alpha_kl_projection_matches_convex_solver(n, k, caps, w):
    kappa = caps / k
    q, capped = alpha_kl_projection(np.log(w), kappa)
    np.testing.assert_allclose(q, slsqp_kl_projection(w, kappa), rtol=0, atol=PROJ_TOL)
    # capped rows sit at their own cap; the uncapped ones are w scaled by one factor
    assert np.all(q[capped] == kappa[capped])
    free = ~capped
    if free.sum() > 1:
        ratio = q[free] / w[free]
        np.testing.assert_allclose(ratio, ratio[0], rtol=1e-12)
    # the capped rows have the largest w_i / kappa_i
    if capped.any() and free.any():
        assert (w / kappa)[capped].min() >= (w / kappa)[free].max() * (1 - 1e-12)


@pytest.mark.parametrize("gamma", [0.0, 0.1, 0.3])
@pytest.mark.parametrize(("n", "k", "caps", "w"), PROJ_CASES[::2])
def test_project_is_mixed_projection_on_the_alphaset(n, k, caps, w, gamma):
    A = alphaset(n, k, caps)
    p, capped = A.project(w, gamma, return_capped=True)
    p_log, capped_log = A.project(np.log(w), gamma, log_domain=True, return_capped=True)
    np.testing.assert_allclose(p_log, p, rtol=0, atol=1e-13)
    assert np.array_equal(capped_log, capped)
    assert A.contains(p)
    assert np.all(p[capped] == caps[capped] / k)  # exactly at alpha_i
    kappa = kappa_of(caps, k, gamma)
    np.testing.assert_allclose(A.kappa(gamma), kappa, rtol=1e-15)
    q = slsqp_kl_projection(w, kappa)
    np.testing.assert_allclose(p, (1.0 - gamma) * q + gamma / n, rtol=0, atol=PROJ_TOL)


def _wrong_projection_capping_largest_weights(w, kappa):
    """Caps the |C| rows of largest w_i (the uniform-cap rule) instead of the
    largest w_i / kappa_i; |C| taken from the right answer."""
    m = int(alpha_kl_projection(np.log(w), kappa)[1].sum())
    cap = np.zeros(w.size, dtype=bool)
    cap[np.argsort(-w)[:m]] = True
    q = np.empty(w.size)
    q[cap] = kappa[cap]
    q[~cap] = (1.0 - kappa[cap].sum()) * w[~cap] / w[~cap].sum()
    return q


@pytest.mark.parametrize("wrong", [_wrong_projection_capping_largest_weights,
                                   _wrong_projection_no_renormalisation])
def test_reference_rejects_wrong_projections(wrong):
    # power of PROJ_TOL: wherever a wrong variant differs from the right
    # answer, it is at least 100 * PROJ_TOL away from the convex solve
    differ = 0
    for _n, k, caps, w in PROJ_CASES:
        kappa = caps / k
        if np.max(np.abs(wrong(w, kappa) - alpha_kl_projection(np.log(w), kappa)[0])) < 1e-12:
            continue
        differ += 1
        assert np.max(np.abs(wrong(w, kappa) - slsqp_kl_projection(w, kappa))) > 100 * PROJ_TOL
    assert differ >= 10


@pytest.mark.parametrize("gamma", [0.0, 0.1, 0.3])
def test_log_domain_extreme_range_is_finite_and_in_alphaset(gamma):
    # log-weights spanning 2e6: exp() of these over- and underflows everywhere
    log_w = np.resize(np.array([1e6, 0.0, -1e6, 1e6 - 1.0, -5e5, 3.0]), 40)
    caps = random_caps(np.random.default_rng(4), 40, 7)
    A = alphaset(40, 7, caps)
    p, capped = A.project(log_w, gamma, log_domain=True, return_capped=True)
    assert np.all(np.isfinite(p)) and A.contains(p)
    assert np.all(p[capped] == caps[capped] / 7)


def test_single_point_set_projects_to_alpha():
    # sum alpha_i = 1 needs every k alpha_i = 1 and k = n: K_alpha = {1/n}
    A = alphaset(5, 5)
    p, capped = A.project(np.arange(1.0, 6.0), 0.2, return_capped=True)
    np.testing.assert_array_equal(p, np.full(5, 0.2))
    assert capped.all()


def test_projection_without_enough_positive_weights_is_an_error():
    A = alphaset(4, 2, [1, 1, 1, 1])
    with pytest.raises(ValueError, match="positive weight"):
        A.project(np.array([5.0, 0.0, 0.0, 0.0]), 0.0)


# ---------------------------------------------------------------------------
# linear maximisation oracle against a linear program
# ---------------------------------------------------------------------------


def linprog_max(losses: np.ndarray, alpha: np.ndarray) -> float:
    res = optimize.linprog(-losses, A_eq=np.ones((1, losses.size)), b_eq=[1.0],
                           bounds=list(zip(np.zeros(losses.size), alpha, strict=True)),
                           method="highs")
    assert res.status == 0
    return -float(res.fun)


@pytest.mark.parametrize("seed", range(5))
def test_lmo_equals_linear_program(seed):
    # seed s, 10 random (n, k, caps, losses) each; tolerance 1e-9 on the value
    rng = np.random.default_rng(seed)
    for _ in range(10):
        n = int(rng.integers(2, 80))
        k = int(rng.integers(1, n + 1))
        caps = random_caps(rng, n, k)
        losses = rng.normal(size=n) * rng.choice([1e-3, 1.0, 100.0])
        A = alphaset(n, k, caps)
        value, p = A.lmo(losses)
        assert value == pytest.approx(linprog_max(losses, caps / k), abs=1e-9, rel=1e-12)
        assert A.contains(p)
        assert float(losses @ p) == pytest.approx(value, abs=1e-12, rel=1e-12)
        np.testing.assert_allclose(k * p, np.round(k * p), atol=1e-12)  # a multiset vertex


# ---------------------------------------------------------------------------
# with every k alpha_i = 1 the alpha-set is the k-set
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("gamma", [0.0, 0.1, 0.3])
@pytest.mark.parametrize(("n", "k", "caps", "w"), PROJ_CASES[::3])
def test_uniform_caps_project_like_the_kset(n, k, caps, w, gamma):
    # same formula with a per-row array instead of a scalar cap: equal up to
    # the rounding of the capped mass (sum of kappa_i vs m * kappa), 1e-15
    p_k, c_k = kset(n, k).project(w, gamma, return_capped=True)
    p_a, c_a = alphaset(n, k).project(w, gamma, return_capped=True)
    assert np.array_equal(c_a, c_k)
    np.testing.assert_allclose(p_a, p_k, rtol=0, atol=1e-15)


@pytest.mark.parametrize("seed", range(3))
def test_uniform_caps_oracle_and_sampler_are_the_ksets(seed):
    # oracle: the same value and argmax, bit for bit; sampler: the same rows
    # draw for draw from the same generator state, each with multiplicity 1
    rng = np.random.default_rng(seed)
    n, k = 50, 7
    K, A = kset(n, k), alphaset(n, k)
    np.testing.assert_array_equal(A.row_caps(), K.row_caps())
    for _ in range(20):
        losses = rng.normal(size=n)
        vk, pk = K.lmo(losses)
        va, pa = A.lmo(losses)
        assert va == vk and np.array_equal(pa, pk)
    p = K.project(random_weights(rng, n), 0.1)
    rk, ra = np.random.default_rng(seed), np.random.default_rng(seed)
    for _ in range(300):
        rows, mult = A.sample(p, ra)
        assert np.array_equal(rows, K.sample(p, rk).rows) and np.all(mult == 1)


def _game(constraint: dict, p_player: str = "exp4mp", budget: int = 20000, dataset=None,
          seed: int = 0, checkpoints: int = 5):
    return harness.prepare(game_cfg(
        constraint=constraint, p_player={"name": p_player},
        dataset=dataset or {"name": "breast_cancer"},
        budget=budget, seed=seed, checkpoints=checkpoints))


def test_uniform_caps_exp4mp_game_is_the_kset_game():
    # EXP4.MP vs OGD on breast cancer, k=5, 20k data points, seed 0: the two
    # games draw the same rows every round, so every metric agrees (1e-12)
    a = harness.play(_game({"name": "kset", "k": 5}))
    b = harness.play(_game({"name": "alphaset", "k": 5}))
    assert set(a) == set(b)
    for key in a:
        if key not in harness.game.TIMING_METRICS:
            assert b[key] == pytest.approx(a[key], rel=1e-12, abs=1e-12), key


# ---------------------------------------------------------------------------
# the multiset sampler
# ---------------------------------------------------------------------------

# Mean multiplicities. N = 20000 draws, seed 2024 (numpy default_rng). Each
# m_i = floor(k p_i) + B_i with B_i ~ Bernoulli(f_i), f_i the fractional part
# of k p_i, so S_i = sum over draws of m_i has mean N k p_i and variance
# N f_i (1 - f_i). Statistic: chi2 = sum_i (S_i - N k p_i)^2 / (N f_i (1 - f_i))
# over the m rows with fractional f_i; reference chi-square with df = m
# (draws are independent; the rows of one draw are negatively correlated,
# which makes the actual level slightly above the nominal one, as for
# DepRound in test_kset.py); reject when the p-value is below 1e-3. Rows with
# integer k p_i must get exactly k p_i in every draw.
N_DRAWS = 20000
SEED = 2024
P_THRESHOLD = 1e-3
EPS = 1e-9


def sampler_p(n: int, k: int, gamma: float, seed: int) -> tuple[AlphaSet, np.ndarray]:
    """An alpha-set and a p from its projection of random weights, with rows
    at their caps and rows with fractional k p_i above 1."""
    rng = np.random.default_rng(seed)
    caps = random_caps(rng, n, k)
    A = alphaset(n, k, caps)
    return A, A.project(random_weights(rng, n, n_large=4), gamma)


# (n, k, gamma, seed): each has capped rows and rows with 1 < k p_i < cap
SAMPLER_CASES = [(30, 6, 0.1, 7), (40, 10, 0.0, 1), (25, 5, 0.3, 7)]


def multiplicity_stats(mults: np.ndarray, p: np.ndarray, k: int) -> dict[str, object]:
    """Checks of a ``draws x n`` multiplicity matrix against ``k p``."""
    draws = mults.shape[0]
    kp = k * p
    base = np.floor(kp + EPS)
    f = kp - base
    frac = f > EPS
    sums = mults.sum(axis=0)
    expected = draws * kp[frac]
    chi2 = float(np.sum((sums[frac] - expected) ** 2 / (draws * f[frac] * (1.0 - f[frac]))))
    m = int(frac.sum())
    return {
        "integer_rows_exact": bool(np.all(mults[:, ~frac] == base[~frac])),
        "chi2": chi2,
        "df": m,
        "pvalue": float(stats.chi2.sf(chi2, df=m)),
        "max_abs_mean_error": float(np.max(np.abs(sums / draws - kp))),
    }


def draws_matrix(sampler, p, n, draws, rng) -> np.ndarray:
    out = np.zeros((draws, n), dtype=np.int64)
    for d in range(draws):
        rows, mult = sampler(p, rng)
        out[d, rows] = mult
    return out


def python_multiset(kp, caps, k, rng, *, invert_coin=False):
    """floor(k p) plus DepRound (Algorithm 5, ``python_depround_core``'s pairing)
    of the fractional parts, in plain Python; ``invert_coin`` takes +alpha
    with probability alpha / (alpha + beta) (a known wrong variant)."""
    x = np.minimum(kp, caps)
    base = np.floor(x)
    f = x - base
    u = rng.random(x.size)
    python_depround_core(f, u, int(round(f.sum())), invert_coin=invert_coin)
    m = (base + (f > 0.5)).astype(np.int64)
    rows = np.flatnonzero(m)
    return rows, m[rows]


@pytest.mark.parametrize(("n", "k", "gamma", "seed"), SAMPLER_CASES)
def test_multiset_sampler_every_draw_is_a_multiset_of_size_k_under_the_caps(n, k, gamma, seed):
    A, p = sampler_p(n, k, gamma, seed)
    kp = k * p
    assert np.any(kp >= units(A) - EPS) and np.any((kp > 1 + EPS) & (kp < units(A) - EPS))
    rng = np.random.default_rng(SEED)
    lo, hi = np.floor(kp + EPS), np.ceil(kp - EPS)
    for _ in range(3000):
        rows, mult = A.sample(p, rng)
        assert mult.sum() == k
        assert np.all(np.diff(rows) > 0) and np.all(mult >= 1)
        assert np.all(mult <= units(A)[rows])
        m = np.zeros(n, dtype=np.int64)
        m[rows] = mult
        assert np.all((m == lo) | (m == hi))
        assert A.contains(m / k)


@pytest.mark.parametrize(("n", "k", "gamma", "seed"), SAMPLER_CASES)
def test_multiset_sampler_mean_multiplicities_are_k_p(n, k, gamma, seed):
    A, p = sampler_p(n, k, gamma, seed)
    mults = draws_matrix(A.sample, p, n, N_DRAWS, np.random.default_rng(SEED))
    s = multiplicity_stats(mults, p, k)
    assert s["integer_rows_exact"] and s["pvalue"] >= P_THRESHOLD, s


@pytest.mark.parametrize(("n", "k", "gamma", "seed"), SAMPLER_CASES)
def test_mean_check_rejects_the_inverted_coin(n, k, gamma, seed):
    # power: the same statistic, N and seed reject DepRound's known wrong coin
    A, p = sampler_p(n, k, gamma, seed)

    def wrong(p, rng):
        return python_multiset(k * p, units(A), k, rng, invert_coin=True)

    s = multiplicity_stats(draws_matrix(wrong, p, n, N_DRAWS, np.random.default_rng(SEED)), p, k)
    assert s["pvalue"] < P_THRESHOLD, s


def test_law_check_rejects_sampling_with_replacement_from_p():
    # k i.i.d. draws from p have the right means E[m_i] = k p_i but break the
    # caps and the floor/ceil law: the per-draw checks must see it
    A, p = sampler_p(*SAMPLER_CASES[0])
    k, rng = A.k, np.random.default_rng(SEED)
    kp = k * p
    broken = 0
    for _ in range(200):
        m = rng.multinomial(k, p / p.sum())
        broken += bool(np.any(m > units(A)) or np.any(m > np.ceil(kp - EPS)))
    assert broken > 100


def test_compiled_sampler_matches_python_reference_draw_for_draw():
    # the same uniforms give the same multiset (seed 5, 300 draws per case)
    rng = np.random.default_rng(5)
    for case in SAMPLER_CASES:
        A, p = sampler_p(*case)
        for _ in range(300):
            state = rng.bit_generator.state
            rows, mult = A.sample(p, rng)
            rng2 = np.random.default_rng()
            rng2.bit_generator.state = state
            rows2, mult2 = python_multiset(A.k * p, units(A), A.k, rng2)
            assert np.array_equal(rows, rows2) and np.array_equal(mult, mult2)


def test_sampler_refuses_p_outside_the_alphaset():
    A = alphaset(10, 4, [2] * 10)
    with pytest.raises(ValueError, match="sum to k=4"):
        A.sample(np.full(10, 0.05), np.random.default_rng(0))  # sums to 0.5
    with pytest.raises(ValueError, match="sum to k=4"):
        multiset_round(np.full(10, 0.6), np.full(10, 2), 4, np.random.default_rng(0))
    rows, mult, r = multiset_round_core(np.full(4, 1.0), np.full(4, 1), np.zeros(4), 4)
    assert r == 0 and np.array_equal(rows, np.arange(4)) and np.all(mult == 1)


# ---------------------------------------------------------------------------
# Euclidean projection (S-AFL's step)
# ---------------------------------------------------------------------------


def slsqp_euclidean(v: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    n = v.size
    with threadpool_limits(limits=1):
        res = optimize.minimize(
            lambda q: 0.5 * float(np.sum((q - v) ** 2)), alpha / alpha.sum(),
            jac=lambda q: q - v, method="SLSQP",
            bounds=list(zip(np.zeros(n), alpha, strict=True)),
            constraints=[{"type": "eq", "fun": lambda q: q.sum() - 1.0,
                          "jac": lambda q: np.ones(n)}],
            options={"ftol": 1e-15, "maxiter": 2000})
    return res.x


@pytest.mark.parametrize("seed", range(4))
def test_euclidean_projection_matches_convex_solver(seed):
    # seed s, 5 instances each; tolerance 1e-7 on SLSQP's answer (measured
    # error: median 6e-16, worst 5e-13)
    rng = np.random.default_rng(seed)
    for _ in range(5):
        n = int(rng.integers(3, 40))
        k = int(rng.integers(1, n + 1))
        caps = random_caps(rng, n, k)
        v = rng.normal(size=n) * rng.choice([0.01, 0.3, 3.0])
        q = capped_simplex_euclidean(v, caps / k)
        assert alphaset(n, k, caps).contains(q, atol=1e-12)
        np.testing.assert_allclose(q, slsqp_euclidean(v, caps / k), rtol=0, atol=1e-7)


def _edge_cases():
    """(v, k, caps in units of 1/k): ties, repeated breakpoints, caps summing to
    exactly 1, one row, all-equal inputs, flat segments of f."""
    yield np.array([0.3]), 1, np.array([1])
    yield np.full(6, 0.2), 3, np.ones(6, dtype=int)
    yield np.array([0.5, 0.5, 0.5, 0.1, 0.1]), 2, np.array([1, 1, 1, 2, 2])
    yield np.array([1.0, 0.5, 0.5, 0.0]), 4, np.array([1, 1, 1, 1])  # sum caps = 1
    yield np.array([0.0, 0.25, 0.5, 0.75, 1.0]), 2, np.array([1, 2, 1, 2, 1])  # v_i - a_i = v_j
    yield np.array([3.0, -3.0, 0.0, 0.0, 0.0]), 3, np.array([3, 1, 1, 1, 1])
    yield np.array([1e-12, 0.0, -1e-12, 2e-12]), 2, np.array([2, 1, 1, 2])
    rng = np.random.default_rng(8)
    for _ in range(40):  # values on a coarse grid: many exact ties
        n = int(rng.integers(2, 12))
        k = int(rng.integers(1, n + 1))
        yield rng.integers(-3, 4, size=n) / 4.0, k, random_caps(rng, n, k)


def test_euclidean_projection_matches_bisection_on_edge_cases():
    # against tests/reference_solvers.bisect_euclidean (200 halvings of tau);
    # tolerance 1e-12; the k-set's projection on the cases with every cap 1
    for v, k, caps in _edge_cases():
        want = bisect_euclidean(v, caps / k)
        got = alphaset(v.size, k, caps).euclidean_project(v)
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-12, err_msg=str((v, k, caps)))
        if np.all(caps == 1):
            np.testing.assert_allclose(kset(v.size, k).euclidean_project(v), want, rtol=0,
                                       atol=1e-12)


def test_euclidean_projection_refuses_nan_instead_of_looping():
    with pytest.raises(ValueError, match="finite inputs"):
        kset(3, 1).euclidean_project(np.array([0.1, np.nan, 0.2]))


# ---------------------------------------------------------------------------
# property tests
# ---------------------------------------------------------------------------


@st.composite
def alpha_case(draw):
    n = draw(st.integers(min_value=2, max_value=40))
    k = draw(st.integers(min_value=1, max_value=n))
    caps = np.array(draw(st.lists(st.integers(min_value=1, max_value=k), min_size=n,
                                  max_size=n)))
    if caps.sum() < k:
        caps[0] = k
    w = np.array(draw(st.lists(st.floats(min_value=1e-6, max_value=1e6), min_size=n,
                               max_size=n)))
    gamma = draw(st.sampled_from([0.0, 0.05, 0.3, 0.9]))
    return n, k, caps, w, gamma


@settings(max_examples=150, deadline=None)
@given(alpha_case(), st.integers(min_value=0, max_value=2**32 - 1))
def test_projection_sample_and_oracle_properties(case, seed):
    n, k, caps, w, gamma = case
    A = alphaset(n, k, caps)
    p = A.project(w, gamma)
    assert A.contains(p)
    np.testing.assert_allclose(A.project(p, 0.0), p, rtol=0, atol=1e-9)  # idempotent
    rows, mult = A.sample(p, np.random.default_rng(seed))
    assert mult.sum() == k and np.all(mult <= caps[rows])
    losses = np.random.default_rng(seed).normal(size=n)
    value, _ = A.lmo(losses)
    assert value >= float(losses @ p) - 1e-12
    assert value >= float(losses[rows] @ mult) / k - 1e-12


# ---------------------------------------------------------------------------
# caps from the config and their validation
# ---------------------------------------------------------------------------


class GroupTable:
    """6 rows with a group column and a numeric caps column."""

    name = "group_table"
    params: dict = {}
    task = "classification"
    n_classes = 2
    default_model = "logistic_cel"
    group_column = "g"

    def __init__(self) -> None:
        self.X = np.linspace(0.0, 1.0, 12).reshape(6, 2)
        self.y = np.array([0, 1, 0, 1, 0, 1])
        self.columns = {"g": np.array(["a", "a", "b", "a", "b", "c"]),
                        "prior": np.array([1, 2, 3, 1, 1, 2]),
                        "bad": np.array([1, 2, 0, 1, 9, 1])}


def test_caps_by_group_column_rows_and_file_agree(tmp_path):
    want = np.array([2, 2, 3, 2, 3, 1])
    rule = {"by_group": {"column": "g", "values": {"a": 2, "b": 3}, "default": 1}}
    A = harness.build("constraint_set", "alphaset", n=6, k=3, caps=rule)
    info = A.bind(GroupTable())
    np.testing.assert_array_equal(units(A), want)
    assert info == {"sum_alpha": 13 / 3, "max_k_alpha": 3, "rows_k_alpha_above_1": 5}
    C = harness.build("constraint_set", "alphaset", n=6, k=3, caps={"column": "prior"})
    C.bind(GroupTable())
    np.testing.assert_array_equal(units(C), [1, 2, 3, 1, 1, 2])
    np.save(tmp_path / "caps.npy", want)
    (tmp_path / "caps.txt").write_text("# k alpha_i\n" + "\n".join(map(str, want)) + "\n")
    for name in ("caps.npy", "caps.txt"):
        F = harness.build("constraint_set", "alphaset", n=6, k=3,
                          caps={"file": str(tmp_path / name)})
        np.testing.assert_array_equal(units(F), want)
    R = harness.build("constraint_set", "alphaset", n=6, k=3, caps={"rows": want.tolist()})
    np.testing.assert_array_equal(units(R), want)


@pytest.mark.parametrize(("caps", "message"), [
    ({"rows": [1, 2, 0.5, 1, 7, 1]},
     r"must be integers k alpha_i in \[1, k=3\]. Got 0.5 at row 2; offending rows \[2, 4\]\."),
    ({"rows": [1, 1]}, r"one k alpha_i per row \(n=6\). Got 2 values"),
    ({"rows": [0] * 6 + [1]}, r"one k alpha_i per row"),
    ({"rows": [1, 1, 1, 1, 1, 1]}, None),
    ({"rows": [1, 1, 1, 1, 1, 1], "file": "x"}, r"exactly one of the keys"),
    ({"weights": [1] * 6}, r"exactly one of the keys \['rows', 'file', 'column', 'by_group'\]"),
    ({"file": "/nonexistent/caps.npy"}, r"caps file of alphaset was not found"),
    ({"by_group": {"column": "g", "values": {"a": 2}, "extra": 1}},
     r"Unknown key\(s\) \['extra'\]"),
])
def test_caps_validation_messages(caps, message):
    if message is None:
        harness.build("constraint_set", "alphaset", n=6, k=3, caps=caps)
        return
    with pytest.raises(harness.ConfigError, match=message):
        harness.build("constraint_set", "alphaset", n=6, k=3, caps=caps)


def test_caps_must_sum_to_at_least_k():
    # with k <= n (the set's parameter table) every c_i >= 1 implies sum c >= k;
    # check_caps states the condition on its own for any (n, k)
    np.testing.assert_array_equal(check_caps([1] * 6, 6, 6, "rows"), np.ones(6))
    with pytest.raises(harness.ConfigError, match=r"sum alpha_i >= 1, i.e. sum k alpha_i >= "
                                                  r"k=8. Got sum k alpha_i = 7 over n=6 rows"):
        check_caps([1, 1, 1, 1, 1, 2], 6, 8, "rows")
    with pytest.raises(harness.ConfigError, match=r"Got 1.5 at row 1; offending rows "
                                                  r"\[1, 3, 4, 5, 6, \.\.\. \(6 rows in all\)\]"):
        check_caps([1, 1.5, 1, 0, 9, -1, np.nan, np.inf, 1], 9, 8, "rows")


@pytest.mark.parametrize(("caps", "message"), [
    ({"column": "nope"}, r"column 'nope'; the data set 'group_table' has columns "
                         r"\['bad', 'g', 'prior'\]"),
    ({"column": "bad"}, r"Got 0 at row 2; offending rows \[2, 4\]\."),
    ({"by_group": {"column": "g", "values": {"a": 2}}},
     r"no k alpha_i for group\(s\) \['b', 'c'\]"),
    ({"by_group": {"column": "g", "values": {"a": 2, "z": 1}, "default": 1}},
     r"names group\(s\) \['z'\] absent"),
    ({"by_group": {"column": "g", "values": {"a": 2}, "default": "many"}},
     r"must give integers k alpha_i. Got 'many' for default"),
    ({"by_group": {"column": "g", "values": {"a": 2, "b": 1, "c": 1.5}}},
     r"Got 1.5 at row 5; offending rows \[5\]"),
])
def test_caps_from_the_data_set_validation_messages(caps, message):
    A = harness.build("constraint_set", "alphaset", n=6, k=3, caps=caps)
    with pytest.raises(RuntimeError, match="call bind"):
        A.lmo(np.zeros(6))
    with pytest.raises(harness.ConfigError, match=message):
        A.bind(GroupTable())


def test_k_above_n_is_a_config_error():
    with pytest.raises(harness.ConfigError) as err:
        harness.build("constraint_set", "alphaset", n=10, k=11)
    assert str(err.value) == ("The 'k' parameter of alphaset must be an int in [1, n=10]. "
                              "Got 11 instead.")


# ---------------------------------------------------------------------------
# p-players on the alpha-set, through the harness
# ---------------------------------------------------------------------------

GROUP_CAPS = {"by_group": {"column": "group", "values": {"majority": 1, "minority": 3}}}
GROUPS = {"name": "synthetic_groups", "n": 120}


@pytest.mark.parametrize("p_player", ["exp4mp", "ftrl", "safl"])
def test_p_player_games_stay_in_the_alphaset_and_count_distinct_rows(p_player):
    # synthetic_groups n=120, k=10, minority caps 3, theory defaults, seed 4
    prep = _game({"name": "alphaset", "k": 10, "caps": GROUP_CAPS}, p_player,
                 budget=30000, dataset=GROUPS, seed=4)
    pp, K = prep.parts.p_player, prep.parts.constraint
    rows_seen: list[int] = []
    propose, observe = pp.propose, pp.observe

    def checked_propose(rng):
        prop = propose(rng)
        rows_seen.append(prop.rows.size)
        w_rows = prop.rows[:-K.k] if p_player == "safl" else prop.rows
        assert np.unique(w_rows).size == w_rows.size  # the multiset's rows are distinct
        assert prop.weights.sum() == pytest.approx(1.0, abs=1e-12)
        return prop

    def checked_observe(losses):
        out = observe(losses)
        assert K.contains(pp.p, atol=1e-9)
        return out

    pp.propose, pp.observe = checked_propose, checked_observe
    metrics = harness.play(prep)
    assert metrics["data_points"] == sum(rows_seen)
    state = prep.game.state
    assert K.contains(state.a_sum / prep.context.parts.rounds, atol=1e-9)


@pytest.mark.parametrize(("p_player", "params"), [
    ("exp4mp", {"eta": 0.05, "gamma": 0.05}), ("ftrl", {"eta": 0.05}), ("safl", {"eta": 0.01})])
def test_p_players_move_above_one_over_k_within_the_caps(p_player, params):
    # n=30, k=5, rows 0-4 capped at 3/k, the rest at 1/k; fixed losses (seed 6):
    # rows 0 and 1 at 0.9, the others in [0.1, 0.5]. A maximising player must end
    # with k p_i > 1.1 on rows 0 and 1 (the k-set would stop them at 1) and
    # k (p_0 + p_1) > 3.5 (the maximiser puts all of p on them, 5; exp4mp's
    # mixing and finite eta end near 4). The split between the two equal rows
    # wanders with the draws (exp4mp over 12 draw seeds: the smaller of the two
    # 1.13-2.0, the sum 3.95-4.05), so each is held to 1.1 only. It must stay in
    # K_alpha every round and (from the draws) put weight m_i / k > 1/k on a
    # row in most rounds; 3000 rounds, draws seed 0.
    n, k = 30, 5
    caps = np.ones(n, dtype=np.int64)
    caps[:5] = 3
    losses = np.random.default_rng(6).uniform(0.1, 0.5, n)
    losses[:2] = 0.9
    K = alphaset(n, k, caps)
    pp = harness.build("p_player", p_player, **params)
    pp.setup(K, 3000)
    rng, heavy = np.random.default_rng(0), 0
    for _ in range(3000):
        prop = pp.propose(rng)
        pp.observe(losses[prop.rows])
        assert K.contains(pp.p, atol=1e-9)
        heavy += int(np.any(prop.weights > 1.0 / k + 1e-12))
    assert np.all(k * pp.p[:2] > 1.1), k * pp.p[:2]
    assert k * pp.p[:2].sum() > 3.5, k * pp.p[:2]
    assert heavy > 1500


def test_exp4mp_alphaset_game_logs_group_metrics_and_caps():
    prep = _game({"name": "alphaset", "k": 10, "caps": GROUP_CAPS}, budget=50000,
                 dataset=GROUPS, checkpoints=6)
    assert prep.context.params["constraint.max_k_alpha"] == 3
    assert prep.context.params["constraint.rows_k_alpha_above_1"] == 12
    metrics = harness.play(prep)
    assert "theory_bound" not in metrics  # no guarantee is proven on K_alpha
    groups = prep.parts.dataset.columns["group"]
    w_bar = prep.parts.w_player.w_bar
    X, y, model = prep.parts.dataset.X, prep.parts.dataset.y, prep.parts.model
    raw = model.raw_losses(w_bar, X, y)
    for g in ("majority", "minority"):
        assert metrics[f"group_loss.{g}"] == pytest.approx(raw[groups == g].mean(), rel=1e-12)
    assert metrics["worst_group_loss"] == max(metrics["group_loss.majority"],
                                              metrics["group_loss.minority"])


@pytest.mark.parametrize("confidence", ["all", "sampled"])
def test_exp4mp_update_on_a_multiset_weights_each_row_by_its_multiplicity(confidence):
    # n=6, k=3, every cap 2/3; a fixed draw: row 1 twice, row 4 once. At the
    # uniform start (no row capped) 1/(k p_i) = 2, so the log-weights rise by
    # eta (m_i L_i 2) on the sampled rows, plus eta c/sqrt(nT) * 2 on every
    # row ("all") or eta c/sqrt(nT) * m_i 2 on the sampled ones ("sampled");
    # compared after the rebasing to max 0, to 1e-15.
    n, k, T, eta, c = 6, 3, 100, 0.1, 1.0
    A = alphaset(n, k, [2] * n)
    pp = harness.build("p_player", "exp4mp", eta=eta, gamma=0.2, c=c, confidence=confidence)
    pp.setup(A, T)
    assert not pp.capped_.any()
    A.sample = lambda p, rng: (np.array([1, 4]), np.array([2, 1]))
    prop = pp.propose(np.random.default_rng(0))
    np.testing.assert_array_equal(prop.rows, [1, 4])
    np.testing.assert_allclose(prop.weights, [2 / 3, 1 / 3], rtol=1e-15)
    pp.observe(np.array([0.5, 0.25]))
    conf = eta * c / math.sqrt(n * T) * 2.0
    want = np.zeros(n)
    want[[1, 4]] = eta * np.array([2 * 0.5 * 2.0, 1 * 0.25 * 2.0])
    if confidence == "all":
        want += conf
    else:
        want[[1, 4]] += conf * np.array([2.0, 1.0])
    np.testing.assert_allclose(pp.log_w_, want - want.max(), rtol=0, atol=1e-15)


class GapSpy:
    """Records the dual gap at each checkpoint (an event-hook plugin)."""

    def __init__(self) -> None:
        self.gaps: list[float] = []

    @harness.hookimpl
    def on_checkpoint(self, context, step, metrics):
        self.gaps.append(metrics["dual_gap"])


def test_exp4mp_dual_gap_decreases_on_the_alphaset():
    # synthetic_groups n=120, k=10, minority caps 3, 5e5 data points, seed 0.
    # The gap starts small (at w = 0 every loss is log 2), peaks while w_bar
    # moves (measured 0.069 near 1.4e4 data points), then decreases: the last
    # four checkpoints decrease and the last is below 0.7 times the peak
    # (measured 0.037, i.e. 0.54 times).
    spy = GapSpy()
    cfg = game_cfg(constraint={"name": "alphaset", "k": 10, "caps": GROUP_CAPS},
                   dataset=GROUPS, budget=500000, checkpoints=10)
    harness.run(cfg, plugins=[spy])
    gaps = spy.gaps
    assert all(a > b for a, b in zip(gaps[-4:], gaps[-3:], strict=False)), gaps
    assert gaps[-1] < 0.7 * max(gaps), gaps


def test_no_group_metrics_without_a_group_column(tiny_cfg):
    metrics = harness.run(tiny_cfg)
    assert not any(k.startswith("group_loss") for k in metrics)
    assert "worst_group_loss" not in metrics


def test_synthetic_groups_is_reproducible_and_scaled():
    a = harness.build("dataset", "synthetic_groups", seed=3)
    b = harness.build("dataset", "synthetic_groups", seed=3)
    assert np.array_equal(a.X, b.X) and np.array_equal(a.y, b.y)
    assert a.X.min() == 0.0 and a.X.max() == 1.0 and a.X.shape == (400, 3)
    assert (a.columns["group"] == "minority").sum() == 40
    assert math.isclose(a.y.mean(), 0.5, abs_tol=0.1)


# ---------------------------------------------------------------------------
# configs
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("overrides", [
    ["constraint=alphaset"],
    ["constraint=alphaset_groups", "dataset=synthetic_groups"],
    ["experiment=groups", "constraint=alphaset_groups", "p_player=exp4mp"],
    ["experiment=groups", "constraint=kset", "p_player=ftrl"],
])
def test_configs_compose_and_build(overrides):
    from hydra import compose, initialize_config_dir

    from harness.config import config_dir

    with initialize_config_dir(version_base="1.3", config_dir=config_dir()):
        cfg = compose("config", overrides=[*overrides, "budget=4000", "tracking.enabled=false"])
    prep = harness.prepare(cfg)
    if "experiment=groups" in overrides:
        assert prep.parts.constraint.k == 40 and prep.parts.w_player.radius == 3.0
    if "constraint=alphaset_groups" in overrides:
        assert prep.context.params["constraint.max_k_alpha"] == 3


def test_the_group_caps_preset_plays_and_certifies_its_gap():
    # the alpha-set's ``caps`` attribute is its config mapping: the enclosure of F
    # (the reference's w = 0 and the gaps) reads the caps through row_caps() (a
    # float() of the mapping crashed here)
    from conftest import game_cfg

    cfg = game_cfg("constraint=alphaset_groups", "dataset=synthetic_groups", "budget=4000",
                   "checkpoints=2", "reference.exact=true")
    metrics = harness.play(harness.prepare(cfg))
    assert math.isfinite(metrics["dual_gap"]) and metrics["dual_gap"] >= 0.0
