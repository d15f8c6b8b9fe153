"""Ada-CVaR's sampler (Curi, Levy, Jegelka, Krause 2020) on the k-set, as a baseline."""

from __future__ import annotations

import math
from typing import ClassVar, NamedTuple

import numpy as np
from numba import njit

import harness
from harness import Compiled, Param, Proposal
from plugins.lib.capped import capped_set_sample, checked_batch, needs_sets_of_k_rows, player_form
from plugins.lib.steps import scale_param, scaled_step
from plugins.lib.vecmath import extremes, vexp


def dpp_marginals(log_w: np.ndarray, k: int) -> np.ndarray:
    """Approximate k-DPP marginals ``m_i = e^nu w_i / (1 + e^nu w_i)`` with ``nu``
    the root of ``sum_i m_i = k`` (``dpp_shift``)."""
    log_w = np.ascontiguousarray(log_w, dtype=np.float64)
    if k >= log_w.size:
        return np.ones(log_w.size)
    return _sigmoid(dpp_shift(log_w, k) + log_w)


def _sigmoid(z: np.ndarray) -> np.ndarray:
    """The logistic function ``1 / (1 + e^-z)``, elementwise (``_sigmoid_at``)."""
    z = np.ascontiguousarray(z, dtype=np.float64)
    out = np.empty(z.shape)
    _sigmoid_into(z.reshape(-1), out.reshape(-1))
    return out


@njit(cache=True, error_model="numpy")
def _sigmoid_at(z):  # pragma: no cover - compiled
    """``1 / (1 + e^-z)`` at one point, without overflow (``e^z / (1 + e^z)``,
    taken as ``e^z`` times ``1 / (1 + e^z)``, for ``z < 0``), with ``vexp``
    (``plugins.lib.vecmath``), one division and no branch, so that the loops
    calling it vectorise. The root finder (``_dpp_solve``), the marginals
    of the Python loop and those of the compiled round engine all use it, so the
    three agree to the bit (numpy's vectorised ``exp`` can differ in the last
    bit, and the updates, which divide by the marginals, amplify any difference
    from round to round)."""
    e = vexp(-abs(z))
    r = 1.0 / (1.0 + e)  # one division: e / (1 + e) is e r, to within an ulp
    return r if z >= 0.0 else e * r


@njit(cache=True, error_model="numpy")
def _sigmoid_into(z, out):  # pragma: no cover - compiled
    """``out = _sigmoid_at(z)`` elementwise."""
    for i in range(z.size):
        out[i] = _sigmoid_at(z[i])


def dpp_shift(log_w: np.ndarray, k: float, start: float = -np.inf) -> float:
    """The root ``nu`` of ``g(nu) = sum_i sigmoid(nu + log_w_i) - k`` (``k < n``);
    ``start``: a guess (the previous round's root), used if it lies inside the
    bracket below."""
    log_w = np.ascontiguousarray(log_w, dtype=np.float64)
    return _dpp_solve(log_w, float(k), float(start), np.empty(log_w.size), False)


