"""The sorted values of the spectral best response (``plugins.solvers.best_response``)
and their pooled blocks, kept as one value changes at a time.

The Euclidean projection of ``v`` onto the permutahedron ``P(sigma)`` is, in the
order of ``v`` sorted ascending (``s``), ``q = s - z`` with ``z`` the
non-decreasing isotonic regression of ``u = s - sigma``, whose blocks pool
adjacent violators (``plugins.lib.permutahedron``). ``PoolTree`` keeps ``s``
(with each position's row; a row's position is found from its key ``(v_i,
i)`` by binary search) and the blocks: the
positions are cut into leaves of ``leaf`` positions, each holding the blocks of
its own positions (cumulative lengths and sums), and a binary tree over the
leaves whose node holds the blocks of its range as the left child's first
``kept`` blocks, at most one *bridge* block (the left child's other blocks
pooled with the right child's first ``taken``) and the right child's other
blocks. A node's blocks are never listed: a block, or a sum over the first j,
is found by one descent.

A changed value moves its entry from position r to r' (the entries between
shift by one: O(|r - r'|)); the leaves over ``[r, r']`` are pooled again
(O(leaf) each) and the nodes above them find their bridge again by binary
searches started at the last one (the common tangent of two convex chains).
docs/algorithms.md, "The spectral best response under one-row updates", has
the proofs and the costs.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit

_LEAF, _LEAVES = 0, 1


class PoolTree(NamedTuple):
    """Sorted values and their pooled blocks (module docstring), read by field;
    node v's children are 2v and 2v + 1, leaf l is node ``leaves + l`` (its
    blocks' cumulative lengths and sums at positions ``l * leaf + k``). Without
    pooling (``nu = 0``) only the order is kept."""

    #: ``s``, ascending by (value, row), and the row at each position
    values: np.ndarray
    rows: np.ndarray
    #: the spectrum, ascending
    sigma: np.ndarray
    #: a leaf's blocks: cumulative lengths and sums of ``u`` over its first k + 1
    cum_length: np.ndarray
    cum_total: np.ndarray
    #: per node: its blocks, positions and sum of ``u``
    blocks: np.ndarray
    length: np.ndarray
    total: np.ndarray
    #: per internal node: the left child's blocks kept before the bridge and
    #: their positions and sum; the right child's blocks in the bridge (0: no
    #: bridge) and their positions and sum
    kept: np.ndarray
    kept_length: np.ndarray
    kept_total: np.ndarray
    taken: np.ndarray
    taken_length: np.ndarray
    taken_total: np.ndarray
    #: [leaf size, leaves (a power of 2)]
    meta: np.ndarray


def pool_tree_new(v: np.ndarray, sigma: np.ndarray, pool: bool,
                  leaf: int | None = None) -> PoolTree:
    """A ``PoolTree`` over ``v`` (row j has key ``(v[j], j)``) for the spectrum
    ``sigma`` (ascending); ``pool``: keep the blocks (``nu > 0``), else only the
    order. Leaves of ``leaf`` positions (default 128, at least 2)."""
    v = np.ascontiguousarray(v, dtype=np.float64)
    n = v.size
    leaf = 128 if leaf is None else max(2, int(leaf))
    leaves = 1
    while leaves * leaf < n:
        leaves *= 2
    width, nodes = (n, 2 * leaves) if pool else (0, 0)
    order = np.argsort(v, kind="stable").astype(np.int64)

    def ints(size: int) -> np.ndarray:
        return np.zeros(size, dtype=np.int64)

    pt = PoolTree(v[order], order, np.ascontiguousarray(sigma, dtype=np.float64),
                  ints(width), np.zeros(width), ints(nodes), ints(nodes), np.zeros(nodes),
                  ints(nodes), ints(nodes), np.zeros(nodes), ints(nodes), ints(nodes),
                  np.zeros(nodes), np.array([leaf, leaves], dtype=np.int64))
    if pool and n > 0:
        _repool(pt, 0, n - 1)
    return pt


@njit(cache=True, error_model="numpy")
def _prefix(pt, v, j):  # pragma: no cover - compiled
    """The positions and the sum of ``u`` of node v's first j + 1 blocks (j >= -1),
    relative to the node's first position. One descent."""
    if j < 0:
        return 0, 0.0
    leaves = pt.meta[_LEAVES]
    c = 0
    t = 0.0
    while v < leaves:
        left = 2 * v
        kept = pt.kept[v]
        if j < kept:
            v = left
            continue
        taken = pt.taken[v]
        if taken > 0 and j == kept:  # the bridge: all of the left, the right's first taken
            return c + pt.length[left] + pt.taken_length[v], t + pt.total[left] + pt.taken_total[v]
        c += pt.length[left]
        t += pt.total[left]
        j += taken - kept - (1 if taken > 0 else 0)
        v = left + 1
    base = (v - leaves) * pt.meta[_LEAF]
    return c + pt.cum_length[base + j], t + pt.cum_total[base + j]


