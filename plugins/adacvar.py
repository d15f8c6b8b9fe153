"""Ada-CVaR's sampler (Curi, Levy, Jegelka, Krause 2020) on the k-set, as a baseline."""

from __future__ import annotations

import math
from typing import ClassVar

import numpy as np
from numba import njit

import harness
from harness import Param, Proposal
from plugins.lib.capped import needs_sets_of_k_rows


def dpp_marginals(log_w: np.ndarray, k: int) -> np.ndarray:
    """Approximate k-DPP marginals ``m_i = e^nu w_i / (1 + e^nu w_i)`` with ``nu``
    the root of ``sum_i m_i = k`` (``dpp_shift``)."""
    log_w = np.ascontiguousarray(log_w, dtype=np.float64)
    if k >= log_w.size:
        return np.ones(log_w.size)
    return _sigmoid(dpp_shift(log_w, k) + log_w)


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return np.exp(-np.logaddexp(0.0, -z))


def dpp_shift(log_w: np.ndarray, k: float, start: float = -np.inf) -> float:
    """The root ``nu`` of ``g(nu) = sum_i sigmoid(nu + log_w_i) - k`` (``k < n``);
    ``start``: a guess (the previous round's root), used if it lies inside the
    bracket below."""
    return _dpp_shift(np.ascontiguousarray(log_w, dtype=np.float64), float(k), float(start))


