"""Kernels of the variance-reduced solvers (``plugins.solvers.prospect``,
``plugins.solvers.lsvrg``):
per-row losses and gradients of the two built-in models, the dense best
response, and the best response maintained under one-row updates.

**The best response.** With ``nu > 0`` the inner maximiser of ``F`` is

    q(l)_j = clip(v_j - theta, 0, c_j),   v = 1/n + l / (nu n),

with ``c`` the set's row caps (``row_caps()``: k-set ``1/k``, simplex 1,
alpha-set ``alpha``) and ``theta`` the root of ``f(theta) = sum_j clip(v_j -
theta, 0, c_j) = 1``. Writing ``clip(x, 0, c) = relu(x) - relu(x - c)``,

    f(theta) = P_U(theta) - P_L(theta),   P_S(t) = sum_{s in S} relu(s - t),

over the multisets ``U = {v_j}`` and ``L = {v_j - c_j}``; ``f`` is continuous,
piecewise linear and non-increasing with breakpoints ``U`` and ``L``. With
both multisets kept sorted, with counts and suffix sums, ``P_S(t)`` is a
binary search plus two lookups, and the root is found by a binary search over
the breakpoints of ``U`` (the last one with ``f >= 1``), one over those of
``L``, and a linear interpolation on the segment after the larger of the two.

``OrderTree`` keeps a multiset sorted in a counted B+ tree of ``(value,
row)`` keys (the row breaks ties, so the order is strict and a row's key is
found exactly): leaves of at most 64 sorted keys with their suffix sums,
internal nodes of at most 32 children with each child's separator, count and
sum of keys and the suffixes of those; the whole tree is five arrays. ``P_S(t)``
is one descent (the counts and sums of the children right of the path, then
a leaf's suffix). Replacing one row's value deletes and inserts one key: O(64)
in a leaf and O(32) per level on the path (height ~log_24(n / 48): 4 at n =
1e6), all of it recomputed from the level below (no running sums, so no drift
over any number of updates). A full leaf or node splits in two (O(64 + 32
height)); emptied leaves stay until the spare leaves (as many as the bulk
load made) run out, and then an O(n) rebuild (after Omega(n) insertions:
O(1) amortised). With equal caps (k-set, simplex) ``L`` is ``U`` shifted by
``-c`` and is read from ``U`` (``fl(v_j - c)`` compared exactly as the dense
projection forms it); with per-row caps a second ``OrderTree`` holds ``L``.

Costs per one-row change: O(log n) to update (amortised); ``theta`` by
Newton's method from the previous one (``br_theta``: two O(log n) evaluations
of ``f`` when no breakpoint lies between the two thresholds, the common
case), else by the O(log^2 n) search (O(log n) evaluations of ``f`` at keys
selected by rank); then ``q_i`` of any row in O(1). With ``nu = 0`` the best
response is the linear maximisation oracle (the largest losses filled up to
their caps, ties broken by the larger row index first); with equal caps
``q_i`` follows from the rank of row i (O(log n)); with per-row caps ``q_i``
needs the caps of all larger keys, an exact O(n) scan (``weight_lmo_scan``).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from plugins.lib.capped import euclidean_projection_row_caps

#: models with compiled per-row kernels, by name, with their kind code
MODEL_KINDS = {"linear_mse": 0, "logistic_cel": 1}


# ---------------------------------------------------------------------------
# models: per-row loss and gradient (scaled, never clipped)
# ---------------------------------------------------------------------------


def model_spec(model) -> tuple[int, int, int, bool, float]:
    """The scalars the row kernels read: ``(kind, d, C, bias, 1 / scale)``.
    ``model`` must be a set-up ``linear_mse`` or ``logistic_cel`` (KeyError
    otherwise: the solvers turn it into a ConfigError)."""
    kind = MODEL_KINDS[model.name]
    if kind == 0:
        return (0, int(model.d_), 1, bool(model.bias), 1.0 / float(model.scale_))
    return (1, int(model.d_), int(model.C_), True, 1.0 / float(model.scale_))


def row_smoothness(model, X: np.ndarray, chunk: int = 65536) -> float:
    """A constant L such that every scaled row loss is L-smooth:
    ``2 max_i ||x_i'||^2 / scale`` for the squared error (Hessian ``2 x' x'^T``,
    ``x' = (x, 1)`` with a bias, ``x`` without) and ``max_i ||(x_i, 1)||^2 /
    (2 scale)`` for softmax cross-entropy (Hessian ``(diag(p) - p p^T) kron
    x x^T`` with ``||diag(p) - p p^T|| <= 1/2``)."""
    best = 0.0
    for start in range(0, X.shape[0], chunk):
        block = np.asarray(X[start:start + chunk], dtype=np.float64)
        best = max(best, float(np.max(np.einsum("ij,ij->i", block, block))))
    kind, _, _, bias, inv_scale = model_spec(model)
    if kind == 0:
        return 2.0 * (best + (1.0 if bias else 0.0)) * inv_scale
    return 0.5 * (best + 1.0) * inv_scale


@njit(cache=True, inline="always", error_model="numpy")
def _residual(spec, X, y, i, w):  # pragma: no cover - compiled
    """``<x_i, theta> (+ b) - y_i`` of the linear model."""
    d, bias = spec[1], spec[3]
    r = -y[i]
    for j in range(d):
        r += X[i, j] * w[j]
    if bias:
        r += w[d]
    return r


@njit(cache=True, inline="always", error_model="numpy")
def _logits(spec, X, i, w, z):  # pragma: no cover - compiled
    """The softmax model's logits of row ``i`` into ``z``; returns their maximum."""
    d, C = spec[1], spec[2]
    D = d + 1
    zmax = -np.inf
    for c in range(C):
        s = w[c * D + d]
        for j in range(d):
            s += w[c * D + j] * X[i, j]
        z[c] = s
        zmax = max(zmax, s)
    return zmax