@njit(cache=True, error_model="numpy")
def _block(pt, v, j):  # pragma: no cover - compiled
    """The positions and sum of ``u`` of node v's blocks before block j, and of
    block j itself (0 <= j < its block count), in one descent (``_prefix``
    would take two)."""
    leaves = pt.meta[_LEAVES]
    c = 0
    t = 0.0
    while v < leaves:
        left = 2 * v
        kept = pt.kept[v]
        if j < kept:
            v = left
            continue
        taken = pt.taken[v]
        if taken > 0 and j == kept:
            return (c + pt.kept_length[v], t + pt.kept_total[v],
                    pt.length[left] - pt.kept_length[v] + pt.taken_length[v],
                    pt.total[left] - pt.kept_total[v] + pt.taken_total[v])
        c += pt.length[left]
        t += pt.total[left]
        j += taken - kept - (1 if taken > 0 else 0)
        v = left + 1
    base = (v - leaves) * pt.meta[_LEAF] + j
    if j == 0:
        return c, t, pt.cum_length[base], pt.cum_total[base]
    return (c + pt.cum_length[base - 1], t + pt.cum_total[base - 1],
            pt.cum_length[base] - pt.cum_length[base - 1],
            pt.cum_total[base] - pt.cum_total[base - 1])


@njit(cache=True, inline="always", error_model="numpy")
def _pooled(at, ac, bt, bc):  # pragma: no cover - compiled
    """Whether block a, left of block b, has a mean >= b's: they are pooled (as
    ``pav_sorted`` compares them)."""
    return at * bc >= bt * ac


@njit(cache=True, error_model="numpy")
def _tangent(pt, v, qc, qt, hint):  # pragma: no cover - compiled
    """The first of the left child's blocks pooled into a block that ends at
    ``(qc, qt)`` (positions and sum from node v's start, right of the left
    child): the smallest i whose block i has a mean >= that of blocks i+1.. with
    the end, or the left child's block count if none (block i's test is
    monotone in i: the chain's means increase). A galloping search from
    ``hint``."""
    left = 2 * v
    lo = 0
    hi = pt.blocks[left] - 1
    if hi < lo:
        return 0
    h = min(max(hint, lo), hi)
    # test(i): block i pooled into [i+1, end]
    c0, t0, uc, ut = _block(pt, left, h)
    if _pooled(ut, uc, qt - t0 - ut, qc - c0 - uc):
        a = lo - 1
        b = h
        step = 1
        while b - step >= lo:
            k = b - step
            c0, t0, uc, ut = _block(pt, left, k)
            if not _pooled(ut, uc, qt - t0 - ut, qc - c0 - uc):
                a = k
                break
            b = k
            step *= 2
    else:
        a = h
        b = hi + 1
        step = 1
        while a + step <= hi:
            k = a + step
            c0, t0, uc, ut = _block(pt, left, k)
            if _pooled(ut, uc, qt - t0 - ut, qc - c0 - uc):
                b = k
                break
            a = k
            step *= 2
    while b - a > 1:  # test(a) false (or a = lo - 1), test(b) true (or b = hi + 1)
        k = (a + b) // 2
        c0, t0, uc, ut = _block(pt, left, k)
        if _pooled(ut, uc, qt - t0 - ut, qc - c0 - uc):
            b = k
        else:
            a = k
    return b


