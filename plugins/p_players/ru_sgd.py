"""What a practitioner runs instead of a game: SGD on the Rockafellar-Uryasev
form of the average top-k loss (truncated CVaR), and its smoothed variant.

Rockafellar and Uryasev (2000, Theorem 1) write the objective as

    max_{p in K} <L(w), p> = min_tau F(w, tau),
    F(w, tau) = tau + sum_i c_i (L_i(w) - tau)_+,

with ``c_i = 1/k = 1/(alpha n)`` on the k-set (``alpha = k/n``; any per-row caps
``c`` of ``K = {0 <= p_i <= c_i, sum p = 1}`` work the same). ``F`` is jointly
convex; SGD on ``(w, tau)`` with uniform mini-batches is the "truncated CVaR"
baseline of Curi, Levy, Jegelka and Krause (2020).
"""

from __future__ import annotations

import itertools
import math
import weakref
from typing import ClassVar

import numpy as np
from numba import njit, objmode

import harness
from harness import Compiled, Param, Proposal
from plugins.lib.capped import needs_row_caps
from plugins.lib.steps import scale_param, scaled_step
from plugins.p_players.draws import choice, pairwise_sum

#: the constraint sets whose ``lmo`` the compiled kernels call back, by token
_SETS: weakref.WeakValueDictionary = weakref.WeakValueDictionary()
_TOKENS = itertools.count(1)


