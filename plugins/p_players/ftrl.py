"""OL-FTRL: entropic follow-the-regularized-leader with full information
(the paper's online-online baseline, Section 6 and Appendix E, subsection OL-FTRL)."""

from __future__ import annotations

import math
from typing import ClassVar, NamedTuple

import numpy as np
from numba import njit

import harness
from harness import Compiled, Param, Proposal
from plugins.lib.capped import (
    capped_set_kappa,
    capped_set_point,
    capped_set_state,
    log_row_caps,
    player_form,
    weights_row_caps,
)
from plugins.lib.steps import scale_param, scaled_step
from plugins.lib.vecmath import extremes, vexp


class FTRLState(NamedTuple):
    """OL-FTRL's state on a capped simplex (its kernels' and its Python
    ``observe``'s), the arrays changed in place."""

    #: the cumulative log-weights ``eta sum_s L_s`` rebased to max 0
    log_w: np.ndarray
    #: ``p_t`` and last round's ``p`` (the batch weights and the action)
    p: np.ndarray
    previous: np.ndarray
    #: every row ``0..n-1``
    rows: np.ndarray
    eta: float
    #: the weights ``exp(log_w)`` (scratch), the capped rows, and
    #: ``weights_row_caps``'s book (cap mass, number of free rows)
    w: np.ndarray
    capped: np.ndarray
    book: np.ndarray


class FTRL:
    """Entropic FTRL over ``K``: all n rows are evaluated every round.

    ``p_{t+1} = argmax_{p in K} <sum_{s<=t} L_s, p> - (1/eta) sum_i p_i log p_i``,
    i.e. the KL projection onto K of ``exp(eta * cumulative losses)`` (the
    capping projection without uniform mixing). The w-player steps on the
    ``p_t``-weighted full gradient, and ``a_t = p_t``. Horizon ``T = N / n``.

    Default ``eta = sqrt(log(n/k) / T)`` (the OL-FTRL theorem of Appendix E,
    "Parameters for Section 6", subsection OL-FTRL). Per round O(n d).

    Regret bound (``regret_bound``): that theorem's ``R_t <= log(n/k) / eta +
    eta t``, deterministic, for the first t rounds at the eta in use, in game
    units; ``2 sqrt(T log(n/k))`` at t = T and the default eta. On a set with
    row caps ``c`` (``row_caps()``) ``log(n max_i c_i)`` takes the place of
    ``log(n/k)``; on a permutahedron ``P(sigma)``, ``log(n) - H(sigma)``; on a set
    of another form, ``log(n)`` (``entropy_range``). The
    paper's Table 3 rates differ from the theorem's eta (docs/algorithms.md,
    "The p-players' regret bounds").
    """

    name: ClassVar[str] = "ftrl"
    state_version: ClassVar[int] = 1
    constraints: ClassVar[tuple[str, ...] | None] = None  # any set that supports() accepts
    params: ClassVar[dict[str, Param]] = {
        "eta": Param(float, low=0.0, low_open=True, nullable=True,
                     doc="step size; None: sqrt(log(n/k) / T)"),
        "eta_scale": scale_param("eta"),
    }

    @classmethod
    def supports(cls, constraint) -> str | None:
        """Any set with a KL projection (every constraint set has one)."""
        return None

    def __init__(self, eta=None, eta_scale=1.0) -> None:
        self.eta = eta
        self.eta_scale = eta_scale

    def rows_per_round(self, constraint) -> int:
        return constraint.n

    def setup(self, constraint, horizon: int) -> dict[str, float]:
        n = constraint.n
        self.constraint_ = constraint
        self.log_ratio_ = log_ratio = self.entropy_range(constraint)
        theory = math.sqrt(log_ratio / horizon) if log_ratio > 0 else 1.0
        self.eta_ = scaled_step(self.name, "eta", self.eta, self.eta_scale, theory)
        self.log_w_ = np.zeros(n)
        self.rows_ = np.arange(n)
        caps = constraint.row_caps()
        if caps is None:  # a set of another form: its own KL projection
            self.set_state_ = None
            self.p_ = constraint.project(self.log_w_, 0.0, log_domain=True)
            return {"eta": self.eta_}
        # a capped simplex: the kernels of the compiled path, so both paths agree
        self.set_state_ = capped_set_state(caps, constraint.k, "depround",
                                           abs(float(caps.sum()) - 1.0) <= 1e-12)
        self.p_ = np.empty(n)
        self.state_ = FTRLState(self.log_w_, self.p_, np.empty(n), self.rows_, float(self.eta_),
                                np.empty(n), np.zeros(n, dtype=bool), np.zeros(2))
        ftrl_project(self.state_, self.set_state_)
        return {"eta": self.eta_}

    @staticmethod
    def entropy_range(constraint) -> float:
        """The negative entropy's range over ``K``: ``log(n/k)`` when every row cap
        is ``1/k`` (the OL-FTRL theorem's form); ``log(n) - H(sigma)`` on a
        permutahedron ``P(sigma)`` (a set whose ``spectrum()`` is not None);
        ``log(n max_i c_i)``, a bound, for other row caps ``c``; ``log(n)`` else."""
        n, k = constraint.n, constraint.k
        caps = constraint.row_caps()
        top = None if caps is None else float(np.max(caps))
        if top is not None and top == 1.0 / k:
            return math.log(n / k)
        spectrum = getattr(constraint, "spectrum", None)
        sigma = spectrum() if callable(spectrum) else None
        if sigma is not None:  # the entropy is log n at 1/n, H(sigma) at every vertex
            mass = np.asarray(sigma, dtype=np.float64)
            mass = mass[mass > 0.0]
            return max(0.0, math.log(n) + float(np.sum(mass * np.log(mass))))
        return math.log(n) if top is None else math.log(n * top)

    @property
    def p(self) -> np.ndarray:
        return self.p_

    def propose(self, rng: np.random.Generator) -> Proposal:
        # a copy: observe writes p_{t+1} into p_ in place
        return Proposal(self.rows_, self.p_.copy())

    def observe(self, losses: np.ndarray) -> None:
        """``eta L_t`` onto the log-weights and the next ``p``: on a capped
        simplex ``ftrl_observe``, the kernel the compiled path runs too; on a
        set of another form its ``project``."""
        if self.set_state_ is not None:
            ftrl_observe(self.state_, self.set_state_, self.rows_, self.p_,
                         np.ascontiguousarray(losses, dtype=np.float64))
            return
        self.log_w_ += self.eta_ * losses
        self.log_w_ -= self.log_w_.max()
        self.p_ = self.constraint_.project(self.log_w_, 0.0, log_domain=True)

    def compiled(self, constraint: Compiled | None) -> Compiled | None:
        """The compiled form (``harness.engine``) on a capped simplex:
        ``ftrl_propose``/``ftrl_observe`` on the player's state (the arrays
        changed in place; the Python ``observe`` runs the same kernel); None on
        any other set."""
        if self.set_state_ is None:
            return None
        return player_form(self, FTRL, constraint, "plugins.p_players.ftrl:ftrl")

    def regret_bound(self, rounds: int) -> float | None:
        """``log(n/k) / eta + eta t`` after ``t = rounds`` rounds at the eta in
        use, deterministic, game units (``entropy_range`` in place of
        ``log(n/k)`` on other sets)."""
        return self.log_ratio_ / self.eta_ + self.eta_ * rounds


