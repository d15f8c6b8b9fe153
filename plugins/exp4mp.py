"""OL-EXP.4M's p-player: EXP4.MP on the k-set (paper, Algorithm 2; Vural et al. 2019)
and on the alpha-set (the alpha-set appendix, D)."""

from __future__ import annotations

import math
from typing import ClassVar

import numpy as np
from numba import njit

import harness
from harness import Compiled, Param, Proposal
from plugins.lib.capped import (
    CAPPED_SET,
    capped_set_project,
    capped_set_sample,
    needs_row_caps,
)


class Exp4MP:
    """EXP4.MP with semi-bandit feedback on ``S_{n,k}`` (Algorithm 2, Theorem 4.1 ``th:topk``).

    Each round: project the weights onto the k-set mixed with the uniform
    distribution (Lines 3-10), draw k rows with ``P[i in I_t] = k p_i``
    (Line 11), observe their losses (Line 12), and raise the log-weights by
    ``eta * (L_hat + c U / sqrt(n T))`` (Lines 13-15) where
    ``L_hat_i = L_i / (k p_i)`` on the sampled uncapped rows.

    ``confidence="all"`` (default) adds the confidence term
    ``c U_i / sqrt(nT)`` with ``U_i = 1 / (k p_i)`` to every row outside
    ``J_t``, as the k-set proof (Appendix C) uses it (the bound (eq:l) sums it
    over all ``i not in J_t``); ``confidence="sampled"`` restricts it to the
    sampled rows, as the algorithm box writes it.

    Weights are kept as log-weights rebased to max 0 every round, so any
    number of rounds neither overflows nor underflows the largest weight.
    Defaults (Theorem 4.1, ``th:topk``): ``gamma = sqrt(n log(n/k) / (k T))``,
    ``eta = k gamma / (2n)``, ``c = sqrt(k log(n/delta))``, ``delta = 0.05``.
    Per round: O(n) (the dense confidence update and the projection).

    Regret bound (``regret_bound``). The proof of the EXP4.MP regret theorem
    (``th:EXP4.MP``, the k-set proof, Appendix C) bounds ``max_I G_I - G``, gains summed over the k
    rows of an action, i.e. k times the regret in the units of the game
    (``<L, a>`` with ``a = 1_I / k``, the units of the dual gap; the game's gap
    theorem ``thm:general``, Appendix C). Redone for the first t rounds with the parameters in use
    (``eps = c / sqrt(nT)`` the confidence coefficient, ``a = log(n/delta)``,
    ``beta = gamma + 2 eta n / k``), and divided by k, it reads

        R_p(t) <= beta t + log(n/k) / eta + eps n t / k
                  + 2 eta eps^2 n^2 t / (k^2 gamma) + a / eps,

    with probability at least 1 - delta, for all t <= T at once (the proof's
    concentration step, Theorem 1 of Beygelzimer et al. 2011 with
    ``sigma' = a / eps^2`` fixed in advance, is a supermartingale bound, so
    Ville's inequality makes it uniform in t). At t = T and the defaults it is
    ``th:EXP4.MP``'s ``2 sqrt(knT log(n/delta)) + 4 sqrt(knT log(n/k)) +
    k log(n/delta)`` divided by k; before T the terms ``log(n/k)/eta`` and
    ``a/eps``, fixed by the horizon's parameters, do not shrink. Two steps
    differ from the paper's proof: rows in ``J_t`` are played surely but get
    no estimate, so their gains are carried on both sides instead of using
    ``L_hat = L`` there (the paper's (eq:Lhat)); and the final bound keeps
    ``beta`` for a user-set eta. It needs ``eta (1 + eps) n / (k gamma) <= 1``
    (so ``eta L_tilde <= 1``), ``beta < 1`` and ``eps^2 <= e - 2``; otherwise,
    with ``confidence="sampled"`` (the concentration step needs the
    confidence term on every uncapped row), and on sets other than
    ``S_{n,k}``, ``regret_bound`` is None and no ``theory_bound`` is logged.

    The set's ``sample`` gives a ``harness.Draw``: distinct rows with
    multiplicities ``m_i``, ``E[m_i] = k p_i`` (all 1 on the k-set; a multiset
    on the alpha-set ``K_alpha``, the alpha-set appendix (D), ``plugins.lib.capped.
    multiset_round``). Feedback is semi-bandit on the distinct rows,
    ``L_hat_i = m_i L_i / (k p_i)`` (unbiased because ``E[m_i] = k p_i``; the
    sampled confidence term is ``m_i / (k p_i)`` likewise), the w-player's
    batch weights and the action are ``m_i / k``, and each distinct row counts
    once as a data point. ``th:EXP4.MP`` holds on ``S_{n,k}``; the paper proves no
    guarantee on other sets: the defaults stay Theorem 4.1's with the set's k,
    and ``regret_bound`` is None unless every row cap (``row_caps()``) is
    ``1/k``, i.e. ``K`` is ``S_{n,k}``.
    """

    name: ClassVar[str] = "exp4mp"
    constraints: ClassVar[tuple[str, ...] | None] = None  # any set that supports() accepts
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

    @classmethod
    def supports(cls, constraint) -> str | None:
        """A capped simplex (``row_caps()`` not None): the k-set, the simplex, an alpha-set."""
        return needs_row_caps(constraint)

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
        caps = constraint.row_caps()  # th:EXP4.MP is proven on S_{n,k} only
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

    def compiled(self, constraint: Compiled | None) -> Compiled | None:
        """The compiled form (``harness.engine``) on a capped simplex:
        ``exp4mp_propose``/``exp4mp_observe`` on ``(log_w, p, capped, eta,
        gamma, confidence coefficient, confidence on all rows)``, the arrays
        changed in place; None on any other set."""
        if constraint is None or constraint.kernels != CAPPED_SET:
            return None
        state = (self.log_w_, self.p_, self.capped_, float(self.eta_), float(self.gamma_),
                 float(self.conf_), self.confidence == "all")
        return Compiled("plugins.exp4mp:exp4mp", state)

    def regret_bound(self, rounds: int) -> float | None:
        """The EXP4.MP regret theorem (``th:EXP4.MP``, Appendix C) after
        ``rounds`` rounds at the parameters in use, in game units (class
        docstring); None where the proof does not cover the run."""
        if not self.proven_ or self.confidence != "all":
            return None
        n, k, t = self.constraint_.n, self.constraint_.k, rounds
        eta, gamma, eps = self.eta_, self.gamma_, self.conf_
        a = math.log(n / self.delta)
        beta = gamma + 2 * eta * n / k
        if (n <= k or eps <= 0.0 or beta >= 1.0 or eps * eps > math.e - 2
                or eta * (1 + eps) * n / (k * gamma) > 1.0):
            return None
        return (beta * t + math.log(n / k) / eta + eps * n * t / k
                + 2 * eta * eps * eps * n * n * t / (k * k * gamma) + a / eps)


