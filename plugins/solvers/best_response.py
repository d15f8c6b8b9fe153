"""The best response ``q(l)`` of the problem's inner maximisation, dense and
maintained under one-row updates (Prospect's ``lambda``, LSVRG's anchor), on
either form of the constraint set (``plugins.solvers.set_form``).

Row caps ``c``, ``nu > 0``: ``q(l)_j = clip(v_j - theta, 0, c_j)``, ``v = 1/n +
l / (nu n)``, ``theta`` the root of ``f(theta) = sum_j clip(v_j - theta, 0, c_j)
= 1``: ``f = P_U - P_L`` over the multisets ``U = {v_j}`` and ``L = {v_j - c_j}``
(``P_S(t) = sum_{s in S} relu(s - t)``), each kept in an ``OrderTree``
(``plugins.solvers.order_tree``), so ``theta`` follows a changed loss by
Newton's method from the last one (two O(log n) evaluations of ``f`` in the
common case). A spectrum ``sigma``, ``nu > 0``: the projection of ``v`` onto
``P(sigma)``, its sorted values and pooled blocks kept in a ``PoolTree``
(``plugins.solvers.pool_tree``). With ``nu = 0`` the linear maximisation
oracle (a spectrum: ``sigma`` at the row's rank). The derivations and the
costs: ``docs/algorithms.md``, Solvers (the best response of Prospect's
problem, Mehta et al., ICLR 2024).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from numba import njit

from plugins.lib.capped import euclidean_projection_row_caps
from plugins.lib.permutahedron import permutahedron_lmo, permutahedron_projection
from plugins.solvers.order_tree import (
    OrderTree,
    order_tree_new,
    order_tree_replace,
    order_tree_size,
    rank_above,
    relu_sum,
    select_value,
)
from plugins.solvers.pool_tree import (
    PoolTree,
    pool_tree_new,
    pool_tree_position,
    pool_tree_q,
    pool_tree_replace,
    pool_tree_weight,
)
from plugins.solvers.set_form import ROW_CAPS, SPECTRUM, SetForm, caps_form

#: a mass the LMO leaves of at most this is rounding (``lmo_row_caps``)
LMO_REST = 1e-12


@njit(cache=True, error_model="numpy")
def lmo_row_caps(losses, caps):  # pragma: no cover - compiled
    """``argmax_{q in K} <losses, q>`` for ``K = {0 <= q <= c, sum q = 1}``: the
    largest losses filled up to their caps, ties broken by the larger row
    index first (the order of ``OrderTree`` keys, read from the top). A mass
    left of at most ``LMO_REST`` is the rounding of caps that sum to 1 (k
    caps ``fl(1/k)``), not a row's weight: it is dropped, as ``br_weight``
    drops it (a weight of 5.6e-17 would make a row count as weighted)."""
    n = losses.size
    order = np.argsort(losses, kind="mergesort")  # ascending (value, row)
    q = np.zeros(n)
    left = 1.0
    for r in range(n - 1, -1, -1):
        if left <= LMO_REST:
            break
        j = order[r]
        q[j] = min(caps[j], left)
        left -= q[j]
    return q


@njit(cache=True, error_model="numpy")
def best_response_dense(losses, form, nu):  # pragma: no cover - compiled
    """``q(l)`` over all rows for the set of ``form`` (a ``SetForm``): the
    projection of ``1/n + l/(nu n)`` onto K if ``nu > 0`` (O(n log n)), else the
    LMO (``lmo_row_caps``; on ``P(sigma)``, ``sigma`` on the losses sorted
    ascending, ties by row)."""
    n = losses.size
    if form.kind == SPECTRUM:
        if nu == 0.0:
            return permutahedron_lmo(losses, form.sigma)
        return permutahedron_projection(1.0 / n + losses / (nu * n), form.sigma)
    if nu == 0.0:
        return lmo_row_caps(losses, form.caps)
    return euclidean_projection_row_caps(1.0 / n + losses / (nu * n), form.caps)


class BRState(NamedTuple):
    """The state of ``BestResponse`` (its kernels read it by name). Row caps: the
    trees of ``U = {v_j}`` (``upper``) and ``L = {v_j - c_j}`` (``lower``; a
    placeholder with equal caps, whose ``L`` is ``U`` shifted by ``-cap``),
    ``v`` and the row caps, ``nu``, the first cap, whether the caps are equal,
    and the last threshold (one float, nan before the first). ``kind``: the
    set's form (``set_form.ROW_CAPS`` or ``SPECTRUM``); a spectrum keeps ``v``,
    ``nu`` and ``pool``, a ``PoolTree`` (placeholders elsewhere)."""

    upper: OrderTree
    lower: OrderTree
    v: np.ndarray
    caps: np.ndarray
    nu: float
    cap: float
    equal: bool
    theta: np.ndarray
    kind: np.int64
    pool: PoolTree


@njit(cache=True, inline="always", error_model="numpy")
def _f(br, t):  # pragma: no cover - compiled
    """``f(t) = sum_j clip(v_j - t, 0, c_j)`` and the numbers of values of U and
    of L above t (their difference: the rows strictly inside their clip just
    after t, minus the slope of f there)."""
    pu, nu_ = relu_sum(br.upper, t, 0.0)
    if br.equal:
        pl, nl = relu_sum(br.upper, t, -br.cap)
    else:
        pl, nl = relu_sum(br.lower, t, 0.0)
    return pu - pl, nu_, nl


@njit(cache=True, error_model="numpy")
def _last_breakpoint(br, S, shift):  # pragma: no cover - compiled
    """The largest breakpoint ``fl(value + shift)`` of ``S`` with ``f >= 1``
    (and True), or ``(-inf, False)`` if none: a binary search over the ranks
    (f is non-increasing). O(log n) evaluations of f."""
    m = order_tree_size(S)
    if m == 0 or _f(br, select_value(S, 0) + shift)[0] < 1.0:
        return -np.inf, False
    a = 0
    b = m - 1
    while a < b:
        mid = (a + b + 1) // 2
        if _f(br, select_value(S, mid) + shift)[0] >= 1.0:
            a = mid
        else:
            b = mid - 1
    return select_value(S, a) + shift, True


@njit(cache=True, error_model="numpy")
def _smallest(S, shift):  # pragma: no cover - compiled
    if order_tree_size(S) == 0:
        return np.inf
    return select_value(S, 0) + shift


@njit(cache=True, error_model="numpy")
def _theta_search(br):  # pragma: no cover - compiled
    """``theta`` from scratch: the last breakpoint ``t0`` with ``f(t0) >= 1``,
    then ``theta = t0 + (f(t0) - 1) / m`` with ``m`` the rows inside their clip
    after ``t0``. O(log^2 n)."""
    U, L, equal = br.upper, br.lower, br.equal
    tu, fu = _last_breakpoint(br, U, 0.0)
    if equal:
        tl, fl_ = _last_breakpoint(br, U, -br.cap)
    else:
        tl, fl_ = _last_breakpoint(br, L, 0.0)
    # neither: sum c = 1 up to rounding, every row at its cap
    lowest = _smallest(U, -br.cap) if equal else _smallest(L, 0.0)
    t0 = max(tu, tl) if fu or fl_ else lowest
    f0, a, b = _f(br, t0)
    return t0 + (f0 - 1.0) / (a - b) if a > b else t0


@njit(cache=True, error_model="numpy")
def br_theta(br, remember):  # pragma: no cover - compiled
    """The threshold ``theta`` of ``q = clip(v - theta, 0, c)``.

    Newton's method from the last threshold (``br.theta[0]``; one loss has changed
    since, so ``theta`` has moved little): from ``t`` with ``f(t)`` and the
    slope ``-m`` just after t, ``t' = t + (f(t) - 1) / m``; if U and L have as
    many values above ``t'`` as above ``t``, no breakpoint lies between them,
    f is linear there and ``t'`` is the root (refined once by the same
    formula, a rounding-sized step). Else again from ``t'``; after 4 tries,
    or on a flat piece, ``_theta_search``. Two evaluations of f (O(log n)
    each) in the common case. ``remember``: store the result as the next
    start (the solver's steps do; a read of ``q`` does not, so reading q
    leaves the run's numbers unchanged)."""
    t = br.theta[0]
    theta = np.nan
    if np.isfinite(t):
        F, a, b = _f(br, t)
        for _ in range(4):
            m = a - b
            if m <= 0:
                break
            t1 = t + (F - 1.0) / m
            F1, a1, b1 = _f(br, t1)
            if a1 == a and b1 == b:
                theta = t1 + (F1 - 1.0) / m
                break
            t, F, a, b = t1, F1, a1, b1
    if not np.isfinite(theta):
        theta = _theta_search(br)
    if remember:
        br.theta[0] = theta
    return theta


@njit(cache=True, error_model="numpy")
def br_update(br, i, loss, n):  # pragma: no cover - compiled
    """Row i's loss becomes ``loss``: ``v_i = 1/n + loss / (nu n)`` (``loss``
    itself when ``nu = 0``) moves in U (and L), or in the ``PoolTree``."""
    v, caps, nu = br.v, br.caps, br.nu
    v_new = 1.0 / n + loss / (nu * n) if nu > 0.0 else loss
    if v_new == v[i]:
        return
    if br.kind == SPECTRUM:
        pool_tree_replace(br.pool, i, v[i], v_new, nu > 0.0)
        v[i] = v_new
        return
    order_tree_replace(br.upper, i, v[i], v_new)
    if not br.equal and nu > 0.0:
        order_tree_replace(br.lower, i, v[i] - caps[i], v_new - caps[i])
    v[i] = v_new


@njit(cache=True, error_model="numpy")
def weight_lmo_scan(br, i):  # pragma: no cover - compiled
    """``q_i`` of the LMO with per-row caps: the caps of all larger keys. O(n)."""
    v, caps = br.v, br.caps
    above = 0.0
    for j in range(v.size):
        if v[j] > v[i] or (v[j] == v[i] and j > i):
            above += caps[j]
    rest = 1.0 - above
    return min(caps[i], rest) if rest > LMO_REST else 0.0


@njit(cache=True, error_model="numpy")
def br_weight(br, i):  # pragma: no cover - compiled
    """``q(l)_i`` for the current losses: ``clip(v_i - theta, 0, c_i)`` if
    ``nu > 0``; else the LMO's weight of row i (from its rank with equal
    caps, by ``weight_lmo_scan`` otherwise). A spectrum: row i's weight in
    the ``PoolTree`` if ``nu > 0``, else ``sigma`` at its rank (O(log n) both)."""
    v, caps = br.v, br.caps
    if br.kind == SPECTRUM:
        if br.nu > 0.0:
            return pool_tree_weight(br.pool, i, v[i])
        return br.pool.sigma[pool_tree_position(br.pool, i, v[i])]
    if br.nu > 0.0:
        return min(max(v[i] - br_theta(br, True), 0.0), caps[i])
    if not br.equal:
        return weight_lmo_scan(br, i)
    c = br.cap
    full = int(math.floor(1.0 / c + 1e-9))
    rank = rank_above(br.upper, v[i], i)
    if rank < full:
        return c
    if rank == full:
        rest = 1.0 - full * c
        return rest if rest > LMO_REST else 0.0
    return 0.0


class BestResponse:
    """``q(l)`` of the problem's inner maximisation, maintained as single losses
    change (module docstring), on the set of ``form`` (a ``SetForm``, or the
    row caps as an array). Row caps: ``update(i, loss)`` O(log n) amortised,
    ``weight(i)`` O(log n) in the common case and O(log^2 n) at worst (nu > 0)
    or O(log n) (nu = 0, equal caps). A spectrum: ``update`` O(|r - r'| +
    leaf + log^2 n) in the common case (r, r' the row's old and new rank; the
    nodes' bridges found again near the last ones), ``weight`` O(log n).
    ``q()`` O(n) (a spectrum with nu > 0: O(n log n)).
    ``block`` and ``fanout``: the trees' leaf and node capacities
    (``order_tree_new``; a spectrum: ``block`` is the ``PoolTree``'s leaf;
    small ones in the tests, so that splits and rebuilds happen).

    All state is in ``state``, a ``BRState`` (picklable); the compiled kernels
    take ``state`` itself."""

    def __init__(self, losses: np.ndarray, form: SetForm | np.ndarray, nu: float,
                 block: int | None = None, fanout: int | None = None) -> None:
        if not isinstance(form, SetForm):
            form = caps_form(form)
        losses = np.ascontiguousarray(losses, dtype=np.float64)
        n = losses.size
        self.n = n
        self.nu = float(nu)
        v = 1.0 / n + losses / (nu * n) if nu > 0 else losses.copy()
        if form.kind == SPECTRUM:
            none = order_tree_new(np.zeros(1))
            self.state = BRState(none, none, v, np.empty(0), self.nu, math.nan, True,
                                 np.full(1, np.nan), np.int64(SPECTRUM),
                                 pool_tree_new(v, form.sigma, nu > 0, block))
            return
        caps = form.caps
        equal = bool(np.all(caps == caps[0]))
        U = order_tree_new(v, block, fanout)
        L = order_tree_new(v - caps, block, fanout) if (nu > 0 and not equal) else \
            order_tree_new(np.zeros(1))
        self.state = BRState(U, L, v, caps, self.nu, float(caps[0]), equal,
                             np.full(1, np.nan), np.int64(ROW_CAPS),
                             pool_tree_new(np.zeros(1), np.ones(1), False))

    def update(self, i: int, loss: float) -> None:
        br_update(self.state, int(i), float(loss), self.n)

    def weight(self, i: int) -> float:
        return float(br_weight(self.state, int(i)))

    def theta(self) -> float:
        """The threshold of row caps with ``nu > 0`` (``br_theta``)."""
        return float(br_theta(self.state, False))

    def q(self) -> np.ndarray:
        """Every ``q(l)_j`` (class docstring for the cost)."""
        state = self.state
        if state.kind == SPECTRUM:
            pool = state.pool
            if self.nu > 0:
                return pool_tree_q(pool)
            q = np.empty(self.n)
            q[pool.rows] = pool.sigma
            return q
        v, caps = state.v, state.caps
        if self.nu > 0:
            return np.clip(v - self.theta(), 0.0, caps)
        return lmo_row_caps(v, caps)
