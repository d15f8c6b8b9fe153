"""Linear regression ``f(x) = <theta, x> + b`` with the Huber loss

    h(r) = r^2 / 2            if |r| <= delta,
           delta (|r| - delta / 2)  otherwise,      r = f(x) - y,

in numpy only: no compiled form, so every solver reaches it through
``value_and_grad`` on single rows.

On the ball ``||w|| <= B``, with ``R = max_i ||(x_i, 1)||``, ``|r| <= B R +
max |y|`` and h grows with ``|r|``, so ``h(B R + max |y|)`` bounds the loss (the
scale); the gradient ``clip(r, -delta, delta) (x, 1)`` has norm at most
``min(delta, B R + max |y|) R``. ``h'' <= 1``: each row loss is
``||(x, 1)||^2``-smooth.
"""

from __future__ import annotations

import math
from typing import ClassVar

import numpy as np

from harness import Param


def huber(r: np.ndarray, delta: float) -> np.ndarray:
    a = np.abs(r)
    return np.where(a <= delta, 0.5 * r * r, delta * (a - 0.5 * delta))


class HuberLinear:
    """Huber regression over ``w = (theta, b)``."""

    name: ClassVar[str] = "huber_linear"
    task: ClassVar[str] = "regression"
    params: ClassVar[dict[str, Param]] = {
        "delta": Param(float, default=1.0, low=0.0, low_open=True,
                       doc="the residual where the loss turns from quadratic to linear"),
    }

    def __init__(self, delta: float = 1.0) -> None:
        self.delta = float(delta)

    def setup(self, dataset, radius: float) -> dict[str, float]:
        X = np.asarray(dataset.X, dtype=np.float64)
        self.n_params = X.shape[1] + 1
        self.R_ = math.sqrt(float(np.max(np.einsum("ij,ij->i", X, X))) + 1.0)
        top = radius * self.R_ + float(np.max(np.abs(dataset.y)))
        self.scale_ = max(float(huber(np.array(top), self.delta)), 1e-12)
        self.grad_bound = min(self.delta, top) * self.R_ / self.scale_
        self.loss_bound = self.scale_  # every raw loss over the ball is at most the scale
        self.n_clipped = 0
        return {"loss_scale": self.scale_, "grad_bound": self.grad_bound}

    def _residuals(self, w, X, y):
        return X @ w[:-1] + w[-1] - y

    def raw_losses(self, w, X, y):
        return huber(self._residuals(w, X, y), self.delta)

    def losses(self, w, X, y):
        return self.raw_losses(w, X, y) / self.scale_

    def grad(self, w, X, y, weights):
        return self.value_and_grad(w, X, y, weights)[1]

    def value_and_grad(self, w, X, y, weights):
        r = self._residuals(w, X, y)
        s = weights * np.clip(r, -self.delta, self.delta) / self.scale_
        value = float(weights @ huber(r, self.delta)) / self.scale_
        return value, np.append(s @ X, s.sum())

    def row_smoothness(self, X) -> float:
        X = np.asarray(X, dtype=np.float64)
        return (float(np.max(np.einsum("ij,ij->i", X, X))) + 1.0) / self.scale_

    def cvx_raw_losses(self, w, X, y):
        import cvxpy as cp

        # cvxpy's huber is 2 h (r^2 inside, 2 M |r| - M^2 outside)
        return 0.5 * cp.huber(X @ w[:-1] + w[-1] - y, self.delta)

    def task_metrics(self, w, X, y, k):
        raw = self.raw_losses(w, np.asarray(X, dtype=np.float64), y)
        return {"max_loss": float(raw.max()), "mean_loss": float(raw.mean())}
