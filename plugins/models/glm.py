"""The paper's two models (Section 6): linear regression with squared error and
softmax regression with cross-entropy, over parameters in an l2-ball of radius B.

Losses handed to the players are ``loss / loss_scale`` in [0, 1], where the
default ``loss_scale`` is a bound the model proves for ``||w|| <= B`` and the
data: with ``R = max_i ||(x_i, 1)||_2``,

* cross-entropy with C classes: ``loss <= log C + sqrt(2) B R``, since
  ``z_c - z_y = <w_c - w_y, (x, 1)> <= sqrt(2) ||W||_F R``;
* squared error: ``loss <= (B R + max |y|)^2``.

A user-set smaller ``loss_scale`` clips ``loss / loss_scale`` at 1; the number
of clipped losses is counted (``n_clipped``) and logged, never silent.

What the solvers read (``harness.protocols.Model``): ``row_smoothness`` and
``row_grad_bound`` (derived in docs/algorithms.md, Models), and the compiled
row roles ``<prefix>_row_loss``/``_row_grad``/``_row_scratch`` beside the game's
batch roles ``<prefix>_losses``/``_grad`` (Algorithm 1: the mini-batch losses of
line 4, the gradient of the w-player's step, line 7), both on one per-row
arithmetic. The numpy methods (``raw_losses``, ``value_and_grad``) are the
whole-data path, BLAS over all n rows (full_batch, OPT); the kernels the per-round, per-row one.
"""

from __future__ import annotations

import math
from typing import ClassVar, NamedTuple

import numpy as np
from numba import njit

import harness
from harness import Param, stream
from harness.engine import Compiled, replaces
from plugins.lib.vecmath import max_row_sq_norm, row_sq_norms, vexp, vlog

_SCALE = Param(float, low=0.0, low_open=True, nullable=True,
               doc="divide losses by this; None: the proven bound (no clipping)")


class _ScaledLoss:
    """Scaling and clip accounting shared by both models."""

    params: ClassVar[dict[str, Param]] = {"loss_scale": _SCALE}

    def __init__(self, loss_scale: float | None = None) -> None:
        self.loss_scale = loss_scale

    def _set_scale(self, bound: float, grad_bound_raw: float) -> dict[str, float]:
        self.loss_bound = bound
        self.scale_ = bound if self.loss_scale is None else float(self.loss_scale)
        self.clips_ = self.scale_ < bound
        self.grad_bound = grad_bound_raw / self.scale_
        self.n_clipped = 0
        return {"loss_scale": self.scale_, "loss_bound": bound, "grad_bound": self.grad_bound}

    def losses(self, w, X, y):
        """Losses of a batch over the scale, clipped at 1 (and counted) when the
        scale is below the proven bound: the compiled kernel (``kernels``) on the
        batch's rows, so the Python loop computes the bits of the compiled path."""
        clipped = np.zeros(1, dtype=np.int64)  # the kernel's ModelState.clipped
        out = self._batch_losses(self._batch_state(clipped),
                                 np.ascontiguousarray(w, dtype=np.float64),
                                 np.ascontiguousarray(X, dtype=np.float64),
                                 np.ascontiguousarray(y), np.arange(len(y)))
        self.n_clipped += int(clipped[0])
        return out

    def grad(self, w, X, y, weights):
        """Gradient of ``sum_i weights_i * loss_i`` (clipped losses have zero
        gradient): the compiled kernel on the batch's rows."""
        return self._batch_grad(self._batch_state(np.zeros(1, dtype=np.int64)),
                                np.ascontiguousarray(w, dtype=np.float64),
                                np.ascontiguousarray(X, dtype=np.float64),
                                np.ascontiguousarray(y), np.arange(len(y)),
                                np.ascontiguousarray(weights, dtype=np.float64))

    def _batch_state(self, clipped: np.ndarray) -> tuple:
        """The kernels' state for one batch, a plain tuple of ``ModelState``'s
        fields (the ``_batch_*`` kernels name them) counting clips in
        ``clipped``: no scratch, no values kept between calls."""
        return (float(self.scale_), bool(self.clips_), clipped,
                int(getattr(self, "C_", 1)), np.empty(0), np.full(1, -1, dtype=np.int64))

    def value_and_grad(self, w, X, y, weights):
        """``sum_i weights_i raw_loss_i / scale`` and its gradient, never clipped (convex)."""
        value, grad = self._raw_value_and_grad(w, X, y, weights)
        return value / self.scale_, grad / self.scale_

    def compiled(self) -> Compiled | None:
        """The compiled form (``harness.engine``): kernels on a ``ModelState``.
        Batch roles ``losses`` and ``grad``: ``losses`` leaves the rows' residuals
        (or log-probabilities and probabilities) in ``scratch`` for the ``grad``
        that follows it, and the clip count is written back to ``n_clipped``
        after each compiled call. Row roles ``row_loss``, ``row_grad`` and
        ``row_scratch`` (``harness.protocols.Model``): one row, never clipped."""
        if replaces(self, _ScaledLoss, ("losses", "grad")):
            return None
        classes = int(getattr(self, "C_", 1))
        state = ModelState(float(self.scale_), bool(self.clips_),
                           np.array([self.n_clipped], dtype=np.int64), classes,
                           np.empty(2 * int(getattr(self, "rows_", 0)) * classes),
                           np.full(1, -1, dtype=np.int64))

        def store(state) -> None:
            self.n_clipped = int(state.clipped[0])

        return Compiled(self.kernels, state, store)


