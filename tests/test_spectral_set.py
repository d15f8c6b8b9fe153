"""The spectral set P(sigma) (plugins/sets/spectral.py; numerics in
plugins/lib/permutahedron.py): the three spectra against their definitions,
the Euclidean and KL projections against cvxpy (Clarabel) with P(sigma)
written by majorisation, the oracle against all permutations, membership
against a linear program over the vertices, the superquantile as a capped
simplex (and as the k-set), the config and the players' refusals.

Every reference is computed independently of the code under test."""

from __future__ import annotations

import itertools
import math
import re

import numpy as np
import pytest
from scipy.optimize import linprog

import harness
from harness import ConfigError
from plugins.lib.capped import capped_kl_projection, capped_simplex_euclidean
from plugins.lib.permutahedron import (
    permutahedron_kl_projection,
    permutahedron_lmo,
    permutahedron_projection,
    spectrum,
)
from plugins.sets.kset import KSet

from conftest import game_cfg

cp = pytest.importorskip("cvxpy")

# the exponential cone's "Solution may be inaccurate": the tolerances below allow for it
pytestmark = pytest.mark.filterwarnings("ignore:Solution may be inaccurate")

RISKS = ("superquantile", "extremile", "esrm")


def spectral(n: int, **params):
    return harness.build("constraint_set", "spectral", n=n, **params)


# (risk, its parameters) covering the superquantile fractional (n(1-level) not
# an integer at the n used) and integer, the extremile and the ESRM
CASES = [
    ("superquantile", {"level": 0.35}),
    ("superquantile", {"level": 0.5}),
    ("superquantile", {"level": 0.0}),
    ("extremile", {"r": 2.0}),
    ("extremile", {"r": 3.5}),
    ("esrm", {"rho": 1.0}),
    ("esrm", {"rho": 8.0}),
]
CASE_IDS = [f"{risk}-{next(iter(p.values()))}" for risk, p in CASES]


# ---------------------------------------------------------------------------
# the spectra
# ---------------------------------------------------------------------------


def prospect_superquantile(n: int, q: float) -> np.ndarray:
    """``get_superquantile_weights`` of ronakdm/prospect's src/optim/objectives.py."""
    weights = np.zeros(n)
    idx = math.floor(n * q)
    frac = 1 - (n - idx - 1) / (n * (1 - q))
    if frac > 1e-12:
        weights[idx] = frac
        weights[idx + 1:] = 1 / (n * (1 - q))
    else:
        weights[idx:] = 1 / (n - idx)
    return weights


@pytest.mark.parametrize(("n", "level", "want"), [
    # n = 7, level 0.5: n(1 - level) = 3.5 rows; caps 2/7 on three, 1/7 on the boundary
    (7, 0.5, [0, 0, 0, 1 / 7, 2 / 7, 2 / 7, 2 / 7]),
    # n = 10, level 0.35: 6.5 rows; caps 2/13 on six, 1/13 on the boundary
    (10, 0.35, [0, 0, 0, 1 / 13] + [2 / 13] * 6),
    # n = 10, level 0.3: seven rows of 1/7 (the k-set, k = 7)
    (10, 0.3, [0, 0, 0] + [1 / 7] * 7),
    # 100 * 0.29 = 28.999999999999996 in floating point: still 71 rows of 1/71
    (100, 0.29, [0] * 29 + [1 / 71] * 71),
    (4, 0.0, [0.25] * 4),
])
def test_superquantile_spectrum_has_the_fractional_boundary(n, level, want):
    # exact weights to 1e-15
    np.testing.assert_allclose(spectrum("superquantile", n, level=level), want,
                               rtol=0, atol=1e-15)


def test_superquantile_spectrum_is_prospects_off_rounding():
    # every (n, level) on a grid where n level is not within 1e-9 of an integer:
    # the authors' formula, to 1e-15
    for n in (5, 7, 24, 101):
        for level in np.linspace(0.0, 0.95, 39):
            if abs(n * level - round(n * level)) < 1e-9:
                continue
            np.testing.assert_allclose(spectrum("superquantile", n, level=level),
                                       prospect_superquantile(n, level), rtol=0, atol=1e-15)


