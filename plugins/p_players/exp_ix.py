"""EXP3-IX on the simplex (paper, Algorithm 3 and Theorem 3.1 ``th:shalev``; Neu 2015)."""

from __future__ import annotations

import math
from typing import ClassVar, NamedTuple

import numpy as np
from numba import njit

import harness
from harness import Compiled, Param, Proposal
from plugins.lib.capped import capped_set_sample, needs_sets_of_k_rows, player_form
from plugins.lib.steps import scale_param, scaled_step
from plugins.p_players.draws import pairwise_sum


class Exp3IXState(NamedTuple):
    """EXP3-IX's state (its kernels' and its Python ``observe``'s), the arrays
    changed in place."""

    #: the log-weights (max 0), ``p_t`` and the weights ``exp(log_w)``
    log_w: np.ndarray
    p: np.ndarray
    w: np.ndarray
    #: the value of ``a_t = e_{i_t}`` on its row and the batch weight: ``[1]``
    one: np.ndarray
    eta: float
    gamma: float


class Exp3IX:
    """EXP3-IX for the max loss: one row per round.

    The p-player *maximises* ``<L, p>`` while EXP3-IX minimises losses, so it
    is fed the complement ``1 - L`` (the box of Algorithm 3 writes the update
    ``exp(-eta L_hat)`` on ``L`` itself, which would steer the player away
    from the worst row). Per round: ``p_t = w_t / sum w_t``, draw ``i_t ~ p_t``,
    ``L_hat = (1 - L_{i_t}) / (p_{t,i_t} + gamma)`` on ``i_t`` only, and
    ``log w_{i_t} -= eta L_hat``; log-weights rebased to max 0.

    Defaults (Theorem 3.1, ``th:shalev``): ``eta = 2 gamma = sqrt(2 log n / (n T))``;
    ``eta_scale`` multiplies that eta (``plugins.lib.steps``), and gamma's
    default ``eta / 2`` follows the scaled eta.

    Regret bound (``regret_bound``), in game units, with probability at least
    1 - delta for every t <= T at once: Neu (2015)'s proof of his Theorem 1
    (the source of ``th:shalev``) redone for the first t rounds at the eta and
    gamma in use, ``log(n)/eta + log(2n/delta)/(2 gamma) + (eta/2 + gamma)
    (n t + log(2/delta)/(2 gamma))`` (derived in docs/algorithms.md, "The
    p-players' regret bounds"). None if ``gamma = 0``.
    """

    name: ClassVar[str] = "exp_ix"
    state_version: ClassVar[int] = 1
    constraints: ClassVar[tuple[str, ...] | None] = None  # any set that supports() accepts
    params: ClassVar[dict[str, Param]] = {
        "eta": Param(float, low=0.0, low_open=True, nullable=True,
                     doc="step size; None: sqrt(2 log n / (n T))"),
        "eta_scale": scale_param("eta"),
        "gamma": Param(float, low=0.0, high=1.0, nullable=True,
                       doc="implicit exploration; None: eta / 2; 0: no exploration "
                           "(unbiased estimate, no high-probability bound)"),
        "delta": Param(float, default=0.05, low=0.0, high=1.0, low_open=True, high_open=True,
                       doc="failure probability of the bound"),
    }

    @classmethod
    def supports(cls, constraint) -> str | None:
        """One row per draw (``k = 1``: the simplex)."""
        if constraint.k != 1:
            return (f"plays one row per round (k = 1, the simplex); '{constraint.name}' has "
                    f"k = {constraint.k}")
        return needs_sets_of_k_rows(constraint)

    def __init__(self, eta=None, gamma=None, delta=0.05, eta_scale=1.0) -> None:
        self.eta = eta
        self.eta_scale = eta_scale
        self.gamma = gamma
        self.delta = delta

    def rows_per_round(self, constraint) -> int:
        return 1

    def setup(self, constraint, horizon: int) -> dict[str, float]:
        n = constraint.n
        self.constraint_ = constraint
        theory = math.sqrt(2 * math.log(n) / (n * horizon)) if n > 1 else 1.0
        self.eta_ = scaled_step(self.name, "eta", self.eta, self.eta_scale, theory)
        self.gamma_ = self.gamma if self.gamma is not None else self.eta_ / 2
        self.log_w_ = np.zeros(n)
        self.p_ = np.full(n, 1.0 / n)
        self.one_ = np.ones(1)
        self.state_ = Exp3IXState(self.log_w_, self.p_, _exp(self.log_w_), self.one_,
                                  float(self.eta_), float(self.gamma_))
        return {"eta": self.eta_, "gamma": self.gamma_, "delta": self.delta}

    @property
    def p(self) -> np.ndarray:
        return self.p_

    def propose(self, rng: np.random.Generator) -> Proposal:
        self.rows_ = self.constraint_.sample(self.p_, rng).rows
        return Proposal(self.rows_, self.one_)

    def observe(self, losses: np.ndarray) -> None:
        """Lines 7-8 of Algorithm 3 and the next round's Line 3 in
        ``exp_ix_observe``, the kernel the compiled path runs too (numpy's
        vectorised ``exp`` rounds differently from the kernel's in about 5 % of
        last bits, which a bandit's sampling would carry into different rows)."""
        exp_ix_observe(self.state_, None, self.rows_, self.one_,
                       np.ascontiguousarray(losses, dtype=np.float64))

    def compiled(self, constraint: Compiled | None) -> Compiled | None:
        """The compiled form (``harness.engine``) on a capped simplex:
        ``exp_ix_propose``/``exp_ix_observe`` on the player's state
        (``Exp3IXState``); None on any other set."""
        return player_form(self, Exp3IX, constraint, "plugins.p_players.exp_ix:exp_ix")

    def regret_bound(self, rounds: int) -> float | None:
        """The bound of the class docstring after ``rounds`` rounds at the eta
        and gamma in use (game units, probability at least 1 - delta)."""
        n, t = self.constraint_.n, rounds
        if n < 2:
            return 0.0
        eta, gamma, delta = self.eta_, self.gamma_, self.delta
        if gamma <= 0.0:
            return None
        return (math.log(n) / eta + math.log(2 * n / delta) / (2 * gamma)
                + (eta / 2 + gamma) * (n * t + math.log(2 / delta) / (2 * gamma)))


