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
"""

from __future__ import annotations

import math
from typing import ClassVar

import numpy as np
from numba import njit

import harness
from harness import Param, stream
from harness.engine import Compiled, replaces
from plugins.lib.vecmath import vexp, vlog

_SCALE = Param(float, low=0.0, low_open=True, nullable=True,
               doc="divide losses by this; None: the proven bound (no clipping)")


class _ScaledLoss:
    """Scaling and clip accounting shared by both models."""

    params: ClassVar[dict[str, Param]] = {"loss_scale": _SCALE}

    def __init__(self, loss_scale: float | None = None) -> None:
        self.loss_scale = loss_scale

    def _set_scale(self, bound: float, grad_bound_raw: float) -> dict[str, float]:
        self.loss_bound_ = bound
        self.scale_ = bound if self.loss_scale is None else float(self.loss_scale)
        self.clips_ = self.scale_ < bound
        self.grad_bound = grad_bound_raw / self.scale_
        self.n_clipped = 0
        return {"loss_scale": self.scale_, "loss_bound": bound, "grad_bound": self.grad_bound}

    def losses(self, w, X, y):
        """Losses of a batch over the scale, clipped at 1 (and counted) when the
        scale is below the proven bound: the compiled kernel (``kernels``) on the
        batch's rows, so the Python loop computes the bits of the compiled path."""
        state = self._batch_state()
        out = self._batch_losses(state, np.ascontiguousarray(w, dtype=np.float64),
                                 np.ascontiguousarray(X, dtype=np.float64),
                                 np.ascontiguousarray(y), np.arange(len(y)))
        self.n_clipped += int(state[2][0])
        return out

    def grad(self, w, X, y, weights):
        """Gradient of ``sum_i weights_i * loss_i`` (clipped losses have zero
        gradient): the compiled kernel on the batch's rows."""
        return self._batch_grad(self._batch_state(), np.ascontiguousarray(w, dtype=np.float64),
                                np.ascontiguousarray(X, dtype=np.float64),
                                np.ascontiguousarray(y), np.arange(len(y)),
                                np.ascontiguousarray(weights, dtype=np.float64))

    def _batch_state(self) -> tuple:
        """The kernels' state for one batch: no scratch, no values kept between calls."""
        return (float(self.scale_), bool(self.clips_), np.zeros(1, dtype=np.int64),
                int(getattr(self, "C_", 1)), np.empty(0), np.full(1, -1, dtype=np.int64))

    def value_and_grad(self, w, X, y, weights):
        """``sum_i weights_i raw_loss_i / scale`` and its gradient, never clipped (convex)."""
        value, grad = self._raw_value_and_grad(w, X, y, weights)
        return value / self.scale_, grad / self.scale_

    def compiled(self) -> Compiled | None:
        """The compiled form (``harness.engine``): ``losses`` and ``grad`` as
        kernels on ``(scale, clips, clip count, classes, scratch, fresh)``;
        ``losses`` leaves the rows' residuals (or log-probabilities and probabilities) in
        ``scratch`` for the ``grad`` that follows it. The clip count is
        written back to ``n_clipped`` after each compiled call."""
        if replaces(self, _ScaledLoss, ("losses", "grad")):
            return None
        classes = int(getattr(self, "C_", 1))
        state = (float(self.scale_), bool(self.clips_),
                 np.array([self.n_clipped], dtype=np.int64), classes,
                 np.empty(2 * int(getattr(self, "rows_", 0)) * classes),
                 np.full(1, -1, dtype=np.int64))

        def store(state) -> None:
            self.n_clipped = int(state[2][0])

        return Compiled(self.kernels, state, store)


def log_softmax(z: np.ndarray) -> np.ndarray:
    """Row-wise ``log softmax`` (plain numpy: scipy's version costs ~20 us per call)."""
    z = z - z.max(axis=1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=1, keepdims=True))