def superquantile_by_definition(losses: np.ndarray, level: float) -> float:
    """CVaR at ``level`` of the empirical distribution, by Rockafellar and
    Uryasev: ``min_tau tau + E (L - tau)_+ / (1 - level)``, the minimum at a loss."""
    return min(t + np.mean(np.maximum(losses - t, 0.0)) / (1.0 - level) for t in losses)


@pytest.mark.parametrize("n", [1, 2, 7, 10, 33])
@pytest.mark.parametrize(("risk", "params"), CASES, ids=CASE_IDS)
def test_every_spectrum_is_a_distribution_sorted_ascending(n, risk, params):
    sigma = spectrum(risk, n, **params)
    assert sigma.shape == (n,) and np.all(sigma >= 0.0)
    assert np.all(np.diff(sigma) >= -1e-17)
    assert sigma.sum() == pytest.approx(1.0, abs=1e-14)


@pytest.mark.parametrize("level", [0.0, 0.2, 0.35, 0.5, 0.77, 0.9])
def test_superquantile_is_the_rockafellar_uryasev_cvar(level):
    # seed 0, 20 loss vectors over n = 13 rows; the oracle's value equals the
    # Rockafellar-Uryasev minimum to 1e-12
    rng = np.random.default_rng(0)
    K = spectral(13, level=level)
    for _ in range(20):
        losses = rng.random(13)
        assert K.lmo(losses)[0] == pytest.approx(superquantile_by_definition(losses, level),
                                                 abs=1e-12)


@pytest.mark.parametrize("r", [1.0, 2.0, 3.5])
def test_extremile_spectrum_is_the_increments_of_t_to_the_r(r):
    # sigma_i = F((i)/n) - F((i-1)/n), F(t) = t^r, the extremile's distortion
    n = 9
    t = np.arange(n + 1) / n
    np.testing.assert_allclose(spectrum("extremile", n, r=r), np.diff(t ** r), rtol=1e-13)


@pytest.mark.parametrize("rho", [0.01, 1.0, 8.0, 50.0, 2000.0])
def test_esrm_spectrum_integrates_the_exponential_density(rho):
    # sigma_i = integral over [(i-1)/n, i/n] of rho e^(-rho (1 - t)) / (1 - e^-rho),
    # the integral written with expm1 (stable at any rho); relative 1e-12
    n = 11
    t = np.arange(n + 1) / n
    upper, lower = t[1:], t[:-1]
    want = (np.exp(-rho * (1 - upper)) * -np.expm1(-rho * (upper - lower))) / -np.expm1(-rho)
    got = spectrum("esrm", n, rho=rho)
    assert np.all(np.isfinite(got))
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-300)


def test_the_set_gives_its_spectrum_for_any_batch():
    K = spectral(20, risk="extremile", r=2.0)
    np.testing.assert_array_equal(K.spectrum(), spectrum("extremile", 20, r=2.0))
    np.testing.assert_array_equal(K.spectrum(20), K.spectrum())
    np.testing.assert_array_equal(K.spectrum(5), spectrum("extremile", 5, r=2.0))
    K.spectrum()[0] = 7.0  # a copy: the set's own spectrum is unchanged
    assert K.spectrum()[0] == spectrum("extremile", 20, r=2.0)[0]
    np.testing.assert_allclose(spectral(7, level=0.5).spectrum(4), [0, 0, 0.5, 0.5])


# ---------------------------------------------------------------------------
# independent references: cvxpy with P(sigma) written by majorisation
# ---------------------------------------------------------------------------

CLARABEL = {"solver": "CLARABEL", "tol_gap_abs": 1e-11, "tol_gap_rel": 1e-11,
            "tol_feas": 1e-11, "max_iter": 400}


def majorised_by(x, sigma: np.ndarray) -> list:
    """``x in P(sigma)``: ``sum x = 1`` and the sum of the j largest entries of x
    at most that of sigma, j < n (Rado 1952). ``sigma`` may hold negative entries."""
    top = np.cumsum(np.sort(sigma)[::-1])
    return [cp.sum(x) == 1.0] + [cp.sum_largest(x, j) <= top[j - 1]
                                 for j in range(1, sigma.size)]


def qp_projection(v: np.ndarray, sigma: np.ndarray) -> np.ndarray:
    x = cp.Variable(v.size)
    cp.Problem(cp.Minimize(cp.sum_squares(x - v)), majorised_by(x, sigma)).solve(**CLARABEL)
    return x.value


