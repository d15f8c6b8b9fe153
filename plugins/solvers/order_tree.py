"""The order-statistic tree of the best response (``plugins.solvers.best_response``):
a sorted multiset of ``(value, row)`` keys in a counted B+ tree, with the
sum of ``relu(s - t)`` over its keys in one descent.

Leaves of at most 64 sorted keys with their suffix sums, internal nodes of
at most 32 children with each child's separator, count and sum of keys and
the suffixes of those; the whole tree is five arrays (``OrderTree``). The
row breaks ties, so the order is strict and a row's key is found exactly.
Replacing one row's value deletes and inserts one key: O(64) in a leaf and
O(32) per level on the path (height ~log_24(n / 48): 4 at n = 1e6), all of
it recomputed from the level below (no running sums, so no drift over any
number of updates). A full leaf or node splits in two; emptied leaves stay
until the spare leaves run out, then an O(n) rebuild (after Omega(n)
insertions: O(1) amortised). ``docs/algorithms.md``, Solvers, has the
costs and why.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit

# state ``ot``, an ``OrderTree`` of five arrays (picklable; few arrays, so that
# the compiled kernels pass and reference-count little): ``LF = ot.leaf_values``,
# ``LI = ot.leaf_ints``, ``NF = ot.node_values``, ``NI = ot.node_ints`` and
# ``ot.meta``, with LC keys per leaf and IC children per internal node at most:
#   LF[a, p] (p < LC) leaf a's values, sorted by (value, row); LF[a, LC + p] =
#     sum_{q >= p} of them (p <= count)
#   LI[a, p] (p < LC) their rows; LI[a, LC] the count; LI[a, LC + 1] the next
#     leaf in key order (-1 after the last; leaf 0 is the first)
#   NF[x, c] (c < IC) the value of child c's separator: child c >= 1 holds the
#     keys >= its separator and below the next one (c = 0's is never read);
#     NF[x, IC + c] the sum of child c's keys; NF[x, 2 IC + c] the sum of those
#     of children >= c (c <= nk)
#   NI[x, c] child c (a leaf one level above the leaves); NI[x, IC + c] the
#     separator's row; NI[x, 2 IC + c] child c's count of keys; NI[x, 3 IC + c]
#     the count of children >= c (c <= nk); NI[x, 4 IC + 1] = nk, the children
#   meta = [root, height (internal levels, >= 1), leaves used, nodes used, LC,
#     IC (slots _ROOT.._IC), then the nodes (64) and the child slots (64) of
#     the last descent (from _PATH)]
# Every count and sum is recomputed from the level below on each change (never
# a running total), so nothing drifts over any number of updates.

_MAX_HEIGHT = 64
_ROOT, _HEIGHT, _LEAVES, _NODES, _LC, _IC, _PATH = range(7)


class OrderTree(NamedTuple):
    """A sorted multiset of ``(value, row)`` keys in a counted B+ tree (the
    comment above: the five arrays, read by name)."""

    leaf_values: np.ndarray
    leaf_ints: np.ndarray
    node_values: np.ndarray
    node_ints: np.ndarray
    meta: np.ndarray


def order_tree_new(values: np.ndarray, leaf: int | None = None,
                   fanout: int | None = None) -> OrderTree:
    """An ``OrderTree`` over ``values`` (row j has key ``(values[j], j)``): leaves
    of at most ``leaf`` keys (default 64, at least 2), internal nodes of at
    most ``fanout`` children (default 32, at least 4); bulk-loaded 3/4 full,
    with room for as many leaves again (``_rebuild`` when that runs out)."""
    n = int(values.size)
    LC = 64 if leaf is None else max(2, int(leaf))
    IC = 32 if fanout is None else max(4, int(fanout))
    fill = max(1, (3 * LC) // 4)
    leaves = max(1, -(-n // fill))
    nl = 2 * leaves + 4
    ni = nl + _MAX_HEIGHT
    meta = np.zeros(_PATH + 2 * _MAX_HEIGHT, dtype=np.int64)
    meta[_ROOT], meta[_HEIGHT], meta[_LC], meta[_IC] = 0, 1, LC, IC
    LI = np.zeros((nl, LC + 2), dtype=np.int64)
    LI[:, LC + 1] = -1
    ot = OrderTree(np.zeros((nl, 2 * LC + 1)), LI, np.zeros((ni, 3 * IC + 1)),
                   np.zeros((ni, 4 * IC + 2), dtype=np.int64), meta)
    order = np.argsort(values, kind="stable")
    _load(ot, np.ascontiguousarray(values, dtype=np.float64)[order], order.astype(np.int64))
    return ot


@njit(cache=True, inline="always", error_model="numpy")
def _leaf_suffix(LF, LI, LC, a):  # pragma: no cover - compiled
    s = 0.0
    k = LI[a, LC]
    LF[a, LC + k] = 0.0
    for p in range(k - 1, -1, -1):
        s += LF[a, p]
        LF[a, LC + p] = s


@njit(cache=True, inline="always", error_model="numpy")
def _node_suffix(NF, NI, IC, x, top):  # pragma: no cover - compiled
    """Recompute the suffix counts and sums of node x at slots ``<= top`` (the
    same additions, in the same order, as from scratch)."""
    k = NI[x, 4 * IC + 1]
    if top >= k - 1:
        NI[x, 3 * IC + k] = 0
        NF[x, 2 * IC + k] = 0.0
        top = k - 1
    for c in range(top, -1, -1):
        NI[x, 3 * IC + c] = NI[x, 3 * IC + c + 1] + NI[x, 2 * IC + c]
        NF[x, 2 * IC + c] = NF[x, 2 * IC + c + 1] + NF[x, IC + c]


@njit(cache=True, inline="always", error_model="numpy")
def _set_total(ot, x, c, ch, leaf_child):  # pragma: no cover - compiled
    """Child slot c of node x takes the count and sum of ``ch``."""
    LF, LI, NF, NI, meta = ot.leaf_values, ot.leaf_ints, ot.node_values, ot.node_ints, \
        ot.meta
    LC, IC = meta[_LC], meta[_IC]
    if leaf_child:
        NI[x, 2 * IC + c] = LI[ch, LC]
        NF[x, IC + c] = LF[ch, LC]
    else:
        NI[x, 2 * IC + c] = NI[ch, 3 * IC]
        NF[x, IC + c] = NF[ch, 2 * IC]


@njit(cache=True, error_model="numpy")
def _load(ot, svals, srows):  # pragma: no cover - compiled
    """Bulk-load the sorted keys ``(svals, srows)``: leaves 3/4 full, then
    levels of nodes 3/4 full up to a single root (at least one level)."""
    LF, LI, NF, NI, meta = ot.leaf_values, ot.leaf_ints, ot.node_values, ot.node_ints, \
        ot.meta
    LC, IC = meta[_LC], meta[_IC]
    fill = max(1, (3 * LC) // 4)
    n = svals.size
    leaves = max(1, -(-n // fill))
    ids = np.empty(leaves, dtype=np.int64)
    kv = np.empty(leaves)
    kr = np.empty(leaves, dtype=np.int64)
    for a in range(leaves):
        lo = a * fill
        hi = min(n, lo + fill)
        LI[a, LC] = max(hi - lo, 0)
        for p in range(lo, hi):
            LF[a, p - lo] = svals[p]
            LI[a, p - lo] = srows[p]
        _leaf_suffix(LF, LI, LC, a)
        LI[a, LC + 1] = a + 1 if a + 1 < leaves else -1
        ids[a] = a
        kv[a] = svals[lo] if lo < n else -np.inf
        kr[a] = srows[lo] if lo < n else -1
    meta[_LEAVES] = leaves
    width = max(2, (3 * IC) // 4)
    m = leaves
    x = 0
    height = 0
    leaf_level = True
    while True:
        groups = -(-m // width)
        for gi in range(groups):
            lo = gi * width
            hi = min(m, lo + width)
            NI[x, 4 * IC + 1] = hi - lo
            for c in range(hi - lo):
                NI[x, c] = ids[lo + c]
                NF[x, c] = kv[lo + c]
                NI[x, IC + c] = kr[lo + c]
                _set_total(ot, x, c, ids[lo + c], leaf_level)
            _node_suffix(NF, NI, IC, x, IC)
            ids[gi] = x
            kv[gi] = kv[lo]
            kr[gi] = kr[lo]
            x += 1
        height += 1
        leaf_level = False
        m = groups
        if m == 1:
            break
    meta[_ROOT] = x - 1
    meta[_HEIGHT] = height
    meta[_NODES] = x


@njit(cache=True, error_model="numpy")
def _rebuild(ot):  # pragma: no cover - compiled
    """Bulk-load the keys again (when the leaves or nodes run out). O(n)."""
    LF, LI, NI, meta = ot.leaf_values, ot.leaf_ints, ot.node_ints, ot.meta
    LC, IC = meta[_LC], meta[_IC]
    total = NI[meta[_ROOT], 3 * IC]
    svals = np.empty(total)
    srows = np.empty(total, dtype=np.int64)
    p = 0
    a = 0
    while a >= 0:
        for q in range(LI[a, LC]):
            svals[p] = LF[a, q]
            srows[p] = LI[a, q]
            p += 1
        a = LI[a, LC + 1]
    _load(ot, svals, srows)


@njit(cache=True, inline="always", error_model="numpy")
def _key_less(v1, r1, v2, r2):  # pragma: no cover - compiled
    return v1 < v2 or (v1 == v2 and r1 < r2)


@njit(cache=True, inline="always", error_model="numpy")
def _child_of_key(NF, NI, IC, x, v, r):  # pragma: no cover - compiled
    """The last child of node x whose separator is ``<= (v, r)`` (else 0)."""
    lo = 0
    hi = NI[x, 4 * IC + 1] - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if _key_less(v, r, NF[x, mid], NI[x, IC + mid]):
            hi = mid - 1
        else:
            lo = mid
    return lo


@njit(cache=True, inline="always", error_model="numpy")
def _descend(ot, v, r):  # pragma: no cover - compiled
    """The leaf where key ``(v, r)`` is or belongs; the path in ``meta``."""
    NF, NI, meta = ot.node_values, ot.node_ints, ot.meta
    IC = meta[_IC]
    x = meta[_ROOT]
    for d in range(meta[_HEIGHT]):
        c = _child_of_key(NF, NI, IC, x, v, r)
        meta[_PATH + d] = x
        meta[_PATH + _MAX_HEIGHT + d] = c
        x = NI[x, c]
    return x


@njit(cache=True, inline="always", error_model="numpy")
def _pos_in_leaf(LF, LI, LC, a, v, r):  # pragma: no cover - compiled
    """The number of keys of leaf a below ``(v, r)``."""
    lo = 0
    hi = LI[a, LC]
    while lo < hi:
        mid = (lo + hi) // 2
        if _key_less(LF[a, mid], LI[a, mid], v, r):
            lo = mid + 1
        else:
            hi = mid
    return lo


@njit(cache=True, inline="always", error_model="numpy")
def _propagate(ot, a):  # pragma: no cover - compiled
    """Leaf a (the end of the path in ``meta``) changed: refresh the counts
    and sums on the path, bottom up. O(height * fanout)."""
    NF, NI, meta = ot.node_values, ot.node_ints, ot.meta
    IC = meta[_IC]
    h = meta[_HEIGHT]
    ch = a
    for d in range(h - 1, -1, -1):
        x = meta[_PATH + d]
        c = meta[_PATH + _MAX_HEIGHT + d]
        _set_total(ot, x, c, ch, d == h - 1)
        _node_suffix(NF, NI, IC, x, c)
        ch = x


@njit(cache=True, error_model="numpy")
def _put_child(ot, x, c, ch, v, r, leaf_child):  # pragma: no cover - compiled
    """Insert child ``ch`` with separator ``(v, r)`` at slot c of node x (not full)."""
    NF, NI, meta = ot.node_values, ot.node_ints, ot.meta
    IC = meta[_IC]
    k = NI[x, 4 * IC + 1]
    for q in range(k, c, -1):
        NI[x, q] = NI[x, q - 1]
        NF[x, q] = NF[x, q - 1]
        NI[x, IC + q] = NI[x, IC + q - 1]
        NI[x, 2 * IC + q] = NI[x, 2 * IC + q - 1]
        NF[x, IC + q] = NF[x, IC + q - 1]
    NI[x, c] = ch
    NF[x, c] = v
    NI[x, IC + c] = r
    _set_total(ot, x, c, ch, leaf_child)
    NI[x, 4 * IC + 1] = k + 1


@njit(cache=True, error_model="numpy")
def _insert_child(ot, d, ch, v, r, leaf_child):  # pragma: no cover - compiled
    """Insert child ``ch`` (separator ``(v, r)``) after the slot of the path at
    depth d, splitting full nodes up the path (a new root when the root splits)."""
    NF, NI, meta = ot.node_values, ot.node_ints, ot.meta
    IC = meta[_IC]
    while True:
        x = meta[_PATH + d]
        c = meta[_PATH + _MAX_HEIGHT + d]
        _set_total(ot, x, c, NI[x, c], leaf_child)  # the split child's new total
        if NI[x, 4 * IC + 1] < IC:
            _put_child(ot, x, c + 1, ch, v, r, leaf_child)
            _node_suffix(NF, NI, IC, x, IC)
            return
        # x is full: its upper half moves to a new node y, then ch goes in
        y = meta[_NODES]
        meta[_NODES] += 1
        half = IC // 2
        for q in range(half, IC):
            NI[y, q - half] = NI[x, q]
            NF[y, q - half] = NF[x, q]
            NI[y, IC + q - half] = NI[x, IC + q]
            NI[y, 2 * IC + q - half] = NI[x, 2 * IC + q]
            NF[y, IC + q - half] = NF[x, IC + q]
        NI[y, 4 * IC + 1] = IC - half
        NI[x, 4 * IC + 1] = half
        if c + 1 <= half:
            _put_child(ot, x, c + 1, ch, v, r, leaf_child)
        else:
            _put_child(ot, y, c + 1 - half, ch, v, r, leaf_child)
        _node_suffix(NF, NI, IC, x, IC)
        _node_suffix(NF, NI, IC, y, IC)
        v = NF[y, 0]
        r = NI[y, IC]
        ch = y
        leaf_child = False
        if d == 0:  # a new root above x and y
            root = meta[_NODES]
            meta[_NODES] += 1
            NI[root, 4 * IC + 1] = 1
            NI[root, 0] = x
            NF[root, 0] = -np.inf
            NI[root, IC] = -1
            _set_total(ot, root, 0, x, False)
            _put_child(ot, root, 1, y, v, r, False)
            _node_suffix(NF, NI, IC, root, IC)
            meta[_ROOT] = root
            meta[_HEIGHT] += 1
            return
        d -= 1


@njit(cache=True, error_model="numpy")
def _split_leaf(ot, a):  # pragma: no cover - compiled
    """Move the upper half of the full leaf a (end of the path) to a new leaf."""
    LF, LI, meta = ot.leaf_values, ot.leaf_ints, ot.meta
    LC = meta[_LC]
    b = meta[_LEAVES]
    meta[_LEAVES] += 1
    half = LC // 2
    for q in range(half, LC):
        LF[b, q - half] = LF[a, q]
        LI[b, q - half] = LI[a, q]
    LI[b, LC] = LC - half
    LI[a, LC] = half
    LI[b, LC + 1] = LI[a, LC + 1]
    LI[a, LC + 1] = b
    _leaf_suffix(LF, LI, LC, a)
    _leaf_suffix(LF, LI, LC, b)
    _insert_child(ot, meta[_HEIGHT] - 1, b, LF[b, 0], LI[b, 0], True)


@njit(cache=True, error_model="numpy")
def order_tree_replace(ot, r, v_old, v_new):  # pragma: no cover - compiled
    """Replace row ``r``'s key ``(v_old, r)`` by ``(v_new, r)``. O(LC + height *
    fanout); a leaf split O(LC + height * fanout) more, a rebuild O(n) once
    the spare leaves or nodes are used up (after Omega(n) insertions)."""
    LF, LI, meta = ot.leaf_values, ot.leaf_ints, ot.meta
    LC = meta[_LC]
    a = _descend(ot, v_old, r)
    p = _pos_in_leaf(LF, LI, LC, a, v_old, r)
    k = LI[a, LC]
    for q in range(p, k - 1):
        LF[a, q] = LF[a, q + 1]
        LI[a, q] = LI[a, q + 1]
    LI[a, LC] = k - 1
    _leaf_suffix(LF, LI, LC, a)
    _propagate(ot, a)
    if (meta[_LEAVES] >= LF.shape[0] or meta[_NODES] + meta[_HEIGHT] + 2 > ot.node_values.shape[0]
            or meta[_HEIGHT] + 2 > _MAX_HEIGHT):
        _rebuild(ot)
    a = _descend(ot, v_new, r)
    if LI[a, LC] == LC:
        _split_leaf(ot, a)
        a = _descend(ot, v_new, r)
    p = _pos_in_leaf(LF, LI, LC, a, v_new, r)
    k = LI[a, LC]
    for q in range(k, p, -1):
        LF[a, q] = LF[a, q - 1]
        LI[a, q] = LI[a, q - 1]
    LF[a, p] = v_new
    LI[a, p] = r
    LI[a, LC] = k + 1
    _leaf_suffix(LF, LI, LC, a)
    _propagate(ot, a)


@njit(cache=True, inline="always", error_model="numpy")
def relu_sum(ot, t, shift):  # pragma: no cover - compiled
    """``sum relu(s - t)`` over the keys' values ``s = fl(value + shift)`` and
    the number of them above ``t`` (``fl(value + shift) > t``, compared as the
    dense projection forms ``v - c``). One descent, O(height * log fanout +
    log LC)."""
    LF, LI, NF, NI, meta = ot.leaf_values, ot.leaf_ints, ot.node_values, ot.node_ints, \
        ot.meta
    LC, IC = meta[_LC], meta[_IC]
    x = meta[_ROOT]
    count = 0
    s = 0.0
    for _ in range(meta[_HEIGHT]):
        lo = 0
        hi = NI[x, 4 * IC + 1] - 1
        while lo < hi:  # the last child whose separator is not above t
            mid = (lo + hi + 1) // 2
            if NF[x, mid] + shift > t:
                hi = mid - 1
            else:
                lo = mid
        count += NI[x, 3 * IC + lo + 1]
        s += NF[x, 2 * IC + lo + 1]
        x = NI[x, lo]
    a = 0
    b = LI[x, LC]
    while a < b:  # the first key of the leaf above t
        mid = (a + b) // 2
        if LF[x, mid] + shift > t:
            b = mid
        else:
            a = mid + 1
    count += LI[x, LC] - a
    return (s + LF[x, LC + a]) + count * (shift - t), count


@njit(cache=True, error_model="numpy")
def rank_above(ot, v, r):  # pragma: no cover - compiled
    """The number of keys above ``(v, r)`` (a key in the structure). O(log n)."""
    LF, LI, NF, NI, meta = ot.leaf_values, ot.leaf_ints, ot.node_values, ot.node_ints, \
        ot.meta
    LC, IC = meta[_LC], meta[_IC]
    x = meta[_ROOT]
    above = 0
    for _ in range(meta[_HEIGHT]):
        c = _child_of_key(NF, NI, IC, x, v, r)
        above += NI[x, 3 * IC + c + 1]
        x = NI[x, c]
    return above + LI[x, LC] - _pos_in_leaf(LF, LI, LC, x, v, r) - 1


@njit(cache=True, error_model="numpy")
def order_tree_size(ot):  # pragma: no cover - compiled
    meta = ot.meta
    return ot.node_ints[meta[_ROOT], 3 * meta[_IC]]


@njit(cache=True, error_model="numpy")
def select_value(ot, k):  # pragma: no cover - compiled
    """The value of the k-th smallest key (0-based, ``k < size``). O(height * fanout)."""
    NI, meta = ot.node_ints, ot.meta
    IC = meta[_IC]
    x = meta[_ROOT]
    for _ in range(meta[_HEIGHT]):
        c = 0
        while c < NI[x, 4 * IC + 1] - 1 and k >= NI[x, 2 * IC + c]:
            k -= NI[x, 2 * IC + c]
            c += 1
        x = NI[x, c]
    return ot.leaf_values[x, k]

