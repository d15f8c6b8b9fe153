"""One-vs-rest linear classification with the squared hinge loss: with
logits ``z_c = <theta_c, x> + b_c`` (``w = (theta_c, b_c)_c``, ``C x (d + 1)``
row-major) and signs ``s_c = +1`` for the row's class, ``-1`` for the others,

    loss(x, y) = sum_c max(0, 1 - s_c z_c)^2,
    d loss / d z_c = -2 s_c max(0, 1 - s_c z_c).

On the ball ``||w|| <= B``, with ``R = max_i ||(x_i, 1)||``: ``|z_c| <= ||w_c||
R``, so ``loss <= sum_c (1 + ||w_c|| R)^2 <= (sqrt(C) + B R)^2`` (the scale),
and the gradient ``(d loss / d z) kron (x, 1)`` has norm at most ``2 (sqrt(C)
+ B R) R``. The loss's Hessian in z is ``2 diag(active)``: each row loss is
``2 ||(x, 1)||^2``-smooth.

The compiled form offers the batch roles (``ovr_squared_hinge_losses``,
``ovr_squared_hinge_grad``) and the row roles (``ovr_squared_hinge_row_loss``,
``_row_grad``, ``_row_scratch``) of ``harness.protocols.Model``, all on one
per-row function (``_row_terms``); the numpy methods are written apart.
"""

from __future__ import annotations

import math
from typing import ClassVar, NamedTuple

import numpy as np
from numba import njit

from harness import Compiled, ConfigError, Param


class HingeState(NamedTuple):
    """The compiled state: the loss scale and the number of classes."""

    scale: float
    classes: int


class OvRSquaredHinge:
    """One-vs-rest squared hinge over ``C x (d + 1)`` parameters."""

    name: ClassVar[str] = "ovr_squared_hinge"
    task: ClassVar[str] = "classification"
    params: ClassVar[dict[str, Param]] = {}
    kernels: ClassVar[str] = f"{__name__}:ovr_squared_hinge"

    def setup(self, dataset, radius: float) -> dict[str, float]:
        X = np.asarray(dataset.X, dtype=np.float64)
        self.C_ = int(dataset.n_classes)
        if self.C_ < 2:
            raise ConfigError(f"ovr_squared_hinge needs 2 classes or more; got {self.C_}")
        self.d_ = X.shape[1]
        self.n_params = self.C_ * (self.d_ + 1)
        self.R_ = math.sqrt(float(np.max(np.einsum("ij,ij->i", X, X))) + 1.0)
        self.scale_ = (math.sqrt(self.C_) + radius * self.R_) ** 2
        self.grad_bound = self.row_grad_bound(X, dataset.y, radius)
        self.loss_bound = self.scale_  # every raw loss over the ball is at most the scale
        self.n_clipped = 0
        return {"loss_scale": self.scale_, "grad_bound": self.grad_bound}

    # --- numpy ------------------------------------------------------------

    def _logits(self, w, X):
        W = w.reshape(self.C_, self.d_ + 1)
        return X @ W[:, :-1].T + W[:, -1]

    def _signs(self, y):
        S = -np.ones((len(y), self.C_))
        S[np.arange(len(y)), np.asarray(y, dtype=np.int64)] = 1.0
        return S

    def raw_losses(self, w, X, y):
        H = np.maximum(0.0, 1.0 - self._signs(y) * self._logits(w, X))
        return np.sum(H * H, axis=1)

    def value_and_grad(self, w, X, y, weights):
        S = self._signs(y)
        H = np.maximum(0.0, 1.0 - S * self._logits(w, X))
        value = float(weights @ np.sum(H * H, axis=1)) / self.scale_
        G = (-2.0 * S * H) * (weights / self.scale_)[:, None]  # rows x C
        grad = np.concatenate((G.T @ X, G.sum(axis=0)[:, None]), axis=1).ravel()
        return value, grad

    # --- the compiled kernels on the Python path (the same bits as the game's)

    def _state(self) -> HingeState:
        return HingeState(float(self.scale_), int(self.C_))

    def losses(self, w, X, y):
        return ovr_squared_hinge_losses(
            self._state(), np.ascontiguousarray(w, dtype=np.float64),
            np.ascontiguousarray(X, dtype=np.float64), np.ascontiguousarray(y),
            np.arange(len(y)))

    def grad(self, w, X, y, weights):
        return ovr_squared_hinge_grad(
            self._state(), np.ascontiguousarray(w, dtype=np.float64),
            np.ascontiguousarray(X, dtype=np.float64), np.ascontiguousarray(y),
            np.arange(len(y)), np.ascontiguousarray(weights, dtype=np.float64))

    def compiled(self) -> Compiled:
        return Compiled(self.kernels, self._state())

    # --- constants ----------------------------------------------------------

    def row_smoothness(self, X) -> float:
        X = np.asarray(X, dtype=np.float64)
        return 2.0 * (float(np.max(np.einsum("ij,ij->i", X, X))) + 1.0) / self.scale_

    def row_grad_bound(self, X, y, radius: float) -> float:
        X = np.asarray(X, dtype=np.float64)
        R = math.sqrt(float(np.max(np.einsum("ij,ij->i", X, X))) + 1.0)
        return 2.0 * (math.sqrt(self.C_) + radius * R) * R / self.scale_

    def cvx_raw_losses(self, w, X, y):
        import cvxpy as cp

        W = cp.reshape(w, (self.C_, self.d_ + 1), order="C")
        Z = X @ W[:, :-1].T + np.ones((X.shape[0], 1)) @ W[:, -1:].T
        return cp.sum(cp.square(cp.pos(1.0 - cp.multiply(self._signs(y), Z))), axis=1)

    def task_metrics(self, w, X, y, k):
        X = np.asarray(X, dtype=np.float64)
        raw = self.raw_losses(w, X, y)
        hits = int(np.count_nonzero(np.argmax(self._logits(w, X), axis=1) == y))
        return {"accuracy": hits / len(y), "max_loss": float(raw.max()),
                "mean_loss": float(raw.mean())}


