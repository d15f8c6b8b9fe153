"""Ada-CVaR's sampler (Curi, Levy, Jegelka, Krause 2020) on the k-set, as a baseline."""

from __future__ import annotations

import math
from typing import ClassVar

import numpy as np
from numba import njit

import harness
from harness import Param, Proposal


def dpp_marginals(log_w: np.ndarray, k: int) -> np.ndarray:
    """Approximate k-DPP marginals ``m_i = e^nu w_i / (1 + e^nu w_i)`` with ``nu``
    the root of ``sum_i m_i = k`` (``dpp_shift``)."""
    log_w = np.ascontiguousarray(log_w, dtype=np.float64)
    if k >= log_w.size:
        return np.ones(log_w.size)
    return _sigmoid(dpp_shift(log_w, float(k)) + log_w)


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return np.exp(-np.logaddexp(0.0, -z))


@njit(cache=True)
def dpp_shift(log_w, k):  # pragma: no cover - compiled
    """The root ``nu`` of ``g(nu) = sum_i sigmoid(nu + log_w_i) - k`` (``k < n``),
    compiled: Newton's method kept inside a bracket that every step shrinks,
    with a bisection step whenever Newton's would leave it.

    ``g`` is increasing. Since ``sigmoid(z) <= e^z``, ``g`` is <= 0 at
    ``nu_0 = log k - logsumexp(log_w)``, the start; since ``sigmoid(z) >=
    1 - e^-z``, ``g`` is >= 0 at ``log k - min log_w + log(n)`` for ``k <= n - 1``
    (``hi`` below has room to spare). Stops when a step or the bracket is
    within a few ulps of ``nu``, at most 200 steps (Newton's quadratic
    convergence makes that a handful of steps).
    """
    n = log_w.size
    top = -np.inf
    least = np.inf
    for i in range(n):
        top = max(top, log_w[i])
        least = min(least, log_w[i])
    total = 0.0
    for i in range(n):
        total += np.exp(log_w[i] - top)
    lo = np.log(k) - (top + np.log(total))
    hi = np.log(k) - least + np.log(n) + 40.0
    nu = lo
    for _ in range(200):
        tol = 4e-16 * max(1.0, abs(nu))
        g = -k
        slope = 0.0
        for i in range(n):
            z = nu + log_w[i]
            if z >= 0.0:
                s = 1.0 / (1.0 + np.exp(-z))
            else:
                e = np.exp(z)
                s = e / (1.0 + e)
            g += s
            slope += s * (1.0 - s)
        if g == 0.0:
            return nu
        if g < 0.0:
            lo = nu
        else:
            hi = nu
        step = nu - g / slope if slope > 0.0 else 0.5 * (lo + hi)
        if not lo < step < hi:
            step = 0.5 * (lo + hi)
        if abs(step - nu) <= tol or hi - lo <= tol:
            return step
        nu = step
    return nu


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
        "gamma": Param(float, low=0.0, high=1.0, low_open=True, high_open=True, nullable=True,
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
        self.rows_ = self.constraint_.sample(self.p_, rng).rows  # k-set: multiplicities 1
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