def log_softmax(z: np.ndarray) -> np.ndarray:
    """Row-wise ``log softmax`` (plain numpy: scipy's version costs ~20 us per call)."""
    z = z - z.max(axis=1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=1, keepdims=True))


def _row_norm_bound(X: np.ndarray) -> float:
    """``max_i ||(x_i, 1)||_2``."""
    return math.sqrt(max_row_sq_norm(X) + 1.0)


class LinearMSE(_ScaledLoss):
    """Linear regression ``f(x) = <theta, x> + b`` with loss ``(f(x) - y)^2``
    (``bias=false``: ``f(x) = <theta, x>``, parameters ``theta`` alone, as in
    the DRO literature's experiments)."""

    name: ClassVar[str] = "linear_mse"
    task: ClassVar[str] = "regression"
    kernels: ClassVar[str] = "plugins.models.glm:linear_mse"
    params: ClassVar[dict[str, Param]] = {
        "loss_scale": _SCALE,
        "bias": Param(bool, default=True, doc="an intercept b (a parameter of w)"),
    }

    def __init__(self, loss_scale: float | None = None, bias: bool = True) -> None:
        super().__init__(loss_scale)
        self.bias = bias

    def setup(self, dataset, radius: float) -> dict[str, float]:
        self.d_ = dataset.X.shape[1]
        self.rows_ = dataset.X.shape[0]
        self.n_params = self.d_ + (1 if self.bias else 0)
        R = _row_norm_bound(dataset.X)
        y_max = float(np.max(np.abs(dataset.y)))
        bound = (radius * R + y_max) ** 2
        return self._set_scale(bound, 2.0 * (radius * R + y_max) * R)

    def predict(self, w, X):
        if w.size == self.d_:
            return X @ w
        return X @ w[:-1] + w[-1]

    def _pack(self, g, X):
        return np.append(g @ X, g.sum()) if self.bias else g @ X

    def raw_losses(self, w, X, y):
        r = self.predict(w, X) - y
        return r * r

    def _raw_value_and_grad(self, w, X, y, weights):
        r = self.predict(w, X) - y
        return float(weights @ (r * r)), self._pack(2.0 * weights * r, X)

    def row_smoothness(self, X) -> float:
        """``2 max_i ||x_i'||^2 / scale``: the row loss's Hessian is ``2 x' x'^T``
        (``x' = (x, 1)`` with a bias, ``x`` without), of norm ``2 ||x'||^2``."""
        return 2.0 * (max_row_sq_norm(X) + (1.0 if self.bias else 0.0)) / self.scale_

    def row_grad_bound(self, X, y, radius: float, chunk: int = 65536) -> float:
        """``max_i 2 (radius ||x_i'|| + |y_i|) ||x_i'|| / scale``: the gradient is
        ``2 r x'`` with ``|r| = |<w, x'> - y| <= ||w|| ||x'|| + |y|``."""
        best, one = 0.0, 1.0 if self.bias else 0.0
        for start, sq in row_sq_norms(X, chunk):
            norms = np.sqrt(sq + one)
            target = np.abs(np.asarray(y[start:start + sq.size], dtype=np.float64))
            best = max(best, float(np.max(2.0 * (radius * norms + target) * norms)))
        return best / self.scale_

    def cvx_raw_losses(self, w, X, y):
        """``raw_losses`` as a cvxpy expression of the parameter variable ``w``."""
        import cvxpy as cp

        if not self.bias:
            return cp.square(X @ w - y)
        return cp.square(X @ w[:-1] + w[-1] - y)

    def task_metrics(self, w, X, y, k):
        return self.losses_and_metrics(w, X, y, k)[1]

    def losses_and_metrics(self, w, X, y, k):
        """The raw losses and ``task_metrics`` in one pass over ``X`` (the
        metrics are functions of the losses)."""
        raw = stream.raw_losses(self, w, X, y)
        top = np.partition(raw, raw.size - k)[raw.size - k:]
        return raw, {"topk_mse": float(top.mean()), "max_loss": float(raw.max()),
                     "mean_loss": float(raw.mean())}