class TruncatedCVaR:
    """Mini-batch SGD on ``F(w, tau)`` (Rockafellar-Uryasev 2000; Curi et al. 2020's
    Trunc-CVaR), split into the game's two players.

    Per round: b rows ``B`` drawn uniformly without replacement
    (``P[i in B] = b/n``); after their losses are seen, the w-player's batch
    weights are ``v_i = (n/b) c_i 1[L_i > tau]`` (``1[L_i > tau] / (alpha b)``
    on the k-set), so its gradient ``sum_B v_i grad L_i`` is an unbiased
    subgradient of ``F`` in ``w``; ``tau`` steps on the unbiased subgradient
    ``1 - sum_B v_i`` and is projected onto ``[0, 1]`` (where the losses, hence
    the minimising ``tau``, lie). Both steps use ``tau`` before this round's
    update, i.e. one SGD step at ``(w_t, tau_t)``. The objective is evaluated
    at the average ``w_bar`` (Polyak averaging), minimised over ``tau`` exactly.

    Step sizes: the w-player's own rule (OGD: ``B sqrt(2/T)``, the paper's
    Appendix E.1-E.2 rate; set ``w_player.lr`` to override) and, for ``tau``,
    the same rule on its interval: ``sqrt(2/T)`` with radius 1 (``tau_lr``
    overrides; ``tau_lr_scale`` multiplies the default). ``T = budget / b``;
    ``b`` defaults to k, so data points per round match the bandits'.

    ``p_t`` and the action ``a_t`` (a point of K, for the membership check and
    the dual gap): the oracle's answer ``argmax_{p in K} <L~, p>`` on the table
    ``L~`` of the last loss seen for each row, recomputed every ``ceil(n/b)``
    rounds (one expected pass over the data, so amortised O(b) per round);
    the uniform distribution until the first recomputation. It does not
    steer the play; it only lets the certified dual gap, valid for any
    ``a_bar`` in K, shrink as the top-k set of ``w_t`` settles.
    No regret bound is reported (this is not a no-regret p-player).
    """

    name: ClassVar[str] = "ru_sgd"
    constraints: ClassVar[tuple[str, ...] | None] = None  # any set that supports() accepts
    params: ClassVar[dict[str, Param]] = {
        "batch_size": Param(int, low=1, nullable=True,
                            doc="rows per round b; None: the constraint set's k"),
        "tau_lr": Param(float, low=0.0, low_open=True, nullable=True,
                        doc="step of the threshold tau; None: sqrt(2 / T)"),
        "tau_lr_scale": scale_param("tau_lr"),
    }

    @classmethod
    def supports(cls, constraint) -> str | None:
        """A capped simplex (``row_caps()`` not None), as its Rockafellar-Uryasev form needs."""
        return needs_row_caps(constraint)

    def __init__(self, batch_size=None, tau_lr=None, tau_lr_scale=1.0) -> None:
        self.batch_size = batch_size
        self.tau_lr = tau_lr
        self.tau_lr_scale = tau_lr_scale

    def rows_per_round(self, constraint) -> int:
        b = self.batch_size if self.batch_size is not None else constraint.k
        if b > constraint.n:
            raise harness.ConfigError(
                f"The 'batch_size' parameter of {self.name} must be an int in "
                f"[1, n={constraint.n}]. Got {b} instead.")
        return b

    def setup(self, constraint, horizon: int) -> dict[str, float]:
        n = constraint.n
        self.constraint_ = constraint
        self.b_ = self.rows_per_round(constraint)
        self.tau_lr_ = scaled_step(self.name, "tau_lr", self.tau_lr, self.tau_lr_scale,
                                   math.sqrt(2.0 / horizon))
        # v_i = (n / b) c_i: the batch weight of a row above the threshold
        self.scale_ = (n / self.b_) * self.caps(constraint)
        self.tau_ = 0.0
        self.seen_ = np.zeros(n)
        self.refresh_every_ = math.ceil(n / self.b_)
        self.round_ = 0
        self.p_ = np.full(n, 1.0 / n)
        self.action_rows_ = np.arange(n)
        self.action_values_ = self.p_
        return {"batch_size": self.b_, "tau_lr": self.tau_lr_}

    def caps(self, constraint) -> np.ndarray:
        """The row caps ``c`` of ``K`` (``row_caps()``); a set of another form is refused."""
        caps = constraint.row_caps()
        if caps is None:
            raise harness.ConfigError(
                f"The p_player '{self.name}' needs K = {{0 <= p_i <= c_i, sum p = 1}}; the "
                f"constraint set '{constraint.name}' is not of that form (row_caps() is None).")
        return caps

    @property
    def p(self) -> np.ndarray:
        return self.p_

    @property
    def tau(self) -> float:
        """The learned threshold (an estimate of the k-th largest loss, the VaR)."""
        return self.tau_

    def propose(self, rng: np.random.Generator) -> Proposal:
        self.round_ += 1
        if self.round_ % self.refresh_every_ == 0:
            _, self.p_ = self.constraint_.lmo(self.seen_)
            self.action_rows_ = np.flatnonzero(self.p_)
            self.action_values_ = self.p_[self.action_rows_]
        self.rows_ = rng.choice(self.constraint_.n, size=self.b_, replace=False)
        # the batch weights depend on the losses: ``observe`` returns them
        return Proposal(self.rows_, np.zeros(self.b_), self.action_rows_, self.action_values_)

    def slope(self, excess: np.ndarray) -> np.ndarray:
        """Derivative of the truncation ``(x)_+`` at ``x = L_i - tau`` (0 at the kink)."""
        return (excess > 0.0).astype(np.float64)

    def observe(self, losses: np.ndarray) -> np.ndarray:
        rows = self.rows_
        self.seen_[rows] = losses
        weights = self.scale_[rows] * self.slope(losses - self.tau_)
        self.tau_ = min(1.0, max(0.0, self.tau_ - self.tau_lr_ * (1.0 - float(weights.sum()))))
        return weights

    def regret_bound(self, rounds: int) -> float | None:
        return None

    def compiled(self, constraint: Compiled | None) -> Compiled | None:
        """The compiled form (``harness.engine``): ``ru_sgd_propose``/``ru_sgd_observe``
        on ``(last losses seen, v = (n/b) c, p, action rows, action values,
        [action size], [round], [tau], tau step, refresh period, b, temperature
        (0: the truncation), set token, a row mark, the rows 0..n-1)``. The
        oracle ``p`` is the set's own ``lmo``, called back from the kernel once
        every ``ceil(n/b)`` rounds; None if the set has no compiled form or
        cannot be referred to weakly, and for a subclass that replaces a method
        the kernels stand for (``propose``, ``observe``, ``slope``)."""
        cls = type(self)
        if (constraint is None or cls.propose is not TruncatedCVaR.propose
                or cls.observe is not TruncatedCVaR.observe
                or cls.slope not in (TruncatedCVaR.slope, SoftCVaR.slope)):
            return None
        token = next(_TOKENS)
        try:
            _SETS[token] = self.constraint_
        except TypeError:
            return None
        n = self.constraint_.n
        act_rows = np.zeros(n, dtype=np.int64)
        act_values = np.zeros(n)
        size = self.action_rows_.size
        act_rows[:size] = self.action_rows_
        act_values[:size] = self.action_values_
        state = (self.seen_, self.scale_, np.array(self.p_, dtype=np.float64), act_rows,
                 act_values, np.array([size], dtype=np.int64),
                 np.array([self.round_], dtype=np.int64), np.array([self.tau_]),
                 float(self.tau_lr_), int(self.refresh_every_), int(self.b_),
                 float(getattr(self, "temperature_", 0.0)), token,
                 np.zeros(n, dtype=np.bool_), np.arange(n, dtype=np.int64))
        return Compiled("plugins.p_players.ru_sgd:ru_sgd", state, self._store)

    def _store(self, state: tuple) -> None:
        size = int(state[5][0])
        self.p_ = state[2]
        self.action_rows_ = state[3][:size].copy()
        self.action_values_ = state[4][:size].copy()
        self.round_ = int(state[6][0])
        self.tau_ = float(state[7][0])


def _lmo(token: int, seen: np.ndarray) -> np.ndarray:
    """The oracle's answer ``argmax_{p in K} <seen, p>`` of the set behind ``token``."""
    return np.ascontiguousarray(_SETS[token].lmo(seen)[1], dtype=np.float64)