@njit(cache=True, error_model="numpy")
def _exp(log_w):  # pragma: no cover - compiled
    """``exp(log_w)`` row by row, as the kernels compute it."""
    w = np.empty(log_w.size)
    for i in range(log_w.size):
        w[i] = np.exp(log_w[i])
    return w


@njit(cache=True, error_model="numpy")
def exp_ix_propose(ps, ks, rng):  # pragma: no cover - compiled
    """``Exp3IX.propose``: ``i_t ~ p_t`` by the set's draw (``K.sample``,
    ``capped_set_sample``; Algorithm 3, Lines 4-5), ``a_t = e_{i_t}``."""
    rows, _ = capped_set_sample(ks, ps.p, rng)
    return rows, ps.one


@njit(cache=True, error_model="numpy")
def exp_ix_observe(ps, ks, rows, weights, losses):  # pragma: no cover - compiled
    """``Exp3IX.observe``: the IX estimate and the exponential-weights step on
    ``1 - L`` (Algorithm 3, Lines 7-8) lower the log-weight of ``i_t``; the
    log-weights are rebased to max 0 and normalised (the next round's Line 3),
    ``p = w / sum(w)`` with numpy's summation order (``pairwise_sum``).
    ``w = exp(log_w)`` is kept between rounds: only row ``i_t`` changes,
    unless the rebase moves every row (``i_t`` was the only row at the
    maximum) and all n are recomputed; O(n) for the sum and ``p``. numpy's
    error model: a division by zero gives inf, as in the Python method."""
    log_w, p, w, action, eta, gamma = ps.log_w, ps.p, ps.w, ps.one, ps.eta, ps.gamma
    n = log_w.size
    i = rows[0]
    log_w[i] -= eta * (1.0 - losses[0]) / (p[i] + gamma)
    top = log_w.max()
    if top != 0.0:
        for j in range(n):
            log_w[j] -= top
            w[j] = np.exp(log_w[j])
    else:
        w[i] = np.exp(log_w[i])
    total = pairwise_sum(w)
    for j in range(n):
        p[j] = w[j] / total
    return action, rows, action


@harness.hookimpl
def register_p_players(register):
    register(Exp3IX)
