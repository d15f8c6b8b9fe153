"""Projected online gradient descent on the l2-ball (the w-player of Section 6)."""

from __future__ import annotations

import math
from typing import ClassVar

import numpy as np
from numba import njit

import harness
from harness import Param
from harness.engine import Compiled, replaces
from plugins.lib.steps import scale_param, scaled_step


class OGD:
    """Projected OGD on ``W = {w : ||w||_2 <= radius}`` over all model
    parameters, bias included.

    Default step ``radius * sqrt(2 / T)`` (paper, Appendix E, subsections
    OL-EXP.4M and OL-FTRL), or the paired p-player's ``suggest_w_lr``;
    ``lr_scale`` multiplies it (``plugins.lib.steps``).

    Regret bound (``regret_bound``): with ``w_1 = 0``, the step ``s`` in use and
    gradients of norm at most ``G`` (the model's per-example bound, which bounds
    any batch with weights summing to 1), the regret of the first t rounds
    against any ``u`` in the ball is at most ``B^2 / (2s) + s G^2 t / 2``
    (Zinkevich 2003; Shalev-Shwartz 2011, Corollary 2.7, cited in the proof of
    ``th:topk``), for every t and deterministically. It is a bound on
    ``sum_t <L(w_t), a_t> - min_w sum_t <L(w), a_t>`` (game units) when the
    batch gradient is exactly that of ``<L(w_t), a_t>``, which holds for every
    built-in p-player that reports a regret bound.
    """

    name: ClassVar[str] = "ogd"
    params: ClassVar[dict[str, Param]] = {
        "radius": Param(float, default=1.0, low=0.0, low_open=True, doc="radius B of W"),
        "lr": Param(float, low=0.0, low_open=True, nullable=True,
                    doc="step size; None: radius * sqrt(2 / T), or the p-player's "
                        "suggestion (S-AFL)"),
        "lr_scale": scale_param("lr"),
    }

    def __init__(self, radius: float = 1.0, lr: float | None = None,
                 lr_scale: float = 1.0) -> None:
        self.radius = radius
        self.lr = lr
        self.lr_scale = lr_scale

    def setup(self, dim: int, horizon: int, grad_bound: float,
              lr_hint: float | None = None) -> dict[str, float]:
        """``lr_hint``: the paired p-player's step rule (e.g. S-AFL's), the
        default in place of ``radius * sqrt(2 / T)``; ``lr_scale`` multiplies
        whichever default is used."""
        default = lr_hint if lr_hint is not None else self.radius * math.sqrt(2.0 / horizon)
        self.lr_ = scaled_step(self.name, "lr", self.lr, self.lr_scale, default)
        self.grad_bound_ = grad_bound
        self.w_ = np.zeros(dim)
        self.w_sum_ = np.zeros(dim)
        self.rounds_ = 0
        return {"lr": self.lr_, "radius": self.radius}

    @property
    def w(self) -> np.ndarray:
        return self.w_

    @property
    def w_bar(self) -> np.ndarray:
        return self.w_sum_ / max(self.rounds_, 1)

    def step(self, grad: np.ndarray) -> None:
        self.w_sum_ += self.w_
        self.rounds_ += 1
        w = self.w_ - self.lr_ * grad
        norm = math.sqrt(_squared_norm(w))
        if norm > self.radius:
            w *= self.radius / norm
        self.w_ = w

    def compiled(self) -> Compiled | None:
        """The compiled form (``harness.engine``): ``ogd_step`` on
        ``(w, w_sum, [rounds], lr, radius)``, ``w`` changed in place."""
        if replaces(self, OGD, ("step", "w")):
            return None
        self.w_ = np.ascontiguousarray(self.w_, dtype=np.float64)
        state = (self.w_, self.w_sum_, np.array([self.rounds_], dtype=np.int64),
                 float(self.lr_), float(self.radius))

        def store(state) -> None:
            self.rounds_ = int(state[2][0])

        return Compiled("plugins.w_players.ogd:ogd", state, store)

    def regret_bound(self, rounds: int) -> float | None:
        """``B^2 / (2s) + s G^2 t / 2`` after ``t = rounds`` rounds (class docstring)."""
        B, s, G = self.radius, self.lr_, self.grad_bound_
        return B * B / (2 * s) + s * G * G * rounds / 2


@njit(cache=True, error_model="numpy")
def _squared_norm(w):  # pragma: no cover - compiled
    """``w @ w`` summed in index order, as ``ogd_step`` sums it."""
    total = 0.0
    for i in range(w.size):
        total += w[i] * w[i]
    return total


@njit(cache=True, error_model="numpy")
def ogd_iterate(ws):  # pragma: no cover - compiled
    """The current iterate ``w_t``."""
    return ws[0]


@njit(cache=True, error_model="numpy")
def ogd_step(ws, grad):  # pragma: no cover - compiled
    """``OGD.step``: add ``w_t`` to the sum, step, project onto the ball."""
    w, w_sum, rounds, lr, radius = ws
    d = w.size
    for i in range(d):
        w_sum[i] += w[i]
    rounds[0] += 1
    sq = 0.0
    for i in range(d):
        w[i] = w[i] - lr * grad[i]
        sq += w[i] * w[i]
    norm = np.sqrt(sq)
    if norm > radius:
        f = radius / norm
        for i in range(d):
            w[i] *= f


@harness.hookimpl
def register_w_players(register):
    register(OGD)