@njit(cache=True, error_model="numpy")
def row_loss(spec, X, y, i, w, z):  # pragma: no cover - compiled
    """Scaled loss of row ``i`` at ``w``: one evaluation of the row (a data
    point). ``z`` (``row_scratch`` floats) is left holding what ``row_grad``
    needs for the gradient at the same point: the residual (squared error)
    or the class probabilities (cross-entropy)."""
    kind, C, inv_scale = spec[0], spec[2], spec[4]
    if kind == 0:
        r = _residual(spec, X, y, i, w)
        z[0] = r
        return r * r * inv_scale
    zmax = _logits(spec, X, i, w, z)
    zy = z[int(y[i])]
    tot = 0.0
    for c in range(C):
        z[c] = math.exp(z[c] - zmax)
        tot += z[c]
    for c in range(C):
        z[c] = z[c] / tot
    return (math.log(tot) + zmax - zy) * inv_scale


@njit(cache=True, error_model="numpy")
def row_grad(spec, X, y, i, z, g):  # pragma: no cover - compiled
    """The scaled gradient of row ``i`` written into ``g``, from the ``z`` that
    ``row_loss`` left for row ``i``: the gradient at the point where the loss
    was just evaluated (one per-row gradient formed, no further evaluation)."""
    kind, d, C, bias, inv_scale = spec
    if kind == 0:
        a = 2.0 * z[0] * inv_scale
        for j in range(d):
            g[j] = a * X[i, j]
        if bias:
            g[d] = a
        return
    D = d + 1
    cls = int(y[i])
    for c in range(C):
        a = z[c]
        if c == cls:
            a -= 1.0
        a *= inv_scale
        for j in range(d):
            g[c * D + j] = a * X[i, j]
        g[c * D + d] = a


@njit(cache=True, error_model="numpy")
def row_loss_grad(spec, X, y, i, w, g, z):  # pragma: no cover - compiled
    """Scaled loss of row ``i`` at ``w``, its gradient written into ``g``: one
    evaluation and one gradient (``row_loss`` then ``row_grad``)."""
    loss = row_loss(spec, X, y, i, w, z)
    row_grad(spec, X, y, i, z, g)
    return loss


@njit(cache=True, error_model="numpy")
def row_scratch(spec):  # pragma: no cover - compiled
    """The length of the ``z`` scratch of the row kernels (one per class)."""
    return max(spec[2], 1)


# ---------------------------------------------------------------------------
# the dense best response (the reference, and LSVRG's anchor)
# ---------------------------------------------------------------------------


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
def best_response_dense(losses, caps, nu):  # pragma: no cover - compiled
    """``q(l)`` over all rows: the projection of ``1/n + l/(nu n)`` onto the
    capped simplex if ``nu > 0`` (O(n log n)), else ``lmo_row_caps``."""
    n = losses.size
    if nu == 0.0:
        return lmo_row_caps(losses, caps)
    return euclidean_projection_row_caps(1.0 / n + losses / (nu * n), caps)


# ---------------------------------------------------------------------------
# OrderTree: a sorted multiset of (value, row) keys in a counted B+ tree
# ---------------------------------------------------------------------------
# state tuple ``ot = (LF, LI, NF, NI, meta)`` (five arrays, picklable; few
# arrays, so that the compiled kernels pass and reference-count little), with
# LC keys per leaf and IC children per internal node at most:
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
#     IC, then the nodes (64) and the child slots (64) of the last descent]
# Every count and sum is recomputed from the level below on each change (never
# a running total), so nothing drifts over any number of updates.