def kl_projection(w: np.ndarray, sigma: np.ndarray, gamma: float) -> tuple[np.ndarray, float]:
    """``argmin KL(q || w)`` over ``q >= 0`` whose mix ``(1 - gamma) q + gamma/n``
    lies in ``P(sigma)`` (the exponential cone), mixed; and the KL there."""
    n = w.size
    x = cp.Variable(n, nonneg=True)
    mix = (1.0 - gamma) * x + gamma / n
    problem = cp.Problem(cp.Minimize(cp.sum(cp.rel_entr(x, w))), majorised_by(mix, sigma))
    problem.solve(**CLARABEL)
    return (1.0 - gamma) * x.value + gamma / n, problem.value


def kl(q: np.ndarray, w: np.ndarray) -> float:
    pos = q > 0
    return float(np.sum(q[pos] * np.log(q[pos] / w[pos])))


# Euclidean: Clarabel's QP at these settings is accurate to ~1e-8 in q (measured
# 1.0e-8 worst here); 1e-7 is far below the error of a wrong pooling (>= 1e-2).
EUCLID_TOL = 1e-7
# KL: the exponential cone's q is accurate to a few 1e-6 only (measured 4.0e-6
# worst at n <= 8: the objective is flat, an error e in KL moves q by ~sqrt(e)),
# so q is compared at 2e-5 and the objective sharply: the code's KL within 1e-9
# of the solver's optimum (measured 3.4e-11), on a point of the set. A feasible
# point that is not the projection has a KL larger by >= 1e-4 on these inputs.
KL_TOL = 2e-5
KL_VALUE_TOL = 1e-9


@pytest.mark.parametrize(("risk", "params"), CASES, ids=CASE_IDS)
def test_euclidean_projection_is_the_qp_solution(risk, params):
    # seed 3, n in {3, 6, 9}, 6 points each: normal (scale 0.5) around the
    # uniform point and far from it (scale 5)
    rng = np.random.default_rng(3)
    for n in (3, 6, 9):
        K = spectral(n, risk=risk, **params)
        sigma = K.spectrum()
        for scale in (0.5, 0.5, 0.5, 5.0, 5.0, 5.0):
            v = 1.0 / n + scale * rng.standard_normal(n)
            q = K.euclidean_project(v)
            np.testing.assert_allclose(q, qp_projection(v, sigma), rtol=0, atol=EUCLID_TOL)
            assert K.contains(q, atol=1e-12)
            np.testing.assert_allclose(permutahedron_projection(v, sigma), q,
                                       rtol=0, atol=1e-12)


@pytest.mark.parametrize("gamma", [0.0, 0.2, 0.6])
@pytest.mark.parametrize(("risk", "params"), CASES, ids=CASE_IDS)
def test_kl_projection_is_the_exponential_cone_solution(risk, params, gamma):
    # seed 4, n in {4, 7}, 5 weight vectors over four orders of magnitude each;
    # gamma > 0 puts negative entries in sigma' = (sigma - gamma/n) / (1 - gamma)
    rng = np.random.default_rng(4)
    for n in (4, 7):
        K = spectral(n, risk=risk, **params)
        for _ in range(5):
            w = np.exp(rng.uniform(-4.5, 4.5, n))
            p = K.project(w, gamma)
            want, value = kl_projection(w, K.spectrum(), gamma)
            np.testing.assert_allclose(p, want, rtol=0, atol=KL_TOL)
            q = (p - gamma / n) / (1.0 - gamma)
            assert abs(kl(q, w) - value) <= KL_VALUE_TOL
            assert K.contains(p, atol=1e-12)
            np.testing.assert_allclose(K.project(np.log(w), gamma, log_domain=True), p,
                                       rtol=0, atol=1e-15)


@pytest.mark.parametrize(("risk", "params"), CASES, ids=CASE_IDS)
def test_kl_kernel_on_the_spectrum_itself(risk, params):
    # permutahedron_kl_projection on sigma with its zeros (log 0 = -inf in the
    # blocks), against the exponential cone; seed 5, n = 6, tolerance KL_TOL
    rng = np.random.default_rng(5)
    n = 6
    sigma = spectrum(risk, n, **params)
    for _ in range(5):
        w = np.exp(rng.uniform(-3.0, 3.0, n))
        q, fixed, feasible = permutahedron_kl_projection(np.log(w), sigma)
        assert feasible
        np.testing.assert_allclose(q, kl_projection(w, sigma, 0.0)[0], rtol=0, atol=KL_TOL)
        # a row fixed at a spectrum entry holds the entry of its rank
        rank = np.argsort(np.argsort(w, kind="stable"), kind="stable")
        np.testing.assert_allclose(q[fixed], sigma[rank[fixed]], rtol=1e-12, atol=1e-15)