#: the free rows' weights (the largest weight is 1) below which ``ftrl_project``
#: projects in the log domain
TINY_FREE = 1e-250


@njit(cache=True, error_model="numpy")
def ftrl_propose(ps, ks, rng):  # pragma: no cover - compiled
    """``FTRL.propose``: every row, weighted by ``p_t`` (OL-FTRL, Section 6 and
    Appendix E)."""
    return ps.rows, ps.p


@njit(cache=True, error_model="numpy")
def ftrl_observe(ps, ks, rows, weights, losses):  # pragma: no cover - compiled
    """``FTRL.observe`` (OL-FTRL, Appendix E) on a capped simplex: add ``eta
    L_t`` to the cumulative log-weights, rebase them to max 0 and project
    (``ftrl_project``) for ``p_{t+1}``, written into ``p``; the batch weights
    and the action are ``p_t``, copied to ``previous``. The largest
    log-weight comes from ``extremes`` (``plugins.lib.vecmath``); a NaN or
    infinite log-weight raises ValueError, as the set's own projection does."""
    log_w, p, previous, eta = ps.log_w, ps.p, ps.previous, ps.eta
    n = log_w.size
    for i in range(n):
        previous[i] = p[i]
    for i in range(n):
        log_w[i] += eta * losses[i]
    most, _ = extremes(log_w)  # NaN if any entry is
    if not -np.inf < most < np.inf:
        raise ValueError("FTRL's log-weights are not finite: a loss is NaN or infinite")
    for i in range(n):
        log_w[i] -= most
    ftrl_project(ps, ks)
    return previous, rows, previous


@njit(cache=True, error_model="numpy")
def ftrl_project(ps, ks):  # pragma: no cover - compiled
    """``p`` from the log-weights (max 0): the KL projection onto K without
    mixing (Algorithm 4 with ``gamma = 0``) of the weights ``exp(log_w)``
    (``vexp``, a pass that vectorises), by ``weights_row_caps``, the capped
    set warm-started from the last round's (Lemma C.2; ``log_row_caps`` from
    the log-weights if the free weights underflow)."""
    log_w, p, w, capped, book = ps.log_w, ps.p, ps.w, ps.capped, ps.book
    caps = ks.caps
    if capped_set_point(ks, p, capped):
        return
    kappa, log_kappa = capped_set_kappa(ks, 0.0)
    for i in range(log_w.size):
        w[i] = vexp(log_w[i])
    if not weights_row_caps(p, w, capped, caps, kappa, 0.0, book, TINY_FREE):
        log_row_caps(p, log_w, capped, caps, kappa, log_kappa, 0.0, book)


@harness.hookimpl
def register_p_players(register):
    register(FTRL)