_MAX_HEIGHT = 64
_PATH = 6


def order_tree_new(values: np.ndarray, leaf: int | None = None,
                   fanout: int | None = None) -> tuple:
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
    meta[:6] = (0, 1, 0, 0, LC, IC)
    LI = np.zeros((nl, LC + 2), dtype=np.int64)
    LI[:, LC + 1] = -1
    ot = (np.zeros((nl, 2 * LC + 1)), LI, np.zeros((ni, 3 * IC + 1)),
          np.zeros((ni, 4 * IC + 2), dtype=np.int64), meta)
    order = np.argsort(values, kind="stable")
    _load(ot, np.ascontiguousarray(values, dtype=np.float64)[order], order.astype(np.int64))
    return ot


def block_order_new(values: np.ndarray, block: int | None = None) -> tuple:
    """The former constructor's name and signature: ``order_tree_new`` with
    leaves of ``block`` keys."""
    return order_tree_new(values, block)


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
    LF, LI, NF, NI, meta = ot
    LC, IC = meta[4], meta[5]
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
    LF, LI, NF, NI, meta = ot
    LC, IC = meta[4], meta[5]
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
    meta[2] = leaves
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
    meta[0] = x - 1
    meta[1] = height
    meta[3] = x


@njit(cache=True, error_model="numpy")
def _rebuild(ot):  # pragma: no cover - compiled
    """Bulk-load the keys again (when the leaves or nodes run out). O(n)."""
    LF, LI, NF, NI, meta = ot
    LC, IC = meta[4], meta[5]
    total = NI[meta[0], 3 * IC]
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
    NF, NI, meta = ot[2], ot[3], ot[4]
    IC = meta[5]
    x = meta[0]
    for d in range(meta[1]):
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
    NF, NI, meta = ot[2], ot[3], ot[4]
    IC = meta[5]
    h = meta[1]
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
    NF, NI, meta = ot[2], ot[3], ot[4]
    IC = meta[5]
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
    NF, NI, meta = ot[2], ot[3], ot[4]
    IC = meta[5]
    while True:
        x = meta[_PATH + d]
        c = meta[_PATH + _MAX_HEIGHT + d]
        _set_total(ot, x, c, NI[x, c], leaf_child)  # the split child's new total
        if NI[x, 4 * IC + 1] < IC:
            _put_child(ot, x, c + 1, ch, v, r, leaf_child)
            _node_suffix(NF, NI, IC, x, IC)
            return
        # x is full: its upper half moves to a new node y, then ch goes in
        y = meta[3]
        meta[3] += 1
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
            root = meta[3]
            meta[3] += 1
            NI[root, 4 * IC + 1] = 1
            NI[root, 0] = x
            NF[root, 0] = -np.inf
            NI[root, IC] = -1
            _set_total(ot, root, 0, x, False)
            _put_child(ot, root, 1, y, v, r, False)
            _node_suffix(NF, NI, IC, root, IC)
            meta[0] = root
            meta[1] += 1
            return
        d -= 1


@njit(cache=True, error_model="numpy")
def _split_leaf(ot, a):  # pragma: no cover - compiled
    """Move the upper half of the full leaf a (end of the path) to a new leaf."""
    LF, LI, meta = ot[0], ot[1], ot[4]
    LC = meta[4]
    b = meta[2]
    meta[2] += 1
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
    _insert_child(ot, meta[1] - 1, b, LF[b, 0], LI[b, 0], True)


@njit(cache=True, error_model="numpy")
def order_tree_replace(ot, r, v_old, v_new):  # pragma: no cover - compiled
    """Replace row ``r``'s key ``(v_old, r)`` by ``(v_new, r)``. O(LC + height *
    fanout); a leaf split O(LC + height * fanout) more, a rebuild O(n) once
    the spare leaves or nodes are used up (after Omega(n) insertions)."""
    LF, LI, meta = ot[0], ot[1], ot[4]
    LC = meta[4]
    a = _descend(ot, v_old, r)
    p = _pos_in_leaf(LF, LI, LC, a, v_old, r)
    k = LI[a, LC]
    for q in range(p, k - 1):
        LF[a, q] = LF[a, q + 1]
        LI[a, q] = LI[a, q + 1]
    LI[a, LC] = k - 1
    _leaf_suffix(LF, LI, LC, a)
    _propagate(ot, a)
    if (meta[2] >= LF.shape[0] or meta[3] + meta[1] + 2 > ot[2].shape[0]
            or meta[1] + 2 > _MAX_HEIGHT):
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
    LF, LI, NF, NI, meta = ot
    LC, IC = meta[4], meta[5]
    x = meta[0]
    count = 0
    s = 0.0
    for _ in range(meta[1]):
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
    LF, LI, NF, NI, meta = ot
    LC, IC = meta[4], meta[5]
    x = meta[0]
    above = 0
    for _ in range(meta[1]):
        c = _child_of_key(NF, NI, IC, x, v, r)
        above += NI[x, 3 * IC + c + 1]
        x = NI[x, c]
    return above + LI[x, LC] - _pos_in_leaf(LF, LI, LC, x, v, r) - 1