class LogisticCEL(_ScaledLoss):
    """Softmax regression ``softmax(Theta x + b)`` with cross-entropy loss,
    parameters ``(Theta, b)`` flattened row-wise as ``C x (d + 1)``."""

    name: ClassVar[str] = "logistic_cel"
    task: ClassVar[str] = "classification"
    kernels: ClassVar[str] = "plugins.models.glm:logistic_cel"

    def setup(self, dataset, radius: float) -> dict[str, float]:
        self.d_ = dataset.X.shape[1]
        self.rows_ = dataset.X.shape[0]
        self.C_ = int(dataset.n_classes)
        self.n_params = self.C_ * (self.d_ + 1)
        R = _row_norm_bound(dataset.X)
        bound = math.log(self.C_) + math.sqrt(2.0) * radius * R
        return self._set_scale(bound, math.sqrt(2.0) * R)

    def _logits(self, w, X):
        W = w.reshape(self.C_, self.d_ + 1)
        return X @ W[:, :-1].T + W[:, -1]

    def raw_losses(self, w, X, y):
        logp = log_softmax(self._logits(w, X))
        return -logp[np.arange(y.size), y]

    def _dz(self, w, X, y, weights):
        logp = log_softmax(self._logits(w, X))
        G = np.exp(logp)
        G[np.arange(y.size), y] -= 1.0
        return logp, G * weights[:, None]

    @staticmethod
    def _pack(G, X):
        return np.concatenate((G.T @ X, G.sum(axis=0)[:, None]), axis=1).ravel()

    def _raw_value_and_grad(self, w, X, y, weights):
        logp, G = self._dz(w, X, y, weights)
        return float(-(weights @ logp[np.arange(y.size), y])), self._pack(G, X)

    def row_smoothness(self, X) -> float:
        """``max_i ||(x_i, 1)||^2 / (2 scale)``: the row loss's Hessian is
        ``(diag(p) - p p^T) kron x' x'^T`` (``x' = (x, 1)``), and ``diag(p) - p
        p^T`` has norm at most 1/2 on the simplex."""
        return 0.5 * (max_row_sq_norm(X) + 1.0) / self.scale_

    def row_grad_bound(self, X, y, radius: float) -> float:
        """``sqrt(2) max_i ||(x_i, 1)|| / scale`` for any ``radius``: the gradient is
        ``(p - e_y) kron (x, 1)`` and ``||p - e_y||^2 = (1 - p_y)^2 + sum_{c != y}
        p_c^2 <= 2``."""
        return math.sqrt(2.0 * (max_row_sq_norm(X) + 1.0)) / self.scale_

    def cvx_raw_losses(self, w, X, y):
        """``raw_losses`` as a cvxpy expression of the parameter variable ``w``
        (``log sum_c exp z_c - z_y``, an exponential-cone expression)."""
        import cvxpy as cp

        W = cp.reshape(w, (self.C_, self.d_ + 1), order="C")
        Z = X @ W[:, :-1].T + np.ones((X.shape[0], 1)) @ W[:, -1:].T
        return cp.log_sum_exp(Z, axis=1) - cp.sum(cp.multiply(np.eye(self.C_)[y], Z), axis=1)

    def task_metrics(self, w, X, y, k):
        return self.losses_and_metrics(w, X, y, k)[1]

    def losses_and_metrics(self, w, X, y, k):
        """The raw losses and ``task_metrics`` in one pass over ``X`` (chunk by
        chunk: ``X`` may be larger than memory), each chunk's logits formed once."""
        raw, hits = [], 0
        for Xc, yc in stream.row_chunks(X, y):
            z = self._logits(w, Xc)
            raw.append(-log_softmax(z)[np.arange(yc.size), yc])
            hits += int(np.count_nonzero(np.argmax(z, axis=1) == yc))
        raw = np.concatenate(raw)
        return raw, {"accuracy": hits / y.size,
                     "max_loss": float(raw.max()), "mean_loss": float(raw.mean())}