def test_kl_projection_with_zero_weights():
    # zero weights get no mass when the spectrum's zeros cover them; with more
    # zero weights than zeros of sigma there is no projection (KL is infinite)
    n = 6
    w = np.array([0.0, 2.0, 0.0, 1.0, 3.0, 0.5])
    log_w = np.array([-np.inf, np.log(2.0), -np.inf, 0.0, np.log(3.0), np.log(0.5)])
    K = spectral(n, level=0.4)  # 3.6 rows: two zero entries and a fractional one
    p = K.project(w, 0.0)
    assert p[0] == p[2] == 0.0 and K.contains(p, atol=1e-12)
    sigma = np.array([0.0, 0.0, 0.1, 0.2, 0.3, 0.4])  # two zeros: as many as zero weights
    q, _, feasible = permutahedron_kl_projection(log_w, sigma)
    assert feasible and q[0] == q[2] == 0.0
    np.testing.assert_allclose(q, kl_projection(np.where(w > 0, w, 1e-300), sigma, 0.0)[0],
                               rtol=0, atol=KL_TOL)
    with pytest.raises(ValueError, match="positive weight"):
        spectral(n, risk="extremile").project(w, 0.0)  # every entry of sigma positive
    q, _, feasible = permutahedron_kl_projection(log_w, spectrum("extremile", n))
    assert not feasible


def test_kl_projection_mixes_within_the_set_at_any_gamma():
    # seed 6: the mix lies in P(sigma) for gamma up to 0.95, where sigma' is
    # mostly negative (the extremile's smallest entry is 1/n^2)
    rng = np.random.default_rng(6)
    K = spectral(30, risk="extremile")
    for gamma in (0.01, 0.5, 0.95):
        for _ in range(5):
            p = K.project(np.exp(rng.normal(0, 4, 30)), gamma)
            assert K.contains(p, atol=1e-12) and np.min(p) >= gamma / 30 - 1e-15


# ---------------------------------------------------------------------------
# the oracle and membership
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 2, 4, 6])
@pytest.mark.parametrize(("risk", "params"), CASES, ids=CASE_IDS)
def test_lmo_is_the_best_permutation(n, risk, params):
    # seed 7, 10 loss vectors, every other one rounded to 0.1 (ties): the value
    # is the best <losses, permuted sigma> over all n! permutations, to 1e-12
    rng = np.random.default_rng(7)
    K = spectral(n, risk=risk, **params)
    sigma = K.spectrum()
    perms = np.array(list(itertools.permutations(range(n))))
    for j in range(10):
        losses = rng.random(n) if j % 2 == 0 else np.round(rng.random(n), 1)
        value, q = K.lmo(losses)
        best = float(np.max(sigma[perms] @ losses))
        assert value == pytest.approx(best, abs=1e-12)
        assert value == pytest.approx(float(losses @ q), abs=1e-12)
        assert K.contains(q, atol=1e-12)


def in_hull_of_permutations(p: np.ndarray, sigma: np.ndarray) -> bool:
    """Whether ``p`` is a convex combination of the permutations of sigma (an LP
    over the n! vertices, HiGHS)."""
    vertices = sigma[np.array(list(itertools.permutations(range(sigma.size))))]
    m = vertices.shape[0]
    lp = linprog(np.zeros(m), A_eq=np.vstack([vertices.T, np.ones((1, m))]),
                 b_eq=np.append(p, 1.0), bounds=(0, None), method="highs")
    return lp.status == 0