@njit(cache=True, error_model="numpy")
def _dpp_solve(log_w, k, start, sig, fresh):  # pragma: no cover - compiled
    """``dpp_shift``, compiled: Halley and degree-5 Taylor steps on ``g(nu) =
    sum_i sigmoid(nu + log_w_i) - k`` kept inside a bracket that every step
    shrinks, bisecting whenever a step would leave it; stops where ``|g|`` is
    within the rounding of its sum or the step within a few ulps, after at most
    200 steps (the bracket and the steps derived in docs/algorithms.md,
    "Ada-CVaR's marginals").

    ``sig`` receives ``sigmoid(nu + log_w)`` at the returned ``nu``: the
    marginals before mixing, the same bits as ``_sigmoid(nu + log_w)``.
    ``fresh``: ``sig`` already holds ``sigmoid(start + log_w)`` (the compiled
    round engine keeps it from the previous round), so the first step reads it
    instead of computing it when ``start`` is used.
    """
    n = log_w.size
    top, least = extremes(log_w)
    lo = np.log(k) - top - np.log(n)
    hi = np.log(k) - least + np.log(n) + 40.0
    warm = lo < start < hi
    nu = start if warm else lo
    settled = 8.0 * 2.220446049250313e-16 * np.sqrt(n) * k
    for it in range(200):
        tol = 4e-16 * max(1.0, abs(nu))
        if it == 0 and warm and fresh:
            g, m1, m2, m3, m4, m5 = _moments(sig)
            higher = True
        else:
            g, m1 = _sigmoid_pass(log_w, nu, sig)
            higher = False
        g -= k
        if abs(g) <= settled or it == 199:
            return nu
        if g < 0.0:
            lo = nu
        else:
            hi = nu
        if abs(g) <= tol * m1 or hi - lo <= tol:  # Newton's step is within a few ulps
            return nu
        if m1 > 0.0 and not higher:
            _, _, m2, m3, m4, m5 = _moments(sig)
        if m1 > 0.0 and abs(g) <= 0.05 * m1:
            step = nu + _taylor_root(g, m1, m2, m3, m4, m5)
        elif m1 > 0.0 and abs(g * m2) <= m1 * m1:
            step = nu - 2.0 * g * m1 / (2.0 * m1 * m1 - g * m2)
        elif m1 > 0.0:
            step = nu - g / m1
        else:
            step = 0.5 * (lo + hi)
        if not lo < step < hi:
            step = 0.5 * (lo + hi)
        nu = step
    return nu  # not reached


@njit(cache=True, error_model="numpy")
def _moment_terms(s):  # pragma: no cover - compiled
    """``sigmoid`` and its first five derivatives at a point where it is ``s``."""
    d = s * (1.0 - s)
    odd = 1.0 - 2.0 * s
    return (s, d, d * odd, d * (1.0 - 6.0 * d), d * odd * (1.0 - 12.0 * d),
            d * (1.0 - 30.0 * d + 120.0 * d * d))


@njit(cache=True, error_model="numpy")
def _add_terms(acc, s):  # pragma: no cover - compiled
    """``acc`` plus ``_moment_terms(s)``, term by term."""
    ta, tb, tc, td, te, tf = _moment_terms(s)
    return (acc[0] + ta, acc[1] + tb, acc[2] + tc, acc[3] + td, acc[4] + te, acc[5] + tf)