# ---------------------------------------------------------------------------
# compiled forms (harness.engine): the same arithmetic on the rows of one round
# ---------------------------------------------------------------------------
# Two kinds of kernel share one arithmetic per row (``_linear_residual``,
# ``_logits_row`` and ``_log_softmax_columns``, ``_put_outer``/``_add_outer``):
# the batch roles ``<prefix>_losses``/``<prefix>_grad`` of the game's round
# (with BLAS products from ``BLAS_ROWS`` rows on), and the row roles
# ``<prefix>_row_loss``/``<prefix>_row_grad``/``<prefix>_row_scratch`` of the
# solvers that step on one row at a time (``harness.protocols.Model``). The
# row roles are inlined into the solvers' kernels (``inline="always"``): a
# call handing over the state tuple costs about 20 ns, as much as a row of
# the squared error itself.


class ModelState(NamedTuple):
    """The compiled models' state ``ms`` (``compiled().state``), read by name.

    ``scale``: the divisor of raw losses; ``clips``: whether the scale is
    below the proven bound (batch losses above it are clipped at 1);
    ``clipped``: the count of clipped losses (one int64); ``classes``: C (1
    for the squared error); ``scratch``: per-row values ``losses`` leaves for
    the ``grad`` that follows it; ``fresh``: the number of rows those values
    are of (one int64; -1 when there are none)."""

    scale: float
    clips: bool
    clipped: np.ndarray
    classes: int
    scratch: np.ndarray
    fresh: np.ndarray


@njit(cache=True, inline="always", error_model="numpy")
def _dot_at(x, v, off, d):  # pragma: no cover - compiled
    """``sum_i x_i v_{off + i}`` over ``i < d`` in four running sums (the adds of
    one sum wait on each other; four keep the FPU busy). ``x`` is a view of the
    row; ``v`` is indexed at an offset, not sliced: a view costs about 2 ns to
    make, and the logits of a round make one per row and class (1.34 against
    1.55 us for the losses and gradient of 20 rows, 2 classes)."""
    s0 = 0.0
    s1 = 0.0
    s2 = 0.0
    s3 = 0.0
    i = 0
    while i + 4 <= d:
        s0 += x[i] * v[off + i]
        s1 += x[i + 1] * v[off + i + 1]
        s2 += x[i + 2] * v[off + i + 2]
        s3 += x[i + 3] * v[off + i + 3]
        i += 4
    while i < d:
        s0 += x[i] * v[off + i]
        i += 1
    return (s0 + s1) + (s2 + s3)


#: from this many rows on, the compiled models gather the rows and call BLAS
#: (``np.dot``) as numpy does; below it, plain loops cost less than the calls
BLAS_ROWS = 64


@njit(cache=True, error_model="numpy")
def _rows_of(X, rows):  # pragma: no cover - compiled
    """``X[rows]``, or ``X`` itself when ``rows`` is every row in order."""
    n = X.shape[0]
    if rows.size == n:
        whole = True
        for j in range(n):
            if rows[j] != j:
                whole = False
                break
        if whole:
            return X
    out = np.empty((rows.size, X.shape[1]))
    for j in range(rows.size):
        out[j] = X[rows[j]]
    return out


