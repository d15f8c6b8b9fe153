"""Checkpoint computations over data sets that need not fit in memory.

``X`` may be a numpy array, a ``numpy.memmap`` or any object with ``shape``
whose ``X[a:b]`` (a slice) and ``X[rows]`` (sorted distinct indices) return
arrays. Everything here reads ``X`` in row chunks of at most ``CHUNK_BYTES``
(as float64), so memory stays bounded whatever n is; a data set of at most one
chunk is computed in one call, exactly as without chunking.

The certified inner minimum of the dual gap, ``min_{||w|| <= B} F(w)`` with
``F(w) = sum_i a_i loss_i(w)`` over the support of ``a_bar``, is solved on the
support in memory when it fits in ``IN_MEMORY_BYTES`` (``harness.gap.
certified_min``: accelerated projected gradient, many passes). Beyond that it
is solved on a subsample held in memory and certified by one streamed pass
over the whole support (``certified_min_streamed``): the Frank-Wolfe bound
``F(v) - <grad F(v), v> - B ||grad F(v)||`` holds at any ``v``, so the subsample
only decides how tight the certificate is, never whether it is valid.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from harness.gap import InnerSolution, ValueGrad, ball_lower_bound, certified_min

#: rows of a streamed chunk: this many bytes of float64 features
CHUNK_BYTES = 1 << 25
#: a support up to this many bytes of float64 features is gathered in memory
IN_MEMORY_BYTES = 1 << 28


def chunk_rows(d: int, nbytes: int | None = None) -> int:
    """Rows per chunk of ``nbytes`` (default ``CHUNK_BYTES``) for ``d`` features."""
    nbytes = CHUNK_BYTES if nbytes is None else nbytes
    return max(1, nbytes // (8 * max(int(d), 1)))


def row_slices(n: int, d: int, nbytes: int | None = None) -> Iterator[slice]:
    step = chunk_rows(d, nbytes)
    for start in range(0, n, step):
        yield slice(start, min(start + step, n))


def row_chunks(X: Any, y: np.ndarray) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """``(X[s], y[s])`` over consecutive row chunks (``X`` itself if it is an
    in-memory array of at most one chunk)."""
    n, d = X.shape
    if type(X) is np.ndarray and n <= chunk_rows(d):
        yield X, y
        return
    for s in row_slices(n, d):
        yield np.asarray(X[s]), y[s]


def first_outside_unit(X: Any) -> str | None:
    """Where ``X`` first holds a value that is not finite or lies outside [0, 1],
    in words (``"X[12, 3] = 1.7 (4 value(s) outside in rows 0..999)"``), read
    in row chunks; None if every value is in [0, 1]."""
    start = 0
    for s in row_slices(X.shape[0], X.shape[1]):
        Xc = np.asarray(X[s], dtype=np.float64)
        bad = ~(np.isfinite(Xc) & (Xc >= 0.0) & (Xc <= 1.0))
        if bad.any():
            i, j = np.argwhere(bad)[0]
            return (f"X[{start + i}, {j}] = {Xc[i, j]} ({int(bad.sum())} value(s) outside "
                    f"in rows {start}..{start + len(Xc) - 1})")
        start += len(Xc)
    return None


def raw_losses(model: Any, w: np.ndarray, X: Any, y: np.ndarray) -> np.ndarray:
    """``model.raw_losses`` over all rows, chunk by chunk."""
    n, d = X.shape
    if type(X) is np.ndarray and n <= chunk_rows(d):
        return model.raw_losses(w, X, y)
    out = np.empty(n)
    for s in row_slices(n, d):
        out[s] = model.raw_losses(w, np.asarray(X[s]), y[s])
    return out


def losses_and_task_metrics(model: Any, w: np.ndarray, X: Any, y: np.ndarray,
                            k: int) -> tuple[np.ndarray, dict[str, float]]:
    """``(raw_losses, task_metrics)`` at ``w`` over all rows: in one pass over
    ``X`` by the model's optional ``losses_and_metrics(w, X, y, k)`` (at n =
    1e7 a pass over the data is gigabytes), else by ``raw_losses`` and the
    model's ``task_metrics`` (two)."""
    both = getattr(model, "losses_and_metrics", None)
    if both is not None:
        raw, metrics = both(w, X, y, k)
        return np.asarray(raw, dtype=np.float64), metrics
    return raw_losses(model, w, X, y), model.task_metrics(w, X, y, k)


