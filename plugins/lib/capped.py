"""Numerics of the capped simplices ``K = {p : 0 <= p_i <= c_i, sum p = 1}``:
the k-set ``S_{n,k}`` (every ``c_i = 1/k``; the simplex is ``k = 1``) and the
alpha-set ``K_alpha`` (``c_i = alpha_i``, ``k alpha_i`` integer; paper,
Appendix F). The constraint-set plugins (``plugins.sets.kset``,
``plugins.sets.simplex``, ``plugins.sets.alphaset``) and the p-players call these
functions; nothing here is registered.

* KL (Bregman) projections, Algorithm 4 and Lemma C.2 (one cap, or a cap per
  row): ``capped_kl_projection``, ``alpha_kl_projection``, and their compiled
  core ``kl_projection_row_caps``;
* the Euclidean projection: ``capped_simplex_euclidean`` and its compiled
  core ``euclidean_projection_row_caps``;
* samplers of an extreme point with mean ``p``: DepRound (Algorithm 5,
  ``depround`` and its compiled core ``depround_core``), systematic sampling
  (``systematic``, ``systematic_core``), the simplex's categorical draw
  (``categorical_row``), and the alpha-set's multiset sampler
  (``multiset_round``, compiled core ``multiset_round_core``). The sets'
  Python methods and the compiled draw (``capped_set_sample``) run the same
  cores.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
from numba import njit

from harness import Compiled, ConfigError
from harness.engine import replaces
from plugins.lib.vecmath import vexp

# ---------------------------------------------------------------------------
# KL projections (Algorithm 4, Lemma C.2)
# ---------------------------------------------------------------------------


#: a row is capped when its projected log-weight exceeds its log-cap by more
#: than this (a row at its cap up to rounding stays uncapped: same q either way);
#: the tree state (``plugins.p_players.kset_tree``) uses the same rule
CAP_TOL = 1e-12


def capped_kl_projection(log_w: np.ndarray, kappa: float) -> tuple[np.ndarray, np.ndarray]:
    """KL (Bregman) projection of the weights ``exp(log_w)`` onto
    ``{q : 0 <= q_i <= kappa, sum q = 1}`` (paper, Algorithm 4 and Lemma C.2):
    ``q_i = min(kappa, lam * w_i)`` with ``sum q = 1`` (Lemma C.2 (a)), the
    capped set grown from empty instead of Algorithm 4's sort, sums relative to
    the largest uncapped log-weight (docs/algorithms.md, "The KL projection
    onto a capped simplex"). O(n) per pass, at most ``k - 1`` rows capped.

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


@njit(cache=True, error_model="numpy")
def kl_projection_row_caps(log_w, kappa, log_kappa):  # pragma: no cover - compiled
    """Compiled core of the KL projection onto ``{0 <= q_i <= kappa_i, sum q = 1}``
    (one cap per row; the k-set passes a constant cap). Returns q, the capped
    mask and whether a projection exists. The weights' ``exp`` is ``vexp``
    (``plugins.lib.vecmath``), whose loop vectorises."""
    n = log_w.size
    capped = np.zeros(n, dtype=np.bool_)
    mass = 0.0  # sum of kappa_i over the capped rows
    e = np.empty(n)  # exp(log_w_i - base) of the uncapped rows
    base = np.inf
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
        if base - top > 50.0:  # first pass, or the top fell far: exp anew
            for i in range(n):  # every row (capped ones are not read): vectorises
                e[i] = vexp(log_w[i] - top)
        elif base != top:  # the top row was capped: rescale (one exp)
            f = np.exp(base - top)
            for i in range(n):
                if not capped[i]:
                    e[i] *= f
        base = top
        total = 0.0
        for i in range(n):
            if not capped[i]:
                total += e[i]
        rest = 1.0 - mass
        shift = np.log(rest) - np.log(total) if rest > 0.0 else -np.inf
        # a row at its cap up to rounding is left uncapped (same q either way)
        grew = False
        for i in range(n):
            if not capped[i] and (log_w[i] - top) + shift > log_kappa[i] + CAP_TOL:
                capped[i] = True
                mass += kappa[i]
                grew = True
        if not grew:
            break
    q = np.empty(n)
    scale = np.exp(shift)
    for i in range(n):
        q[i] = kappa[i] if capped[i] else e[i] * scale
    return q, capped, True


def alpha_kl_projection(log_w: np.ndarray, kappa: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """KL (Bregman) projection of the weights ``exp(log_w)`` onto
    ``{q : 0 <= q_i <= kappa_i, sum q = 1}``: Algorithm 4 (paper, Appendix C.2)
    with a cap per row, ``q_i = min(kappa_i, lam * w_i)`` with ``sum q = 1``
    (the KKT conditions; Lemma C.2 (a) with per-row caps), the capped set grown
    from empty as in ``capped_kl_projection`` (docs/algorithms.md, "The KL
    projection onto a capped simplex"). At most k + 1 passes of O(n).

    Returns ``q`` and the boolean mask of capped rows.
    """
    log_w = np.ascontiguousarray(log_w, dtype=np.float64)
    kappa = np.ascontiguousarray(kappa, dtype=np.float64)
    q, capped, feasible = kl_projection_row_caps(log_w, kappa, np.log(kappa))
    if not feasible:
        raise ValueError(
            f"The KL projection onto per-row caps (sum {float(kappa.sum()):.6g}) needs "
            f"positive weight on rows whose caps reach 1; got "
            f"{int(np.sum(np.isfinite(log_w)))} rows with positive weight "
            "(zero weights and gamma = 0?)."
        )
    return q, capped


# ---------------------------------------------------------------------------
# Euclidean projection
# ---------------------------------------------------------------------------


def capped_simplex_euclidean(v: np.ndarray, caps: float | np.ndarray) -> np.ndarray:
    """Euclidean projection of ``v`` onto ``{0 <= p_i <= c_i, sum p = 1}``
    (``sum c >= 1``) for one cap ``caps`` shared by every row (the k-set: 1/k)
    or a cap per row (the alpha-set: ``alpha``): ``euclidean_projection_row_caps``.
    O(n log n), exact."""
    v = np.ascontiguousarray(v, dtype=np.float64)
    if np.ndim(caps) == 0:
        return euclidean_projection_row_caps(v, np.full(v.size, float(caps)))
    return euclidean_projection_row_caps(v, np.ascontiguousarray(caps, dtype=np.float64))


@njit(cache=True, error_model="numpy")
def sorted_breakpoint_threshold(u, low):  # pragma: no cover - compiled
    """The ``tau`` of the Euclidean projection ``p_i = clip(v_i - tau, 0, c_i)``
    from the sorted breakpoints ``u`` (of ``v``) and ``low`` (of ``v - c``): the
    walk of ``euclidean_projection_row_caps``. Raises ValueError on a
    non-finite input."""
    n = u.size
    total_u = 0.0
    total_low = 0.0
    for i in range(n):
        total_u += u[i]
        total_low += low[i]
    if not (np.isfinite(total_u) and np.isfinite(total_low)):
        raise ValueError("the Euclidean projection needs finite inputs and caps")
    a = 0  # rows with v_i <= tau (they contribute 0)
    b = 0  # rows with v_i - c_i <= tau (the others sit at their cap)
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
    return bp_j + (f_j - 1.0) / slope_j if slope_j > 0 else bp_j


@njit(cache=True, error_model="numpy")
def euclidean_projection_row_caps(v, caps):  # pragma: no cover - compiled
    """Euclidean projection of ``v`` onto ``{0 <= p_i <= c_i, sum p = 1}``
    (``c = caps``, ``sum c >= 1``), compiled; the k-set passes a constant cap.

    ``p_i = clip(v_i - tau, 0, c_i)`` where ``f(tau) = sum_i clip(v_i - tau,
    0, c_i)`` is piecewise linear and non-increasing with breakpoints
    ``v_i`` and ``v_i - c_i``. The breakpoints are walked in increasing
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
    tau = sorted_breakpoint_threshold(u, low)
    p = np.empty(n)
    for i in range(n):
        p[i] = min(max(v[i] - tau, 0.0), caps[i])
    return p


# ---------------------------------------------------------------------------
# samplers: DepRound (Algorithm 5), systematic, multiset (Appendix F)
# ---------------------------------------------------------------------------


@njit(cache=True, error_model="numpy")
def capped_set_point(ks, p, capped):  # pragma: no cover - compiled
    """If the set is the single point ``caps`` (``capped_set_state``'s
    ``point``), write it into ``p``, mark every row capped and return True."""
    caps = ks.caps
    if not ks.point:
        return False
    for i in range(p.size):
        p[i] = caps[i]
        capped[i] = True
    return True


@njit(cache=True, error_model="numpy")
def free_weight_total(w, capped):  # pragma: no cover - compiled
    """The sum of the weights outside the capped set, in four running sums
    (row ``i`` into sum ``i mod 4``), added as ``(s0 + s1) + (s2 + s3)``."""
    n = w.size
    s0 = s1 = s2 = s3 = 0.0
    top = n - n % 4
    for i in range(0, top, 4):
        s0 += 0.0 if capped[i] else w[i]
        s1 += 0.0 if capped[i + 1] else w[i + 1]
        s2 += 0.0 if capped[i + 2] else w[i + 2]
        s3 += 0.0 if capped[i + 3] else w[i + 3]
    for i in range(top, n):
        s0 += 0.0 if capped[i] else w[i]
    return (s0 + s1) + (s2 + s3)


@njit(cache=True, error_model="numpy")
def _settle_row_caps(p, w, capped, caps, kappa, lam, gamma, check):  # pragma: no cover
    """``p_i = c_i`` on capped rows, ``(1 - gamma) lam w_i + gamma / n`` on the
    others; with ``check``, whether ``lam`` meets the projection's conditions
    for this capped set (``weights_row_caps``)."""
    n = p.size
    bad = 0
    for i in range(n):
        v = lam * w[i]
        cap = capped[i]
        p[i] = caps[i] if cap else (1.0 - gamma) * v + gamma / n
        if check:
            bad += (v < kappa[i]) if cap else (v > kappa[i] * (1.0 + CAP_TOL))
    return bad == 0


@njit(cache=True, error_model="numpy")
def weights_row_caps(p, w, capped, caps, kappa, gamma, book, tiny):  # pragma: no cover
    """The KL projection of positive weights ``w`` onto ``{0 <= q_i <= kappa_i,
    sum q = 1}``, mixed: ``p = (1 - gamma) q + gamma / n``, ``p_i = c_i`` on the
    capped rows (Lines 3-10 of Algorithm 2; Algorithm 4 with ``gamma = 0``).

    ``q_i = min(kappa_i, lam w_i)`` with ``sum q = 1`` (Lemma C.2). The capped
    set (``capped``, its cap mass ``book[0]`` and its number of free rows
    ``book[1]``) is warm-started from the last call's: its ``lam`` is kept
    when it meets the projection's conditions (every capped row ``lam w_i >=
    kappa_i``, every other ``lam w_i <= kappa_i (1 + CAP_TOL)``; then ``sum_i
    min(kappa_i, lam w_i) = 1``, which fixes the projection); else the set is
    grown from empty as in ``kl_projection_row_caps``. The common call is two
    passes that vectorise (or keep four running sums).

    Returns False when the free rows' weights sum to at most ``tiny``: the
    caller then writes ``p`` by projecting in the log domain
    (``log_row_caps``). Raises ValueError when no projection exists."""
    n = p.size
    if book[1] > 0.0:
        total = free_weight_total(w, capped)
        if total > tiny:
            mass = book[0]
            lam = (1.0 - mass) / total if mass < 1.0 else 0.0
            if _settle_row_caps(p, w, capped, caps, kappa, lam, gamma, True):
                return True
    lam = 0.0
    mass = 0.0
    first = True
    while True:
        total = 0.0
        free = 0
        for i in range(n):
            if first:
                capped[i] = False
            if not capped[i]:
                total += w[i]
                free += 1
        first = False
        book[0] = mass
        book[1] = free
        if free == 0:
            if mass >= 1.0 - 1e-12:
                break
            raise ValueError("the KL projection onto the capped simplex has too few rows "
                             "with positive weight")
        if not total > tiny:
            return False
        rest = 1.0 - mass
        lam = rest / total if rest > 0.0 else 0.0
        grew = False
        for i in range(n):
            if not capped[i] and lam * w[i] > kappa[i] * (1.0 + CAP_TOL):
                capped[i] = True
                mass += kappa[i]
                grew = True
        if not grew:
            break
    _settle_row_caps(p, w, capped, caps, kappa, lam, gamma, False)
    return True


@njit(cache=True, error_model="numpy")
def log_row_caps(p, log_w, capped, caps, kappa, log_kappa, gamma, book):  # pragma: no cover
    """``weights_row_caps`` from log-weights (``kl_projection_row_caps``), for
    weights too small to sum; sets ``capped`` and ``book`` likewise."""
    n = p.size
    q, mask, feasible = kl_projection_row_caps(log_w, kappa, log_kappa)
    if not feasible:
        raise ValueError("the KL projection onto the capped simplex has too few rows "
                         "with positive weight")
    mass = 0.0
    free = 0
    for i in range(n):
        capped[i] = mask[i]
        p[i] = caps[i] if mask[i] else (1.0 - gamma) * q[i] + gamma / n
        if mask[i]:
            mass += kappa[i]
        else:
            free += 1
    book[0] = mass
    book[1] = free


@njit(cache=True, error_model="numpy")
def _depround_level(va, ia, vb, ib, u, gone_v, gone_i, half):  # pragma: no cover
    """One round of ``depround_core``'s pairing: entry ``s`` with entry
    ``s + half`` of ``va`` (rows ``ia``), coin ``u[s]``; the entry that goes on
    into ``vb``/``ib``, the other into ``gone_v``/``gone_i``. The loop has no
    branch and reads and writes contiguous runs, so it vectorises."""
    eps = 1e-12
    for s in range(half):
        a = va[s]
        b = va[s + half]
        alpha = min(1.0 - a, b)
        beta = min(a, 1.0 - b)
        both = (eps < a) & (a < 1.0 - eps) & (eps < b) & (b < 1.0 - eps)
        # Line 7: (p_i + alpha, p_j - alpha) with probability beta / (alpha + beta),
        # else (p_i - beta, p_j + beta); no step unless both are fractional
        step = alpha if u[s] * (alpha + beta) < beta else -beta
        step = step if both else 0.0
        a += step
        b -= step
        keep_a = (eps < a) & (a < 1.0 - eps)
        vb[s] = a if keep_a else b
        gone_v[s] = b if keep_a else a
        ja = ia[s]
        jb = ia[s + half]
        ib[s] = ja if keep_a else jb
        gone_i[s] = jb if keep_a else ja


@njit(cache=True, error_model="numpy")
def depround_core(x, u, k):  # pragma: no cover - compiled
    """Compiled core of ``depround``: Lines 3-10 of Algorithm 5 on ``x = k p``
    (changed in place: the entries end at 0 or 1) with the coins ``u`` (n
    uniforms). Returns the k rows that end at 1, in increasing order, or k
    entries -1 if their number is not k.

    Line 4 lets any two fractional entries be paired. They are paired in
    rounds, as in a knockout tournament over all n entries in index order:
    a round of m entries pairs entry s with entry ``s + m // 2`` (and
    passes an odd last one on); a pair of two fractional entries takes the
    step of Line 7 with coin ``u[c + s]`` (c: the coins of the earlier
    rounds), a pair with an integral entry takes none; of each pair the
    entry still fractional (else either) goes on, at position s of the next
    round. A round's steps do not depend on each other and each round reads
    contiguous runs, so it vectorises (``_depround_level``): 1.7 us at
    n = 569, against 2.6 us for pairing neighbours among the fractional
    entries only, and 3.3 us for index order, one step after the other.
    Rounds of m entries use ``m // 2`` coins: n - 1 in all."""
    n = x.size
    size = (n + 1) // 2
    values = np.empty(2 * n + size)
    rows = np.empty(2 * n + size, dtype=np.int64)
    va, vb, gone_v = values[:n], values[n:n + size], values[n + size:]
    ia, ib, gone_i = rows[:n], rows[n:n + size], rows[n + size:]
    for i in range(n):
        va[i] = x[i]
        ia[i] = i
    m = n
    coin = 0
    while m > 1:
        half = m // 2
        _depround_level(va, ia, vb, ib, u[coin:coin + half], gone_v[coin:coin + half],
                        gone_i[coin:coin + half], half)
        if m > 2 * half:
            vb[half] = va[m - 1]
            ib[half] = ia[m - 1]
        coin += half
        m -= half
        va, vb = vb, va
        ia, ib = ib, ia
    for t in range(coin):
        x[gone_i[t]] = gone_v[t]
    if n > 0:
        x[ia[0]] = va[0]
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

    Line 2 stretches p to sum k (not 1). Entries are paired in rounds
    (``depround_core``; the box allows any pairing); each pair step leaves at
    least one of the two integral, and the rounds use n - 1 coins, drawn up
    front from ``rng`` (reproducible under a seed). O(n) time, compiled.
    """
    x = np.ascontiguousarray(p, dtype=np.float64) * k
    rows = depround_core(x, rng.random(p.size), k)
    if rows[0] < 0:
        raise ValueError(
            f"DepRound did not end with exactly k={k} rows: p must lie in S_n,k "
            f"(sum p = {float(np.sum(p))!r}, max p = {float(np.max(p))!r})."
        )
    return rows


def systematic(p: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """k distinct rows with ``P[i in S] = k p_i`` for ``p`` in ``S_{n,k}`` by
    systematic sampling (Madow 1949; ``systematic_core``): one uniform offset
    ``u`` from ``rng``, the rows whose cumulative ``k p`` crosses one of ``u, u
    + 1, ..., u + k - 1``. Each row's interval has length ``k p_i <= 1``, so
    it holds at most one of the k points: k distinct rows, in index order.

    Same marginals as DepRound; the joint law differs (two rows whose
    intervals lie within one unit of the cumulative sum, such as neighbours
    with small ``k p_i``, are never drawn together), which estimators built on
    the marginals, as the bandits' are, do not see. A row repeated by rounding (an
    interval longer than 1 by an ulp, probability about 1e-16 per draw)
    redraws the offset.
    """
    x = np.ascontiguousarray(p, dtype=np.float64)
    for _ in range(4):
        rows = systematic_core(x, k, rng.random())
        if rows[0] >= 0:
            return rows
    raise ValueError(
        f"Systematic sampling did not give k={k} distinct rows: p must lie in S_n,k "
        f"(sum p = {float(np.sum(p))!r}, max p = {float(np.max(p))!r})."
    )


@njit(cache=True, error_model="numpy")
def systematic_core(p, k, u):  # pragma: no cover - compiled
    """Compiled core of ``systematic`` at the offset ``u``: the k rows whose
    cumulative ``k p`` (summed in index order) first exceeds ``u + j``, ``j <
    k`` (``n - 1`` past the end); ``-1`` first if two coincide. O(n)."""
    n = p.size
    out = np.empty(k, dtype=np.int64)
    cum = 0.0
    j = 0
    for i in range(n):
        cum += p[i] * k
        while j < k and cum > u + j:
            out[j] = i
            j += 1
    while j < k:
        out[j] = n - 1
        j += 1
    for j in range(1, k):
        if out[j] <= out[j - 1]:
            out[0] = -1
    return out


@njit(cache=True, error_model="numpy")
def categorical_row(p, u):  # pragma: no cover - compiled
    """The simplex's draw: the first row whose running sum of ``p`` (in index
    order) exceeds ``u`` times the total, ``n - 1`` if none does (the inverse
    CDF: systematic sampling with k = 1)."""
    n = p.size
    total = 0.0
    for i in range(n):
        total += p[i]
    target = u * total
    cum = 0.0
    for i in range(n):
        cum += p[i]
        if cum > target:
            return i
    return n - 1


def multiset_round(kp: np.ndarray, caps: np.ndarray, k: int,
                   rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """The multiset sampler of ``K_alpha``: integer multiplicities ``m`` with
    ``E[m_i] = k p_i``, ``sum m = k`` and ``m_i <= c_i = k alpha_i``, from
    ``kp = k p`` (``p`` in ``K_alpha``).

    Law: ``m_i = floor(k p_i) + B_i`` where ``B`` is DepRound (paper,
    Algorithm 5) applied to the fractional parts ``f_i = k p_i - floor(k p_i)``,
    which sum to the integer ``r = k - sum_i floor(k p_i)``: ``B`` selects r
    distinct rows with ``P[B_i = 1] = f_i``, and its selections are negatively
    correlated (Gandhi et al. 2006). So each ``m_i`` is
    ``floor(k p_i)`` or ``ceil(k p_i)``, never above the integer cap ``c_i >= k
    p_i``, and ``a = m / k`` is a point of ``K_alpha``. A row with integer
    ``k p_i`` (e.g. at its cap) gets exactly ``k p_i`` every draw. ``k p`` is
    clipped to ``[0, c]`` first so that rounding above a cap cannot make ``m_i``
    exceed it.

    Cost: O(n) time, compiled: one pass for the integer and fractional parts,
    DepRound's pass (n uniforms drawn from ``rng``, n - 1 used), one
    pass to collect the rows. Returns the distinct rows with ``m_i > 0`` (in
    increasing order) and their multiplicities.
    """
    kp = np.ascontiguousarray(kp, dtype=np.float64)
    rows, mult, r = multiset_round_core(kp, caps, rng.random(kp.size), k)
    if r < 0 or (rows.size and rows[0] < 0):
        raise ValueError(
            f"The multiset sampler needs k p to sum to k={k} (got sum "
            f"{float(np.sum(kp)):.12g}, integer parts {k - r}): p must lie in the alpha-set."
        )
    return rows, mult


@njit(cache=True, error_model="numpy")
def multiset_round_core(kp, caps, u, k):  # pragma: no cover - compiled
    """Compiled core of ``multiset_round``: ``(rows, multiplicities, r)`` with
    ``r`` the rows DepRound rounds up (negative: the integer parts exceed k;
    rows ``[-1]``: DepRound failed)."""
    n = kp.size
    m = np.empty(n, dtype=np.int64)
    frac = np.empty(n)
    total = 0
    for i in range(n):
        x = min(max(kp[i], 0.0), caps[i])
        base = np.floor(x)
        m[i] = int(base)
        frac[i] = x - base
        total += m[i]
    r = k - total
    if r < 0:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64), r
    if r > 0:
        chosen = depround_core(frac, u, r)
        if chosen[0] < 0:
            return np.full(1, -1, dtype=np.int64), np.zeros(1, dtype=np.int64), r
        for j in chosen:
            m[j] += 1
    count = 0
    for i in range(n):
        if m[i] > 0:
            count += 1
    rows = np.empty(count, dtype=np.int64)
    mult = np.empty(count, dtype=np.int64)
    c = 0
    for i in range(n):
        if m[i] > 0:
            rows[c] = i
            mult[c] = m[i]
            c += 1
    return rows, mult, r


# ---------------------------------------------------------------------------
# what a player may ask of a set, through the protocol only


def needs_draws(constraint: Any) -> str | None:
    """Why a player that draws its rows from ``constraint.sample`` cannot play on
    ``constraint`` (its ``sampler`` is "none": the set has no sampler), else None."""
    if getattr(constraint, "sampler", None) == "none":
        return (f"draws its rows from the constraint set's sampler; '{constraint.name}' has "
                "none (sampler 'none'), so only full-information players (ftrl) and the "
                "solvers run on it")
    return None


def needs_row_caps(constraint: Any) -> str | None:
    """Why a player that needs a capped simplex cannot play on ``constraint``
    (``row_caps()`` is None), else None."""
    if constraint.row_caps() is None:
        return (f"needs a capped simplex K = {{0 <= p_i <= c_i, sum p = 1}}; row_caps() of "
                f"'{constraint.name}' is None")
    return None


def checked_batch(owner: str, b: int, bound: str, limit: int) -> int:
    """``b``, the rows a player draws per round, if at most ``limit`` (the set's
    ``bound``, n or k); else the refusal naming ``batch_size``."""
    if b > limit:
        raise ConfigError(f"The 'batch_size' parameter of {owner} must be an int in "
                          f"[1, {bound}={limit}]. Got {b} instead.")
    return b


def player_form(player: Any, base: type, constraint: Any, kernels: str,
                capped: bool = True) -> Compiled | None:
    """A p-player's compiled form, ``Compiled(kernels, player.state_)``; None
    without the set's form ``constraint``, on a set whose form is not
    ``CAPPED_SET`` (where the kernels read it as one: ``capped``), and for a
    subclass of ``base`` that replaces a method the kernels stand for."""
    if (constraint is None or (capped and constraint.kernels != CAPPED_SET)
            or replaces(player, base, ("propose", "observe"))):
        return None
    return Compiled(kernels, player.state_)


def needs_sets_of_k_rows(constraint: Any) -> str | None:
    """Why a player that needs every draw to be k distinct rows cannot play on
    ``constraint``, else None: every row cap must be at most 1/k (the k-set, the
    simplex, an alpha-set whose caps are all 1/k) and the set must have a
    sampler (``needs_draws``)."""
    why = needs_draws(constraint)
    if why is not None:
        return why
    caps = constraint.row_caps()
    if caps is None or float(np.max(caps)) * constraint.k > 1.0 + 1e-12:
        return ("needs draws of k distinct rows, i.e. every row cap "
                f"at most 1/k (the k-set or the simplex); '{constraint.name}' has "
                + ("no row caps" if caps is None else f"a cap of {float(np.max(caps)):.6g} "
                   f"> 1/k = {1.0 / constraint.k:.6g}"))
    return None


# ---------------------------------------------------------------------------
# compiled form of a capped simplex (the round engine, ``harness.engine``)
# ---------------------------------------------------------------------------

#: the compiled draws of ``capped_set_sample``, by code: DepRound (Algorithm 5),
#: systematic sampling, the alpha-set's multiset sampler, the simplex's
#: categorical draw (inverse CDF)
DEPROUND, SYSTEMATIC, MULTISET, CATEGORICAL = 0, 1, 2, 3

#: the ``sampler`` words the compiled draw knows, and their codes
SAMPLER_CODES = {"depround": DEPROUND, "systematic": SYSTEMATIC, "multiset": MULTISET,
                 "categorical": CATEGORICAL}

#: the ``kernels`` reference of every capped simplex's compiled form
CAPPED_SET = "plugins.lib.capped:capped_set"


class CappedSetState(NamedTuple):
    """The compiled state of the capped simplex ``{0 <= p_i <= caps_i, sum p = 1}``
    (``capped_set_state``), read by field in the kernels."""

    #: the caps ``c_i`` and their logs
    caps: np.ndarray
    log_caps: np.ndarray
    #: rows per draw (the size of the multiset on the alpha-set)
    k: np.int64
    #: the draw, one of the codes ``DEPROUND``, ``SYSTEMATIC``, ``MULTISET``, ``CATEGORICAL``
    sampler: np.int64
    #: the set is the single point ``caps`` (every row capped by any projection)
    point: np.bool_
    #: the caps before mixing, ``(c_i - gamma/n) / (1 - gamma)``, and their logs, for
    #: the gamma in ``kappa_gamma[0]`` (NaN until first use; ``capped_set_kappa``)
    kappa: np.ndarray
    log_kappa: np.ndarray
    kappa_gamma: np.ndarray
    #: the integer caps ``k c_i`` (the multiset sampler's)
    int_caps: np.ndarray


def capped_set_state(caps: np.ndarray, k: int, sampler: str, point: bool) -> CappedSetState:
    """The compiled state of the capped simplex ``{0 <= p_i <= caps_i, sum p =
    1}`` drawn by ``sampler`` (a key of ``SAMPLER_CODES``; "categorical" is the
    simplex's inverse-CDF draw). ``point``: the set is the single point
    ``caps``."""
    caps = np.ascontiguousarray(caps, dtype=np.float64)
    return CappedSetState(caps, np.log(caps), np.int64(k), np.int64(SAMPLER_CODES[sampler]),
                          np.bool_(point), np.empty(caps.size), np.empty(caps.size),
                          np.full(1, np.nan), np.rint(caps * k).astype(np.int64))


@njit(cache=True, error_model="numpy")
def capped_set_kappa(ks, gamma):  # pragma: no cover - compiled
    """The caps before mixing at rate gamma, ``kappa_i = (c_i - gamma/n) / (1 -
    gamma)`` (Line 5 of Algorithm 2), and their logs; computed once per gamma."""
    caps, kappa, log_kappa, cached = ks.caps, ks.kappa, ks.log_kappa, ks.kappa_gamma
    if cached[0] != gamma:
        n = caps.size
        for i in range(n):
            kappa[i] = (caps[i] - gamma / n) / (1.0 - gamma)
            log_kappa[i] = np.log(kappa[i])
        cached[0] = gamma
    return kappa, log_kappa


@njit(cache=True, error_model="numpy")
def capped_set_project(ks, log_w, gamma):  # pragma: no cover - compiled
    """``K.project(log_w, gamma, log_domain=True, return_capped=True)`` of the
    k-set, the simplex and the alpha-set: the KL projection onto the caps
    before mixing, ``kappa_i = (c_i - gamma/n) / (1 - gamma)``, then mixing
    with the uniform distribution at rate gamma; capped rows end at ``c_i``.
    Same arithmetic as the Python path (``capped_kl_projection``,
    ``alpha_kl_projection``). Raises ValueError where they do."""
    caps, point = ks.caps, ks.point
    n = caps.size
    if not (0.0 <= gamma < 1.0):
        raise ValueError("gamma must be in [0, 1)")
    if point:
        return caps.copy(), np.ones(n, dtype=np.bool_)
    kappa, log_kappa = capped_set_kappa(ks, gamma)
    if n * kappa[0] <= 1.0 + 1e-12 and ks.sampler != MULTISET:  # k-set, k = n: the point 1/n
        return caps.copy(), np.ones(n, dtype=np.bool_)
    q, capped, feasible = kl_projection_row_caps(log_w, kappa, log_kappa)
    if not feasible:
        raise ValueError("the KL projection onto the capped simplex has too few rows "
                         "with positive weight")
    p = np.empty(n)
    for i in range(n):
        p[i] = caps[i] if capped[i] else (1.0 - gamma) * q[i] + gamma / n
    return p, capped


@njit(cache=True, error_model="numpy")
def capped_set_sample(ks, p, rng):  # pragma: no cover - compiled
    """``K.sample(p, rng)`` of the k-set, the simplex and the alpha-set: the
    same law and the same uniforms from ``rng``, in the same order, as the
    Python path; returns ``(rows, multiplicities)``."""
    k, code = ks.k, ks.sampler
    n = p.size
    if code == DEPROUND:  # DepRound: n coins drawn up front
        x = np.empty(n)
        for i in range(n):
            x[i] = p[i] * k
        rows = depround_core(x, rng.random(n), k)
        if rows[0] < 0:
            raise ValueError("DepRound did not end with exactly k rows: p must lie in S_n,k")
        return rows, np.ones(k, dtype=np.int64)
    if code == SYSTEMATIC:  # systematic: one offset, redrawn (at most 4 times) on a repeated row
        for _ in range(4):
            rows = systematic_core(p, k, rng.random())
            if rows[0] >= 0:
                return rows, np.ones(k, dtype=np.int64)
        raise ValueError("Systematic sampling did not give k distinct rows: p must lie in S_n,k")
    if code == MULTISET:  # the alpha-set's multiset
        kp = np.empty(n)
        for i in range(n):
            kp[i] = p[i] * k
        rows, mult, r = multiset_round_core(kp, ks.int_caps, rng.random(n), k)
        if r < 0 or (rows.size > 0 and rows[0] < 0):
            raise ValueError("The multiset sampler needs k p to sum to k: p must lie in "
                             "the alpha-set")
        return rows, mult
    # categorical (the simplex): inverse CDF at u * total
    out = np.empty(1, dtype=np.int64)
    out[0] = categorical_row(p, rng.random())
    return out, np.ones(1, dtype=np.int64)


@njit(cache=True, error_model="numpy")
def capped_set_euclidean(ks, v):  # pragma: no cover - compiled
    """``K.euclidean_project(v)`` of the k-set, the simplex and the alpha-set."""
    return euclidean_projection_row_caps(v, ks.caps)


def check_gamma(gamma: float) -> None:
    """The mixing rate of a set's ``project``: ValueError unless ``0 <= gamma < 1``."""
    if not 0.0 <= gamma < 1.0:
        raise ValueError(f"gamma must be in [0, 1). Got {gamma!r} instead.")


def log_weights(weights: Any, log_domain: bool) -> np.ndarray:
    """The log-weights a set's KL ``project`` reads: ``weights`` as float64,
    their logarithm unless they are logs already (``log_domain``); a zero
    weight is ``-inf``."""
    log_w = np.asarray(weights, dtype=np.float64)
    if not log_domain:
        with np.errstate(divide="ignore"):
            log_w = np.log(log_w)
    return log_w