@njit(cache=True, error_model="numpy")
def _stays(pt, v, j, hint):  # pragma: no cover - compiled
    """Whether the right child's block j (>= 1) stays out of the bridge that
    takes its first j blocks: its mean exceeds that of the block from the
    tangent (``_tangent``) to the end of block j - 1."""
    left = 2 * v
    right = left + 1
    c0, t0, uc, ut = _block(pt, right, j)
    qc = pt.length[left] + c0
    qt = pt.total[left] + t0
    i = _tangent(pt, v, qc, qt, hint)
    pc, ptot = _prefix(pt, left, i - 1)
    return not _pooled(qt - ptot, qc - pc, ut, uc)


@njit(cache=True, error_model="numpy")
def _still_bridge(pt, v, nl, nr):  # pragma: no cover - compiled
    """Whether node v's last bridge (its ``kept`` and ``taken``, in range) is
    the bridge of its children's blocks now: with M the bridge's mean, the
    left child's block kept - 1 has a mean below M and block kept one >= M, the
    right child's block taken - 1 a mean <= M and block taken one above M
    (the line of slope M through the bridge's ends supports both chains).
    If so, node v's counts are brought up to date and True returned."""
    kept = pt.kept[v]
    taken = pt.taken[v]
    if taken < 1 or taken > nr or kept >= nl:
        return False
    left = 2 * v
    right = left + 1
    pc, ptot, kc, kt = _block(pt, left, kept)
    qc, qtot, tc, tt = _block(pt, right, taken - 1)
    qc += tc
    qtot += tt
    bc = pt.length[left] - pc + qc
    bt = pt.total[left] - ptot + qtot
    if not _pooled(kt, kc, bt, bc) or not _pooled(bt, bc, tt, tc):
        return False
    if kept > 0:
        _, _, c, s = _block(pt, left, kept - 1)
        if _pooled(s, c, bt, bc):
            return False
    if taken < nr:
        _, _, c, s = _block(pt, right, taken)
        if _pooled(bt, bc, s, c):
            return False
    pt.kept_length[v] = pc
    pt.kept_total[v] = ptot
    pt.taken_length[v] = qc
    pt.taken_total[v] = qtot
    pt.blocks[v] = kept + 1 + nr - taken
    return True