@njit(cache=True, error_model="numpy")
def _cached(ms, rows, width):  # pragma: no cover - compiled
    """The per-row values ``losses`` left for ``grad`` (the driver calls ``grad``
    right after ``losses``, with the same ``w`` and rows), or an empty array."""
    scratch, fresh = ms.scratch, ms.fresh
    if fresh[0] == rows.size and rows.size * width <= scratch.size:
        fresh[0] = -1
        return scratch[:rows.size * width]
    return scratch[:0]


@njit(cache=True, error_model="numpy")
def _scaled(ms, raw):  # pragma: no cover - compiled
    """``raw / scale`` in place, clipped at 1 (and counted in ``ms.clipped``) when
    the scale is below the proven bound: ``_ScaledLoss.losses`` of both models."""
    scale, clips, clipped = ms.scale, ms.clips, ms.clipped
    for j in range(raw.size):
        v = raw[j] / scale
        if clips and v > 1.0:
            clipped[0] += 1
            v = 1.0
        raw[j] = v
    return raw


@njit(cache=True, inline="always", error_model="numpy")
def _put_outer(g, base, a, x, d, bias):  # pragma: no cover - compiled
    """``g[base:base + d] = a x`` and, with ``bias``, ``g[base + d] = a`` (one
    row's gradient block; indexed, not sliced, as ``_dot_at``)."""
    for i in range(d):
        g[base + i] = a * x[i]
    if bias:
        g[base + d] = a


@njit(cache=True, inline="always", error_model="numpy")
def _add_outer(g, base, a, x, d, bias):  # pragma: no cover - compiled
    """``g[base:base + d] += a x`` and, with ``bias``, ``g[base + d] += a``."""
    gb = g[base:base + d]  # views: the loop vectorises (2x faster)
    for i in range(d):
        gb[i] += a * x[i]
    if bias:
        g[base + d] += a


# --- squared error --------------------------------------------------------


@njit(cache=True, inline="always", error_model="numpy")
def _linear_residual(x, w, d, target):  # pragma: no cover - compiled
    """``<theta, x> + b - target`` of one row (no ``b`` when ``w`` has ``d``
    entries): the squared error's arithmetic, for both kinds of kernel."""
    b = w[d] if w.size > d else 0.0
    return _dot_at(x, w, 0, d) + b - target


@njit(cache=True, error_model="numpy")
def _linear_raw(ms, w, X, y, rows):  # pragma: no cover - compiled
    """Residuals ``<theta, x_i> + b - y_i`` of ``rows``, kept for the next ``grad``."""
    d = X.shape[1]
    scratch, fresh = ms.scratch, ms.fresh
    r = scratch[:rows.size] if rows.size <= scratch.size else np.empty(rows.size)
    if rows.size >= BLAS_ROWS:
        _linear_blas(w, X, y, rows, r)
    else:
        for j in range(rows.size):
            r[j] = _linear_residual(X[rows[j]], w, d, y[rows[j]])
    fresh[0] = rows.size if rows.size <= scratch.size else -1
    return r


@njit(cache=True, error_model="numpy")
def _linear_blas(w, X, y, rows, out):  # pragma: no cover - compiled
    """The residuals of ``rows`` into ``out``, ``<theta, x_i>`` by BLAS. Apart from
    the loop over few rows: a function holding both paths paid 0.9 us per call
    on the loop's path too."""
    d = X.shape[1]
    b = w[d] if w.size > d else 0.0
    z = np.dot(_rows_of(X, rows), np.ascontiguousarray(w[:d]))
    for j in range(rows.size):
        out[j] = z[j] + b - y[rows[j]]


@njit(cache=True, error_model="numpy")
def linear_mse_losses(ms, w, X, y, rows):  # pragma: no cover - compiled
    """``LinearMSE.losses`` of ``rows``: squared residuals over the scale, clipped at 1
    (and counted) when the scale is below the proven bound."""
    r = _linear_raw(ms, w, X, y, rows)
    raw = np.empty(rows.size)
    for j in range(rows.size):
        raw[j] = r[j] * r[j]
    return _scaled(ms, raw)