@pytest.mark.parametrize(("risk", "params"), CASES, ids=CASE_IDS)
def test_membership_is_the_convex_hull_of_the_permutations(risk, params):
    # seed 8, n = 5 (120 vertices): 30 points near the set's boundary, each
    # classified by the LP over the vertices; the points are kept 1e-6 away
    # from the boundary so that atol = 1e-9 cannot change the answer
    rng = np.random.default_rng(8)
    K = spectral(5, risk=risk, **params)
    sigma = K.spectrum()
    inside = outside = 0
    for _ in range(30):
        vertex = sigma[rng.permutation(5)]
        p = vertex + rng.normal(0.0, 0.05, 5) * rng.integers(0, 2)
        p = 1.0 / 5 + rng.uniform(0.5, 1.5) * (p - p.mean())  # sum 1, scaled about 1/n
        slack = np.cumsum(np.sort(sigma)[::-1]) - np.cumsum(np.sort(p)[::-1])
        if np.min(np.abs(slack[:-1])) < 1e-6 or abs(np.min(p)) < 1e-6:
            continue
        truth = in_hull_of_permutations(p, sigma) and np.min(p) >= 0.0
        assert K.contains(p) == truth, (p, truth)
        inside += truth
        outside += not truth
    assert outside >= 3 and (inside >= 3 or np.ptp(sigma) == 0.0)  # level 0: the point 1/n


@pytest.mark.parametrize(("risk", "params"), CASES, ids=CASE_IDS)
def test_membership_rejects_what_is_not_in_the_set(risk, params):
    K = spectral(8, risk=risk, **params)
    sigma = K.spectrum()
    vertex = sigma[::-1].copy()
    assert K.contains(vertex) and K.contains(np.full(8, 1 / 8))
    assert not K.contains(vertex * 1.01)  # sums to 1.01
    assert not K.contains(vertex[:7])  # wrong length
    if sigma[0] < sigma[-1]:  # more mass on the largest entry than sigma allows
        moved = vertex.copy()
        moved[0] += 1e-6
        moved[-1] -= 1e-6
        assert not K.contains(moved, atol=1e-9) and K.contains(moved, atol=1e-5)
    bad = np.full(8, 1 / 8)
    bad[0], bad[1] = -0.01, 1 / 8 + 0.01
    assert not K.contains(bad)


# ---------------------------------------------------------------------------
# the superquantile is a capped simplex (and the k-set at integer n(1-level))
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(("n", "level"), [(7, 0.5), (10, 0.35), (13, 0.2), (9, 0.8), (30, 0.61)])
def test_superquantile_is_the_capped_simplex(n, level):
    # seed 9; the capped simplex {0 <= q <= c, sum q = 1}, c = 1/(n(1-level)):
    # its projections equal the permutahedron's on the spectrum (1e-12), its
    # LP value the permutahedron's oracle (1e-12), its membership majorisation
    rng = np.random.default_rng(9)
    K = spectral(n, level=level)
    sigma = K.spectrum()
    c = 1.0 / (n * (1.0 - level))
    assert K.sampler == "none" and K.compiled() is None
    np.testing.assert_allclose(K.row_caps(), np.full(n, c), rtol=1e-15)
    assert sigma.max() == pytest.approx(c, rel=1e-15) and K.k == np.count_nonzero(sigma)
    for _ in range(10):
        v = 1.0 / n + rng.normal(0.0, 0.3, n)
        np.testing.assert_allclose(capped_simplex_euclidean(v, c),
                                   permutahedron_projection(v, sigma), rtol=0, atol=1e-12)
        log_w = rng.normal(0.0, 3.0, n)
        q_caps, _ = capped_kl_projection(log_w, c)
        q_perm, _, feasible = permutahedron_kl_projection(log_w, sigma)
        assert feasible
        np.testing.assert_allclose(q_caps, q_perm, rtol=0, atol=1e-12)
        losses = rng.random(n)
        lp = linprog(-losses, A_eq=np.ones((1, n)), b_eq=[1.0], bounds=[(0, c)] * n,
                     method="highs")
        assert float(losses @ permutahedron_lmo(losses, sigma)) == pytest.approx(-lp.fun,
                                                                               abs=1e-12)
        assert K.lmo(losses)[0] == pytest.approx(-lp.fun, abs=1e-12)
        p = rng.dirichlet(np.full(n, 2.0))
        assert K.contains(p) == bool(np.max(p) <= c + 1e-9)


@pytest.mark.parametrize(("n", "level", "k"), [(10, 0.3, 7), (24, 0.5, 12), (100, 0.29, 71),
                                               (5, 0.0, 5), (8, 0.875, 1), (9, 0.95, 1),
                                               (10, 0.7, 3)])  # 10 (1 - 0.7) = 3.0000000000000004