@njit(cache=True, error_model="numpy")
def _pool_node(pt, v):  # pragma: no cover - compiled
    """Node v's blocks from its children's: the bridge (if the left child's
    last block and the right child's first are pooled) takes the right
    child's first j blocks, j the first whose block stays out (``_stays``,
    monotone in j), and the left child's blocks from the tangent to it. The
    searches start from the node's last bridge."""
    left = 2 * v
    right = left + 1
    nl = pt.blocks[left]
    nr = pt.blocks[right]
    pt.length[v] = pt.length[left] + pt.length[right]
    pt.total[v] = pt.total[left] + pt.total[right]
    kept = nl
    taken = 0
    if nl > 0 and nr > 0:
        _, _, lc, lt = _block(pt, left, nl - 1)
        _, _, rc, rt = _block(pt, right, 0)
        if _pooled(lt, lc, rt, rc) and _still_bridge(pt, v, nl, nr):
            return
        if _pooled(lt, lc, rt, rc):
            hint_kept = pt.kept[v]
            lo = 1
            hi = nr - 1
            a = lo - 1  # stays(a) false (a = 0: the first block is taken)
            b = hi + 1  # stays(b) true (b = nr: none stays)
            h = min(max(pt.taken[v], lo), hi) if hi >= lo else lo
            if hi >= lo:
                if _stays(pt, v, h, hint_kept):
                    b = h
                    step = 1
                    while b - step >= lo:
                        k = b - step
                        if not _stays(pt, v, k, hint_kept):
                            a = k
                            break
                        b = k
                        step *= 2
                else:
                    a = h
                    step = 1
                    while a + step <= hi:
                        k = a + step
                        if _stays(pt, v, k, hint_kept):
                            b = k
                            break
                        a = k
                        step *= 2
                while b - a > 1:
                    k = (a + b) // 2
                    if _stays(pt, v, k, hint_kept):
                        b = k
                    else:
                        a = k
            taken = b
            c, t = _prefix(pt, right, taken - 1)
            kept = _tangent(pt, v, pt.length[left] + c, pt.total[left] + t, hint_kept)
    pt.kept[v] = kept
    pt.taken[v] = taken
    pt.kept_length[v], pt.kept_total[v] = _prefix(pt, left, kept - 1)
    pt.taken_length[v], pt.taken_total[v] = _prefix(pt, right, taken - 1)
    pt.blocks[v] = kept + (1 if taken > 0 else 0) + nr - taken


@njit(cache=True, error_model="numpy")
def _pool_leaf(pt, leaf):  # pragma: no cover - compiled
    """Pool adjacent violators over the leaf's positions (``pav_sorted``), its
    blocks' cumulative lengths and sums written in place."""
    size = pt.meta[_LEAF]
    n = pt.values.size
    s0 = leaf * size
    s1 = min(n, s0 + size)
    cl, ct = pt.cum_length, pt.cum_total
    m = 0
    for x in range(s0, s1):
        c = 1
        t = pt.values[x] - pt.sigma[x]
        while m > 0 and _pooled(ct[s0 + m - 1], cl[s0 + m - 1], t, c):
            m -= 1
            c += cl[s0 + m]
            t += ct[s0 + m]
        cl[s0 + m] = c
        ct[s0 + m] = t
        m += 1
    for k in range(s0 + 1, s0 + m):
        cl[k] += cl[k - 1]
        ct[k] += ct[k - 1]
    v = pt.meta[_LEAVES] + leaf
    pt.blocks[v] = m
    pt.length[v] = max(s1 - s0, 0)
    pt.total[v] = ct[s0 + m - 1] if m > 0 else 0.0


