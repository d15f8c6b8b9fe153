"""OL-EXP.4M's p-player: EXP4.MP on the k-set (paper, Algorithm 2; Vural et al. 2019)
and on the alpha-set (Appendix F)."""

from __future__ import annotations

import math
from typing import ClassVar

import numpy as np

import harness
from harness import Param, Proposal


class Exp4MP:
    """EXP4.MP with semi-bandit feedback on ``S_{n,k}`` (Algorithm 2, Theorem 4.1).

    Each round: project the weights onto the k-set mixed with the uniform
    distribution (Lines 3-10), draw k rows with ``P[i in I_t] = k p_i``
    (Line 11), observe their losses (Line 12), and raise the log-weights by
    ``eta * (L_hat + c U / sqrt(n T))`` (Lines 13-15) where
    ``L_hat_i = L_i / (k p_i)`` on the sampled uncapped rows.

    ``confidence="all"`` (default) adds the confidence term
    ``c U_i / sqrt(nT)`` with ``U_i = 1 / (k p_i)`` to every row outside
    ``J_t``, as the proof in Appendix D.3 uses it (the bound (eq:l) sums it
    over all ``i not in J_t``); ``confidence="sampled"`` restricts it to the
    sampled rows, as the algorithm box writes it.

    Weights are kept as log-weights rebased to max 0 every round, so any
    number of rounds neither overflows nor underflows the largest weight.
    Defaults (Theorem 4.1): ``gamma = sqrt(n log(n/k) / (k T))``,
    ``eta = k gamma / (2n)``, ``c = sqrt(k log(n/delta))``, ``delta = 0.05``.
    Per round: O(n) (the dense confidence update and the projection).

    The set's ``sample`` gives a ``harness.Draw``: distinct rows with
    multiplicities ``m_i``, ``E[m_i] = k p_i`` (all 1 on the k-set; a multiset
    on the alpha-set ``K_alpha``, paper Appendix F, ``plugins.lib.capped.
    multiset_round``). Feedback is semi-bandit on the distinct rows,
    ``L_hat_i = m_i L_i / (k p_i)`` (unbiased because ``E[m_i] = k p_i``; the
    sampled confidence term is ``m_i / (k p_i)`` likewise), the w-player's
    batch weights and the action are ``m_i / k``, and each distinct row counts
    once as a data point. Theorem D.2 holds on ``S_{n,k}``; the paper proves no
    guarantee on other sets: the defaults stay Theorem 4.1's with the set's k,
    and ``regret_bound`` is None unless every row cap (``row_caps()``) is
    ``1/k``, i.e. ``K`` is ``S_{n,k}``.
    """

    name: ClassVar[str] = "exp4mp"
    constraints: ClassVar[tuple[str, ...] | None] = ("kset", "alphaset")
    params: ClassVar[dict[str, Param]] = {
        "eta": Param(float, low=0.0, low_open=True, nullable=True,
                     doc="step size; None: k gamma / (2n)"),
        "gamma": Param(float, low=0.0, high=1.0, low_open=True, high_open=True, nullable=True,
                       doc="uniform mixing; None: sqrt(n log(n/k) / (k T))"),
        "c": Param(float, low=0.0, nullable=True,
                   doc="confidence width; None: sqrt(k log(n/delta))"),
        "delta": Param(float, default=0.05, low=0.0, high=1.0, low_open=True, high_open=True,
                       doc="failure probability of the high-probability bound"),
        "confidence": Param(str, default="all", choices=("all", "sampled"),
                            doc="rows receiving the confidence term: all outside J_t (proof) "
                                "or only sampled ones (algorithm box)"),
    }

    def __init__(self, eta=None, gamma=None, c=None, delta=0.05, confidence="all") -> None:
        self.eta = eta
        self.gamma = gamma
        self.c = c
        self.delta = delta
        self.confidence = confidence

    def rows_per_round(self, constraint) -> int:
        return constraint.k

    def setup(self, constraint, horizon: int) -> dict[str, float]:
        n, k, T = constraint.n, constraint.k, horizon
        self.constraint_ = constraint
        self.horizon_ = T
        gamma = self.gamma
        if gamma is None:
            gamma = math.sqrt(n * math.log(n / k) / (k * T)) if n > k else 0.0
            if gamma >= 1.0:
                raise harness.ConfigError(
                    f"The theory value of exp4mp's gamma, sqrt(n log(n/k) / (k T)) = {gamma:.3g}, "
                    f"is not below 1 for n={n}, k={k}, T={T}: Theorem 4.1 needs "
                    f"T >= n log(n/k) / k = {n * math.log(n / k) / k:.0f} rounds. "
                    "Raise the budget or set p_player.gamma."
                )
        self.gamma_ = gamma
        self.eta_ = self.eta if self.eta is not None else k * gamma / (2 * n)
        self.c_ = self.c if self.c is not None else math.sqrt(k * math.log(n / self.delta))
        self.conf_ = self.c_ / math.sqrt(n * T)
        caps = constraint.row_caps()  # Theorem D.2 is proven on S_{n,k} only
        self.proven_ = caps is not None and bool(np.all(caps == 1.0 / k))
        self.log_w_ = np.zeros(n)
        self._refresh()
        return {"eta": self.eta_, "gamma": self.gamma_, "c": self.c_, "delta": self.delta}

    def _refresh(self) -> None:
        self.p_, self.capped_ = self.constraint_.project(
            self.log_w_, self.gamma_, log_domain=True, return_capped=True
        )

    @property
    def p(self) -> np.ndarray:
        return self.p_

    def propose(self, rng: np.random.Generator) -> Proposal:
        self.rows_, self.mult_ = self.constraint_.sample(self.p_, rng)
        return Proposal(self.rows_, self.mult_ / self.constraint_.k)

    def observe(self, losses: np.ndarray) -> None:
        k, rows, p = self.constraint_.k, self.rows_, self.p_
        inv_kp = 1.0 / (k * p)
        free = ~self.capped_[rows]
        sampled = rows[free]
        mult = self.mult_[free]
        gain = self.eta_ * losses[free] * inv_kp[sampled] * mult
        if self.confidence == "all":
            uncapped = ~self.capped_
            self.log_w_[uncapped] += (self.eta_ * self.conf_) * inv_kp[uncapped]
        else:
            gain += (self.eta_ * self.conf_) * (mult * inv_kp[sampled])
        self.log_w_[sampled] += gain
        self.log_w_ -= self.log_w_.max()
        self._refresh()
        return None

    def regret_bound(self, rounds: int) -> float | None:
        """Theorem D.2: ``2 sqrt(knT log(n/delta)) + 4 sqrt(knT log(n/k)) + k log(n/delta)``
        (None on an alpha-set other than the k-set: no guarantee is proven there)."""
        if not self.proven_:
            return None
        n, k, T = self.constraint_.n, self.constraint_.k, rounds
        a = math.log(n / self.delta)
        return 2 * math.sqrt(k * n * T * a) + 4 * math.sqrt(k * n * T * math.log(n / k)) + k * a


@harness.hookimpl
def register_p_players(register):
    register(Exp4MP)
