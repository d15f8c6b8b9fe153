"""The k-set ``S_{n,k} = {p : 0 <= p_i <= 1/k, sum p = 1}`` (paper, eq. (k-Set)).

Its extreme points are the ``(1/k) 1_I`` for subsets ``I`` of size k (Section 4),
so a draw from it is k distinct rows. ``<L, p>`` maximised over it is the
average of the k largest losses (average top-k loss, empirical CVaR).
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
from numba import njit

import harness
from harness import Param


def capped_kl_projection(log_w: np.ndarray, kappa: float) -> tuple[np.ndarray, np.ndarray]:
    """KL (Bregman) projection of the weights ``exp(log_w)`` onto
    ``{q : 0 <= q_i <= kappa, sum q = 1}`` (paper, Algorithm 4 and Lemma C.2).

    The projection is ``q_i = min(kappa, lam * w_i)`` with ``lam`` such that
    ``sum q = 1`` (Lemma C.2 (a)); the capped rows are the largest weights.
    Instead of Algorithm 4's sort, the capped set is grown from empty: with
    ``C`` capped, ``lam(C) = (1 - |C| kappa) / sum_{i not in C} w_i`` never
    exceeds the optimal ``lam*`` when ``C`` is inside the optimal capped set,
    so every row with ``lam(C) w_i > kappa`` is capped at the optimum too.
    Each pass is O(n) and at most ``ceil(1/kappa) - 1 <= k - 1`` rows are ever
    capped. Sums are taken relative to the largest uncapped log-weight, so
    weights spanning any dynamic range (1e8 rounds of exponential updates)
    neither overflow nor lose the small rows to cancellation.

    Returns ``q`` and the boolean mask of capped rows (``J_t``, Line 6 of
    Algorithm 2).
    """
    log_w = np.ascontiguousarray(log_w, dtype=np.float64)
    if log_w.size * kappa <= 1.0 + 1e-12:  # the set is the single point 1/n
        return np.full(log_w.size, 1.0 / log_w.size), np.ones(log_w.size, dtype=bool)
    caps = np.full(log_w.size, kappa)
    q, capped, feasible = kl_projection_row_caps(log_w, caps, np.full(log_w.size, np.log(kappa)))
    if not feasible:
        raise ValueError(
            f"The KL projection onto caps {kappa:.6g} needs more than {int(1 / kappa)} rows "
            f"with positive weight; got {int(np.sum(np.isfinite(log_w)))} "
            "(zero weights and gamma = 0?)."
        )
    return q, capped


@njit(cache=True)
def kl_projection_row_caps(log_w, kappa, log_kappa):  # pragma: no cover - compiled
    """Compiled core of the KL projection onto ``{0 <= q_i <= kappa_i, sum q = 1}``
    (one cap per row; the k-set passes a constant cap). Returns q, the capped
    mask and whether a projection exists."""
    n = log_w.size
    capped = np.zeros(n, dtype=np.bool_)
    mass = 0.0  # sum of kappa_i over the capped rows
    top = -np.inf
    shift = 0.0
    while True:
        top = -np.inf
        for i in range(n):
            if not capped[i] and log_w[i] > top:
                top = log_w[i]
        if top == -np.inf:
            if mass >= 1.0 - 1e-12:  # every row capped, the caps sum to 1
                break
            return np.zeros(n), capped, False
        total = 0.0
        for i in range(n):
            if not capped[i]:
                total += np.exp(log_w[i] - top)
        rest = 1.0 - mass
        shift = np.log(rest) - np.log(total) if rest > 0.0 else -np.inf
        # a row at its cap up to rounding is left uncapped (same q either way)
        grew = False
        for i in range(n):
            if not capped[i] and (log_w[i] - top) + shift > log_kappa[i] + 1e-12:
                capped[i] = True
                mass += kappa[i]
                grew = True
        if not grew:
            break
    q = np.empty(n)
    for i in range(n):
        q[i] = kappa[i] if capped[i] else np.exp((log_w[i] - top) + shift)
    return q, capped, True


@njit(cache=True)
def _depround(x: np.ndarray, u: np.ndarray, k: int) -> np.ndarray:  # pragma: no cover - compiled
    eps = 1e-12
    n = x.size
    carry = -1
    coin = 0
    for j in range(n):
        xj = x[j]
        if xj <= eps or xj >= 1.0 - eps:
            continue
        if carry < 0:
            carry = j
            continue
        xi = x[carry]
        alpha = min(1.0 - xi, xj)
        beta = min(xi, 1.0 - xj)
        # Line 7: (p_i + alpha, p_j - alpha) with probability beta / (alpha + beta)
        if u[coin] * (alpha + beta) < beta:
            xi += alpha
            xj -= alpha
        else:
            xi -= beta
            xj += beta
        coin += 1
        x[carry] = xi
        x[j] = xj
        if xi <= eps or xi >= 1.0 - eps:
            carry = j if eps < xj < 1.0 - eps else -1
    out = np.empty(k, dtype=np.int64)
    c = 0
    for i in range(n):
        if x[i] > 0.5:
            if c < k:
                out[c] = i
            c += 1
    if c != k:
        out[:] = -1
    return out


def depround(p: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """DepRound (paper, Algorithm 5; Gandhi et al. 2006): k distinct rows with
    ``P[i in S] = k p_i`` for ``p`` in ``S_{n,k}``.

    Line 2 stretches p to sum k (not 1). Fractional entries are paired in
    index order (the box allows any pairing); each pair step leaves at least
    one of the two integral, so at most n - 1 coins are needed and they are
    drawn up front from ``rng`` (reproducible under a seed). O(n) time, compiled.
    """
    x = np.ascontiguousarray(p, dtype=np.float64) * k
    rows = _depround(x, rng.random(p.size), k)
    if rows[0] < 0:
        raise ValueError(
            f"DepRound did not end with exactly k={k} rows: p must lie in S_n,k "
            f"(sum p = {float(np.sum(p))!r}, max p = {float(np.max(p))!r})."
        )
    return rows


def systematic_rows(kp: np.ndarray, k: int, u: float) -> np.ndarray:
    """Systematic (Madow 1949) sampling: the rows whose cumulative ``kp``
    crosses one of ``u, u + 1, ..., u + k - 1`` for one offset ``u`` in [0, 1).

    With ``kp = k p`` summing to k and every ``kp_i <= 1``, each row's interval
    ``[cum_{i-1}, cum_i)`` has length at most 1 and so holds at most one of the
    k points: exactly k distinct rows, and ``P[i in S] = kp_i`` when ``u`` is
    uniform. Rows come in index order. O(n) (one cumulative sum).
    """
    cum = np.cumsum(kp)
    rows = np.searchsorted(cum, u + np.arange(k), side="right")
    return np.minimum(rows, kp.size - 1)


def systematic(p: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """k distinct rows with ``P[i in S] = k p_i`` for ``p`` in ``S_{n,k}`` by
    systematic sampling (``systematic_rows``): one uniform draw from ``rng``.

    Same marginals as DepRound; the joint law differs (two rows whose
    intervals lie within one unit of the cumulative sum, such as neighbours
    with small ``k p_i``, are never drawn together), which estimators built on
    the marginals, as the bandits' are, do not see. A row repeated by rounding (an
    interval longer than 1 by an ulp, probability about 1e-16 per draw)
    redraws the offset.
    """
    kp = np.asarray(p, dtype=np.float64) * k
    for _ in range(4):
        rows = systematic_rows(kp, k, rng.random())
        if np.all(np.diff(rows) > 0):
            return rows
    raise ValueError(
        f"Systematic sampling did not give k={k} distinct rows: p must lie in S_n,k "
        f"(sum p = {float(np.sum(p))!r}, max p = {float(np.max(p))!r})."
    )


def capped_simplex_euclidean(v: np.ndarray, cap: float) -> np.ndarray:
    """Euclidean projection of ``v`` onto ``{0 <= p_i <= cap, sum p = 1}``
    (``euclidean_projection_row_caps`` with one cap for every row)."""
    v = np.ascontiguousarray(v, dtype=np.float64)
    return euclidean_projection_row_caps(v, np.full(v.size, float(cap)))


@njit(cache=True)
def euclidean_projection_row_caps(v, caps):  # pragma: no cover - compiled
    """Euclidean projection of ``v`` onto ``{0 <= p_i <= caps_i, sum p = 1}``
    (``sum caps >= 1``), compiled; the k-set passes a constant cap.

    ``p_i = clip(v_i - tau, 0, caps_i)`` where ``f(tau) = sum_i clip(v_i - tau,
    0, caps_i)`` is piecewise linear and non-increasing with breakpoints
    ``v_i`` and ``v_i - caps_i``. The breakpoints are walked in increasing
    order (a merge of the sorted ``v`` and the sorted ``v - caps``) with
    running sums, up to the last one where ``f >= 1``; ``tau`` is interpolated
    on the segment after it, where ``f`` has slope ``-(#rows strictly between
    their two breakpoints)``. O(n log n) for the two sorts, exact up to the
    rounding of the running sums (inputs are O(1) in use: a point of the set
    plus a step). A NaN or inf input raises ValueError.
    """
    n = v.size
    u = np.sort(v)
    low = np.sort(v - caps)
    total_u = 0.0
    total_low = 0.0
    for i in range(n):
        total_u += u[i]
        total_low += low[i]
    if not (np.isfinite(total_u) and np.isfinite(total_low)):
        raise ValueError("the Euclidean projection needs finite inputs and caps")
    a = 0  # rows with v_i <= tau (they contribute 0)
    b = 0  # rows with v_i - caps_i <= tau (the others sit at their cap)
    below_u = 0.0
    below_low = 0.0
    bp_j = min(u[0], low[0])
    f_j = 1.0
    slope_j = 0
    first = True
    while a < n or b < n:
        bp = low[b] if b < n and (a >= n or low[b] <= u[a]) else u[a]
        while a < n and u[a] <= bp:
            below_u += u[a]
            a += 1
        while b < n and low[b] <= bp:
            below_low += low[b]
            b += 1
        c1 = n - a
        c2 = n - b
        f = (total_u - below_u - c1 * bp) - (total_low - below_low - c2 * bp)
        if f < 1.0 and not first:
            break
        bp_j, f_j, slope_j = bp, f, c1 - c2
        first = False
    tau = bp_j + (f_j - 1.0) / slope_j if slope_j > 0 else bp_j
    p = np.empty(n)
    for i in range(n):
        p[i] = min(max(v[i] - tau, 0.0), caps[i])
    return p


class KSet:
    """``S_{n,k}``: caps every row's weight at 1/k (average top-k loss)."""

    name: ClassVar[str] = "kset"
    params: ClassVar[dict[str, Param]] = {
        "n": Param(int, low=1, doc="number of rows (set by the data set)"),
        "k": Param(int, default=20, low=1, high="n", doc="rows per extreme point"),
        "sampler": Param(str, default="depround", choices=("depround", "systematic"),
                         doc="how an extreme point with mean p is drawn: DepRound "
                             "(Algorithm 5) or systematic sampling (Madow), same marginals"),
    }

    def __init__(self, n: int, k: int = 20, sampler: str = "depround") -> None:
        self.n = n
        self.k = k
        self.sampler = sampler

    def lmo(self, losses: np.ndarray) -> tuple[float, np.ndarray]:
        """Average of the k largest losses and the point 1/k on them."""
        idx = np.argpartition(losses, self.n - self.k)[self.n - self.k:]
        p = np.zeros(self.n)
        p[idx] = 1.0 / self.k
        return float(np.sum(losses[idx]) / self.k), p

    def kappa(self, gamma: float) -> float:
        """The cap before mixing, ``(1/k - gamma/n) / (1 - gamma)`` (Line 5 of Algorithm 2)."""
        return (1.0 / self.k - gamma / self.n) / (1.0 - gamma)

    def project(self, weights, gamma=0.0, *, log_domain=False, return_capped=False):
        """Lines 3-10 of Algorithm 2: project onto ``S_{n, 1/kappa}``, then mix
        with the uniform distribution at rate ``gamma``; capped rows end at
        exactly 1/k."""
        if not 0.0 <= gamma < 1.0:
            raise ValueError(f"gamma must be in [0, 1). Got {gamma!r} instead.")
        log_w = np.asarray(weights, dtype=np.float64)
        if not log_domain:
            with np.errstate(divide="ignore"):
                log_w = np.log(log_w)
        q, capped = capped_kl_projection(log_w, self.kappa(gamma))
        p = (1.0 - gamma) * q + gamma / self.n
        p[capped] = 1.0 / self.k
        return (p, capped) if return_capped else p

    def euclidean_project(self, v: np.ndarray) -> np.ndarray:
        """Euclidean projection onto the set (for gradient-ascent p-players)."""
        return capped_simplex_euclidean(v, 1.0 / self.k)

    def sample(self, p: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        if self.sampler == "systematic":
            return systematic(p, self.k, rng)
        return depround(p, self.k, rng)

    def contains(self, p: np.ndarray, atol: float = 1e-9) -> bool:
        p = np.asarray(p)
        return bool(
            p.shape == (self.n,)
            and abs(float(np.sum(p)) - 1.0) <= atol
            and float(np.min(p)) >= -atol
            and float(np.max(p)) <= 1.0 / self.k + atol
        )


@harness.hookimpl
def register_constraint_sets(register):
    register(KSet)