def weighted_value_grad(
    model: Any, X: Any, y: np.ndarray, rows: np.ndarray, weights: np.ndarray
) -> ValueGrad:
    """``v -> (sum_j weights_j loss_{rows_j}(v) / scale, gradient)``, streamed over
    chunks of ``rows`` (sorted) whatever their number."""
    d = X.shape[1]
    step = chunk_rows(d)
    if rows.size <= step:
        Xs, ys = np.asarray(X[rows]), y[rows]
        return lambda v: model.value_and_grad(v, Xs, ys, weights)

    def value_grad(v: np.ndarray) -> tuple[float, np.ndarray]:
        value, grad = 0.0, np.zeros_like(v)
        for start in range(0, rows.size, step):
            r = rows[start:start + step]
            f, g = model.value_and_grad(v, np.asarray(X[r]), y[r], weights[start:start + step])
            value += f
            grad += g
        return value, grad

    return value_grad


def inclusion_probabilities(a: np.ndarray, m: int) -> np.ndarray:
    """``pi_i = min(1, c a_i)`` with ``c`` such that ``sum pi = m`` (for ``a > 0``
    and ``m <= a.size``): the largest entries are taken surely, the others in
    proportion to ``a``."""
    order = np.argsort(a)[::-1]
    top = a[order[:m]]
    rest = np.cumsum(a[order][::-1])[::-1][:m]  # sum of a over the j-th largest and below
    c = (m - np.arange(m)) / rest
    j = int(np.argmax(c * top <= 1.0 + 1e-12))  # the first row that need not be capped
    return np.minimum(c[j] * a, 1.0)


def subsample(a: np.ndarray, m: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """m distinct positions of ``a > 0`` drawn with inclusion probabilities
    ``pi_i = min(1, c a_i)`` by systematic sampling (Madow 1949: one uniform
    offset, the positions where ``cumsum(pi)`` crosses ``u, u + 1, ...``), and
    their Horvitz-Thompson weights ``a_i / pi_i``: an unbiased estimate of any
    ``sum_i a_i f_i`` from m rows."""
    pi = inclusion_probabilities(a, m)
    cum = np.cumsum(pi)
    picked = np.searchsorted(cum, rng.random() + np.arange(m), side="right")
    picked = np.unique(np.minimum(picked, a.size - 1))
    return picked, a[picked] / pi[picked]


def certified_min_streamed(
    model: Any,
    X: Any,
    y: np.ndarray,
    rows: np.ndarray,
    weights: np.ndarray,
    w0: np.ndarray,
    radius: float,
    *,
    lipschitz: float = 1.0,
    rng: np.random.Generator | None = None,
    sample_bytes: int | None = None,
    solve: Callable[..., InnerSolution] = certified_min,
) -> InnerSolution:
    """A certified lower bound on ``min_{||w|| <= radius} sum_j weights_j loss_{rows_j}(w)``
    (losses scaled as the model scales them) for a support too large for memory.

    Solves the Horvitz-Thompson subsample problem (``subsample``, at most
    ``sample_bytes`` of features) in memory from ``w0``, then evaluates the
    exact objective and gradient at its answer ``v`` in one streamed pass over
    ``rows``: ``lower = F(v) - <grad F(v), v> - radius ||grad F(v)||`` and
    ``upper = F(v)``. Cost: one in-memory solve plus one pass over ``rows``.
    ``sample_bytes`` defaults to a quarter of ``IN_MEMORY_BYTES``.
    """
    rng = rng if rng is not None else np.random.default_rng(0)
    sample_bytes = IN_MEMORY_BYTES // 4 if sample_bytes is None else sample_bytes
    m = min(rows.size, chunk_rows(X.shape[1], sample_bytes))
    picked, ht = subsample(weights, m, rng)
    sub = rows[picked]
    Xs, ys = np.asarray(X[sub]), y[sub]
    approx = solve(lambda v: model.value_and_grad(v, Xs, ys, ht), w0, radius,
                   lipschitz=lipschitz)
    v = approx.w
    value, grad = weighted_value_grad(model, X, y, rows, weights)(v)
    lower = ball_lower_bound(value, grad, v, radius)
    return InnerSolution(lower, value, v, approx.iterations, approx.lipschitz)


def certified_inner_min(
    model: Any,
    X: Any,
    y: np.ndarray,
    rows: np.ndarray,
    weights: np.ndarray,
    w0: np.ndarray,
    radius: float,
    *,
    lipschitz: float = 1.0,
    seed: int = 0,
) -> InnerSolution:
    """``harness.gap.certified_min`` on the support in memory if it fits in
    ``IN_MEMORY_BYTES``, else ``certified_min_streamed`` (its subsample drawn
    with ``numpy.random.default_rng(seed)``)."""
    if rows.size <= chunk_rows(X.shape[1], IN_MEMORY_BYTES):
        Xs, ys = np.asarray(X[rows]), y[rows]
        return certified_min(lambda v: model.value_and_grad(v, Xs, ys, weights), w0, radius,
                             lipschitz=lipschitz)
    return certified_min_streamed(model, X, y, rows, weights, w0, radius,
                                  lipschitz=lipschitz, rng=np.random.default_rng(seed))