@njit(cache=True, error_model="numpy")
def order_tree_size(ot):  # pragma: no cover - compiled
    meta = ot[4]
    return ot[3][meta[0], 3 * meta[5]]


@njit(cache=True, error_model="numpy")
def select_value(ot, k):  # pragma: no cover - compiled
    """The value of the k-th smallest key (0-based, ``k < size``). O(height * fanout)."""
    NI, meta = ot[3], ot[4]
    IC = meta[5]
    x = meta[0]
    for _ in range(meta[1]):
        c = 0
        while c < NI[x, 4 * IC + 1] - 1 and k >= NI[x, 2 * IC + c]:
            k -= NI[x, 2 * IC + c]
            c += 1
        x = NI[x, c]
    return ot[0][x, k]


# ---------------------------------------------------------------------------
# theta from the two multisets
# ---------------------------------------------------------------------------
# best-response state ``br``: (U, L, v[n], caps[n], par = [nu, c, equal, last theta]); with
# equal caps L is a placeholder and the breakpoints of L are U's values - c.


@njit(cache=True, inline="always", error_model="numpy")
def _f(br, t):  # pragma: no cover - compiled
    """``f(t) = sum_j clip(v_j - t, 0, c_j)`` and the numbers of values of U and
    of L above t (their difference: the rows strictly inside their clip just
    after t, minus the slope of f there)."""
    U, L, par = br[0], br[1], br[4]
    pu, nu_ = relu_sum(U, t, 0.0)
    if par[2] != 0.0:
        pl, nl = relu_sum(U, t, -par[1])
    else:
        pl, nl = relu_sum(L, t, 0.0)
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
    U, L, par = br[0], br[1], br[4]
    equal = par[2] != 0.0
    tu, fu = _last_breakpoint(br, U, 0.0)
    if equal:
        tl, fl_ = _last_breakpoint(br, U, -par[1])
    else:
        tl, fl_ = _last_breakpoint(br, L, 0.0)
    # neither: sum c = 1 up to rounding, every row at its cap
    lowest = _smallest(U, -par[1]) if equal else _smallest(L, 0.0)
    t0 = max(tu, tl) if fu or fl_ else lowest
    f0, a, b = _f(br, t0)
    return t0 + (f0 - 1.0) / (a - b) if a > b else t0

@njit(cache=True, error_model="numpy")
def br_theta(br, remember):  # pragma: no cover - compiled
    """The threshold ``theta`` of ``q = clip(v - theta, 0, c)``.

    Newton's method from the last threshold (``par[3]``; one loss has changed
    since, so ``theta`` has moved little): from ``t`` with ``f(t)`` and the
    slope ``-m`` just after t, ``t' = t + (f(t) - 1) / m``; if U and L have as
    many values above ``t'`` as above ``t``, no breakpoint lies between them,
    f is linear there and ``t'`` is the root (refined once by the same
    formula, a rounding-sized step). Else again from ``t'``; after 4 tries,
    or on a flat piece, ``_theta_search``. Two evaluations of f (O(log n)
    each) in the common case. ``remember``: store the result as the next
    start (the solver's steps do; a read of ``q`` does not, so reading q
    leaves the run's numbers unchanged)."""
    par = br[4]
    t = par[3]
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
        par[3] = theta
    return theta


@njit(cache=True, error_model="numpy")
def br_update(br, i, loss, n):  # pragma: no cover - compiled
    """Row i's loss becomes ``loss``: ``v_i = 1/n + loss / (nu n)`` (``loss``
    itself when ``nu = 0``) moves in U (and L)."""
    U, L, v, caps, par = br
    nu = par[0]
    v_new = 1.0 / n + loss / (nu * n) if nu > 0.0 else loss
    if v_new == v[i]:
        return
    order_tree_replace(U, i, v[i], v_new)
    if par[2] == 0.0 and nu > 0.0:
        order_tree_replace(L, i, v[i] - caps[i], v_new - caps[i])
    v[i] = v_new