@njit(cache=True, error_model="numpy")
def linear_mse_grad(ms, w, X, y, rows, weights):  # pragma: no cover - compiled
    """``LinearMSE.grad``: ``sum_j weights_j grad loss_j`` of ``rows`` (clipped rows: zero)."""
    scale, clips = ms.scale, ms.clips
    d = X.shape[1]
    r = _cached(ms, rows, 1)
    if r.size == 0 and rows.size > 0:
        r = _linear_raw(ms, w, X, y, rows)
        ms.fresh[0] = -1
    g = np.zeros(w.size)
    bias = w.size > d
    if rows.size >= BLAS_ROWS:
        _linear_grad_blas(ms, X, rows, weights, r, g)
    else:
        for j in range(rows.size):
            if weights[j] == 0.0 or (clips and r[j] * r[j] > scale):
                continue  # no gradient formed: it would enter the sum times 0
            _add_outer(g, 0, 2.0 * weights[j] * r[j], X[rows[j]], d, bias)
    for c in range(w.size):
        g[c] /= scale
    return g


@njit(cache=True, error_model="numpy")
def _linear_grad_blas(ms, X, rows, weights, r, g):  # pragma: no cover - compiled
    """``linear_mse_grad``'s sum over many rows by BLAS, into ``g`` (unscaled)."""
    scale, clips = ms.scale, ms.clips
    d = X.shape[1]
    coef = np.empty(rows.size)
    total = 0.0
    for j in range(rows.size):
        keep = not (clips and r[j] * r[j] > scale)
        coef[j] = 2.0 * weights[j] * r[j] if keep else 0.0
        total += coef[j]
    g[:d] = np.dot(coef, _rows_of(X, rows))
    if g.size > d:
        g[d] = total


@njit(cache=True, inline="always", error_model="numpy")
def linear_mse_row_loss(ms, X, y, i, w, z):  # pragma: no cover - compiled
    """Row role: ``(<theta, x_i> + b - y_i)^2 / scale``, never clipped; the
    residual is left in ``z[0]`` for ``linear_mse_row_grad``."""
    r = _linear_residual(X[i], w, X.shape[1], y[i])
    z[0] = r
    return r * r / ms.scale


@njit(cache=True, inline="always", error_model="numpy")
def linear_mse_row_grad(ms, X, y, i, w, z, g):  # pragma: no cover - compiled
    """Row role: the scaled gradient ``2 r_i (x_i, 1) / scale`` into ``g``, from
    the residual ``linear_mse_row_loss`` left in ``z``."""
    d = X.shape[1]
    _put_outer(g, 0, 2.0 * z[0] / ms.scale, X[i], d, w.size > d)


@njit(cache=True, inline="always", error_model="numpy")
def linear_mse_row_scratch(ms):  # pragma: no cover - compiled
    """Row role: the length of ``z`` (the residual)."""
    return 1


# --- softmax cross-entropy ------------------------------------------------


@njit(cache=True, inline="always", error_model="numpy")
def _logits_row(x, w, d, C, out, R, j):  # pragma: no cover - compiled
    """The logits ``<theta_c, x> + b_c`` of one row into ``out[c R + j]``
    (class-major: a column of ``R`` rows per class)."""
    D = d + 1
    for c in range(C):
        out[c * R + j] = _dot_at(x, w, c * D, d) + w[c * D + d]


@njit(cache=True, inline="always", error_model="numpy")
def _log_softmax_columns(both, R, C, top, total):  # pragma: no cover - compiled
    """The softmax's arithmetic, for both kinds of kernel: the logits of ``R``
    rows, class-major in ``both[:R C]`` (entry ``c R + j``: each class's values
    of the rows in one run, so the passes run across the rows and vectorise),
    become their log-softmax ``z - top - log sum_c exp(z_c - top)``, and the
    softmax ``exp(z_c - top) / total`` (the terms of the log's sum, divided:
    no second ``exp``) goes to ``both[R C:2 R C]``. ``top`` and ``total`` (``R``
    floats each) are work space. ``exp`` and ``log`` are ``vexp`` and ``vlog``
    (``plugins.lib.vecmath``), which vectorise."""
    size = R * C
    logp, prob = both[:size], both[size:2 * size]
    for j in range(R):
        top[j] = -np.inf
        total[j] = 0.0
    for c in range(C):
        z = logp[c * R:(c + 1) * R]
        for j in range(R):
            v = z[j]
            top[j] = v if v > top[j] else top[j]
    for c in range(C):
        z, e = logp[c * R:(c + 1) * R], prob[c * R:(c + 1) * R]
        for j in range(R):
            v = z[j] - top[j]
            z[j] = v
            e[j] = vexp(v)  # exp(0) = 1 exactly: the largest logit's term
            total[j] += e[j]
    for j in range(R):
        top[j] = vlog(total[j])  # top: now the log of the sum
    for c in range(C):
        z, e = logp[c * R:(c + 1) * R], prob[c * R:(c + 1) * R]
        for j in range(R):
            z[j] -= top[j]
            e[j] /= total[j]