@njit(cache=True)
def exp4mp_propose(ps, ks, rng):  # pragma: no cover - compiled
    """``Exp4MP.propose``: a draw with mean ``p_t`` (Line 11); batch weights ``m / k``."""
    rows, mult = capped_set_sample(ks, ps[1], rng)
    k = ks[2]
    weights = np.empty(rows.size)
    for j in range(rows.size):
        weights[j] = mult[j] / k
    return rows, weights


@njit(cache=True)
def exp4mp_observe(ps, ks, rows, weights, losses):  # pragma: no cover - compiled
    """``Exp4MP.observe`` (Lines 12-15 and the next round's Lines 3-10): the same
    updates in the same order; the multiplicities are ``k`` times the weights."""
    log_w, p, capped, eta, gamma, conf, all_rows = ps
    k = ks[2]
    n = p.size
    if all_rows:
        c = eta * conf
        for i in range(n):
            if not capped[i]:
                log_w[i] += c * (1.0 / (k * p[i]))
    for j in range(rows.size):
        i = rows[j]
        if capped[i]:
            continue
        inv = 1.0 / (k * p[i])
        m = np.rint(weights[j] * k)
        gain = eta * losses[j] * inv * m
        if not all_rows:
            gain += (eta * conf) * (m * inv)
        log_w[i] += gain
    top = log_w.max()
    for i in range(n):
        log_w[i] -= top
    new_p, new_capped = capped_set_project(ks, log_w, gamma)
    p[:] = new_p
    capped[:] = new_capped
    return weights, rows, weights


@harness.hookimpl
def register_p_players(register):
    register(Exp4MP)