def test_superquantile_at_integer_width_is_the_kset(n, level, k):
    # the same oracle, projections and draws (same generator, seed 10) as KSet
    K = spectral(n, level=level)
    kset = KSet(n, k)
    assert K.k == k and K.sampler == "depround"
    np.testing.assert_array_equal(K.row_caps(), kset.row_caps())
    assert K.compiled() is not None and K.compiled().kernels == kset.compiled().kernels
    rng = np.random.default_rng(10)
    for _ in range(5):
        losses, w, v = rng.random(n), np.exp(rng.normal(0, 2, n)), rng.normal(0, 1, n)
        assert K.lmo(losses)[0] == kset.lmo(losses)[0]
        np.testing.assert_array_equal(K.project(w, 0.1), kset.project(w, 0.1))
        np.testing.assert_array_equal(K.euclidean_project(v), kset.euclidean_project(v))
        p = kset.project(w, 0.1)
        a, b = K.sample(p, np.random.default_rng(11)), kset.sample(p, np.random.default_rng(11))
        np.testing.assert_array_equal(a.rows, b.rows)
        assert K.contains(p) and K.contains(K.lmo(losses)[1])


def test_return_capped_marks_rows_at_a_spectrum_entry():
    # the capped superquantile: rows at the cap; the extremile: rows whose
    # weight is their rank's spectrum entry (blocks of one row); seed 12
    rng = np.random.default_rng(12)
    w = np.exp(rng.normal(0, 3, 9))
    p, capped = spectral(9, level=0.35).project(w, 0.0, return_capped=True)
    np.testing.assert_array_equal(p[capped], 1.0 / (9 * 0.65))
    assert capped.any() and np.all(p[~capped] < 1.0 / (9 * 0.65))
    K = spectral(9, risk="extremile")
    p, fixed = K.project(w, 0.0, return_capped=True)
    rank = np.argsort(np.argsort(w))
    np.testing.assert_allclose(p[fixed], K.spectrum()[rank[fixed]], rtol=1e-12)
    assert fixed.any() and not fixed.all()


def test_a_set_without_sampler_says_so():
    K = spectral(9, risk="esrm", rho=2.0)
    with pytest.raises(ConfigError, match=r"'spectral' \(esrm rho=2\) has no sampler"):
        K.sample(np.full(9, 1 / 9), np.random.default_rng(0))
    assert K.row_caps() is None and K.compiled() is None and K.k == 9
    assert K.label() == "esrm rho=2"
    assert spectral(9, level=0.5).label() == "superquantile level=0.5"
    assert spectral(9, risk="extremile", r=2.5).label() == "extremile r=2.5"


# ---------------------------------------------------------------------------
# config, validation and the players
# ---------------------------------------------------------------------------


def test_the_set_is_built_from_the_cli_config():
    prepared = harness.prepare(game_cfg("constraint=spectral", "constraint.risk=esrm",
                                        "constraint.rho=3", "p_player=ftrl",
                                        "dataset=breast_cancer", budget=10 * 569))
    K = prepared.parts.constraint
    assert K.name == "spectral" and K.risk == "esrm" and K.rho == 3.0
    np.testing.assert_array_equal(K.spectrum(), spectrum("esrm", 569, rho=3.0))
    assert prepared.context.params["constraint.risk"] == "esrm"
    assert prepared.context.params["constraint.k"] == 569


@pytest.mark.parametrize(("override", "message"), [
    ("constraint.risk=cvar", "The 'risk' parameter of spectral must be one of "
                             "['superquantile', 'extremile', 'esrm']. Got 'cvar' instead."),
    ("constraint.level=1.0", "The 'level' parameter of spectral must be a float in [0, 1). "
                             "Got 1.0 instead."),
    ("constraint.level=-0.1", "The 'level' parameter of spectral must be a float in [0, 1). "
                              "Got -0.1 instead."),
    ("constraint.r=0.5", "The 'r' parameter of spectral must be a float in [1, inf). "
                         "Got 0.5 instead."),
    ("constraint.rho=0", "The 'rho' parameter of spectral must be a float in (0, inf). "
                         "Got 0 instead."),
    ("+constraint.k=3", "Unknown parameter(s) ['k'] for spectral."),
])
def test_bad_values_are_refused_in_one_line(override, message):
    with pytest.raises(ConfigError) as err:
        harness.prepare(game_cfg("constraint=spectral", override, "p_player=ftrl"))
    assert message in str(err.value) and "\n" not in str(err.value)