@njit(cache=True, error_model="numpy")
def _logistic_logp(ms, w, X, y, rows, C):  # pragma: no cover - compiled
    """Log-softmax and softmax of the logits of ``rows`` (``C x (d + 1)``
    row-major ``w``), class-major (``_log_softmax_columns``); both kept for the
    next ``grad``."""
    d = X.shape[1]
    R = rows.size
    scratch, fresh = ms.scratch, ms.fresh
    size = R * C
    both = scratch[:2 * size] if 2 * size <= scratch.size else np.empty(2 * size)
    if R >= BLAS_ROWS:
        _logits_blas(w, X, rows, C, both)
    else:
        for j in range(R):
            _logits_row(X[rows[j]], w, d, C, both, R, j)
    _log_softmax_columns(both, R, C, np.empty(R), np.empty(R))
    fresh[0] = R if 2 * size <= scratch.size else -1
    return both


@njit(cache=True, error_model="numpy")
def _logits_blas(w, X, rows, C, out):  # pragma: no cover - compiled
    """The logits ``Theta x_i + b`` of ``rows`` into ``out``, class-major (``C x
    rows``, flat), ``Theta x_i`` by BLAS (apart from the loop over few rows, as
    ``_linear_blas``)."""
    d = X.shape[1]
    W = w.reshape((C, d + 1))
    # rows x C, as numpy's X @ W.T (the class-major product, W X^T, costs 2.5x:
    # X^T is not C-ordered)
    Z = np.dot(_rows_of(X, rows), np.ascontiguousarray(W[:, :d].T))
    R = rows.size
    for c in range(C):
        b = W[c, d]
        for j in range(R):
            out[c * R + j] = Z[j, c] + b


@njit(cache=True, error_model="numpy")
def logistic_cel_losses(ms, w, X, y, rows):  # pragma: no cover - compiled
    """``LogisticCEL.losses`` of ``rows``: cross-entropy over the scale, clipped at 1
    (and counted) when the scale is below the proven bound."""
    C = ms.classes
    R = rows.size
    logp = _logistic_logp(ms, w, X, y, rows, C)[:R * C]
    raw = np.empty(R)
    for j in range(R):
        raw[j] = -logp[int(y[rows[j]]) * R + j]
    return _scaled(ms, raw)


@njit(cache=True, error_model="numpy")
def logistic_cel_grad(ms, w, X, y, rows, weights):  # pragma: no cover - compiled
    """``LogisticCEL.grad``: ``(softmax - onehot) weights`` packed as ``C x (d + 1)``."""
    scale, clips, C = ms.scale, ms.clips, ms.classes
    d = X.shape[1]
    R = rows.size
    both = _cached(ms, rows, 2 * C)
    if both.size == 0 and R > 0:
        both = _logistic_logp(ms, w, X, y, rows, C)
        ms.fresh[0] = -1
    size = R * C
    logp, prob = both[:size], both[size:2 * size]
    g = np.zeros(C * (d + 1))
    if R >= BLAS_ROWS:
        _logistic_grad_blas(ms, X, y, rows, weights, logp, prob, g)
    else:
        for j in range(R):
            label = int(y[rows[j]])
            if weights[j] == 0.0 or (clips and -logp[label * R + j] > scale):
                continue  # no gradient formed: it would enter the sum times 0
            x = X[rows[j]]
            for c in range(C):
                s = prob[c * R + j]
                if c == label:
                    s -= 1.0
                _add_outer(g, c * (d + 1), s * weights[j], x, d, True)
    for c in range(C * (d + 1)):
        g[c] /= scale
    return g