def _row_norm_bound(X: np.ndarray, chunk: int = 65536) -> float:
    """``max_i ||(x_i, 1)||_2``, read in chunks."""
    best = 0.0
    for start in range(0, X.shape[0], chunk):
        block = np.asarray(X[start:start + chunk], dtype=np.float64)
        best = max(best, float(np.max(np.einsum("ij,ij->i", block, block))))
    return math.sqrt(best + 1.0)


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

    def _raw_grad(self, w, X, y, weights):
        return self._pack(2.0 * weights * (self.predict(w, X) - y), X)

    def _raw_value_and_grad(self, w, X, y, weights):
        r = self.predict(w, X) - y
        return float(weights @ (r * r)), self._pack(2.0 * weights * r, X)

    def cvx_raw_losses(self, w, X, y):
        """``raw_losses`` as a cvxpy expression of the parameter variable ``w``."""
        import cvxpy as cp

        if not self.bias:
            return cp.square(X @ w - y)
        return cp.square(X @ w[:-1] + w[-1] - y)

    def task_metrics(self, w, X, y, k):
        raw = stream.raw_losses(self, w, X, y)
        top = np.partition(raw, raw.size - k)[raw.size - k:]
        return {"topk_mse": float(top.mean()), "max_loss": float(raw.max()),
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

    def _raw_grad(self, w, X, y, weights):
        return self._pack(self._dz(w, X, y, weights)[1], X)

    def _raw_value_and_grad(self, w, X, y, weights):
        logp, G = self._dz(w, X, y, weights)
        return float(-(weights @ logp[np.arange(y.size), y])), self._pack(G, X)

    def cvx_raw_losses(self, w, X, y):
        """``raw_losses`` as a cvxpy expression of the parameter variable ``w``
        (``log sum_c exp z_c - z_y``, an exponential-cone expression)."""
        import cvxpy as cp

        W = cp.reshape(w, (self.C_, self.d_ + 1), order="C")
        Z = X @ W[:, :-1].T + np.ones((X.shape[0], 1)) @ W[:, -1:].T
        return cp.log_sum_exp(Z, axis=1) - cp.sum(cp.multiply(np.eye(self.C_)[y], Z), axis=1)

    def task_metrics(self, w, X, y, k):
        raw, hits = [], 0
        for Xc, yc in stream.row_chunks(X, y):  # X may be larger than memory
            z = self._logits(w, Xc)
            raw.append(-log_softmax(z)[np.arange(yc.size), yc])
            hits += int(np.count_nonzero(np.argmax(z, axis=1) == yc))
        raw = np.concatenate(raw)
        return {"accuracy": hits / y.size,
                "max_loss": float(raw.max()), "mean_loss": float(raw.mean())}


# ---------------------------------------------------------------------------
# compiled forms (harness.engine): the same arithmetic on the rows of one round
# ---------------------------------------------------------------------------


@njit(cache=True, error_model="numpy")
def _dot(x, v, d):  # pragma: no cover - compiled
    """``sum_i x_i v_i`` over ``i < d`` in four running sums (the adds of one
    sum wait on each other; four keep the FPU busy). Callers pass views of
    the row and of the weights (faster than indexing into the whole arrays:
    0.86 against 1.04 us for the logits of a round)."""
    s0 = 0.0
    s1 = 0.0
    s2 = 0.0
    s3 = 0.0
    i = 0
    while i + 4 <= d:
        s0 += x[i] * v[i]
        s1 += x[i + 1] * v[i + 1]
        s2 += x[i + 2] * v[i + 2]
        s3 += x[i + 3] * v[i + 3]
        i += 4
    while i < d:
        s0 += x[i] * v[i]
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
    scratch, fresh = ms[4], ms[5]
    if fresh[0] == rows.size and rows.size * width <= scratch.size:
        fresh[0] = -1
        return scratch[:rows.size * width]
    return scratch[:0]


@njit(cache=True, error_model="numpy")
def _scaled(ms, raw):  # pragma: no cover - compiled
    """``raw / scale`` in place, clipped at 1 (and counted in ``ms[2]``) when the
    scale is below the proven bound: ``_ScaledLoss.losses`` of both models."""
    scale, clips, clipped = ms[0], ms[1], ms[2]
    for j in range(raw.size):
        v = raw[j] / scale
        if clips and v > 1.0:
            clipped[0] += 1
            v = 1.0
        raw[j] = v
    return raw


@njit(cache=True, error_model="numpy")
def _linear_raw(ms, w, X, y, rows):  # pragma: no cover - compiled
    """Residuals ``<theta, x_i> + b - y_i`` of ``rows`` (no ``b`` when ``w`` has
    ``d`` entries), kept for the next ``grad``."""
    d = X.shape[1]
    b = w[d] if w.size > d else 0.0
    scratch, fresh = ms[4], ms[5]
    r = scratch[:rows.size] if rows.size <= scratch.size else np.empty(rows.size)
    if rows.size >= BLAS_ROWS:
        _linear_blas(w, X, rows, r)
    else:
        theta = w[:d]
        for j in range(rows.size):
            r[j] = _dot(X[rows[j]], theta, d)
    for j in range(rows.size):
        r[j] = r[j] + b - y[rows[j]]
    fresh[0] = rows.size if rows.size <= scratch.size else -1
    return r


@njit(cache=True, error_model="numpy")
def _linear_blas(w, X, rows, out):  # pragma: no cover - compiled
    """``<theta, x_i>`` of ``rows`` into ``out`` by BLAS. Apart from the loop
    over few rows: a function holding both paths paid 0.9 us per call on the
    loop's path too."""
    d = X.shape[1]
    z = np.dot(_rows_of(X, rows), np.ascontiguousarray(w[:d]))
    for j in range(rows.size):
        out[j] = z[j]


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
    scale, clips = ms[0], ms[1]
    d = X.shape[1]
    r = _cached(ms, rows, 1)
    if r.size == 0 and rows.size > 0:
        r = _linear_raw(ms, w, X, y, rows)
        ms[5][0] = -1
    g = np.zeros(w.size)
    bias = w.size > d
    if rows.size >= BLAS_ROWS:
        _linear_grad_blas(ms, X, rows, weights, r, g)
    else:
        for j in range(rows.size):
            if weights[j] == 0.0 or (clips and r[j] * r[j] > scale):
                continue  # no gradient formed: it would enter the sum times 0
            s = 2.0 * weights[j] * r[j]
            x, gd = X[rows[j]], g[:d]  # views: the loop vectorises (2x faster)
            for c in range(d):
                gd[c] += s * x[c]
            if bias:
                g[d] += s
    for c in range(w.size):
        g[c] /= scale
    return g


@njit(cache=True, error_model="numpy")
def _linear_grad_blas(ms, X, rows, weights, r, g):  # pragma: no cover - compiled
    """``linear_mse_grad``'s sum over many rows by BLAS, into ``g`` (unscaled)."""
    scale, clips = ms[0], ms[1]
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


@njit(cache=True, error_model="numpy")
def _logistic_logp(ms, w, X, y, rows, C):  # pragma: no cover - compiled
    """Log-softmax of the logits of ``rows`` (``C x (d + 1)`` row-major ``w``),
    class-major (entry ``c * rows + j``: each class's values of the rows in
    one run, so the passes below run across the rows and vectorise), then
    the softmax ``exp(z_c - top) / total`` (the terms of the log's sum,
    divided: no second ``exp``) after it; both kept for the next ``grad``.
    ``exp`` and ``log`` are ``vexp`` and ``vlog`` (``plugins.lib.vecmath``),
    which vectorise."""
    d = X.shape[1]
    R = rows.size
    scratch, fresh = ms[4], ms[5]
    size = R * C
    both = scratch[:2 * size] if 2 * size <= scratch.size else np.empty(2 * size)
    logp, prob = both[:size], both[size:]
    if R >= BLAS_ROWS:
        _logits_blas(w, X, rows, C, logp)
    else:
        for j in range(R):
            x = X[rows[j]]
            for c in range(C):
                logp[c * R + j] = _dot(x, w[c * (d + 1):c * (d + 1) + d], d)
    top = np.full(R, -np.inf)
    for c in range(C):
        bias = w[c * (d + 1) + d]
        z = logp[c * R:(c + 1) * R]
        for j in range(R):
            v = z[j] + bias
            z[j] = v
            top[j] = v if v > top[j] else top[j]
    total = np.zeros(R)
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
    fresh[0] = R if 2 * size <= scratch.size else -1
    return both


@njit(cache=True, error_model="numpy")
def _logits_blas(w, X, rows, C, out):  # pragma: no cover - compiled
    """``Theta x_i`` of ``rows`` (no bias) into ``out``, class-major (``C x
    rows``, flat), by BLAS (apart from the loop over few rows, as
    ``_linear_blas``)."""
    d = X.shape[1]
    W = w.reshape((C, d + 1))
    # rows x C, as numpy's X @ W.T (the class-major product, W X^T, costs 2.5x:
    # X^T is not C-ordered)
    Z = np.dot(_rows_of(X, rows), np.ascontiguousarray(W[:, :d].T))
    R = rows.size
    for c in range(C):
        for j in range(R):
            out[c * R + j] = Z[j, c]


@njit(cache=True, error_model="numpy")
def logistic_cel_losses(ms, w, X, y, rows):  # pragma: no cover - compiled
    """``LogisticCEL.losses`` of ``rows``: cross-entropy over the scale, clipped at 1
    (and counted) when the scale is below the proven bound."""
    C = ms[3]
    R = rows.size
    logp = _logistic_logp(ms, w, X, y, rows, C)[:R * C]
    raw = np.empty(R)
    for j in range(R):
        raw[j] = -logp[y[rows[j]] * R + j]
    return _scaled(ms, raw)


@njit(cache=True, error_model="numpy")
def logistic_cel_grad(ms, w, X, y, rows, weights):  # pragma: no cover - compiled
    """``LogisticCEL.grad``: ``(softmax - onehot) weights`` packed as ``C x (d + 1)``."""
    scale, clips, C = ms[0], ms[1], ms[3]
    d = X.shape[1]
    R = rows.size
    both = _cached(ms, rows, 2 * C)
    if both.size == 0 and R > 0:
        both = _logistic_logp(ms, w, X, y, rows, C)
        ms[5][0] = -1
    size = R * C
    logp, prob = both[:size], both[size:2 * size]
    g = np.zeros(C * (d + 1))
    if R >= BLAS_ROWS:
        _logistic_grad_blas(ms, X, y, rows, weights, logp, prob, g)
    else:
        for j in range(R):
            label = y[rows[j]]
            if weights[j] == 0.0 or (clips and -logp[label * R + j] > scale):
                continue  # no gradient formed: it would enter the sum times 0
            x = X[rows[j]]
            for c in range(C):
                s = prob[c * R + j]
                if c == label:
                    s -= 1.0
                s *= weights[j]
                base = c * (d + 1)
                gc = g[base:base + d]  # views: the loop vectorises (2x faster)
                for i in range(d):
                    gc[i] += s * x[i]
                g[base + d] += s
    for c in range(C * (d + 1)):
        g[c] /= scale
    return g


@njit(cache=True, error_model="numpy")
def _logistic_grad_blas(ms, X, y, rows, weights, logp, prob, g):  # pragma: no cover
    """``logistic_cel_grad``'s sum over many rows by BLAS, into ``g`` (unscaled):
    ``G = (softmax - onehot) weights`` class-major, then ``G X``."""
    scale, clips, C = ms[0], ms[1], ms[3]
    d = X.shape[1]
    R = rows.size
    G = np.empty((C, R))
    for c in range(C):
        for j in range(R):
            G[c, j] = (prob[c * R + j] - (1.0 if y[rows[j]] == c else 0.0)) * weights[j]
    if clips:
        for j in range(R):
            if -logp[y[rows[j]] * R + j] > scale:
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


@harness.hookimpl
def register_models(register):
    register(LinearMSE)
    register(LogisticCEL)


LinearMSE._batch_losses = staticmethod(linear_mse_losses)
LinearMSE._batch_grad = staticmethod(linear_mse_grad)
LogisticCEL._batch_losses = staticmethod(logistic_cel_losses)
LogisticCEL._batch_grad = staticmethod(logistic_cel_grad)
