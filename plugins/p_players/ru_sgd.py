"""What a practitioner runs instead of a game: SGD on the Rockafellar-Uryasev
form of the average top-k loss (truncated CVaR); its smoothed variant is
``plugins.p_players.soft_cvar``.

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
from typing import Any, ClassVar, NamedTuple

import numpy as np
from numba import njit, objmode

import harness
from harness import Compiled, Param, Proposal
from plugins.lib.capped import checked_batch, needs_row_caps, player_form
from plugins.lib.steps import scale_param, scaled_step
from plugins.p_players.draws import choice, pairwise_sum

#: the constraint sets whose ``lmo`` the kernels call back, by token (a set that
#: cannot be referred to weakly is kept in ``_KEPT``)
_SETS: weakref.WeakValueDictionary = weakref.WeakValueDictionary()
_KEPT: dict[int, Any] = {}
_TOKENS = itertools.count(1)


def _register(constraint: Any) -> int:
    """A token by which the kernels call back ``constraint.lmo`` (``_lmo``)."""
    token = next(_TOKENS)
    try:
        _SETS[token] = constraint
    except TypeError:
        _KEPT[token] = constraint
    return token


class RUState(NamedTuple):
    """The state of the Rockafellar-Uryasev players (the kernels' and the
    Python methods'), the arrays changed in place."""

    #: the last loss seen of every row
    seen: np.ndarray
    #: ``v = (n/b) c``: a row's batch weight at slope 1
    scale: np.ndarray
    #: ``p`` (the oracle's answer on ``seen``) and the action: its rows and values
    #: (the first ``action_size[0]`` entries)
    p: np.ndarray
    action_rows: np.ndarray
    action_values: np.ndarray
    action_size: np.ndarray
    #: rounds played and the threshold tau, one-element arrays
    rounds: np.ndarray
    tau: np.ndarray
    tau_lr: float
    #: rounds between two oracle calls, ``ceil(n/b)``, and the batch size b
    refresh: int
    b: int
    #: the softplus temperature (0: the truncation ``(x)_+``)
    temperature: float
    #: the set's token (``_register``)
    token: int
    #: the rows ``0..n-1``, scratch of ``draws.choice``
    perm: np.ndarray


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
    the oracle's answer on a table of zeros (a point of K on the fewest
    rows, k on the k-set) until the first recomputation. It does not
    steer the play; it only lets the certified dual gap, valid for any
    ``a_bar`` in K, shrink as the top-k set of ``w_t`` settles.
    No regret bound is reported (this is not a no-regret p-player).
    """

    name: ClassVar[str] = "ru_sgd"
    state_version: ClassVar[int] = 1
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
        return checked_batch(self.name, b, "n", constraint.n)

    def setup(self, constraint, horizon: int) -> dict[str, float]:
        n = constraint.n
        self.constraint_ = constraint
        self.b_ = self.rows_per_round(constraint)
        self.tau_lr_ = scaled_step(self.name, "tau_lr", self.tau_lr, self.tau_lr_scale,
                                   math.sqrt(2.0 / horizon))
        self.refresh_every_ = math.ceil(n / self.b_)
        # v_i = (n / b) c_i: the batch weight of a row above the threshold
        self.scale_ = (n / self.b_) * self.caps(constraint)
        self.seen_ = np.zeros(n)
        # until the first oracle call, the oracle's answer on the table of
        # zeros: a point of K on as few rows as K allows (k on the k-set), so
        # that a round adds O(k) to a_bar, not the n of the uniform point
        first = np.ascontiguousarray(constraint.lmo(self.seen_)[1], dtype=np.float64)
        support = np.flatnonzero(first)
        act_rows = np.zeros(n, dtype=np.int64)
        act_rows[:support.size] = support
        act_values = np.zeros(n)
        act_values[:support.size] = first[support]
        self.state_ = RUState(self.seen_, np.ascontiguousarray(self.scale_, dtype=np.float64),
                              first, act_rows, act_values,
                              np.array([support.size]), np.zeros(1, dtype=np.int64), np.zeros(1),
                              float(self.tau_lr_), int(self.refresh_every_), int(self.b_),
                              float(self.softplus_temperature(constraint)),
                              _register(constraint),
                              np.arange(n, dtype=np.int64))
        return {"batch_size": self.b_, "tau_lr": self.tau_lr_}

    def softplus_temperature(self, constraint) -> float:
        """The softplus temperature of the slope; 0: the truncation ``(x)_+``."""
        return 0.0

    def __setstate__(self, state: dict) -> None:
        """A pickled player (a saved game) takes a new token for its set."""
        self.__dict__.update(state)
        if "state_" in state:
            self.state_ = self.state_._replace(token=_register(self.constraint_))

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
        return self.state_.p

    @property
    def tau_(self) -> float:
        return float(self.state_.tau[0])

    @tau_.setter
    def tau_(self, value: float) -> None:
        self.state_.tau[0] = value

    @property
    def tau(self) -> float:
        """The learned threshold (an estimate of the k-th largest loss, the VaR)."""
        return self.tau_

    def propose(self, rng: np.random.Generator) -> Proposal:
        """``ru_sgd_propose``, the kernel the compiled path runs too."""
        self.rows_, self.zeros_ = ru_sgd_propose(self.state_, None, rng)
        size = int(self.state_.action_size[0])
        # the batch weights depend on the losses: ``observe`` returns them
        return Proposal(self.rows_, self.zeros_, self.state_.action_rows[:size],
                        self.state_.action_values[:size])

    def observe(self, losses: np.ndarray) -> np.ndarray:
        """``ru_sgd_observe``, the kernel the compiled path runs too."""
        weights, _, _ = ru_sgd_observe(self.state_, None, self.rows_, self.zeros_,
                                       np.ascontiguousarray(losses, dtype=np.float64))
        return weights

    def regret_bound(self, rounds: int) -> float | None:
        return None

    def compiled(self, constraint: Compiled | None) -> Compiled | None:
        """The compiled form (``harness.engine``): ``ru_sgd_propose``/``ru_sgd_observe``
        on the player's state (``RUState``; the Python methods run the same
        kernels). The oracle ``p`` is the set's own ``lmo``, called back from
        the kernel once every ``ceil(n/b)`` rounds; None if the set has no
        compiled form, and for a subclass that replaces a method the kernels
        stand for (``propose``, ``observe``)."""
        return player_form(self, TruncatedCVaR, constraint, "plugins.p_players.ru_sgd:ru_sgd",
                           capped=False)


def _lmo(token: int, seen: np.ndarray) -> np.ndarray:
    """The oracle's answer ``argmax_{p in K} <seen, p>`` of the set behind ``token``."""
    return np.ascontiguousarray(_SETS[token].lmo(seen)[1], dtype=np.float64)


