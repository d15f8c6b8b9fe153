"""EXP3-IX on the simplex (paper, Algorithm 3 and Theorem 3.1; Neu 2015)."""

from __future__ import annotations

import math
from typing import ClassVar

import numpy as np

import harness
from harness import Param, Proposal


class Exp3IX:
    """EXP3-IX for the max loss: one row per round.

    The p-player *maximises* ``<L, p>`` while EXP3-IX minimises losses, so it
    is fed the complement ``1 - L`` (the box of Algorithm 3 writes the update
    ``exp(-eta L_hat)`` on ``L`` itself, which would steer the player away
    from the worst row). Per round: ``p_t = w_t / sum w_t``, draw ``i_t ~ p_t``,
    ``L_hat = (1 - L_{i_t}) / (p_{t,i_t} + gamma)`` on ``i_t`` only, and
    ``log w_{i_t} -= eta L_hat``; log-weights rebased to max 0.

    Defaults (Theorem 3.1): ``eta = 2 gamma = sqrt(2 log n / (n T))``. Its
    high-probability regret bound is
    ``2 sqrt(2 n T log n) + (sqrt(2 n T / log n) + 1) log(2 / delta)``.
    """

    name: ClassVar[str] = "exp_ix"
    constraints: ClassVar[tuple[str, ...] | None] = ("simplex",)
    params: ClassVar[dict[str, Param]] = {
        "eta": Param(float, low=0.0, low_open=True, nullable=True,
                     doc="step size; None: sqrt(2 log n / (n T))"),
        "gamma": Param(float, low=0.0, high=1.0, nullable=True,
                       doc="implicit exploration; None: eta / 2; 0: no exploration "
                           "(unbiased estimate, no high-probability bound)"),
        "delta": Param(float, default=0.05, low=0.0, high=1.0, low_open=True, high_open=True,
                       doc="failure probability of the bound"),
    }

    def __init__(self, eta=None, gamma=None, delta=0.05) -> None:
        self.eta = eta
        self.gamma = gamma
        self.delta = delta

    def rows_per_round(self, constraint) -> int:
        return 1

    def setup(self, constraint, horizon: int) -> dict[str, float]:
        n = constraint.n
        self.constraint_ = constraint
        self.eta_ = self.eta if self.eta is not None else math.sqrt(
            2 * math.log(n) / (n * horizon)) if n > 1 else 1.0
        self.gamma_ = self.gamma if self.gamma is not None else self.eta_ / 2
        self.log_w_ = np.zeros(n)
        self.p_ = np.full(n, 1.0 / n)
        self.one_ = np.ones(1)
        return {"eta": self.eta_, "gamma": self.gamma_, "delta": self.delta}

    @property
    def p(self) -> np.ndarray:
        return self.p_

    def propose(self, rng: np.random.Generator) -> Proposal:
        self.rows_ = self.constraint_.sample(self.p_, rng).rows
        return Proposal(self.rows_, self.one_)

    def observe(self, losses: np.ndarray) -> None:
        i = self.rows_[0]
        self.log_w_[i] -= self.eta_ * (1.0 - losses[0]) / (self.p_[i] + self.gamma_)
        self.log_w_ -= self.log_w_.max()
        w = np.exp(self.log_w_)
        self.p_ = w / w.sum()

    def regret_bound(self, rounds: int) -> float | None:
        n, T = self.constraint_.n, rounds
        if n < 2:
            return 0.0
        return (2 * math.sqrt(2 * n * T * math.log(n))
                + (math.sqrt(2 * n * T / math.log(n)) + 1) * math.log(2 / self.delta))


@harness.hookimpl
def register_p_players(register):
    register(Exp3IX)
