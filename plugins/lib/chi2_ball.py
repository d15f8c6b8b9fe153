"""Numerics of the chi-square ball ``K = {q in simplex : (1/(2n)) sum_i (n q_i -
1)^2 <= radius}``, i.e. ``||q - u||^2 <= r^2`` with ``u = 1/n`` and ``r^2 = 2
radius / n`` (the uncertainty set of Mehta, Diakonikolas and Harchaoui,
"Drago", NeurIPS 2024, Section 5). The set plugin ``plugins.sets.chi2_ball``
calls these functions; nothing here is registered.

The ball is centred at the simplex's own centre ``u``, and projecting onto the
simplex commutes with adding a constant to every entry, so every oracle is a
point ``proj_simplex(t v)`` or its Bregman analogue for one scalar found by a
one-dimensional root (derivations: docs/sets.md, "The chi-square ball"):

* ``sphere_point``: ``proj_simplex(t v)`` at the largest ``t <= t_max`` inside
  the ball. ``t -> ||proj_simplex(t v) - u||`` is non-decreasing (Calamai and
  Moré 1987, Lemma 2.2) and, with the support of the projection fixed to the
  j largest entries, equals ``sqrt(t^2 V_j + 1/j - 1/n)`` (``V_j`` the centred
  sum of squares of those entries): after one sort the root is exact, O(n log
  n). The linear maximisation oracle (``chi2_ball_lmo``, ``t_max = inf``) and
  the Euclidean projection (``chi2_ball_euclidean``, ``t_max = 1``) are this
  point.
* ``chi2_ball_kl_projection``: ``argmin_{q in K} KL(q || w / sum w)``,
  ``q_i = W(s w_i e^-eta) / s`` (Lambert's W, ``lambertw_exp``) for the
  multipliers ``eta`` of ``sum q = 1`` and ``s`` of the ball. Both follow from
  one scalar ``zeta = log s - eta``: ``s q_i = W(e^(log w_i + zeta))`` and ``sum
  q = 1`` gives ``s``, so the root of ``||q - u|| = r`` in ``zeta`` is one
  safeguarded Newton iteration (``kl_ball_root``), O(n) per step, in the log
  domain.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit


def radius_sq(n: int, radius: float) -> float:
    """``r^2 = 2 radius / n``: the ball ``(1/(2n)) sum (n q_i - 1)^2 <= radius``
    written as ``||q - 1/n||^2 <= r^2``."""
    return 2.0 * radius / n


def least_rows(n: int, radius: float) -> int:
    """The fewest rows ``k`` whose uniform distribution ``1_I / k`` lies in the
    ball: ``(1/(2n)) sum (n q_i - 1)^2 = (n/k - 1) / 2 <= radius``, i.e. ``k =
    ceil(n / (1 + 2 radius))`` (at least 1)."""
    return max(1, min(n, math.ceil(n / (1.0 + 2.0 * radius) - 1e-9)))


def _finite(v: np.ndarray, what: str) -> np.ndarray:
    v = np.ascontiguousarray(v, dtype=np.float64)
    if v.ndim != 1 or v.size == 0 or not np.all(np.isfinite(v)):
        raise ValueError(f"The {what} must be a non-empty vector of finite floats. "
                         f"Got {v!r:.120} instead.")
    return v


# ---------------------------------------------------------------------------
# the ray proj_simplex(t v) and the sphere
# ---------------------------------------------------------------------------


@njit(cache=True, error_model="numpy")
def pull_inside(q, r_sq, support):  # pragma: no cover - compiled
    """Mix ``q``, a point of the simplex that rounding left a hair outside the
    ball (``phi = ||q - u||^2 > r_sq``), with the uniform distribution on the
    rows where ``support`` is True (``||. - u||^2 = 1/m - 1/n < r_sq`` for m
    such rows), just enough to land inside: ``||. - u||^2`` is convex along the
    segment, so the weight ``(phi - r_sq) / (phi - 1/m + 1/n)`` on the centre
    suffices. In place; rows off the support stay 0."""
    n = q.size
    inv_n = 1.0 / n
    phi = 0.0
    m = 0
    for i in range(n):
        phi += (q[i] - inv_n) ** 2
        m += support[i]
    if phi <= r_sq:
        return
    theta = min(1.0, (phi - r_sq) / (phi - (1.0 / m - inv_n)))
    share = theta / m
    for i in range(n):
        q[i] = (1.0 - theta) * q[i] + (share if support[i] else 0.0)


@njit(cache=True, error_model="numpy")
def sphere_point(v, order, r_sq, t_max):  # pragma: no cover - compiled
    """``q = proj_simplex(t v)`` at the largest ``t`` in ``(0, t_max]`` with
    ``||q - 1/n||^2 <= r_sq``, and that ``t`` (``inf`` when the face of the
    largest entries is reached: ``q`` is then uniform on the tied maxima).
    ``order``: the indices of ``v`` sorted descending.

    Walk the supports j = 1..n (``t`` decreasing): with the j largest entries
    ``a_1 >= ... >= a_j`` as support, ``q_i = t (a_i - m_j) + 1/j`` (``m_j``
    their mean) for ``t`` in ``[1/c_{j+1}, 1/c_j)``, ``c_j = sum_{i<=j} (a_i -
    a_j)``, and ``||q - u||^2 = t^2 V_j + 1/j - 1/n`` (``V_j`` the centred sum of
    squares, updated as Welford's). The first interval whose lower end is
    inside the ball holds the root ``t = sqrt((r_sq - 1/j + 1/n) / V_j)``."""
    n = v.size
    top = v[order[0]]
    inv_n = 1.0 / n
    mean = 0.0  # m_j of a_i = v_i - top, sorted descending
    m2 = 0.0  # V_j
    c = 0.0  # c_j
    t = t_max
    support = n
    for j in range(1, n + 1):
        a = v[order[j - 1]] - top
        delta = a - mean
        mean += delta / j
        m2 += delta * (a - mean)
        if j < n:  # c_{j+1} = sum_{i<=j} (a_i - a_{j+1}) = j (m_j - a_{j+1})
            c_next = max(j * (mean - (v[order[j]] - top)), c)
            lo = 1.0 / c_next if c_next > 0.0 else np.inf
        else:
            c_next = np.inf
            lo = 0.0
        if lo < t_max:
            hi = min(1.0 / c if c > 0.0 else np.inf, t_max)
            base = 1.0 / j - inv_n
            # ||q - u||^2 at hi (at t = inf only the tied maxima, m2 = 0, are left)
            d_hi = hi * hi * m2 + base if hi < np.inf else (base if m2 == 0.0 else np.inf)
            if d_hi <= r_sq:
                t = hi
                support = j
                break
            if lo * lo * m2 + base <= r_sq:
                t = math.sqrt((r_sq - base) / m2) if m2 > 0.0 else hi
                t = min(max(t, lo), hi)
                support = j
                break
        c = c_next
    q = np.zeros(n)
    inv_j = 1.0 / support
    for i in range(support):
        if t == np.inf:  # V_j = 0: the tied maxima
            q[order[i]] = inv_j
        else:
            q[order[i]] = max(t * ((v[order[i]] - top) - mean) + inv_j, 0.0)
    pull_inside(q, r_sq, np.ones(n, dtype=np.bool_))
    return q, t



def chi2_ball_lmo(losses: np.ndarray, r_sq: float) -> np.ndarray:
    """``argmax_{q in K} <losses, q>``. KKT with the multiplier ``lam >= 0`` of the
    ball: ``q = argmax_{simplex} <l, q> - (lam/2) ||q - u||^2 = proj_simplex(u + l /
    lam) = proj_simplex(t l)``, ``t = 1/lam``, on the sphere unless the face of
    the largest losses (``t = inf``) has a point inside (its centre, the
    uniform distribution on the tied maxima): ``sphere_point`` with ``t_max =
    inf``. All-equal losses give ``u``. O(n log n)."""
    v = _finite(losses, "losses")
    return sphere_point(v, np.argsort(-v), r_sq, np.inf)[0]


def chi2_ball_euclidean(v: np.ndarray, r_sq: float) -> np.ndarray:
    """``argmin_{q in K} ||q - v||``. KKT with the multiplier ``lam >= 0`` of the
    ball: ``q = proj_simplex((v + lam u) / (1 + lam)) = proj_simplex(t v)``, ``t =
    1/(1 + lam)`` in ``(0, 1]``, with ``t = 1`` when ``proj_simplex(v)`` is inside
    and otherwise on the sphere: ``sphere_point`` with ``t_max = 1``. O(n log n).

    With ``v = u + l / (nu n)`` it is the smoothed best response ``argmax_{q in
    K} <l, q> - nu (n/2) ||q - u||^2`` (complete the square)."""
    v = _finite(v, "point to project")
    return sphere_point(v, np.argsort(-v), r_sq, 1.0)[0]


# ---------------------------------------------------------------------------
# the KL projection
# ---------------------------------------------------------------------------


@njit(cache=True, error_model="numpy", inline="always")
def lambertw_exp(y):  # pragma: no cover - compiled
    """``W(e^y)``, the principal branch of Lambert's W at ``e^y``, for real ``y``
    (``-inf`` gives 0), without forming ``e^y``: Winitzki's approximation
    ``L (1 - log(1 + L) / (2 + L))``, ``L = log(1 + e^y)`` (within 2 %), then two
    steps of the iteration of Fritsch, Shafer and Crowley (CACM 1973, Algorithm
    443) on ``w + log w = y``, each raising the relative error to about its
    fourth power: machine precision (tested against scipy's ``lambertw``)."""
    if y < -40.0:  # W(x) = x - x^2 + O(x^3), x < 5e-18
        x = math.exp(y)
        return x - x * x
    big = y + math.log1p(math.exp(-y)) if y > 0.0 else math.log1p(math.exp(y))
    w = big * (1.0 - math.log1p(big) / (2.0 + big))
    for _ in range(2):
        z = y - math.log(w) - w
        g = 2.0 * (1.0 + w) * (1.0 + w + z * (2.0 / 3.0))
        w *= 1.0 + z / (1.0 + w) * (g - z) / (g - 2.0 * z)
    return w


@njit(cache=True, error_model="numpy")
def kl_ball_point(x, zeta, w):  # pragma: no cover - compiled
    """The point of the KL path at ``zeta`` and the derivatives Newton's method
    needs: ``w_i = W(e^(x_i + zeta))`` (into ``w``), ``s = G = sum w``, ``q = w /
    G``, ``phi = ||q - u||^2`` and ``d phi / d zeta = (2/G) (sum_i (q_i - u) w_i
    / (1 + w_i) - G' phi)`` with ``G' = sum w / (1 + w)`` (``dw_i / d zeta = w_i
    / (1 + w_i)``). Returns ``(G, phi, d phi / d zeta)``."""
    n = x.size
    total = 0.0
    slope = 0.0
    for i in range(n):
        wi = lambertw_exp(x[i] + zeta)
        w[i] = wi
        total += wi
        slope += wi / (1.0 + wi)
    inv_n = 1.0 / n
    phi = 0.0
    tilt = 0.0
    for i in range(n):
        d = w[i] / total - inv_n
        phi += d * d
        tilt += d * (w[i] / (1.0 + w[i]))
    return total, phi, 2.0 / total * (tilt - slope * phi)


@njit(cache=True, error_model="numpy")
def kl_ball_root(x, r_sq, lo, hi):  # pragma: no cover - compiled
    """The KL projection onto the ball of the weights ``e^x`` whose
    normalisation lies outside it: the root ``zeta`` in ``[lo, hi]`` of
    ``phi(zeta)^(-1/2) = 1 / r`` (``phi`` non-increasing: ``kl_ball_point``), by
    Newton's method from ``hi`` safeguarded by bisection; ``lo`` and ``hi``
    bracket the root (``chi2_ball_kl_projection``). ``phi^(-1/2)`` is affine in
    ``zeta`` where the weights ``w`` are large, whence that form. Returns ``q``,
    the multiplier ``s`` and the iterations."""
    n = x.size
    w = np.empty(n)
    target = 1.0 / math.sqrt(r_sq)
    zeta = hi
    total = 1.0
    iterations = 0
    while iterations < 200:
        iterations += 1
        total, phi, dphi = kl_ball_point(x, zeta, w)
        gap = 1.0 / math.sqrt(phi) - target  # increasing in zeta
        if gap >= 0.0:
            hi = zeta
        else:
            lo = zeta
        if abs(gap) <= 1e-14 * target or hi - lo <= 1e-15 * (1.0 + abs(zeta)):
            break
        slope = -0.5 * dphi / (phi * math.sqrt(phi))
        step = zeta - gap / slope if slope > 0.0 else np.nan
        zeta = step if lo < step < hi else 0.5 * (lo + hi)
    q = np.empty(n)
    for i in range(n):
        q[i] = w[i] / total
    return q, total, iterations


def chi2_ball_kl_projection(log_w: np.ndarray, r_sq: float) -> np.ndarray:
    """``argmin_{q in K} KL(q || w / sum w)`` for weights ``w = exp(log_w)``
    (entries ``-inf`` are weights 0 and get ``q_i = 0``). KKT with multipliers
    ``eta`` (``sum q = 1``) and ``s / 2 >= 0`` (the ball ``||q - u||^2 <= r^2``):
    ``log q_i + s q_i = log w_i - eta``, i.e. ``q_i = W(s w_i e^-eta) / s``
    (Lambert's W); ``s = 0`` (the normalised weights) when they are inside,
    else ``s > 0`` puts ``q`` on the sphere. Writing ``zeta = log s - eta``, ``s
    q_i = W(e^(log w_i + zeta))`` and ``sum q = 1`` makes ``s`` their sum: the
    root ``zeta`` of ``||q - u|| = r`` is found by ``kl_ball_root`` in a bracket
    from ``kl_bracket``, and ``pull_inside`` takes up the rounding. Raises
    ValueError when fewer than ``m`` rows have positive weight and ``1/m - 1/n
    > r^2`` (no point of K is supported on them).

    With ``log_w = l / nu`` it is the KL-penalised best response ``argmax_{q in
    K} <l, q> - nu KL(q || u)``."""
    x = np.ascontiguousarray(log_w, dtype=np.float64)
    if x.ndim != 1 or x.size == 0 or np.any(np.isnan(x)) or np.any(x == np.inf):
        raise ValueError("The log-weights must be a non-empty vector of floats, finite "
                         f"or -inf (weight 0). Got {x!r:.120} instead.")
    n = x.size
    finite = x > -np.inf
    m = int(np.count_nonzero(finite))
    if m == 0 or 1.0 / m - 1.0 / n > r_sq * (1.0 + 1e-12):
        raise ValueError(
            f"The KL projection onto the chi-square ball (r^2 = {r_sq:.6g}) needs at least "
            f"{math.ceil(1.0 / (r_sq + 1.0 / n) - 1e-9)} rows with positive weight; got {m} "
            "(zero weights and gamma = 0?).")
    x = x - np.max(x)
    q = np.exp(x)
    q /= np.sum(q)
    inv_n = 1.0 / n
    phi_hat = float(np.sum((q - inv_n) ** 2))
    if phi_hat <= r_sq:
        return q
    room = r_sq - (1.0 / m - inv_n)
    spread = -float(np.min(x[finite]))
    if room <= 0.0 or spread == 0.0:  # only the uniform distribution on the support
        return np.where(finite, 1.0 / m, 0.0)
    lo, hi = kl_bracket(x[finite], r_sq, phi_hat, room)
    q, _, _ = kl_ball_root(x, r_sq, lo, hi)
    pull_inside(q, r_sq, finite)
    return q


def kl_bracket(x: np.ndarray, r_sq: float, phi_hat: float, room: float) -> tuple[float, float]:
    """``zeta`` below and above the root of ``kl_ball_root``, for the finite
    log-weights ``x`` (``max x = 0``, m of them) whose normalisation ``p`` has
    ``||p - u||^2 = phi_hat > r^2``; ``room = r^2 - (1/m - 1/n) > 0``.

    Above: on the support ``s |q_i - q_j| <= |x_i - x_j|`` (``log q + s q`` is
    ``x`` up to a constant), so ``||q - u||^2 <= m (spread / s)^2 + 1/m - 1/n <=
    r^2`` once ``s >= s_hi = spread sqrt(m / room)``; ``s = G(zeta) >= W(e^zeta)``
    and, ``W(e^y)`` being convex, ``>= m W(e^(mean x + zeta))``, so ``zeta >= min(log
    s_hi + s_hi, log(s_hi / m) + s_hi / m - mean x)`` has ``s >= s_hi``. Below: the
    path's point at ``s`` beats ``p`` on ``KL(. || p) + (s/2) ||. - u||^2``, so
    ``KL <= s phi_hat / 2`` and by Pinsker ``||q - p|| <= sqrt(s phi_hat)``: ``q`` is
    outside for ``s < s_lo = (1 - r / sqrt(phi_hat))^2``, and ``G(zeta) <= e^zeta
    sum e^x`` gives ``zeta_lo = log s_lo - log sum e^x``."""
    m = x.size
    s_hi = float(-np.min(x)) * math.sqrt(m / room)
    hi = min(math.log(s_hi) + s_hi, math.log(s_hi / m) + s_hi / m - float(np.mean(x)))
    s_lo = (1.0 - math.sqrt(r_sq / phi_hat)) ** 2
    lo = (math.log(s_lo) if s_lo > 0.0 else -745.0) - float(np.log(np.sum(np.exp(x))))
    return lo, max(hi, lo)