@njit(cache=True, error_model="numpy")
def ru_sgd_propose(ps, ks, rng):  # pragma: no cover - compiled
    """``TruncatedCVaR.propose``: every ``ceil(n/b)`` rounds ``p`` becomes the
    set's ``lmo`` of the last losses seen (called back into Python) and the
    action its support; then b rows uniformly without replacement. The batch
    weights depend on the losses: ``ru_sgd_observe`` gives them."""
    seen, p, act_rows, act_values, act_size = ps[0], ps[2], ps[3], ps[4], ps[5]
    rounds, refresh, b, token, perm = ps[6], ps[9], ps[10], ps[12], ps[14]
    n = seen.size
    rounds[0] += 1
    if rounds[0] % refresh == 0:
        with objmode(answer="float64[::1]"):
            answer = _lmo(token, seen)
        size = 0
        for i in range(n):
            p[i] = answer[i]
            if answer[i] != 0.0:
                act_rows[size] = i
                act_values[size] = answer[i]
                size += 1
        act_size[0] = size
    return choice(rng, n, b, perm, np.empty(b, dtype=np.int64)), np.zeros(b)


@njit(cache=True, error_model="numpy")
def ru_sgd_observe(ps, ks, rows, weights, losses):  # pragma: no cover - compiled
    """``TruncatedCVaR.observe`` (``SoftCVaR.observe`` when the temperature is
    positive): record the losses, the batch weights ``v_i = (n/b) c_i
    slope(L_i - tau)`` with the slope ``1[x > 0]`` or ``sigmoid(x / T)``, and
    the projected SGD step ``tau <- clip(tau - eta_tau (1 - sum v), 0, 1)``
    (Rockafellar and Uryasev 2000; Curi et al. 2020), on ``tau`` before the step."""
    seen, scale, act_rows, act_values, act_size = ps[0], ps[1], ps[3], ps[4], ps[5]
    tau, tau_lr, temperature = ps[7], ps[8], ps[11]
    b = rows.size
    for j in range(b):
        seen[rows[j]] = losses[j]
    out = np.empty(b)
    for j in range(b):
        excess = losses[j] - tau[0]
        if temperature > 0.0:
            slope = np.exp(-np.logaddexp(0.0, -excess / temperature))
        else:
            slope = 1.0 if excess > 0.0 else 0.0
        out[j] = scale[rows[j]] * slope
    step = tau[0] - tau_lr * (1.0 - pairwise_sum(out))
    step = step if step > 0.0 else 0.0
    tau[0] = step if step < 1.0 else 1.0
    size = act_size[0]
    return out, act_rows[:size], act_values[:size]


class SoftCVaR(TruncatedCVaR):
    """SGD on the smoothed Rockafellar-Uryasev form

        F_T(w, tau) = tau + sum_i c_i T softplus((L_i(w) - tau) / T),

    Curi et al. (2020)'s Soft-CVaR baseline (the convex approximation of
    Nemirovski and Shapiro 2006): ``(x)_+`` is replaced by
    ``T log(1 + exp(x / T))``, so the batch weights are ``(n/b) c_i
    sigmoid((L_i - tau) / T)`` instead of an indicator. Since
    ``0 <= T softplus(x / T) - (x)_+ <= T log 2`` and ``sum_i c_i = n/k``,
    ``F <= F_T <= F + (n/k) T log 2``: the default temperature
    ``T = bias * k / (n log 2)`` guarantees that minimising ``F_T`` costs at
    most ``bias`` in objective. Everything else is ``ru_sgd``.
    """

    name: ClassVar[str] = "soft_cvar"
    params: ClassVar[dict[str, Param]] = {
        **TruncatedCVaR.params,
        "temperature": Param(float, low=0.0, low_open=True, nullable=True,
                             doc="softplus temperature T; None: bias * k / (n log 2)"),
        "bias": Param(float, default=1e-3, low=0.0, low_open=True,
                      doc="largest objective cost of the smoothing (sets T when T is None)"),
    }

    def __init__(self, batch_size=None, tau_lr=None, temperature=None, bias=1e-3,
                 tau_lr_scale=1.0) -> None:
        super().__init__(batch_size, tau_lr, tau_lr_scale)
        self.temperature = temperature
        self.bias = bias

    def setup(self, constraint, horizon: int) -> dict[str, float]:
        derived = super().setup(constraint, horizon)
        total_caps = float(self.caps(constraint).sum())  # n/k on the k-set
        self.temperature_ = self.temperature if self.temperature is not None else (
            self.bias / (total_caps * math.log(2.0)))
        # the guaranteed smoothing cost at the temperature in use
        return {**derived, "temperature": self.temperature_,
                "bias": self.temperature_ * total_caps * math.log(2.0)}

    def slope(self, excess: np.ndarray) -> np.ndarray:
        """``sigmoid(x / T)``, the derivative of ``T softplus(x / T)``."""
        return np.exp(-np.logaddexp(0.0, -excess / self.temperature_))


@harness.hookimpl
def register_p_players(register):
    register(TruncatedCVaR)
    register(SoftCVaR)