@njit(cache=True)
def _dpp_shift(log_w, k, start):  # pragma: no cover - compiled
    """``dpp_shift``, compiled: Newton's method kept inside a bracket that every
    step shrinks, with a bisection step whenever Newton's would leave it.

    ``g`` is increasing. Since ``sigmoid(z) <= e^z``, ``g`` is <= 0 at
    ``nu_0 = log k - logsumexp(log_w)``, the default start; since ``sigmoid(z) >=
    1 - e^-z``, ``g`` is >= 0 at ``log k - min log_w + log(n)`` for ``k <= n - 1``
    (``hi`` below has room to spare). Stops when a step or the bracket is
    within a few ulps of ``nu``, at most 200 steps (Newton's quadratic
    convergence makes that a handful of steps; one or two from a warm start).
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
    nu = start if lo < start < hi else lo
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
    """Ada-CVaR's sampler (Curi, Levy, Jegelka, Krause 2020): exponential weights
    over the n rows whose k-set marginals come from an approximate k-DPP.

    Both variants keep log-weights ``log w`` and the marginals
    ``m = (1 - gamma) dpp_marginals(w, k) + gamma k / n`` (``sum m = k``, every
    ``m_i <= 1``), so ``p_t = m / k`` is in ``S_{n,k}``.

    ``variant="authors"`` (the default) is Ada-CVaR as its authors run it
    (Curi et al. 2020, Algorithm 1, and their released code, sebascuri/adacvar,
    ``Exp3Sampler`` with ``iid_batch=False``): a k-subset ``S`` with
    ``P[i in S] = m_i``, then ``batch_size`` rows drawn uniformly with
    replacement from ``S`` (one row by default: Algorithm 1's learner steps on
    one sampled point); only those rows are evaluated. The learner steps on the
    batch mean (batch weights ``m_j / b`` for a row drawn ``m_j`` times). The
    sampler is EXP3 in loss form on ``1 - L``: ``log w_j -= eta m_j (1 - L_j) /
    (m_j + eps)`` for each drawn row, dividing by the row's k-subset marginal
    as their code does. Their defaults: ``eta = sqrt((1/alpha) log(1/alpha) / T)``
    with ``alpha = k/n`` and T the number of steps (their
    ``parse_learning_rate``), ``gamma = 0``, ``eps = 0``. With one row per step
    the row is drawn directly with probability ``m_i / k = p_i`` (the law of a
    uniform row of ``S``), without materialising ``S``; with ``b > 1`` ``S`` is
    drawn with the constraint set's sampler (exact marginals ``m``; their code
    uses numpy's successive sampling, whose marginals only approximate ``m``).
    The action is ``a_t = p_t``, the mean of ``(1/k) 1_S``. Data points: the
    distinct rows of the batch, one per round by default (``T = budget``); with
    ``b > 1`` a row drawn twice counts once, so a run processes at most
    ``budget`` data points in ``T = budget // b`` rounds.

    ``variant="all_rows"`` is this harness's earlier baseline: all k rows of
    ``S`` are evaluated every round (k data points, ``T = budget // k``), the
    w-player's batch weights are ``1/k``, and the update is in gains form,
    ``log w_i += eta L_i / m_i`` on ``S``. Its defaults follow Exp3.M (Uchiya et
    al. 2010) without Exp3.M's ``(e - 1)`` factor: ``gamma = sqrt(n log(n/k) /
    (k T))`` (at most 1/2) and ``eta = k gamma / n``; ``eps`` is unused.

    No regret bound is reported for either variant (``regret_bound`` is None):
    the estimator has no confidence term and no implicit exploration by
    default, so at most an expected (pseudo-)regret bound against an oblivious
    adversary holds, which gives the game neither a high-probability nor an
    expected gap bound (paper, Appendix A, "Bandit performance measures").
    """

    name: ClassVar[str] = "adacvar"
    constraints: ClassVar[tuple[str, ...] | None] = None  # any set that supports() accepts
    params: ClassVar[dict[str, Param]] = {
        "variant": Param(str, default="authors", choices=("authors", "all_rows"),
                         doc="authors: b rows from the k-subset, EXP3 on 1 - L (Curi et al.); "
                             "all_rows: all k rows, gains form"),
        "eta": Param(float, low=0.0, low_open=True, nullable=True,
                     doc="step size; None: sqrt((n/k) log(n/k) / T) (authors), "
                         "k gamma / n (all_rows)"),
        "gamma": Param(float, low=0.0, high=1.0, high_open=True, nullable=True,
                       doc="uniform mixing; None: 0 (authors), sqrt(n log(n/k) / (k T)) "
                           "at most 1/2 (all_rows)"),
        "eps": Param(float, default=0.0, low=0.0,
                     doc="EXP3-IX bias of the authors' estimate (1 - L) / (m + eps)"),
        "batch_size": Param(int, default=1, low=1,
                            doc="authors: rows drawn with replacement from the k-subset"),
    }

    @classmethod
    def supports(cls, constraint) -> str | None:
        """Draws of k distinct rows (every row cap at most 1/k: the k-set, the simplex)."""
        return needs_sets_of_k_rows(constraint)

    def __init__(self, variant="authors", eta=None, gamma=None, eps=0.0, batch_size=1) -> None:
        self.variant = variant
        self.eta = eta
        self.gamma = gamma
        self.eps = eps
        self.batch_size = batch_size

    def rows_per_round(self, constraint) -> int:
        if self.variant == "all_rows":
            return constraint.k
        if self.batch_size > constraint.k:
            raise harness.ConfigError(
                f"The 'batch_size' parameter of adacvar must be an int in [1, k={constraint.k}]. "
                f"Got {self.batch_size} instead.")
        return self.batch_size

    def setup(self, constraint, horizon: int) -> dict[str, float | str]:
        n, k = constraint.n, constraint.k
        self.constraint_ = constraint
        self.b_ = self.rows_per_round(constraint)
        ratio = math.log(n / k) if n > k else 0.0
        if self.variant == "authors":
            self.gamma_ = self.gamma if self.gamma is not None else 0.0
            self.eta_ = self.eta if self.eta is not None else (
                math.sqrt((n / k) * ratio / horizon) if ratio > 0 else 1.0)
        else:
            self.gamma_ = self.gamma if self.gamma is not None else min(
                0.5, math.sqrt(n * ratio / (k * horizon)))
            self.eta_ = self.eta if self.eta is not None else k * self.gamma_ / n
        self.log_w_ = np.zeros(n)
        self.nu_ = -np.inf
        self.batch_weights_ = np.full(k, 1.0 / k)
        self.all_rows_ = np.arange(n)
        self._refresh()
        return {"variant": self.variant, "eta": self.eta_, "gamma": self.gamma_,
                "eps": self.eps, "batch_size": self.b_}

    def _refresh(self) -> None:
        K = self.constraint_
        if K.k >= K.n:
            m = np.ones(K.n)
        else:
            self.nu_ = dpp_shift(self.log_w_, K.k, self.nu_)
            m = _sigmoid(self.nu_ + self.log_w_)
        m = (1 - self.gamma_) * m + self.gamma_ * K.k / K.n
        self.marginals_ = np.minimum(m, 1.0)
        self.p_ = self.marginals_ / K.k

    @property
    def p(self) -> np.ndarray:
        return self.p_

    def propose(self, rng: np.random.Generator) -> Proposal:
        K = self.constraint_
        if self.variant == "all_rows":
            self.rows_ = K.sample(self.p_, rng).rows  # k-set: multiplicities 1
            return Proposal(self.rows_, self.batch_weights_)
        if self.b_ == 1:  # a uniform row of S ~ m: row i with probability m_i / k = p_i
            cdf = np.cumsum(self.p_)
            row = min(int(np.searchsorted(cdf, rng.random() * cdf[-1], side="right")), K.n - 1)
            self.rows_, self.mult_ = np.array([row]), np.ones(1)
        else:
            subset = K.sample(self.p_, rng).rows
            drawn = subset[rng.integers(0, subset.size, size=self.b_)]
            self.rows_, counts = np.unique(drawn, return_counts=True)
            self.mult_ = counts.astype(np.float64)
        return Proposal(self.rows_, self.mult_ / self.b_, self.all_rows_, self.p_)

    def observe(self, losses: np.ndarray) -> None:
        rows = self.rows_
        if self.variant == "all_rows":
            self.log_w_[rows] += self.eta_ * losses / self.marginals_[rows]
        else:
            self.log_w_[rows] -= (self.eta_ * self.mult_ * (1.0 - losses)
                                  / (self.marginals_[rows] + self.eps))
        self.log_w_ -= self.log_w_.max()
        self._refresh()

    def regret_bound(self, rounds: int) -> float | None:
        """None: no theorem bounds this sampler's regret against the game's
        adaptive w-player (class docstring)."""
        return None


@harness.hookimpl
def register_p_players(register):
    register(AdaCVaR)