DRAWING_PLAYERS = ("exp4mp", "exp_ix_m", "adacvar", "safl")


@pytest.mark.parametrize("player", DRAWING_PLAYERS)
@pytest.mark.parametrize("risk", ["extremile", "esrm", "superquantile"])
def test_players_that_draw_refuse_a_set_without_sampler(player, risk):
    # breast cancer: n = 569, so level 0.5 leaves 284.5 rows (no k-set)
    with pytest.raises(ConfigError) as err:
        harness.prepare(game_cfg("constraint=spectral", f"constraint.risk={risk}",
                                 f"p_player={player}"))
    text = str(err.value)
    assert "\n" not in text
    assert text == (f"The p_player '{player}' cannot play on constraint 'spectral': it draws "
                    "its rows from the constraint set's sampler; 'spectral' has none "
                    "(sampler 'none'), so only full-information players (ftrl) and the "
                    "solvers run on it.")


@pytest.mark.parametrize(("player", "risk", "why"), [
    ("exp_ix", "extremile", "it plays one row per round (k = 1, the simplex)"),
    ("ru_sgd", "extremile", "it needs a capped simplex"),
    ("soft_cvar", "esrm", "it needs a capped simplex"),
])
def test_other_players_refuse_the_sets_they_cannot_play(player, risk, why):
    with pytest.raises(ConfigError, match=re.escape(f"The p_player '{player}' cannot play "
                                                    f"on constraint 'spectral': {why}")):
        harness.prepare(game_cfg("constraint=spectral", f"constraint.risk={risk}",
                                 f"p_player={player}"))


def test_players_that_draw_play_on_the_kset_form():
    # yacht: n = 308, level 0.5 leaves 154 rows, the k-set
    prepared = harness.prepare(game_cfg("constraint=spectral", "p_player=exp4mp",
                                        "dataset=yacht", budget=154 * 50))
    assert prepared.parts.constraint.k == 154 and prepared.parts.constraint.sampler == "depround"


@pytest.mark.parametrize(("risk", "extra"), [("superquantile", ()), ("superquantile",
                                             ("constraint.level=0.35",)),
                                             ("extremile", ()), ("esrm", ())])
def test_ftrl_runs_end_to_end_on_every_risk(risk, extra):
    # 20 rounds of OL-FTRL on breast cancer (n = 569): p_t stays in the set, the
    # certified gap is finite and at most the theory bound
    cfg = game_cfg("constraint=spectral", f"constraint.risk={risk}", *extra,
                   "p_player=ftrl", "dataset=breast_cancer", budget=20 * 569)
    result = harness.run(cfg)
    assert math.isfinite(result["dual_gap"]) and result["dual_gap"] >= 0.0
    assert result["dual_gap"] <= result["theory_bound"] + 1e-12


@pytest.mark.parametrize(("risk", "params"), CASES, ids=CASE_IDS)
def test_ftrl_entropy_range_is_that_of_the_permutahedron(risk, params):
    # log n - H(sigma): the negative entropy's range over P(sigma), its minimum
    # -log n at 1/n, its maximum -H(sigma) at every vertex; checked against
    # the projections (seed 13): no point of K has negative entropy above -H(sigma)
    n = 12
    K = spectral(n, **{"risk": risk, **params})
    ftrl = harness.build("p_player", "ftrl")
    sigma = K.spectrum()
    pos = sigma[sigma > 0]
    want = math.log(n) + float(np.sum(pos * np.log(pos)))
    if K.kset_ is not None:
        assert ftrl.entropy_range(K) == math.log(n / K.k)
    assert ftrl.entropy_range(K) == pytest.approx(want, abs=1e-12)
    rng = np.random.default_rng(13)
    for _ in range(20):
        p = K.project(np.exp(rng.normal(0, 5, n)), 0.0)
        neg_entropy = float(np.sum(p[p > 0] * np.log(p[p > 0])))
        assert -math.log(n) - 1e-12 <= neg_entropy <= -math.log(n) + want + 1e-12
