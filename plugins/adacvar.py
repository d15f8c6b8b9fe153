"""Ada-CVaR's sampler (Curi, Levy, Jegelka, Krause 2020) on the k-set, as a baseline."""

from __future__ import annotations

import math
from typing import ClassVar

import numpy as np
from scipy.optimize import brentq

import harness
from harness import Param, Proposal


def dpp_marginals(log_w: np.ndarray, k: int) -> np.ndarray:
    """Approximate k-DPP marginals ``m_i = e^nu w_i / (1 + e^nu w_i)`` with ``nu``
    the root of ``sum_i m_i = k`` (monotone in nu; Brent's method in log space)."""
    if k >= log_w.size:
        return np.ones(log_w.size)

    def excess(nu: float) -> float:
        return float(np.sum(_sigmoid(nu + log_w))) - k

    hi = -float(np.min(log_w)) + math.log(k) + 40.0
    lo = -float(np.max(log_w)) + math.log(k / log_w.size) - 40.0
    return _sigmoid(brentq(excess, lo, hi, xtol=1e-12) + log_w)


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return np.exp(-np.logaddexp(0.0, -z))


class AdaCVaR:
    """Exponential weights over the n rows with k-set marginals from an
    approximate k-DPP, mixed with the uniform distribution.

    Per round: marginals ``m = (1 - gamma) dpp_marginals(w) + gamma k / n``
    (so ``p = m / k`` is in ``S_{n,k}``), k rows drawn with ``P[i in S] = m_i``
    (the constraint set's sampler), the w-player's batch weights ``1/k``,
    importance-weighted gains ``L_i / m_i`` on the sampled rows, and
    ``log w_i += eta * L_i / m_i``.

    Departures from the paper's requirements (Appendix A): the estimator has
    no confidence term, so only a pseudo-regret / expected bound against an
    oblivious adversary holds, which does not give the game's high-probability
    (or even expected) gap bound; Curi et al. analyse plain EXP3 and add the
    uniform mixing only in experiments. No regret bound is reported.
    Defaults follow Exp3.M (Uchiya et al. 2010): ``gamma = sqrt(n log(n/k) / (k T))``
    and ``eta = k gamma / n``.
    """

    name: ClassVar[str] = "adacvar"
    constraints: ClassVar[tuple[str, ...] | None] = ("kset",)
    params: ClassVar[dict[str, Param]] = {
        "eta": Param(float, low=0.0, low_open=True, nullable=True,
                     doc="step size; None: k gamma / n"),
        "gamma": Param(float, low=0.0, high=1.0, high_open=True, nullable=True,
                       doc="uniform mixing; None: sqrt(n log(n/k) / (k T)), at most 1/2"),
    }

    def __init__(self, eta=None, gamma=None) -> None:
        self.eta = eta
        self.gamma = gamma

    def rows_per_round(self, constraint) -> int:
        return constraint.k

    def setup(self, constraint, horizon: int) -> dict[str, float]:
        n, k = constraint.n, constraint.k
        self.constraint_ = constraint
        self.gamma_ = self.gamma if self.gamma is not None else min(
            0.5, math.sqrt(n * math.log(n / k) / (k * horizon)) if n > k else 0.0)
        self.eta_ = self.eta if self.eta is not None else k * self.gamma_ / n
        self.log_w_ = np.zeros(n)
        self.batch_weights_ = np.full(k, 1.0 / k)
        self._refresh()
        return {"eta": self.eta_, "gamma": self.gamma_}

    def _refresh(self) -> None:
        K = self.constraint_
        m = (1 - self.gamma_) * dpp_marginals(self.log_w_, K.k) + self.gamma_ * K.k / K.n
        self.marginals_ = np.minimum(m, 1.0)
        self.p_ = self.marginals_ / K.k

    @property
    def p(self) -> np.ndarray:
        return self.p_

    def propose(self, rng: np.random.Generator) -> Proposal:
        self.rows_ = self.constraint_.sample(self.p_, rng)
        return Proposal(self.rows_, self.batch_weights_)

    def observe(self, losses: np.ndarray) -> None:
        rows = self.rows_
        self.log_w_[rows] += self.eta_ * losses / self.marginals_[rows]
        self.log_w_ -= self.log_w_.max()
        self._refresh()

    def regret_bound(self, rounds: int) -> float | None:
        return None


@harness.hookimpl
def register_p_players(register):
    register(AdaCVaR)
