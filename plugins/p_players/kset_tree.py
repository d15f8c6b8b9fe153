"""A p-player state on the k-set whose rounds cost O(k log n): a tree of sums
and maxima over the weights, the capping threshold found from the largest
weights and the total, and systematic sampling by k descents of the tree.

The weights are kept proportional to ``p_t`` (a greedy mirror-descent step, then
the KL projection onto ``S_{n,k}``, Lemma C.2 (a): the capped weights replaced by
the threshold), so a round changes the k sampled rows and at most k - 1 capped
ones: Algorithm 4 on the top of the order only (``project``), systematic sampling
(Madow 1949, ``sample``) and ``scale``, each O(log n) per row, in a ``FANOUT``-ary
tree held in one ``TreeState`` record (``tree_sample``, ``tree_ix_step``).
Derivation: docs/algorithms.md, "The k-set tree: rounds in O(k log n)".
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from numba import njit

from harness.prefetch import prefetch, prefetch_at, prefetch_entries
from plugins.lib.capped import CAP_TOL  # the capping rule of every capped set

#: children per tree node
FANOUT = 16
#: tree nodes ((sum, max) pairs) and leaves per cache line, for the prefetches
NODES_PER_LINE = 4
LEAVES_PER_LINE = 8
#: rebase when the largest weight falls below exp(-REBASE)
REBASE = 200.0


def _layout(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Start offsets and sizes of the tree levels, bottom-up; the last has one node."""
    sizes = []
    size = n
    while True:
        size = -(-size // FANOUT)
        sizes.append(size)
        if size == 1:
            break
    offsets = np.concatenate(([0], np.cumsum(sizes)))
    return offsets.astype(np.int64), np.asarray(sizes, dtype=np.int64)


@njit(cache=True, error_model="numpy")
def _fix_node(w, nodes, offsets, sizes, level, g):  # pragma: no cover - compiled
    """Recompute node ``g`` of ``level`` from its children (leaves: removed ones,
    stored negated, count in neither the sum nor the maximum)."""
    F = FANOUT
    lo = g * F
    s = 0.0
    m = -1.0
    if level == 0:
        hi = min(lo + F, w.size)
        for c in range(lo, hi):
            x = w[c]
            if x > 0.0:
                s += x
            if x > m:
                m = x
    else:
        base = offsets[level - 1]
        hi = min(lo + F, sizes[level - 1])
        for c in range(lo, hi):
            s += nodes[base + c, 0]
            x = nodes[base + c, 1]
            if x > m:
                m = x
    nodes[offsets[level] + g, 0] = s
    nodes[offsets[level] + g, 1] = m


@njit(cache=True, error_model="numpy")
def _fix_path(w, nodes, offsets, sizes, i):  # pragma: no cover - compiled
    g = i
    for level in range(sizes.size):
        g = g // FANOUT
        _fix_node(w, nodes, offsets, sizes, level, g)


@njit(cache=True, error_model="numpy")
def _fix_paths(w, nodes, offsets, sizes, rows):  # pragma: no cover - compiled
    """``_fix_path`` for several leaves, level by level (independent reads overlap)."""
    _fix_paths_into(w, nodes, offsets, sizes, rows, np.empty(rows.size, dtype=np.int64))


@njit(cache=True, error_model="numpy")
def _fix_paths_into(w, nodes, offsets, sizes, rows, g):  # pragma: no cover - compiled
    """``_fix_paths`` with the node indices in the scratch ``g`` (``rows.size``
    entries). A node is recomputed once per level when the rows sharing it are
    adjacent (sorted rows, as systematic sampling gives them): a node is a
    function of its children only, so recomputing it again changes nothing."""
    m = rows.size
    for j in range(m):
        g[j] = rows[j]
    for level in range(sizes.size):
        previous = -1
        for j in range(m):
            g[j] = g[j] // FANOUT
            if g[j] != previous:
                _fix_node(w, nodes, offsets, sizes, level, g[j])
                previous = g[j]


@njit(cache=True, error_model="numpy")
def _build(w, nodes, offsets, sizes):  # pragma: no cover - compiled
    for level in range(sizes.size):
        for g in range(sizes[level]):
            _fix_node(w, nodes, offsets, sizes, level, g)


@njit(cache=True, inline="always")
def _prefetch_children(nodes, base, g, m):  # pragma: no cover - compiled
    """Prefetch the children of the nodes ``g[:m]`` (level starting at
    ``base``), so that the descents' cache misses overlap (``harness.prefetch``)."""
    for j in range(m):
        for c in range(0, FANOUT, NODES_PER_LINE):
            prefetch_at(nodes, min(base + g[j] * FANOUT + c, nodes.shape[0] - 1), 0)


@njit(cache=True, inline="always")
def _prefetch_leaves(w, g, m):  # pragma: no cover - compiled
    """Prefetch the leaves under the bottom nodes ``g[:m]``."""
    for j in range(m):
        for c in range(0, FANOUT, LEAVES_PER_LINE):
            prefetch(w, min(g[j] * FANOUT + c, w.size - 1))


@njit(cache=True, error_model="numpy")
def _find_prefix_into(w, nodes, offsets, sizes, t, g, out):  # pragma: no cover - compiled
    """For each target of ``t``, the first leaf whose inclusive prefix sum
    exceeds it (the last leaf with positive weight if rounding puts it past the
    total), into ``out``; ``t`` is overwritten (the remainders), the node
    indices go in the scratch ``g``. The descents go level by level for all
    targets together, so their memory reads are independent and overlap (at
    n = 1e7 the lower levels and the leaves are not in cache):
    ``_find_mixed_prefix_into`` with the masses ``w_i`` themselves (``1 w_i + 0``:
    the same numbers, bit for bit)."""
    _find_mixed_prefix_into(w, nodes, offsets, sizes, 1.0, 0.0, t, g, out)


@njit(cache=True, error_model="numpy")
def _find_max(w, nodes, offsets, sizes):  # pragma: no cover - compiled
    """The first leaf holding the largest weight."""
    F = FANOUT
    g = 0
    for level in range(sizes.size - 1, 0, -1):
        base = offsets[level - 1]
        target = nodes[offsets[level] + g, 1]
        lo = g * F
        hi = min(lo + F, sizes[level - 1])
        chosen = lo
        for c in range(lo, hi):
            if nodes[base + c, 1] == target:
                chosen = c
                break
        g = chosen
    target = nodes[offsets[0] + g, 1]
    lo = g * F
    hi = min(lo + F, w.size)
    for i in range(lo, hi):
        if w[i] == target:
            return i
    return lo


@njit(cache=True, error_model="numpy")
def _systematic(w, nodes, offsets, sizes, k, u, out):  # pragma: no cover - compiled
    """Systematic sampling into ``out``; False if two targets fell in one row
    (an interval longer than 1 by rounding)."""
    return _systematic_into(w, nodes, offsets, sizes, k, u, out, np.empty(k),
                            np.empty(k, dtype=np.int64))


@njit(cache=True, error_model="numpy")
def _systematic_into(w, nodes, offsets, sizes, k, u, out, t, g):  # pragma: no cover - compiled
    """``_systematic`` with the targets in the scratch ``t`` and the node indices
    in the scratch ``g`` (k entries each)."""
    total = nodes[offsets[sizes.size - 1], 0]
    for j in range(k):
        t[j] = (u + j) * total / k
    _find_prefix_into(w, nodes, offsets, sizes, t, g, out)
    j = 1
    while j < k and out[j] > out[j - 1]:
        j += 1
    return j >= k


@njit(cache=True, error_model="numpy")
def _project(w, nodes, offsets, sizes, kappa, capped):  # pragma: no cover - compiled
    """Cap the largest weights at the KL projection's threshold; returns how many."""
    root = offsets[sizes.size - 1]
    log_kappa = math.log(kappa)
    m = 0
    while m * kappa < 1.0:
        top = nodes[root, 1]
        if top <= 0.0:
            break
        shift = math.log1p(-m * kappa) - math.log(nodes[root, 0])
        if not math.log(top) + shift > log_kappa + CAP_TOL:
            break
        i = _find_max(w, nodes, offsets, sizes)
        capped[m] = i
        m += 1
        w[i] = -w[i]
        _fix_path(w, nodes, offsets, sizes, i)
    if m > 0:
        theta = kappa * nodes[root, 0] / (1.0 - m * kappa)
        for j in range(m):
            i = capped[j]
            w[i] = theta
            _fix_path(w, nodes, offsets, sizes, i)
    return m


@njit(cache=True, error_model="numpy")
def _ix_step_into(w, nodes, offsets, sizes, rows, losses, k, eta, gamma, kappa, capped,
                  g):  # pragma: no cover - compiled
    """The implicit-exploration step of ``plugins.p_players.exp_ix_m`` on the
    sampled rows, ``w_i *= exp(-eta (1 - L_i) / (k p_i + gamma))`` with ``p_i =
    w_i / sum(w)``, then the projection; returns the number of capped rows.
    ``g``: scratch for the node indices (``rows.size`` entries)."""
    total = nodes[offsets[sizes.size - 1], 0]
    for j in range(rows.size):
        i = rows[j]
        w[i] *= math.exp(-eta * (1.0 - losses[j]) / (k * w[i] / total + gamma))
    _fix_paths_into(w, nodes, offsets, sizes, rows, g)
    return _project(w, nodes, offsets, sizes, kappa, capped)


class TreeState(NamedTuple):
    """The tree's arrays (changed in place), constants, counters and scratch,
    read by field in the kernels."""

    #: the leaves (weights), the ``(sum, max)`` nodes, the levels' offsets and sizes
    w: np.ndarray
    nodes: np.ndarray
    offsets: np.ndarray
    sizes: np.ndarray
    #: rows per draw and the cap
    k: np.int64
    kappa: float
    #: the last draw's rows and the rows capped by the last projection
    rows: np.ndarray
    capped: np.ndarray
    #: the number of capped rows and of rebases, one-element arrays
    n_capped: np.ndarray
    rebases: np.ndarray
    #: rebase when the largest weight falls below this
    rebase_below: float
    #: scratch of a draw: its k targets and node indices
    targets: np.ndarray
    nodes_at: np.ndarray


class CappedWeightTree:
    """``p = w / sum(w)`` on ``S_{n,k}`` (cap ``kappa``, 1/k by default) with
    O(log n) updates, projection and systematic sampling (module docstring).

    ``w_`` are the leaves, ``nodes_`` the tree, ``capped_[:n_capped_]`` the
    rows capped by the last projection; all of it is ``state_`` (``TreeState``).
    Starts at the uniform distribution.
    """

    def __init__(self, n: int, k: int, kappa: float | None = None) -> None:
        if not 1 <= k <= n:
            raise ValueError(f"CappedWeightTree needs 1 <= k <= n. Got k={k}, n={n} instead.")
        self.n, self.k = n, k
        self.kappa = 1.0 / k if kappa is None else float(kappa)
        self.offsets_, self.sizes_ = _layout(n)
        self.w_ = np.ones(n)
        self.nodes_ = np.zeros((int(self.offsets_[-1]), 2))
        self.capped_ = np.empty(int(1.0 / self.kappa) + 1, dtype=np.int64)
        self.rows_ = np.empty(k, dtype=np.int64)
        self.state_ = TreeState(self.w_, self.nodes_, self.offsets_, self.sizes_, np.int64(k),
                                float(self.kappa), self.rows_, self.capped_,
                                np.zeros(1, dtype=np.int64), np.zeros(1, dtype=np.int64),
                                math.exp(-REBASE), np.empty(k), np.empty(k, dtype=np.int64))
        _build(self.w_, self.nodes_, self.offsets_, self.sizes_)

    @property
    def n_capped_(self) -> int:
        return int(self.state_.n_capped[0])

    @property
    def rebases_(self) -> int:
        return int(self.state_.rebases[0])

    @property
    def rebase_below_(self) -> float:
        return self.state_.rebase_below

    @rebase_below_.setter
    def rebase_below_(self, value: float) -> None:
        self.state_ = self.state_._replace(rebase_below=float(value))

    @property
    def total(self) -> float:
        return float(self.nodes_[-1, 0])

    @property
    def top(self) -> float:
        return float(self.nodes_[-1, 1])

    @property
    def p(self) -> np.ndarray:
        """The dense distribution (O(n): for checkpoints, not rounds)."""
        return self.w_ / self.total

    def p_of(self, rows: np.ndarray) -> np.ndarray:
        return self.w_[rows] / self.total

    @property
    def capped(self) -> np.ndarray:
        """The rows capped by the last projection (``J_t``)."""
        return self.capped_[: self.n_capped_].copy()

    def sample(self, u: float) -> np.ndarray | None:
        """Systematic sampling at offset ``u``: k distinct rows, or None if
        rounding put two targets in one row (then draw another offset)."""
        ok = _systematic(self.w_, self.nodes_, self.offsets_, self.sizes_, self.k, u, self.rows_)
        return self.rows_.copy() if ok else None

    def scale(self, rows: np.ndarray, factors: np.ndarray) -> None:
        """Multiply the weights of distinct ``rows`` (a log-weight step), then project."""
        rows = np.asarray(rows, dtype=np.int64)
        self.w_[rows] *= factors
        _fix_paths(self.w_, self.nodes_, self.offsets_, self.sizes_, rows)
        self.project()

    def ix_step(self, rows: np.ndarray, losses: np.ndarray, eta: float, gamma: float) -> None:
        """``lw_i -= eta (1 - L_i) / (k p_i + gamma)`` on the sampled rows, then
        project (``tree_ix_step``)."""
        tree_ix_step(self.state_, np.ascontiguousarray(rows, dtype=np.int64),
                     np.ascontiguousarray(losses, dtype=np.float64), float(eta), float(gamma))

    def project(self) -> None:
        """KL projection onto the cap: clamp the capped rows to the threshold."""
        self.state_.n_capped[0] = _project(self.w_, self.nodes_, self.offsets_, self.sizes_,
                                           self.kappa, self.capped_)
        _rebase_if_due(self.state_)

    def rebase(self) -> None:
        """Multiply every weight so that the largest is 1 again. O(n)."""
        _rebase(self.state_)


@njit(cache=True, error_model="numpy")
def _rebase(ts):  # pragma: no cover - compiled
    """``CappedWeightTree.rebase``: every weight times ``1 / max``, the tree rebuilt."""
    w = ts.w
    inv = 1.0 / ts.nodes[ts.nodes.shape[0] - 1, 1]
    for i in range(w.size):
        w[i] *= inv
    _build(w, ts.nodes, ts.offsets, ts.sizes)
    ts.rebases[0] += 1


@njit(cache=True, error_model="numpy")
def _rebase_if_due(ts):  # pragma: no cover - compiled
    """``_rebase`` when the largest weight is below ``rebase_below``."""
    if ts.nodes[ts.nodes.shape[0] - 1, 1] < ts.rebase_below:
        _rebase(ts)


@njit(cache=True, error_model="numpy")
def tree_sample(ts, rng):  # pragma: no cover - compiled
    """``CappedWeightTree.sample(rng.random())`` on the tree's record (the draw
    of Algorithm 2, Line 11, by systematic sampling), redrawn (one more
    uniform each) while two targets fall in one row; the rows are written into
    the tree's row buffer, which is returned."""
    while not _systematic_into(ts.w, ts.nodes, ts.offsets, ts.sizes, ts.k, rng.random(),
                               ts.rows, ts.targets, ts.nodes_at):
        pass
    return ts.rows


@njit(cache=True, error_model="numpy")
def tree_ix_step(ts, rows, losses, eta, gamma):  # pragma: no cover - compiled
    """``CappedWeightTree.ix_step`` on the tree's record: the IX step of the
    sampled rows, the KL projection onto the cap (Algorithm 4 on the largest
    weights, ``_project``), and the rebase when the largest weight falls below
    ``exp(-REBASE)``; the number of capped rows and of rebases go to the
    record's counters. O(k log n) but for the rebase."""
    ts.n_capped[0] = _ix_step_into(ts.w, ts.nodes, ts.offsets, ts.sizes, rows, losses, ts.k,
                                   eta, gamma, ts.kappa, ts.capped, ts.nodes_at)
    _rebase_if_due(ts)


# ---------------------------------------------------------------------------
# weights that grow by gains, mixed with uniform (EXP4.MP, Algorithm 2)
# ---------------------------------------------------------------------------

#: rebase when the largest weight climbs above exp(REBASE) (gains raise it)
REBASE_ABOVE = REBASE
#: a log-weight above this rebases at once: n leaves of exp(600) still sum below
#: the largest double
EXP_SAFE = 600.0


class MixedTreeState(NamedTuple):
    """The tree of ``p = (1 - gamma) q + gamma / n`` (Algorithm 2, Lines 3-10):
    ``q`` the KL projection of the weights onto the cap ``kappa`` (Lemma C.2),
    the capped rows at ``p_i = cap``. Read by field in the kernels.

    The leaves of ``tree`` are ``exp(log_w)`` on the free rows and the
    projection's threshold on the capped ones, so ``q_i = w_i / sum(w)`` and a
    node's mass in ``p`` is ``(1 - gamma) sum / total + gamma leaves / n``.
    Algorithm 2 updates the weights outside ``J_t`` only (Line 14) and projects
    the weights afresh each round, so a capped row keeps its own log-weight in
    ``log_w`` and gets it back in its leaf before the next projection."""

    #: the tree over the leaves (``CappedWeightTree.state_``, cap ``kappa``)
    tree: TreeState
    #: every row's log-weight, capped or not; shifted by a constant at a rebase
    log_w: np.ndarray
    #: the rows capped by the last projection (``J_t``), as a mask
    is_capped: np.ndarray
    #: scratch of a step: the rows whose leaves change, and their node indices
    touched: np.ndarray
    touched_at: np.ndarray
    #: the uniform mixing rate and ``p_i`` of a capped row (the set's cap)
    gamma: float
    cap: float
    #: the set is the single point ``cap`` (k = n): p stays there, draws are all rows
    point: bool
    #: rebase when the largest leaf climbs above this (``tree.rebase_below``: falls below)
    rebase_above: float


def mixed_tree_state(n: int, k: int, cap: float, gamma: float) -> MixedTreeState:
    """The uniform distribution on ``{0 <= p_i <= cap, sum p = 1}`` (k rows per
    draw) mixed at rate ``gamma``: the tree's cap is ``kappa = (cap - gamma / n)
    / (1 - gamma)`` (Line 5 of Algorithm 2, as ``capped_set_kappa``)."""
    kappa = (cap - gamma / n) / (1.0 - gamma)
    ts = CappedWeightTree(n, k, kappa).state_
    extra = k + ts.capped.size
    return MixedTreeState(ts, np.zeros(n), np.zeros(n, dtype=np.bool_),
                          np.empty(extra, dtype=np.int64), np.empty(extra, dtype=np.int64),
                          float(gamma), float(cap), bool(abs(n * cap - 1.0) <= 1e-12),
                          math.exp(REBASE_ABOVE))


@njit(cache=True, error_model="numpy")
def mixed_p_of(ms, i):  # pragma: no cover - compiled
    """``p_i`` (the leaf's share mixed with uniform; a capped row's is the cap)."""
    if ms.point or ms.is_capped[i]:
        return ms.cap
    ts = ms.tree
    total = ts.nodes[ts.offsets[ts.sizes.size - 1], 0]
    return (1.0 - ms.gamma) * (ts.w[i] / total) + ms.gamma / ts.w.size


@njit(cache=True, error_model="numpy")
def mixed_tree_p(ms):  # pragma: no cover - compiled
    """The dense ``p`` (O(n): for checkpoints, not rounds)."""
    ts = ms.tree
    n = ts.w.size
    p = np.empty(n)
    if ms.point:
        p[:] = ms.cap
        return p
    total = ts.nodes[ts.offsets[ts.sizes.size - 1], 0]
    for i in range(n):
        p[i] = (1.0 - ms.gamma) * (ts.w[i] / total) + ms.gamma / n
    for j in range(ts.n_capped[0]):
        p[ts.capped[j]] = ms.cap
    return p


@njit(cache=True, error_model="numpy")
def _find_mixed_prefix_into(w, nodes, offsets, sizes, a, b, t, g,
                            out):  # pragma: no cover - compiled
    """For each target of ``t``, the first leaf whose inclusive prefix of the
    masses ``a w_i + b`` exceeds it (``_find_prefix_into``'s rules): a node of
    ``s`` leaves weighing ``sum`` has mass ``a sum + b s`` (a node spans
    ``FANOUT^(level + 1)`` leaves, the last of a level fewer)."""
    F = FANOUT
    n = w.size
    for j in range(t.size):
        g[j] = 0
    span = 1  # the leaves under a node one level below the current one
    for _ in range(sizes.size - 1):
        span *= F
    for level in range(sizes.size - 1, 0, -1):
        base = offsets[level - 1]
        _prefetch_children(nodes, base, g, t.size)
        for j in range(t.size):
            lo = g[j] * F
            hi = min(lo + F, sizes[level - 1])
            chosen = -1
            last = lo
            r = t[j]
            for c in range(lo, hi):
                s = a * nodes[base + c, 0] + b * (min((c + 1) * span, n) - c * span)
                if s > 0.0:
                    last = c
                    if r < s:
                        chosen = c
                        break
                    r -= s
            if chosen < 0:  # past the total by rounding: stay at the right edge
                chosen = last
                r = a * nodes[base + last, 0] + b * (min((last + 1) * span, n) - last * span)
            g[j] = chosen
            t[j] = r
        span //= F
    _prefetch_leaves(w, g, t.size)
    for j in range(t.size):
        lo = g[j] * F
        hi = min(lo + F, n)
        last = lo
        found = -1
        r = t[j]
        for i in range(lo, hi):
            x = a * w[i] + b
            if x > 0.0:
                last = i
                if r < x:
                    found = i
                    break
                r -= x
        out[j] = found if found >= 0 else last


@njit(cache=True, error_model="numpy")
def _mixed_systematic(ms, u):  # pragma: no cover - compiled
    """Systematic sampling from ``p`` at offset ``u`` into the tree's row
    buffer: the rows whose prefix of ``p`` first exceeds ``(u + j) / k``;
    False if two targets fell in one row (an interval longer than 1 by rounding)."""
    ts = ms.tree
    k, n = ts.k, ts.w.size
    total = ts.nodes[ts.offsets[ts.sizes.size - 1], 0]
    t = ts.targets
    for j in range(k):
        t[j] = (u + j) / k
    _find_mixed_prefix_into(ts.w, ts.nodes, ts.offsets, ts.sizes, (1.0 - ms.gamma) / total,
                            ms.gamma / n, t, ts.nodes_at, ts.rows)
    out = ts.rows
    j = 1
    while j < k and out[j] > out[j - 1]:
        j += 1
    return j >= k


@njit(cache=True, error_model="numpy")
def tree_mixed_sample(ms, rng):  # pragma: no cover - compiled
    """The draw of Algorithm 2, Line 11, by systematic sampling (Madow) from
    the mixture ``p``: k descents, ``P[i in I_t] = k p_i``; redrawn (one more
    uniform each) while two targets fall in one row. The rows, sorted, are
    written into the tree's row buffer, which is returned. O(k log n)."""
    ts = ms.tree
    if ms.point:
        for j in range(ts.k):
            ts.rows[j] = j
        return ts.rows
    while not _mixed_systematic(ms, rng.random()):
        pass
    prefetch_entries(ms.log_w, ts.rows)  # read by the step that follows
    prefetch_entries(ms.is_capped, ts.rows)
    return ts.rows


@njit(cache=True, error_model="numpy")
def _mark_capped(ms):  # pragma: no cover - compiled
    ts = ms.tree
    for j in range(ts.n_capped[0]):
        ms.is_capped[ts.capped[j]] = True


@njit(cache=True, error_model="numpy")
def tree_mixed_rebase(ms):  # pragma: no cover - compiled
    """Every log-weight minus the largest, the leaves recomputed from them,
    the tree rebuilt and projected again: ``p`` is unchanged but for a
    rounding (the leaves are ``exp(log_w)`` before and after). O(n)."""
    ts = ms.tree
    log_w, w = ms.log_w, ts.w
    high = log_w.max()
    for i in range(w.size):
        log_w[i] -= high
        w[i] = math.exp(log_w[i])
        ms.is_capped[i] = False
    _build(w, ts.nodes, ts.offsets, ts.sizes)
    ts.n_capped[0] = _project(w, ts.nodes, ts.offsets, ts.sizes, ts.kappa, ts.capped)
    _mark_capped(ms)
    ts.rebases[0] += 1


@njit(cache=True, error_model="numpy")
def tree_gain_step(ms, rows, gains):  # pragma: no cover - compiled
    """``log w_i += gains_j`` on the rows outside the capped set ``J_t``
    (Algorithm 2, Lines 13-15: the capped rows keep their weights), then the
    next round's projection (Lines 3-10): the capped rows' own weights back in
    their leaves, the largest weights capped at the threshold (``_project``,
    Lemma C.2), and a rebase when the largest leaf leaves ``[rebase_below,
    rebase_above]`` or a log-weight passes ``EXP_SAFE``. O(k log n) but
    for the rebase."""
    ts = ms.tree
    if ms.point:
        return
    w, log_w, is_capped, touched = ts.w, ms.log_w, ms.is_capped, ms.touched
    m = 0
    overflow = False
    for j in range(rows.size):
        i = rows[j]
        if is_capped[i]:
            continue
        log_w[i] += gains[j]
        overflow |= log_w[i] > EXP_SAFE
        w[i] = math.exp(log_w[i])
        touched[m] = i
        m += 1
    for j in range(ts.n_capped[0]):
        i = ts.capped[j]
        is_capped[i] = False
        w[i] = math.exp(log_w[i])
        overflow |= log_w[i] > EXP_SAFE
        touched[m] = i
        m += 1
    if overflow:
        tree_mixed_rebase(ms)
        return
    _fix_paths_into(w, ts.nodes, ts.offsets, ts.sizes, touched[:m], ms.touched_at)
    ts.n_capped[0] = _project(w, ts.nodes, ts.offsets, ts.sizes, ts.kappa, ts.capped)
    _mark_capped(ms)
    top = ts.nodes[ts.offsets[ts.sizes.size - 1], 1]
    if top > ms.rebase_above or top < ts.rebase_below:
        tree_mixed_rebase(ms)
