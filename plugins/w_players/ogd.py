"""Projected online gradient descent on the l2-ball (the w-player of Section 6)."""

from __future__ import annotations

import math
from typing import ClassVar, NamedTuple

import numpy as np
from numba import njit

import harness
from harness import Param
from harness.engine import Compiled, replaces
from harness.gap import project_ball_inplace
from plugins.lib.steps import scale_param, scaled_step


class OGDState(NamedTuple):
    """OGD's state, the kernels' and the Python methods' alike (changed in place)."""

    #: the iterate ``w_t`` and the sum of the iterates played
    w: np.ndarray
    w_sum: np.ndarray
    #: the rounds played, in a one-element array
    rounds: np.ndarray
    #: the step size and the radius B of W
    lr: float
    radius: float


class OGD:
    """Projected OGD on ``W = {w : ||w||_2 <= radius}`` over all model
    parameters, bias included.

    Default step ``radius * sqrt(2 / T)`` (paper, Appendix E, subsections
    OL-EXP.4M and OL-FTRL), or the paired p-player's ``suggest_w_lr``;
    ``lr_scale`` multiplies it (``plugins.lib.steps``).

    Regret bound (``regret_bound``): ``B^2 / (2s) + s G^2 t / 2`` after t
    rounds at the step ``s`` in use with gradients of norm at most ``G``
    (Zinkevich 2003; Shalev-Shwartz 2011, Corollary 2.7, cited in the proof
    of ``th:topk``), deterministic (docs/algorithms.md, "The p-players'
    regret bounds").
    """

    name: ClassVar[str] = "ogd"
    state_version: ClassVar[int] = 1
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
        self.state_ = OGDState(self.w_, np.zeros(dim), np.zeros(1, dtype=np.int64),
                               float(self.lr_), float(self.radius))
        return {"lr": self.lr_, "radius": self.radius}

    @property
    def w(self) -> np.ndarray:
        return self.w_

    @property
    def rounds_(self) -> int:
        return int(self.state_.rounds[0])

    @property
    def w_bar(self) -> np.ndarray:
        return self.state_.w_sum / max(self.rounds_, 1)

    def step(self, grad: np.ndarray) -> None:
        """``ogd_step``, the kernel the compiled path runs too."""
        ogd_step(self.state_, np.ascontiguousarray(grad, dtype=np.float64))

    def compiled(self) -> Compiled | None:
        """The compiled form (``harness.engine``): ``ogd_iterate``/``ogd_step``
        on the player's state (``OGDState``), ``w`` changed in place."""
        if replaces(self, OGD, ("step", "w")):
            return None
        return Compiled("plugins.w_players.ogd:ogd", self.state_)

    def regret_bound(self, rounds: int) -> float | None:
        """``B^2 / (2s) + s G^2 t / 2`` after ``t = rounds`` rounds (class docstring)."""
        B, s, G = self.radius, self.lr_, self.grad_bound_
        return B * B / (2 * s) + s * G * G * rounds / 2


@njit(cache=True, error_model="numpy")
def ogd_iterate(ws):  # pragma: no cover - compiled
    """The current iterate ``w_t``."""
    return ws.w


@njit(cache=True, error_model="numpy")
def ogd_step(ws, grad):  # pragma: no cover - compiled
    """``OGD.step``: add ``w_t`` to the sum, step, project onto the ball
    (``project_ball_inplace``)."""
    w, w_sum = ws.w, ws.w_sum
    lr = ws.lr
    for i in range(w.size):
        w_sum[i] += w[i]
        w[i] = w[i] - lr * grad[i]
    ws.rounds[0] += 1
    project_ball_inplace(w, ws.radius)


@harness.hookimpl
def register_w_players(register):
    register(OGD)
