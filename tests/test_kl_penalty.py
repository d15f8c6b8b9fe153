"""The KL penalty ``nu KL(q || 1/n)`` of the problem F (harness/problem.py) through
the harness: its inner maximiser, its exact optimum (plugins/metrics/optimum.py),
its certified dual gap (harness/dual.py), the full-batch solver on it and the
configuration (``problem.penalty``, ``problem.nu_times_n``, the solvers'
``penalties``).

The references are written here independently of the harness: the inner
maximum as a convex program in cvxpy (``entr``, the constraints of K from their
definitions, a doubly stochastic matrix for a permutahedron); the KL projections by a
bisection on the capped simplex's multiplier and by pooling adjacent violators
on the sorted weights (Blondel et al., ICML 2020, Proposition 3); ``F`` from
those, minimised by scipy (L-BFGS-B without a ball, SLSQP with one).
"""

from __future__ import annotations

import math
import tempfile
import warnings
from types import SimpleNamespace
from typing import Any, ClassVar

import numpy as np
import pytest
from scipy import optimize

import harness
from harness import ConfigError, Param
from harness.dual import certified_gap, dual_lower_bound, enclose_value
from harness.gap import project_ball
from harness.problem import Problem, problem_values

cp = pytest.importorskip("cvxpy")
optimum = pytest.importorskip("plugins.metrics.optimum")


# ---------------------------------------------------------------------------
# independent references
# ---------------------------------------------------------------------------


def _point(K: Any, n: int) -> tuple[Any, list[Any]]:
    """A cvxpy point of K and its constraints, from the set's definition: the
    simplex with the row caps ``q <= c`` where the set has them; else ``q = M
    sigma`` with ``M`` doubly stochastic (Birkhoff: the permutahedron is the
    convex hull of the permutations of ``sigma``)."""
    caps = K.row_caps()
    if caps is not None:
        x = cp.Variable(n)
        return x, [cp.sum(x) == 1, x >= 0, x <= caps]
    M = cp.Variable((n, n), nonneg=True)
    return M @ K.spectrum(), [cp.sum(M, axis=0) == 1, cp.sum(M, axis=1) == 1]


def _kl_inner_by_cvxpy(losses: np.ndarray, nu: float, K: Any) -> tuple[float, np.ndarray]:
    """``max_{q in K} <l, q> - nu sum_i q_i log(n q_i)`` by Clarabel at tight
    tolerances (``nu sum entr(q) - nu log n`` is the penalty), the value taken at the
    solver's point clipped to ``q >= 0`` (a point of K to the solver's accuracy)."""
    n = losses.size
    x, constraints = _point(K, n)
    program = cp.Problem(cp.Maximize(losses @ x + nu * cp.sum(cp.entr(x)) - nu * math.log(n)),
                         constraints)
    with warnings.catch_warnings():  # "may be inaccurate": the tolerances say how far
        warnings.simplefilter("ignore", UserWarning)
        program.solve(solver="CLARABEL", tol_gap_abs=1e-11, tol_gap_rel=1e-11, tol_feas=1e-11)
    assert program.status in (cp.OPTIMAL, cp.OPTIMAL_INACCURATE), program.status
    q = np.maximum(np.asarray(x.value), 0.0)
    return float(losses @ q) - nu * _entropy_term(q), q


def _kl_capped(z: np.ndarray, caps: np.ndarray) -> np.ndarray:
    """``q_i = min(c_i, exp(z_i + t))`` with ``sum q = 1``: ``t`` by 200 bisections
    (the KL projection of ``exp(z)`` onto the capped simplex, by its KKT conditions)."""
    z = z - z.max()
    lo, hi = -z.max() - 50.0 + float(np.log(caps.min())), -z.min() + 50.0

    def point(t: float) -> np.ndarray:
        with np.errstate(over="ignore"):  # exp(inf) = inf, capped
            return np.minimum(caps, np.exp(z + t))

    for _ in range(200):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if float(point(mid).sum()) < 1.0 else (lo, mid)
    return point(0.5 * (lo + hi))