@njit(cache=True, error_model="numpy")
def weight_lmo_scan(br, i):  # pragma: no cover - compiled
    """``q_i`` of the LMO with per-row caps: the caps of all larger keys. O(n)."""
    v, caps = br[2], br[3]
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
    caps, by ``weight_lmo_scan`` otherwise)."""
    U, v, caps, par = br[0], br[2], br[3], br[4]
    if par[0] > 0.0:
        return min(max(v[i] - br_theta(br, True), 0.0), caps[i])
    if par[2] == 0.0:
        return weight_lmo_scan(br, i)
    c = par[1]
    full = int(math.floor(1.0 / c + 1e-9))
    rank = rank_above(U, v[i], i)
    if rank < full:
        return c
    if rank == full:
        rest = 1.0 - full * c
        return rest if rest > LMO_REST else 0.0
    return 0.0


class BestResponse:
    """``q(l)`` of the problem's inner maximisation, maintained as single losses
    change (module docstring): ``update(i, loss)`` O(log n) amortised,
    ``weight(i)`` O(log n) in the common case and O(log^2 n) at worst (nu > 0)
    or O(log n) (nu = 0, equal caps), ``q()`` O(n). ``block`` and ``fanout``:
    the trees' leaf and node capacities (``order_tree_new``; small ones in
    the tests, so that splits and rebuilds happen).

    All state is numpy arrays in ``state`` (picklable); the compiled kernels
    take ``state`` itself."""

    def __init__(self, losses: np.ndarray, caps: np.ndarray, nu: float,
                 block: int | None = None, fanout: int | None = None) -> None:
        losses = np.ascontiguousarray(losses, dtype=np.float64)
        caps = np.ascontiguousarray(caps, dtype=np.float64)
        n = losses.size
        self.n = n
        self.nu = float(nu)
        equal = bool(np.all(caps == caps[0]))
        v = 1.0 / n + losses / (nu * n) if nu > 0 else losses.copy()
        U = order_tree_new(v, block, fanout)
        L = order_tree_new(v - caps, block, fanout) if (nu > 0 and not equal) else \
            order_tree_new(np.zeros(1))
        self.state = (U, L, v, caps, np.array([self.nu, caps[0], 1.0 if equal else 0.0, np.nan]))

    def update(self, i: int, loss: float) -> None:
        br_update(self.state, int(i), float(loss), self.n)

    def weight(self, i: int) -> float:
        return float(br_weight(self.state, int(i)))

    def theta(self) -> float:
        return float(br_theta(self.state, False))

    def q(self) -> np.ndarray:
        """Every ``q(l)_j`` (O(n))."""
        v, caps = self.state[2], self.state[3]
        if self.nu > 0:
            return np.clip(v - self.theta(), 0.0, caps)
        return lmo_row_caps(v, caps)


# ---------------------------------------------------------------------------
# what both solvers read of the problem
# ---------------------------------------------------------------------------

#: the constant c of the default step ``1 / (c n max_i c_i L + mu)``
STEP_CONSTANT = 1.0


def solver_inputs(solver: str, problem) -> tuple[tuple, np.ndarray]:
    """The row kernels' model scalars and the set's row caps, or a
    ``harness.ConfigError`` naming ``solver`` and what it cannot run."""
    from harness import ConfigError

    model = problem.model
    name = getattr(model, "name", type(model).__name__)
    if name not in MODEL_KINDS:
        raise ConfigError(f"The solver '{solver}' supports the models {sorted(MODEL_KINDS)}. "
                          f"Got model '{name}' instead.")
    caps = problem.constraint.row_caps()
    if caps is None:
        raise ConfigError(f"The solver '{solver}' needs a constraint set with row caps "
                          f"(row_caps() is None for '{getattr(problem.constraint, 'name', '?')}').")
    return model_spec(model), np.ascontiguousarray(caps, dtype=np.float64)


def default_step(n: int, caps: np.ndarray, smoothness: float, mu: float) -> float:
    """``1 / (c n sigma_max L + mu)`` with ``sigma_max = max_i c_i`` (the largest
    weight the best response can put on a row) and ``c = STEP_CONSTANT``."""
    return 1.0 / (STEP_CONSTANT * n * float(np.max(caps)) * smoothness + mu)


def row_data(problem) -> tuple[np.ndarray, np.ndarray]:
    """``X`` and ``y`` as contiguous float64 arrays (class codes as floats)."""
    return (np.ascontiguousarray(problem.X, dtype=np.float64),
            np.ascontiguousarray(problem.y, dtype=np.float64))