@njit(cache=True, error_model="numpy")
def _moments(sig):  # pragma: no cover - compiled
    """The sums over ``i`` of ``_moment_terms(sig[i])``, each as four partial
    sums over ``i mod 4`` (the tail in the first) added pairwise at the end."""
    n = sig.size
    a = b = c = d = (0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
    i = 0
    while i + 4 <= n:
        a = _add_terms(a, sig[i])
        b = _add_terms(b, sig[i + 1])
        c = _add_terms(c, sig[i + 2])
        d = _add_terms(d, sig[i + 3])
        i += 4
    while i < n:
        a = _add_terms(a, sig[i])
        i += 1
    return ((a[0] + b[0]) + (c[0] + d[0]), (a[1] + b[1]) + (c[1] + d[1]),
            (a[2] + b[2]) + (c[2] + d[2]), (a[3] + b[3]) + (c[3] + d[3]),
            (a[4] + b[4]) + (c[4] + d[4]), (a[5] + b[5]) + (c[5] + d[5]))


@njit(cache=True, error_model="numpy")
def _sigmoid_pass(log_w, nu, sig):  # pragma: no cover - compiled
    """``sig = sigmoid(nu + log_w)`` and the first two sums of ``_moments(sig)``
    (``sum s``, ``sum s (1 - s)``), in the same four partial sums. The
    sigmoids come first, in a loop of their own, which vectorises."""
    n = log_w.size
    for i in range(n):
        sig[i] = _sigmoid_at(nu + log_w[i])
    a = b = c = d = (0.0, 0.0)
    i = 0
    while i + 4 <= n:
        a = _add_two(a, sig[i])
        b = _add_two(b, sig[i + 1])
        c = _add_two(c, sig[i + 2])
        d = _add_two(d, sig[i + 3])
        i += 4
    while i < n:
        a = _add_two(a, sig[i])
        i += 1
    return (a[0] + b[0]) + (c[0] + d[0]), (a[1] + b[1]) + (c[1] + d[1])


@njit(cache=True, error_model="numpy")
def _add_two(acc, s):  # pragma: no cover - compiled
    """``acc`` plus ``(s, s (1 - s))``, term by term."""
    return acc[0] + s, acc[1] + s * (1.0 - s)


@njit(cache=True, error_model="numpy")
def _taylor_root(g, m1, m2, m3, m4, m5):  # pragma: no cover - compiled
    """The root near ``-g / m1`` of ``g + m1 x + m2 x^2/2 + m3 x^3/6 + m4 x^4/24 +
    m5 x^5/120`` (Newton's method on the polynomial, at most 8 steps)."""
    c2, c3, c4, c5 = m2 / 2.0, m3 / 6.0, m4 / 24.0, m5 / 120.0
    x = -g / m1
    for _ in range(8):
        value = g + x * (m1 + x * (c2 + x * (c3 + x * (c4 + x * c5))))
        slope = m1 + x * (2.0 * c2 + x * (3.0 * c3 + x * (4.0 * c4 + x * 5.0 * c5)))
        if not slope > 0.0:
            break
        nx = x - value / slope
        if nx == x:
            break
        x = nx
    return x


class AdaCVaRState(NamedTuple):
    """Ada-CVaR's state (its kernels' and its Python ``observe``'s), the arrays
    changed in place."""

    #: the log-weights (max 0), the marginals ``m`` and ``p = m / k``
    log_w: np.ndarray
    marginals: np.ndarray
    p: np.ndarray
    #: ``p`` before the last update (the authors' action ``a_t``)
    before: np.ndarray
    #: the running sums of ``p`` (the authors' one-row draw)
    cdf: np.ndarray
    #: every row ``0..n-1`` (the authors' action's rows)
    all_rows: np.ndarray
    #: the root ``nu`` of ``dpp_shift``, in a one-element array
    nu: np.ndarray
    eta: float
    eps: float
    #: rows drawn per round
    b: int
    #: the authors' variant (else all_rows)
    authors: bool
    #: the all_rows batch weights ``1/k``
    batch: np.ndarray
    #: k as a float, ``1 - gamma`` and ``gamma k / n`` (the mixing of the marginals)
    k: float
    scale: float
    shift: float
    #: ``sigmoid(nu + log w)``, and whether it is current for ``nu[0]``
    sig: np.ndarray
    current: np.ndarray


class AdaCVaR:
    """Ada-CVaR's sampler (Curi, Levy, Jegelka, Krause 2020): exponential weights
    over the n rows whose k-set marginals come from an approximate k-DPP.

    Marginals ``m = (1 - gamma) dpp_marginals(w, k) + gamma k / n``, so ``p_t = m / k``
    is in ``S_{n,k}``. ``variant="authors"`` (default): Curi et al. (2020), Algorithm
    1, as their code runs it: ``batch_size`` rows (default 1) drawn uniformly from a
    k-subset with marginals ``m``, EXP3 in loss form on ``1 - L``; their defaults
    ``eta = sqrt((1/alpha) log(1/alpha) / T)``, ``alpha = k/n``, ``gamma = 0``,
    ``eps = 0``. ``variant="all_rows"``: all k rows of the subset every round, in
    gains form, with defaults after Exp3.M (Uchiya et al. 2010), ``gamma = sqrt(n
    log(n/k) / (k T))`` (at most 1/2), ``eta = k gamma / n``. ``regret_bound`` is
    None (the paper, Appendix A, "Bandit performance measures").
    Derivation: docs/algorithms.md, "Ada-CVaR's variants".
    """

    name: ClassVar[str] = "adacvar"
    state_version: ClassVar[int] = 1
    constraints: ClassVar[tuple[str, ...] | None] = None  # any set that supports() accepts
    params: ClassVar[dict[str, Param]] = {
        "variant": Param(str, default="authors", choices=("authors", "all_rows"),
                         doc="authors: b rows from the k-subset, EXP3 on 1 - L (Curi et al.); "
                             "all_rows: all k rows, gains form"),
        "eta": Param(float, low=0.0, low_open=True, nullable=True,
                     doc="step size; None: sqrt((n/k) log(n/k) / T) (authors), "
                         "k gamma / n (all_rows)"),
        "eta_scale": scale_param("eta"),
        "gamma": Param(float, low=0.0, high=1.0, high_open=True, nullable=True,
                       doc="uniform mixing; None: 0 (authors), sqrt(n log(n/k) / (k T)) "
                           "at most 1/2 (all_rows)"),
        "eps": Param(float, default=0.0, low=0.0,
                     doc="EXP3-IX bias of the authors' estimate (1 - L) / (m + eps)"),
        "batch_size": Param(int, default=1, low=1,
                            doc="authors: rows drawn with replacement from the k-subset"),
    }

    @classmethod
    def supports(cls, constraint) -> str | None:
        """Draws of k distinct rows (every row cap at most 1/k: the k-set, the simplex)."""
        return needs_sets_of_k_rows(constraint)

    def __init__(self, variant="authors", eta=None, gamma=None, eps=0.0, batch_size=1,
                 eta_scale=1.0) -> None:
        self.variant = variant
        self.eta = eta
        self.eta_scale = eta_scale
        self.gamma = gamma
        self.eps = eps
        self.batch_size = batch_size

    def rows_per_round(self, constraint) -> int:
        if self.variant == "all_rows":
            return constraint.k
        return checked_batch(self.name, self.batch_size, "k", constraint.k)

    def setup(self, constraint, horizon: int) -> dict[str, float | str]:
        n, k = constraint.n, constraint.k
        self.constraint_ = constraint
        self.b_ = self.rows_per_round(constraint)
        ratio = math.log(n / k) if n > k else 0.0
        if self.variant == "authors":
            self.gamma_ = self.gamma if self.gamma is not None else 0.0
            default = math.sqrt((n / k) * ratio / horizon) if ratio > 0 else 1.0
        else:
            self.gamma_ = self.gamma if self.gamma is not None else min(
                0.5, math.sqrt(n * ratio / (k * horizon)))
            default = k * self.gamma_ / n
        self.eta_ = scaled_step(self.name, "eta", self.eta, self.eta_scale, default)
        self.log_w_ = np.zeros(n)
        self.batch_weights_ = np.full(k, 1.0 / k)
        self.all_rows_ = np.arange(n)
        self.state_ = AdaCVaRState(
            self.log_w_, np.empty(n), np.empty(n), np.empty(n), np.empty(n), self.all_rows_,
            np.array([-np.inf]), float(self.eta_), float(self.eps), int(self.b_),
            self.variant == "authors", self.batch_weights_, float(k), float(1 - self.gamma_),
            float(self.gamma_ * k / n), np.zeros(n), np.array([False]))
        self.marginals_, self.p_ = self.state_.marginals, self.state_.p
        _refresh(self.state_)  # the marginals of the uniform start
        self.state_.cdf[:] = _running_sums(self.p_)
        return {"variant": self.variant, "eta": self.eta_, "gamma": self.gamma_,
                "eps": self.eps, "batch_size": self.b_}

    @property
    def nu_(self) -> float:
        """The root of ``dpp_shift`` at the current log-weights (-inf before the first)."""
        return float(self.state_.nu[0])

    @property
    def p(self) -> np.ndarray:
        return self.p_

    def propose(self, rng: np.random.Generator) -> Proposal:
        K = self.constraint_
        if self.variant == "all_rows":
            self.rows_ = K.sample(self.p_, rng).rows  # k-set: multiplicities 1
            self.weights_ = self.batch_weights_
            return Proposal(self.rows_, self.batch_weights_)
        if self.b_ == 1:  # a uniform row of S ~ m: row i with probability m_i / k = p_i
            self.rows_ = np.array([_row_at(self.state_.cdf, rng.random())])
            self.weights_ = np.ones(1)
        else:
            subset = np.ascontiguousarray(K.sample(self.p_, rng).rows, dtype=np.int64)
            self.rows_, self.weights_ = _picks(subset, self.b_, rng)
        # a copy: observe updates p in place
        return Proposal(self.rows_, self.weights_, self.all_rows_, self.p_.copy())

    def observe(self, losses: np.ndarray) -> None:
        """The step on the log-weights and the next marginals in
        ``adacvar_observe``, the kernel the compiled path runs too."""
        adacvar_observe(self.state_, None, self.rows_, self.weights_,
                        np.ascontiguousarray(losses, dtype=np.float64))

    def compiled(self, constraint: Compiled | None) -> Compiled | None:
        """The compiled form (``harness.engine``) on the k-set and the simplex:
        ``adacvar_propose``/``adacvar_observe`` on the player's state
        (``AdaCVaRState``; the Python ``observe`` runs the same kernel); None
        on any other set, and for a subclass that replaces a method the
        kernels stand for."""
        return player_form(self, AdaCVaR, constraint, "plugins.p_players.adacvar:adacvar")

    def regret_bound(self, rounds: int) -> float | None:
        """None: no theorem bounds this sampler's regret against the game's
        adaptive w-player (class docstring)."""
        return None


@njit(cache=True, error_model="numpy")
def _running_sums(p):  # pragma: no cover - compiled
    """``np.cumsum(p)``: the running sums in index order."""
    out = np.empty(p.size)
    total = 0.0
    for i in range(p.size):
        total += p[i]
        out[i] = total
    return out


@njit(cache=True, error_model="numpy")
def _row_at(cdf, u):  # pragma: no cover - compiled
    """The row drawn at the uniform ``u``: the number of running sums ``cdf``
    at most ``u`` times the total (``np.searchsorted(cdf, u cdf[-1],
    side="right")``), at most ``n - 1``."""
    n = cdf.size
    target = u * cdf[n - 1]
    lo = 0
    hi = n
    while lo < hi:
        mid = (lo + hi) >> 1
        if cdf[mid] <= target:
            lo = mid + 1
        else:
            hi = mid
    return min(lo, n - 1)


@njit(cache=True, error_model="numpy")
def adacvar_propose(ps, ks, rng):  # pragma: no cover - compiled
    """``AdaCVaR.propose``. Authors' variant: one row ``i`` with probability
    ``p_i`` (``_row_at``), or with ``b > 1`` a k-subset from the set's sampler
    and ``b`` uniform picks from it (Curi et al. 2020, Algorithm 1), rows in
    increasing order with weights ``m_j / b``. all_rows: the set's draw of k
    rows, weights ``1/k``."""
    p, b = ps.p, ps.b
    if not ps.authors:
        rows, _ = capped_set_sample(ks, p, rng)
        return rows, ps.batch
    if b == 1:
        rows = np.empty(1, dtype=np.int64)
        rows[0] = _row_at(ps.cdf, rng.random())
        return rows, np.ones(1)
    subset, _ = capped_set_sample(ks, p, rng)
    return _picks(subset, b, rng)


@njit(cache=True, error_model="numpy")
def _picks(subset, b, rng):  # pragma: no cover - compiled
    """``b`` uniform picks from the k-subset (Curi et al. 2020, Algorithm 1):
    the distinct rows in increasing order, weights their counts over ``b``."""
    drawn = np.empty(b, dtype=np.int64)
    for j in range(b):
        drawn[j] = subset[rng.integers(0, subset.size)]
    drawn = np.sort(drawn)
    count = 1
    for j in range(1, b):
        if drawn[j] != drawn[j - 1]:
            count += 1
    rows = np.empty(count, dtype=np.int64)
    weights = np.zeros(count)
    c = -1
    for j in range(b):
        if j == 0 or drawn[j] != drawn[j - 1]:
            c += 1
            rows[c] = drawn[j]
        weights[c] += 1.0
    for c in range(count):
        weights[c] = weights[c] / b
    return rows, weights


@njit(cache=True, error_model="numpy")
def adacvar_observe(ps, ks, rows, weights, losses):  # pragma: no cover - compiled
    """``AdaCVaR.observe``: the authors' EXP3 step on ``1 - L`` (``log w_j -=
    eta m_j (1 - L_j) / (m_j + eps)``, multiplicities ``b`` times the weights)
    or the all_rows gains step ``log w_i += eta L_i / m_i``; the log-weights
    rebased to max 0 (the sigmoids then stale on every row, else recomputed on
    the rows that moved); the next marginals (``_refresh``). The action is
    ``p_t`` on every row (authors) or ``1/k`` on the rows drawn (all_rows);
    ``ks`` is not read."""
    log_w, marginals, p, before, nu = ps.log_w, ps.marginals, ps.p, ps.before, ps.nu
    eta, eps, b, sig, current = ps.eta, ps.eps, ps.b, ps.sig, ps.current
    n = log_w.size
    if ps.authors:
        for i in range(n):
            before[i] = p[i]
        for j in range(rows.size):
            i = rows[j]
            mult = np.rint(weights[j] * b)
            log_w[i] -= eta * mult * (1.0 - losses[j]) / (marginals[i] + eps)
    else:
        for j in range(rows.size):
            i = rows[j]
            log_w[i] += eta * losses[j] / marginals[i]
    top, _ = extremes(log_w)  # log_w.max()
    if top != 0.0 or math.copysign(1.0, top) < 0.0:
        for i in range(n):
            log_w[i] -= top
        current[0] = False
    if current[0] and ps.k < n:
        for j in range(rows.size):
            sig[rows[j]] = _sigmoid_at(nu[0] + log_w[rows[j]])
    _refresh(ps)
    if ps.authors:
        return weights, ps.all_rows, before
    return weights, rows, weights


@njit(cache=True, error_model="numpy")
def _refresh(ps):  # pragma: no cover - compiled
    """The marginals of the log-weights: ``nu`` by ``_dpp_solve`` from the
    previous root (its first step reads ``sig`` when it is current), then
    ``m = (1 - gamma) sigmoid(nu + log w) + gamma k / n`` capped at 1 (every
    ``m_i = 1`` when ``k = n``), ``p = m / k`` and, for the authors' one-row
    draw, its running sums."""
    log_w, marginals, p, cdf, nu = ps.log_w, ps.marginals, ps.p, ps.cdf, ps.nu
    kf, scale, shift, sig, current = ps.k, ps.scale, ps.shift, ps.sig, ps.current
    n = log_w.size
    if kf < n:
        nu[0] = _dpp_solve(log_w, kf, nu[0], sig, current[0])
        current[0] = True
    for i in range(n):
        m = sig[i] if kf < n else 1.0
        m = scale * m + shift
        m = 1.0 if m > 1.0 else m
        marginals[i] = m
        p[i] = m / kf
    if ps.authors and ps.b == 1:
        total = 0.0
        for i in range(n):
            total += p[i]
            cdf[i] = total


@harness.hookimpl
def register_p_players(register):
    register(AdaCVaR)