def _kl_permutahedron(z: np.ndarray, sigma: np.ndarray) -> np.ndarray:
    """The KL projection of ``exp(z)`` onto ``P(sigma)`` (``sigma`` ascending) by
    pooling adjacent violators: in the order of ``z`` descending, blocks ``B``
    with ``q_i = exp(z_i) S_B / E_B`` (``S_B`` the spectrum's mass, ``E_B`` the
    weights' on the block), merged while a block's log-ratio ``log S_B - log
    E_B`` exceeds the next one's (Blondel et al. 2020, Proposition 3)."""
    order = np.argsort(-z, kind="stable")
    s = z[order] - z.max()
    desc = sigma[::-1]
    blocks: list[list[float]] = []  # [start, end, spectrum mass, weight mass]

    def ratio(b: list[float]) -> float:
        return -math.inf if b[2] <= 0 else math.log(b[2]) - math.log(b[3])

    for i in range(s.size):
        blocks.append([i, i + 1, float(desc[i]), math.exp(s[i])])
        while len(blocks) > 1 and ratio(blocks[-2]) > ratio(blocks[-1]):
            last = blocks.pop()
            blocks[-1] = [blocks[-1][0], last[1], blocks[-1][2] + last[2],
                          blocks[-1][3] + last[3]]
    q_sorted = np.empty(s.size)
    for start, end, mass, weight in blocks:
        rows = slice(int(start), int(end))
        q_sorted[rows] = np.exp(s[rows]) * (mass / weight)
    q = np.empty(s.size)
    q[order] = q_sorted
    return q


def _kl_maximiser(losses: np.ndarray, nu: float, K: Any) -> np.ndarray:
    """The KL maximiser written here: softmax on the simplex, ``_kl_capped`` on a
    capped set, ``_kl_permutahedron`` on a spectral one."""
    z = losses / nu
    caps = K.row_caps()
    if caps is not None and np.all(caps >= 1.0):
        e = np.exp(z - z.max())
        return e / e.sum()
    return _kl_capped(z, caps) if caps is not None else _kl_permutahedron(z, K.spectrum())


def _entropy_term(q: np.ndarray) -> float:
    n = q.size
    pos = q > 0
    return float(np.sum(q[pos] * np.log(n * q[pos])))


class Reference:
    """``F(w) = max_{q in K} <L(w), q> - nu KL(q || 1/n) + (mu/2) ||w||^2`` with the
    maximiser above and the losses written out for the squared error (``(x.w -
    y)^2 / scale`` without a bias), or read from the model otherwise."""

    def __init__(self, X, y, model, K, mu: float, nu: float) -> None:
        self.X, self.y, self.model, self.K, self.mu, self.nu = X, y, model, K, mu, nu
        self.square = model.name == "linear_mse" and not model.bias

    def __call__(self, w: np.ndarray) -> tuple[float, np.ndarray]:
        X, y, model = self.X, self.y, self.model
        if self.square:
            r = X @ w - y
            losses = r * r / model.scale_
        else:
            losses = model.raw_losses(w, X, y) / model.scale_
        q = _kl_maximiser(losses, self.nu, self.K)
        value = float(losses @ q) - self.nu * _entropy_term(q) + 0.5 * self.mu * float(w @ w)
        if self.square:
            grad = X.T @ (2.0 * q * r) / model.scale_
        else:
            grad = model.value_and_grad(w, X, y, q)[1]
        return value, grad + self.mu * w

    def minimum(self, radius: float = math.inf) -> tuple[float, np.ndarray]:
        """``min F`` by L-BFGS-B (no ball) or SLSQP from three starts (a ball)."""
        dim = self.model.n_params
        if math.isinf(radius):
            found = optimize.minimize(self, np.zeros(dim), jac=True, method="L-BFGS-B",
                                      options={"ftol": 1e-16, "gtol": 1e-11, "maxiter": 5000})
            return self(found.x)[0], found.x
        best = (math.inf, np.zeros(dim))
        cons = [{"type": "ineq", "fun": lambda w: radius * radius - float(w @ w),
                 "jac": lambda w: -2.0 * w}]
        rng = np.random.default_rng(0)
        for w0 in (np.zeros(dim), *(0.5 * radius * rng.normal(size=dim) / math.sqrt(dim)
                                    for _ in range(2))):
            found = optimize.minimize(lambda w: self(w)[0], w0, jac=lambda w: self(w)[1],
                                      method="SLSQP", constraints=cons,
                                      options={"ftol": 1e-15, "maxiter": 1000})
            w = project_ball(found.x, radius)
            value = self(w)[0]
            if value < best[0]:
                best = (value, w)
        return best


# ---------------------------------------------------------------------------
# instances
# ---------------------------------------------------------------------------