@njit(cache=True, error_model="numpy")
def _logistic_grad_blas(ms, X, y, rows, weights, logp, prob, g):  # pragma: no cover
    """``logistic_cel_grad``'s sum over many rows by BLAS, into ``g`` (unscaled):
    ``G = (softmax - onehot) weights`` class-major, then ``G X``."""
    scale, clips, C = ms.scale, ms.clips, ms.classes
    d = X.shape[1]
    R = rows.size
    G = np.empty((C, R))
    for c in range(C):
        for j in range(R):
            G[c, j] = (prob[c * R + j] - (1.0 if int(y[rows[j]]) == c else 0.0)) * weights[j]
    if clips:
        for j in range(R):
            if -logp[int(y[rows[j]]) * R + j] > scale:
                for c in range(C):
                    G[c, j] = 0.0
    GX = np.dot(G, _rows_of(X, rows))
    for c in range(C):
        base = c * (d + 1)
        total = 0.0
        for j in range(R):
            total += G[c, j]
        for i in range(d):
            g[base + i] = GX[c, i]
        g[base + d] = total


@njit(cache=True, inline="always", error_model="numpy")
def logistic_cel_row_loss(ms, X, y, i, w, z):  # pragma: no cover - compiled
    """Row role: the cross-entropy of row ``i`` over the scale, never clipped
    (``_log_softmax_columns`` on one row); the log-softmax and the softmax are
    left in ``z[:2C]`` for ``logistic_cel_row_grad``."""
    C = ms.classes
    _logits_row(X[i], w, X.shape[1], C, z, 1, 0)
    _log_softmax_columns(z, 1, C, z[2 * C:2 * C + 1], z[2 * C + 1:2 * C + 2])
    return -z[int(y[i])] / ms.scale


@njit(cache=True, inline="always", error_model="numpy")
def logistic_cel_row_grad(ms, X, y, i, w, z, g):  # pragma: no cover - compiled
    """Row role: the scaled gradient ``(softmax - e_{y_i}) kron (x_i, 1) / scale``
    into ``g``, from the softmax ``logistic_cel_row_loss`` left in ``z``."""
    C = ms.classes
    d = X.shape[1]
    label = int(y[i])
    x = X[i]
    inv = 1.0 / ms.scale  # one division, off the path from z to g
    for c in range(C):
        s = z[C + c]
        if c == label:
            s -= 1.0
        _put_outer(g, c * (d + 1), s * inv, x, d, True)


@njit(cache=True, inline="always", error_model="numpy")
def logistic_cel_row_scratch(ms):  # pragma: no cover - compiled
    """Row role: the length of ``z`` (log-softmax, softmax, two work floats)."""
    return 2 * ms.classes + 2


# The Python path's calls (``_ScaledLoss.losses`` and ``grad``) hand the state
# over as a plain tuple and name it inside: numba types a named tuple argument
# about 0.7 us slower per call from Python (measured: 2.4 against 1.6 us for
# ``linear_mse_losses`` of 20 rows).


@njit(cache=True, error_model="numpy")
def _linear_mse_losses_py(t, w, X, y, rows):  # pragma: no cover - compiled
    return linear_mse_losses(ModelState(*t), w, X, y, rows)


@njit(cache=True, error_model="numpy")
def _linear_mse_grad_py(t, w, X, y, rows, weights):  # pragma: no cover - compiled
    return linear_mse_grad(ModelState(*t), w, X, y, rows, weights)


@njit(cache=True, error_model="numpy")
def _logistic_cel_losses_py(t, w, X, y, rows):  # pragma: no cover - compiled
    return logistic_cel_losses(ModelState(*t), w, X, y, rows)


@njit(cache=True, error_model="numpy")
def _logistic_cel_grad_py(t, w, X, y, rows, weights):  # pragma: no cover - compiled
    return logistic_cel_grad(ModelState(*t), w, X, y, rows, weights)


@harness.hookimpl
def register_models(register):
    register(LinearMSE)
    register(LogisticCEL)


LinearMSE._batch_losses = staticmethod(_linear_mse_losses_py)
LinearMSE._batch_grad = staticmethod(_linear_mse_grad_py)
LogisticCEL._batch_losses = staticmethod(_logistic_cel_losses_py)
LogisticCEL._batch_grad = staticmethod(_logistic_cel_grad_py)