@njit(cache=True, error_model="numpy")
def _repool(pt, a, b):  # pragma: no cover - compiled
    """Positions ``a..b`` changed: their leaves, then the nodes above them."""
    size, leaves = pt.meta[_LEAF], pt.meta[_LEAVES]
    for leaf in range(a // size, b // size + 1):
        _pool_leaf(pt, leaf)
    lo = leaves + a // size
    hi = leaves + b // size
    while lo > 1:
        lo //= 2
        hi //= 2
        for v in range(lo, hi + 1):
            _pool_node(pt, v)


@njit(cache=True, error_model="numpy")
def pool_tree_position(pt, i, v):  # pragma: no cover - compiled
    """The position of row i's key ``(v, i)`` (v its value): the number of keys
    below it. O(log n)."""
    return _bisect(pt.values, pt.rows, i, v, 0, pt.values.size)


@njit(cache=True, error_model="numpy", inline="always")
def _bisect(s, rows, i, v, lo, hi):  # pragma: no cover - compiled
    """The number of keys below ``(v, i)``, knowing it lies in ``[lo, hi]``."""
    while lo < hi:
        mid = (lo + hi) // 2
        if s[mid] < v or (s[mid] == v and rows[mid] < i):
            lo = mid + 1
        else:
            hi = mid
    return lo


@njit(cache=True, error_model="numpy")
def _position_near(pt, i, v, start):  # pragma: no cover - compiled
    """``pool_tree_position`` by a galloping search from position ``start``:
    O(log d) for a key d positions away."""
    s, rows = pt.values, pt.rows
    n = s.size
    if start < n and (s[start] < v or (s[start] == v and rows[start] < i)):
        lo = start + 1  # keys below: all of [0, lo)
        step = 1
        hi = min(n, lo + step)
        while hi < n and (s[hi - 1] < v or (s[hi - 1] == v and rows[hi - 1] < i)):
            lo = hi
            step *= 2
            hi = min(n, lo + step)
    else:
        hi = start  # no key below from hi on
        step = 1
        lo = max(0, hi - step)
        while lo > 0 and not (s[lo] < v or (s[lo] == v and rows[lo] < i)):
            hi = lo
            step *= 2
            lo = max(0, hi - step)
    return _bisect(s, rows, i, v, lo, hi)


@njit(cache=True, error_model="numpy")
def pool_tree_replace(pt, i, v_old, v_new, pool):  # pragma: no cover - compiled
    """Row i's value goes from ``v_old`` to ``v_new``: its entry moves to its new
    position (those between shift by one), then, with ``pool``, the blocks
    over the positions that changed are pooled again (module docstring)."""
    s, rows = pt.values, pt.rows
    r = pool_tree_position(pt, i, v_old)
    r_new = _position_near(pt, i, v_new, r)
    if v_old < v_new:
        r_new -= 1  # (the old key is below the new one)
    if r_new > r:
        for x in range(r, r_new):
            s[x] = s[x + 1]
            rows[x] = rows[x + 1]
    else:
        for x in range(r, r_new, -1):
            s[x] = s[x - 1]
            rows[x] = rows[x - 1]
    s[r_new] = v_new
    rows[r_new] = i
    if pool:
        _repool(pt, min(r, r_new), max(r, r_new))


@njit(cache=True, error_model="numpy")
def pool_tree_mean(pt, x):  # pragma: no cover - compiled
    """``z_x``, the mean of ``u`` over the block holding position x: one descent
    from the root (a node's kept blocks, its bridge or the right child's),
    then a binary search in the leaf. O(log n)."""
    leaves = pt.meta[_LEAVES]
    v = 1
    start = 0
    while v < leaves:
        left = 2 * v
        off = x - start
        if off < pt.kept_length[v]:
            v = left
            continue
        if pt.taken[v] > 0 and off < pt.length[left] + pt.taken_length[v]:
            c = pt.length[left] - pt.kept_length[v] + pt.taken_length[v]
            t = pt.total[left] - pt.kept_total[v] + pt.taken_total[v]
            return t / c
        start += pt.length[left]
        v = left + 1
    base = (v - leaves) * pt.meta[_LEAF]
    off = x - start
    a = 0
    b = pt.blocks[v] - 1
    while a < b:  # the first block whose cumulative length exceeds off
        k = (a + b) // 2
        if pt.cum_length[base + k] > off:
            b = k
        else:
            a = k + 1
    c = pt.cum_length[base + a]
    t = pt.cum_total[base + a]
    if a > 0:
        c -= pt.cum_length[base + a - 1]
        t -= pt.cum_total[base + a - 1]
    return t / c


@njit(cache=True, error_model="numpy")
def pool_tree_weight(pt, i, v):  # pragma: no cover - compiled
    """Row i's weight ``s_x - z_x`` (v its value, x its position). O(log n)."""
    x = pool_tree_position(pt, i, v)
    return pt.values[x] - pool_tree_mean(pt, x)


@njit(cache=True, error_model="numpy")
def pool_tree_q(pt):  # pragma: no cover - compiled
    """Every row's weight (``q`` in row order), each as ``pool_tree_weight``
    gives it. O(n log n)."""
    n = pt.values.size
    q = np.empty(n)
    for x in range(n):
        q[pt.rows[x]] = pt.values[x] - pool_tree_mean(pt, x)
    return q