def _set(name: str, n: int) -> Any:
    if name == "simplex":
        return harness.build("constraint_set", "simplex", n=n)
    if name == "kset":
        return harness.build("constraint_set", "kset", n=n, k=max(2, n // 5))
    if name == "alphaset":  # caps of three sizes: k alpha_i in {1, 2, 4}, k = 6
        caps = np.ones(n, dtype=int)
        caps[::3] = 2
        caps[::7] = 4
        return harness.build("constraint_set", "alphaset", n=n, k=6,
                             caps={"rows": caps.tolist()})
    if name == "superquantile":  # n (1 - level) not an integer: a fractional boundary row
        return harness.build("constraint_set", "spectral", n=n, risk="superquantile",
                             level=0.63)
    if name == "extremile":
        return harness.build("constraint_set", "spectral", n=n, risk="extremile", r=2.5)
    if name == "esrm":
        return harness.build("constraint_set", "spectral", n=n, risk="esrm", rho=3.0)
    raise ValueError(name)


SETS = ("simplex", "kset", "alphaset", "superquantile", "extremile", "esrm")


def _regression(n: int, d: int, seed: int, loss_scale: float = 2.0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = X @ rng.normal(size=d) + rng.normal(size=n)
    model = harness.build("model", "linear_mse", bias=False, loss_scale=loss_scale)
    model.setup(SimpleNamespace(X=X, y=y, n_classes=0), 1.0)
    return X, y, model


def _classification(n: int, d: int, seed: int):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = (X @ rng.normal(size=d) + 0.5 * rng.normal(size=n) > 0).astype(np.int64)
    model = harness.build("model", "logistic_cel", loss_scale=1.0)
    model.setup(SimpleNamespace(X=X, y=y, n_classes=2), 1.0)
    return X, y, model


def _optimum(P: Problem, **kw: Any):
    caps, spectrum = optimum.set_form(P.constraint)
    return optimum.solve(np.asarray(P.X, dtype=np.float64), P.y, P.model, caps,
                         float(P.radius), rtol=1e-8, atol=1e-12, mu=P.mu, nu=P.nu,
                         spectrum=spectrum, penalty=P.penalty, **kw)


# ---------------------------------------------------------------------------
# the inner maximiser
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", SETS)
def test_kl_inner_maximiser_matches_a_convex_solve(name):
    # seeds 0-2, n in {23, 40, 57}, losses uniform on [0, 3) (and one row raised by 4),
    # nu in {0.05, 0.5, 5}. Against Clarabel (tolerances 1e-11; it reports
    # "inaccurate" on a few instances, up to 1e-7 off in value and 7e-6 in q):
    # value 2e-7 absolute, maximiser 2e-5 in every entry; against the maximiser
    # written here (softmax, bisection, pooling adjacent violators): 1e-12 in every
    # entry, and D(q) to 1e-14
    for seed, n in enumerate((23, 40, 57)):
        rng = np.random.default_rng(seed)
        losses = 3.0 * rng.random(n)
        losses[rng.integers(n)] += 4.0
        K = _set(name, n)
        for nu in (0.05, 0.5, 5.0):
            P = Problem(np.zeros((n, 1)), np.zeros(n), None, K, 0.0, nu, 1.0, "kl")
            value, q = P.inner(losses)
            want, q_want = _kl_inner_by_cvxpy(losses, nu, K)
            assert K.contains(q, atol=1e-12), (name, n, nu)
            assert value == pytest.approx(want, abs=2e-7), (name, n, nu)
            np.testing.assert_allclose(q, q_want, rtol=0, atol=2e-5, err_msg=f"{name} {n} {nu}")
            np.testing.assert_allclose(q, _kl_maximiser(losses, nu, K), rtol=0, atol=1e-12)
            assert P.divergence(q) == pytest.approx(_entropy_term(q), abs=1e-14)


@pytest.mark.parametrize("name", SETS)
def test_kl_inner_maximum_is_stable_for_large_losses_over_nu(name):
    # seed 4, n = 31, losses up to 1e3 over nu = 1e-2 (exp(l/nu) overflows float64 by
    # far): the maximum shifts with the losses exactly as it must, inner(l + c) =
    # inner(l) + c, within 1e-12 relative; the maximiser is finite, in K and unchanged
    rng = np.random.default_rng(4)
    n = 31
    K = _set(name, n)
    losses = 1e3 * rng.random(n)
    P = Problem(np.zeros((n, 1)), np.zeros(n), None, K, 0.0, 1e-2, 1.0, "kl")
    value, q = P.inner(losses)
    moved, q_moved = P.inner(losses + 250.0)
    assert np.all(np.isfinite(q)) and K.contains(q, atol=1e-12)
    assert moved == pytest.approx(value + 250.0, rel=1e-12)
    np.testing.assert_allclose(q_moved, q, rtol=0, atol=1e-12)


def test_kl_and_chi2_agree_on_the_divergence_of_their_names():
    # seed 5, n = 17: D(q || 1/n) of each penalty against its formula (1e-15 relative);
    # 0 log 0 = 0 for KL, and the uniform point has D = 0 for both
    rng = np.random.default_rng(5)
    n = 17
    q = rng.random(n)
    q[3] = 0.0
    q /= q.sum()
    K = _set("simplex", n)
    chi2 = Problem(np.zeros((n, 1)), np.zeros(n), None, K, 0.0, 1.0, 1.0, "chi2")
    kl = Problem(np.zeros((n, 1)), np.zeros(n), None, K, 0.0, 1.0, 1.0, "kl")
    assert chi2.divergence(q) == pytest.approx(np.sum((n * q - 1) ** 2) / (2 * n), rel=1e-15)
    keep = q > 0
    assert kl.divergence(q) == pytest.approx(np.sum(q[keep] * np.log(n * q[keep])), rel=1e-15)
    assert kl.divergence(np.full(n, 1 / n)) == pytest.approx(0.0, abs=1e-16)
    assert chi2.divergence(np.full(n, 1 / n)) == pytest.approx(0.0, abs=1e-16)


# ---------------------------------------------------------------------------
# the exact optimum
# ---------------------------------------------------------------------------


SMOOTH_CASES = [  # (set, model, mu, nu)
    ("simplex", "linear_mse", 0.1, 0.5),
    ("kset", "logistic_cel", 0.05, 0.2),
    ("alphaset", "linear_mse", 0.1, 0.3),
    ("extremile", "linear_mse", 0.1, 0.5),
    ("esrm", "logistic_cel", 0.05, 0.5),
]


@pytest.mark.parametrize(("name", "model", "mu", "nu"), SMOOTH_CASES)
def test_kl_optimum_matches_an_independent_lbfgs(name, model, mu, nu):
    # seed 11, n = 36, d = 4, no ball: OPT's certified interval contains the minimum
    # found by L-BFGS-B on F written here (tolerance 1e-9 relative: scipy's stopping
    # point), is at most 1e-12 relative wide (polished to machine precision), and
    # F written here at OPT's w is OPT's value to 1e-12 relative
    n, d = 36, 4
    X, y, m = (_regression if model == "linear_mse" else _classification)(n, d, 11)
    K = _set(name, n)
    P = Problem(X, y, m, K, mu, nu, math.inf, "kl")
    found = _optimum(P)
    ref = Reference(X, y, m, K, mu, nu)
    best, _ = ref.minimum()
    assert found.value - found.lower <= 1e-12 * abs(found.value)
    assert found.lower <= best + 1e-12 * abs(best)
    assert best <= found.value + 1e-9 * abs(found.value)
    assert ref(np.asarray(found.w))[0] == pytest.approx(found.value, rel=1e-12)


@pytest.mark.parametrize("name", ["kset", "superquantile", "extremile"])
def test_kl_optimum_over_a_ball_without_mu_by_the_conic_program(name):
    # seed 12, n = 30, d = 3, mu = 0, nu = 0.4, radius 0.6 (active): the conic program
    # (exponential cones, no polish: F is not strongly convex) against SLSQP over the
    # ball on F written here; tolerance: OPT's interval (rtol 1e-8) and SLSQP's 1e-9
    n, d = 30, 3
    X, y, m = _regression(n, d, 12)
    K = _set(name, n)
    P = Problem(X, y, m, K, 0.0, 0.4, 0.6, "kl")
    found = _optimum(P)
    assert found.solver in optimum.SOLVERS and not found.polished
    best, w_best = Reference(X, y, m, K, 0.0, 0.4).minimum(0.6)
    assert np.linalg.norm(w_best) == pytest.approx(0.6, rel=1e-6)  # the ball binds
    assert found.lower <= best + 1e-12
    assert best <= found.value + 1e-9 * abs(found.value)
    assert found.value - found.lower <= 1e-8 * abs(found.value) + 1e-12


@pytest.mark.parametrize("name", ["kset", "extremile"])
def test_conic_form_of_the_kl_inner_maximum_is_problem_inner(name):
    # seed 14, n = 12, fixed losses uniform on [0, 2), nu in {0.1, 1}: the cvxpy
    # expressions OPT is built from (conjugate_phi over caps, support_inner over a
    # spectrum), minimised by Clarabel, give Problem.inner's maximum (1e-7 relative:
    # Clarabel's default accuracy)
    rng = np.random.default_rng(14)
    n = 12
    K = _set(name, n)
    losses = 2.0 * rng.random(n)
    for nu in (0.1, 1.0):
        want = Problem(np.zeros((n, 1)), np.zeros(n), None, K, 0.0, nu, 1.0, "kl").inner(losses)[0]
        caps = K.row_caps()
        if caps is not None:
            tau = cp.Variable()
            program = cp.Problem(cp.Minimize(tau + optimum.conjugate_phi(cp, losses - tau, caps,
                                                                         nu, "kl")))
        else:
            e = cp.Variable(n)
            program = cp.Problem(cp.Minimize(optimum.spectral_inner(cp, e, K.spectrum(), nu,
                                                                    "kl")), [e == losses])
        program.solve(solver="CLARABEL")
        assert program.value == pytest.approx(want, rel=1e-7), (name, nu)


class SimplexBySupport:
    """The simplex known by its support function only (no caps, no spectrum): the
    oracles ``harness.problem.Problem`` and the certificate ask of a set."""

    name: ClassVar[str] = "simplex_by_support"
    params: ClassVar[dict[str, Param]] = {"n": Param(int, low=1, doc="rows")}

    def __init__(self, n: int) -> None:
        self.n = n
        self.inner_ = harness.build("constraint_set", "simplex", n=n)

    def row_caps(self) -> None:
        return None

    def label(self) -> str:
        return "simplex"

    def support_function(self, cvx: Any, v: Any) -> Any:
        return cvx.max(v)

    def lmo(self, losses):
        return self.inner_.lmo(losses)

    def euclidean_project(self, v):
        return self.inner_.euclidean_project(v)

    def project(self, weights, gamma=0.0, *, log_domain=False):
        return self.inner_.project(weights, gamma, log_domain=log_domain)

    def contains(self, p, atol=1e-9):
        return self.inner_.contains(p, atol)


@pytest.mark.parametrize(("mu", "nu", "radius", "penalty"),
                         [(0.1, 0.5, math.inf, "kl"), (0.0, 0.5, 0.5, "kl"),
                          (0.1, 0.5, math.inf, "chi2"), (0.0, 0.0, 0.5, "chi2")])
def test_a_set_given_by_its_support_function_has_the_optimum_of_its_caps(mu, nu, radius,
                                                                         penalty):
    # seed 15, n = 25, d = 3: the generic path (min_u sigma_K(u) + (nu D)*(e - u),
    # sigma_K = max) for the simplex gives the capped path's OPT within both
    # certified intervals (rtol 1e-8); its cache key differs from the caps' key
    n, d = 25, 3
    X, y, m = _regression(n, d, 15)
    S = SimplexBySupport(n)
    assert optimum.support_form(S) is S
    generic = optimum.solve(X, y, m, None, radius, rtol=1e-8, atol=1e-12, mu=mu, nu=nu,
                            penalty=penalty, support=S)
    capped = optimum.solve(X, y, m, np.ones(n), radius, rtol=1e-8, atol=1e-12, mu=mu, nu=nu,
                           penalty=penalty)
    assert generic.lower <= capped.value + 1e-12 and capped.lower <= generic.value + 1e-12
    assert generic.value == pytest.approx(capped.value, rel=1e-8)
    keys = {optimum.cache_key(X, y, m, None, radius, mu=mu, nu=nu, penalty=penalty, support=S),
            optimum.cache_key(X, y, m, np.ones(n), radius, mu=mu, nu=nu, penalty=penalty),
            optimum.cache_key(X, y, m, None, radius, mu=mu, nu=nu, penalty=penalty,
                              support=SimplexBySupport.__new__(SimplexBySupport))}
    assert len(keys) == 3  # the class and its parameters (n) are in the key


def test_cache_key_names_the_penalty_only_when_it_is_kl_with_nu():
    # the chi-square problem keeps its key (written without a penalty); kl with nu > 0
    # has another; kl with nu = 0 is the same problem as chi2 and shares its key
    X, y, m = _regression(20, 3, 16)
    caps = np.full(20, 0.25)
    old = optimum.cache_key(X, y, m, caps, 1.0, mu=0.1, nu=0.5)
    assert optimum.cache_key(X, y, m, caps, 1.0, mu=0.1, nu=0.5, penalty="chi2") == old
    assert optimum.cache_key(X, y, m, caps, 1.0, mu=0.1, nu=0.5, penalty="kl") != old
    assert (optimum.cache_key(X, y, m, caps, 1.0, mu=0.1, penalty="kl")
            == optimum.cache_key(X, y, m, caps, 1.0, mu=0.1))
    with pytest.raises(ValueError, match="penalty"):
        optimum.cache_key(X, y, m, caps, 1.0, nu=0.5, penalty="hellinger")


# ---------------------------------------------------------------------------
# the certified dual gap
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "model"), [("kset", "linear_mse"), ("alphaset", "logistic_cel"),
                                             ("extremile", "linear_mse")])
def test_kl_certified_gap_is_sound_and_closes_at_the_optimum(name, model):
    # seed 17, n = 32, d = 4, mu = 0.1, nu = 0.3, no ball. At OPT's w the certified gap
    # is in [0, 1e-12 |F|] (measured: about 1e-15 over caps, 1e-14 over a spectrum);
    # at 5 random w (normal, sd 1) it is >= 0 and F(w) - gap, the certified lower
    # bound on F*, is at most the minimum found by L-BFGS-B on F written here
    # (1e-12 relative: that minimum's own rounding), and F(w) is enclosed by
    # enclose_value's interval as F written here computes it (1e-13 relative)
    n, d, mu, nu = 32, 4, 0.1, 0.3
    X, y, m = (_regression if model == "linear_mse" else _classification)(n, d, 17)
    K = _set(name, n)
    P = Problem(X, y, m, K, mu, nu, math.inf, "kl")
    ref = Reference(X, y, m, K, mu, nu)
    best, _ = ref.minimum()
    found = _optimum(P)
    at_opt = certified_gap(P, np.asarray(found.w))
    assert 0.0 <= at_opt.gap <= 1e-12 * abs(found.value)
    rng = np.random.default_rng(17)
    for _ in range(5):
        w = rng.normal(size=m.n_params)
        result = certified_gap(P, w)
        assert result.gap >= 0.0
        assert result.value - result.gap <= best + 1e-12 * abs(best)
        low, high, _ = enclose_value(P, w)
        assert low <= high and high - low <= 1e-13 * abs(high)
        assert low - 1e-13 * abs(low) <= ref(w)[0] <= high + 1e-13 * abs(high)


def test_kl_dual_bound_without_mu_over_a_ball():
    # seed 18, n = 30, d = 3, mu = 0, nu = 0.4, radius 0.6, the k-set: the Frank-Wolfe
    # dual bound at the maximiser q(w) of random w (and at OPT's) is below the SLSQP
    # minimum of F written here (1e-12), and the certified gap at OPT's w is at most
    # 1e-8 (the Frank-Wolfe solve's tolerance, 1e-9 relative, and OPT's rtol 1e-8)
    n, d, radius = 30, 3, 0.6
    X, y, m = _regression(n, d, 18)
    K = _set("kset", n)
    P = Problem(X, y, m, K, 0.0, 0.4, radius, "kl")
    best, _ = Reference(X, y, m, K, 0.0, 0.4).minimum(radius)
    found = _optimum(P)
    w_opt = np.asarray(found.w)
    q_opt = P.inner(P.losses(w_opt))[1]
    result = certified_gap(P, w_opt, q_opt)
    assert 0.0 <= result.gap <= 1e-8
    rng = np.random.default_rng(18)
    for _ in range(4):
        w = project_ball(rng.normal(size=d), radius)
        q = P.inner(P.losses(w))[1]
        lower, _ = dual_lower_bound(P, q, w)
        assert lower <= best + 1e-12
        assert certified_gap(P, w, q).gap >= 0.0


def test_kl_moved_mass_bounds_the_change_of_the_objective():
    # the repair of sum q = 1 takes a residual r from row j (harness.dual._moved_mass):
    # the objective <l, q> - nu sum_i q_i log(n q_i) then changes by exactly -r l_j -
    # nu (g(q_j - r) - g(q_j)), g(t) = t log(n t), computed here in 60-digit
    # arithmetic (mpmath); the bound holds for q_j from 1e-300 to 0.9, residuals of
    # an ulp of q_j up to q_j itself (both signs where q_j - r >= 0), n = 50, nu = 0.3
    mpmath = pytest.importorskip("mpmath")
    from harness.dual import _moved_mass

    mpmath.mp.dps = 60
    n, nu, loss = 50, 0.3, 1.7

    def g(t):
        t = mpmath.mpf(t)
        return mpmath.mpf(0) if t == 0 else t * mpmath.log(n * t)

    for q_j in (1e-300, 1e-20, 1e-5, 0.5 / n, 1.0 / n, 0.9):
        for r in {math.ulp(q_j), 3 * math.ulp(q_j), 1e-3 * q_j, 0.5 * q_j, q_j}:
            for residual in (r, -r):
                change = abs(-mpmath.mpf(residual) * loss
                             - nu * (g(mpmath.mpf(q_j) - mpmath.mpf(residual)) - g(q_j)))
                bound = _moved_mass(residual, 0, loss, q_j, nu, n, "kl")
                assert bound >= change, (q_j, residual)


# ---------------------------------------------------------------------------
# configuration and solvers
# ---------------------------------------------------------------------------


def test_problem_block_takes_the_penalty_and_nu_times_n():
    assert problem_values({}, 40)["penalty"] == "chi2"
    assert problem_values({"penalty": "kl", "nu": 0.5}, 40)["penalty"] == "kl"
    assert problem_values({"nu_times_n": 2.0}, 40)["nu"] == pytest.approx(0.05, rel=1e-15)
    with pytest.raises(ConfigError, match=r"'penalty' parameter of the problem must be one of "
                                          r"\['chi2', 'kl'\]\. Got 'hellinger'"):
        problem_values({"penalty": "hellinger"}, 40)
    with pytest.raises(ConfigError, match="Set one of problem.nu and problem.nu_times_n"):
        problem_values({"nu": 0.1, "nu_times_n": 1.0}, 40)
    with pytest.raises(ConfigError, match="nu_times_n"):
        problem_values({"nu_times_n": -1.0}, 40)


def test_problem_refuses_an_unknown_penalty_and_a_set_without_the_kl_projection():
    n = 10
    with pytest.raises(ConfigError, match=r"\['chi2', 'kl'\]"):
        Problem(np.zeros((n, 1)), np.zeros(n), None, _set("simplex", n), 0.0, 1.0, 1.0, "tv")
    no_kl = SimpleNamespace(name="no_kl", lmo=None, euclidean_project=lambda v: v)
    with pytest.raises(ConfigError, match="penalty=kl .* 'no_kl' has none"):
        Problem(np.zeros((n, 1)), np.zeros(n), None, no_kl, 0.0, 1.0, 1.0, "kl")
    Problem(np.zeros((n, 1)), np.zeros(n), None, no_kl, 0.0, 0.0, 1.0, "kl")  # nu = 0: no D
    Problem(np.zeros((n, 1)), np.zeros(n), None, no_kl, 0.0, 1.0, 1.0, "chi2")


class PlainStep:
    """Projected gradient descent in full passes; declares no penalties (chi2 only)."""

    name: ClassVar[str] = "plain_step"
    params: ClassVar[dict[str, Param]] = {}

    def setup(self, problem, budget):
        self.w = np.zeros(problem.n_params)
        self.data_points = self.grad_evals = 0
        return {}

    def advance(self, problem, rng, until):
        while self.data_points < until:
            _, grad, q = problem.value_and_grad(self.w)
            self.w = problem.project(self.w - 0.01 * grad)
            self.data_points += problem.n
            self.grad_evals += int(np.count_nonzero(q))


class KLStep(PlainStep):
    name: ClassVar[str] = "kl_step"
    penalties: ClassVar[tuple[str, ...]] = ("chi2", "kl")


class StepPlugin:
    @harness.hookimpl
    def register_solvers(self, register):
        register(PlainStep)
        register(KLStep)


def _cfg(solver: str, **problem: Any) -> dict[str, Any]:
    return {"solver": {"name": solver}, "dataset": {"name": "yacht", "scale": "standard"},
            "constraint": {"name": "kset", "level": 0.5},
            "model": {"name": "linear_mse", "bias": False, "loss_scale": 2.0},
            "problem": {"mu_times_n": 1.0, "ball": False, **problem},
            "budget": 20 * 308, "seed": 0, "checkpoints": 4,
            "tracking": {"enabled": False}, "state_dir": None}


def test_solvers_without_kl_refuse_it_with_nu_and_name_the_ones_that_declare_it():
    registry = harness.Registry(harness.make_plugin_manager([StepPlugin()]))
    with pytest.raises(ConfigError) as err:
        harness.prepare(_cfg("plain_step", penalty="kl", nu=1.0), registry)
    text = str(err.value)
    assert "'plain_step'" in text and "problem.penalty='kl'" in text and "['chi2']" in text
    assert "solver=full_batch" in text and "solver=kl_step" in text
    assert "solver=plain_step" not in text
    # nu = 0: no penalty term, any solver; a solver that declares kl takes it
    prep = harness.prepare(_cfg("plain_step", penalty="kl", nu=0.0), registry)
    assert prep.context.params["problem.penalty"] == "kl"
    prep = harness.prepare(_cfg("kl_step", penalty="kl", nu=1.0), registry)
    assert prep.parts.problem.penalty == "kl"


def test_full_batch_solves_the_kl_problem_to_its_exact_optimum():
    # yacht (n = 308, standardised), the superquantile at level 0.5, mu = 1/n, nu_times_n
    # = 308 (nu = 1), KL, no ball: full_batch (L-BFGS) ends within 1e-9 of OPT
    # (normalised) after 60 passes, with a certified gap of at most 1e-9 (measured:
    # both about 5e-15); OPT's interval at most 1e-13 relative (polished)
    cfg = {**_cfg("full_batch", penalty="kl", nu_times_n=308.0), "budget": 60 * 308,
           "reference": {"exact": "true", "rtol": 1e-8, "cache_dir": tempfile.mkdtemp()}}
    prep = harness.prepare(cfg)
    assert prep.context.params["problem.nu"] == pytest.approx(1.0, rel=1e-15)
    metrics = harness.play(prep)
    assert prep.context.params["opt_width"] <= 1e-13 * prep.context.params["opt"]
    assert metrics["normalised_suboptimality"] <= 1e-9
    assert 0.0 <= metrics["dual_gap"] <= 1e-9


def test_full_batch_default_step_is_a_descent_step_with_kl():
    # seed 19, n = 40, d = 4, the k-set (k = 8), mu = 0.01, nu in {0.02, 0.2}, radius 1:
    # full_batch's L_F = L_row + G^2/nu + mu (G over the ball of radius 3B) bounds F's
    # smoothness with KL too (docs/algorithms.md), so a projected gradient step of
    # 1/L_F from any w in the ball decreases F by at least (L_F/2) ||w+ - w||^2 (the
    # descent lemma; tolerance 1e-12 |F| for rounding), at 30 random w; and AGD at
    # that step ends below where it started after 200 passes
    from plugins.solvers.full_batch import FullBatch

    X, y, m = _regression(40, 4, 19)
    K = _set("kset", 40)
    rng = np.random.default_rng(19)
    for nu in (0.02, 0.2):
        P = Problem(X, y, m, K, 0.01, nu, 1.0, "kl")
        solver = FullBatch(method="agd")
        values = solver.setup(P, 200 * 40)
        G = m.row_grad_bound(X, y, 3.0)
        L = m.row_smoothness(X) + G * G / nu + 0.01
        assert values["lipschitz"] == pytest.approx(L, rel=1e-15)
        for scale in np.geomspace(0.01, 1.0, 30):
            w = project_ball(scale * rng.normal(size=4), 1.0)
            value, grad, _ = P.value_and_grad(w)
            step = P.project(w - grad / L)
            assert P.value(step) <= (value - 0.5 * L * float((step - w) @ (step - w))
                                     + 1e-12 * abs(value)), (nu, scale)
        start = P.value(solver.w)
        solver.advance(P, rng, 200 * 40)
        assert P.value(solver.w) < start


@pytest.mark.filterwarnings("ignore:Solution may be inaccurate")
@pytest.mark.parametrize(("penalty", "nu"), [("chi2", 0.5), ("kl", 0.5)])
def test_the_chi2_ball_optimum_matches_an_independent_minimax(penalty, nu):
    # seed 4, n = 12, d = 2, the chi-square ball of radius 0.3, mu = 0.2, no ball on
    # w: OPT by the support-function path against scipy's L-BFGS-B on F whose inner
    # maximum each evaluation solves by cvxpy (Clarabel) over the ball written out
    # here (Danskin's gradient), none of the set's own oracles: within 1e-6
    # relative (the nested solver's accuracy), and inside OPT's certified interval
    # widened by that amount
    cp = pytest.importorskip("cvxpy")
    from plugins.sets.chi2_ball import Chi2Ball

    n, d, radius, mu = 12, 2, 0.3, 0.2
    X, y, m = _regression(n, d, 4)
    found = optimum.solve(X, y, m, None, math.inf, rtol=1e-10, atol=1e-13, mu=mu, nu=nu,
                          penalty=penalty, support=Chi2Ball(n, radius))
    q = cp.Variable(n)
    losses = cp.Parameter(n)
    u = np.full(n, 1.0 / n)
    divergence = (n / 2.0 * cp.sum_squares(q - u) if penalty == "chi2"
                  else -cp.sum(cp.entr(q)) + math.log(n))
    inner = cp.Problem(cp.Maximize(losses @ q - nu * divergence),
                       [q >= 0, cp.sum(q) == 1, cp.sum_squares(q - u) <= 2.0 * radius / n])

    def value_grad(w):
        residual = X @ w - y
        losses.value = 0.5 * residual**2  # linear_mse with loss scale 2
        inner.solve(solver="CLARABEL", tol_gap_abs=1e-12, tol_gap_rel=1e-12,
                    tol_feas=1e-12)
        weights = np.clip(q.value, 0.0, None)
        return inner.value + 0.5 * mu * w @ w, X.T @ (weights * residual) + mu * w

    res = optimize.minimize(value_grad, np.zeros(d), jac=True, method="L-BFGS-B",
                            options={"ftol": 1e-14, "gtol": 1e-9})
    assert res.fun == pytest.approx(found.value, rel=1e-6)
    assert found.lower - 1e-6 * abs(res.fun) <= res.fun