@njit(cache=True, error_model="numpy")
def ru_sgd_propose(ps, ks, rng):  # pragma: no cover - compiled
    """``TruncatedCVaR.propose``: every ``ceil(n/b)`` rounds ``p`` becomes the
    set's ``lmo`` of the last losses seen (called back into Python) and the
    action its support; then b rows uniformly without replacement
    (``draws.choice``). The batch weights depend on the losses:
    ``ru_sgd_observe`` gives them."""
    seen, p, act_rows, act_values = ps.seen, ps.p, ps.action_rows, ps.action_values
    token, b = ps.token, ps.b
    n = seen.size
    ps.rounds[0] += 1
    if ps.rounds[0] % ps.refresh == 0:
        with objmode(answer="float64[::1]"):
            answer = _lmo(token, seen)
        size = 0
        for i in range(n):
            p[i] = answer[i]
            if answer[i] != 0.0:
                act_rows[size] = i
                act_values[size] = answer[i]
                size += 1
        ps.action_size[0] = size
    return choice(rng, n, b, ps.perm, np.empty(b, dtype=np.int64)), np.zeros(b)


@njit(cache=True, error_model="numpy")
def ru_sgd_observe(ps, ks, rows, weights, losses):  # pragma: no cover - compiled
    """``TruncatedCVaR.observe`` (``SoftCVaR``'s when the temperature is
    positive): record the losses, the batch weights ``v_i = (n/b) c_i
    slope(L_i - tau)`` with the slope ``1[x > 0]`` or ``sigmoid(x / T)``, and
    the projected SGD step ``tau <- clip(tau - eta_tau (1 - sum v), 0, 1)``
    (Rockafellar and Uryasev 2000; Curi et al. 2020), on ``tau`` before the
    step. ``weights`` (the proposal's zeros) is not read."""
    seen, scale, tau, temperature = ps.seen, ps.scale, ps.tau, ps.temperature
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
    step = tau[0] - ps.tau_lr * (1.0 - pairwise_sum(out))
    step = step if step > 0.0 else 0.0
    tau[0] = step if step < 1.0 else 1.0
    size = ps.action_size[0]
    return out, ps.action_rows[:size], ps.action_values[:size]


@harness.hookimpl
def register_p_players(register):
    register(TruncatedCVaR)
