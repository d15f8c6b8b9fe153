"""OL-FTRL: entropic follow-the-regularized-leader with full information
(the paper's online-online baseline, Section 6 and Appendix E.2)."""

from __future__ import annotations

import math
from typing import ClassVar

import numpy as np

import harness
from harness import Param, Proposal


class FTRL:
    """Entropic FTRL over ``K``: all n rows are evaluated every round.

    ``p_{t+1} = argmax_{p in K} <sum_{s<=t} L_s, p> - (1/eta) sum_i p_i log p_i``,
    i.e. the KL projection onto K of ``exp(eta * cumulative losses)`` (the
    capping projection without uniform mixing). The w-player steps on the
    ``p_t``-weighted full gradient, and ``a_t = p_t``. Horizon ``T = N / n``.

    Default ``eta = sqrt(log(n/k) / T)`` (Appendix E.2's theorem), whose
    regret bound is ``log(n/k) / eta + eta T = 2 sqrt(T log(n/k))``. Per round O(n d).

    ``log(n/k)`` is the entropy's range over ``S_{n,k}``. On a set with row
    caps ``c`` (``row_caps()``: ``K = {0 <= p_i <= c_i, sum p = 1}``, e.g. the
    alpha-set's ``alpha``) the range is at most ``log(n max_i c_i)`` (``H(p) >=
    -log max_i p_i``), which takes its place (``log(n/k)`` when every
    ``c_i = 1/k``); on a set of another form, ``log(n)``, the range over the
    whole simplex.
    """

    name: ClassVar[str] = "ftrl"
    constraints: ClassVar[tuple[str, ...] | None] = ("kset", "simplex", "alphaset")
    params: ClassVar[dict[str, Param]] = {
        "eta": Param(float, low=0.0, low_open=True, nullable=True,
                     doc="step size; None: sqrt(log(n/k) / T)"),
    }

    def __init__(self, eta=None) -> None:
        self.eta = eta

    def rows_per_round(self, constraint) -> int:
        return constraint.n

    def setup(self, constraint, horizon: int) -> dict[str, float]:
        n = constraint.n
        self.constraint_ = constraint
        self.log_ratio_ = log_ratio = self.entropy_range(constraint)
        self.eta_ = self.eta if self.eta is not None else (
            math.sqrt(log_ratio / horizon) if log_ratio > 0 else 1.0)
        self.log_w_ = np.zeros(n)
        self.rows_ = np.arange(n)
        self.p_ = constraint.project(self.log_w_, 0.0, log_domain=True)
        return {"eta": self.eta_}

    @staticmethod
    def entropy_range(constraint) -> float:
        """``log(n max_i c_i)`` for the row caps ``c`` of ``K`` (written ``log(n/k)``
        when every cap is ``1/k``, Appendix E.2's form); ``log(n)`` if ``K`` has none."""
        n, k = constraint.n, constraint.k
        caps = constraint.row_caps()
        if caps is None:
            return math.log(n)
        top = float(np.max(caps))
        return math.log(n / k) if top == 1.0 / k else math.log(n * top)

    @property
    def p(self) -> np.ndarray:
        return self.p_

    def propose(self, rng: np.random.Generator) -> Proposal:
        return Proposal(self.rows_, self.p_)

    def observe(self, losses: np.ndarray) -> None:
        self.log_w_ += self.eta_ * losses
        self.log_w_ -= self.log_w_.max()
        self.p_ = self.constraint_.project(self.log_w_, 0.0, log_domain=True)

    def regret_bound(self, rounds: int) -> float | None:
        """``log(n/k) / eta + eta T``; ``2 sqrt(T log(n/k))`` at the default eta
        (``entropy_range`` in place of ``log(n/k)`` on other sets)."""
        return self.log_ratio_ / self.eta_ + self.eta_ * rounds


@harness.hookimpl
def register_p_players(register):
    register(FTRL)