# ---------------------------------------------------------------------------
# compiled kernels
# ---------------------------------------------------------------------------


@njit(cache=True, inline="always", error_model="numpy")
def _row_terms(ms, X, y, i, w, z):  # pragma: no cover - compiled
    """Row i's raw loss; ``z[c]`` gets ``d loss / d z_c``."""
    C = ms.classes
    d = X.shape[1]
    label = int(y[i])
    total = 0.0
    for c in range(C):
        s = w[c * (d + 1) + d]
        for j in range(d):
            s += w[c * (d + 1) + j] * X[i, j]
        sign = 1.0 if c == label else -1.0
        h = max(0.0, 1.0 - sign * s)
        total += h * h
        z[c] = -2.0 * sign * h
    return total


@njit(cache=True, error_model="numpy")
def ovr_squared_hinge_losses(ms, w, X, y, rows):  # pragma: no cover - compiled
    z = np.empty(ms.classes)
    out = np.empty(rows.size)
    for j in range(rows.size):
        out[j] = _row_terms(ms, X, y, rows[j], w, z) / ms.scale
    return out


@njit(cache=True, error_model="numpy")
def ovr_squared_hinge_grad(ms, w, X, y, rows, weights):  # pragma: no cover - compiled
    C = ms.classes
    d = X.shape[1]
    z = np.empty(C)
    g = np.zeros(C * (d + 1))
    for j in range(rows.size):
        if weights[j] == 0.0:
            continue
        i = rows[j]
        _row_terms(ms, X, y, i, w, z)
        for c in range(C):
            a = weights[j] * z[c] / ms.scale
            for k in range(d):
                g[c * (d + 1) + k] += a * X[i, k]
            g[c * (d + 1) + d] += a
    return g


@njit(cache=True, inline="always", error_model="numpy")
def ovr_squared_hinge_row_loss(ms, X, y, i, w, z):  # pragma: no cover - compiled
    return _row_terms(ms, X, y, i, w, z) / ms.scale


@njit(cache=True, inline="always", error_model="numpy")
def ovr_squared_hinge_row_grad(ms, X, y, i, w, z, g):  # pragma: no cover - compiled
    d = X.shape[1]
    for c in range(ms.classes):
        a = z[c] / ms.scale
        for k in range(d):
            g[c * (d + 1) + k] = a * X[i, k]
        g[c * (d + 1) + d] = a


@njit(cache=True, inline="always", error_model="numpy")
def ovr_squared_hinge_row_scratch(ms):  # pragma: no cover - compiled
    return ms.classes
