"""Stochastic AFL (Mohri, Sivek, Suresh 2019) as the paper runs it (Section 6;
Appendix E, subsection S-AFL)."""

from __future__ import annotations

import math
from typing import ClassVar, NamedTuple

import numpy as np
from numba import njit

import harness
from harness import Compiled, Param, Proposal
from plugins.lib.capped import (
    capped_set_euclidean,
    capped_set_sample,
    capped_set_state,
    needs_draws,
    player_form,
    sorted_breakpoint_threshold,
)
from plugins.lib.steps import scale_param, scaled_step
from plugins.p_players.draws import choice


class SAFLState(NamedTuple):
    """S-AFL's state on a capped simplex (its kernels' and its Python ``observe``'s),
    the arrays changed in place."""

    #: ``lambda_t`` and the point before the last step (the action ``a_t``)
    lam: np.ndarray
    before: np.ndarray
    #: every row ``0..n-1`` (the action's rows)
    all_rows: np.ndarray
    #: the step's coefficient ``eta n / k``
    coef: float
    #: the identity permutation, scratch of ``draws.choice``
    perm: np.ndarray
    #: ``lambda`` sorted (``_project_one_cap`` keeps it so)
    ordered: np.ndarray
    #: every row has the same cap (the k-set, the simplex): ``_project_one_cap``
    one_cap: bool
    #: scratch of ``_project_one_cap`` (n each)
    merged: np.ndarray
    low: np.ndarray


class StochasticAFL:
    """Projected stochastic gradient ascent on ``lambda in K``.

    Per round: k rows ``S ~ lambda_t`` (the constraint set's sampler, so
    ``P[i in S] = k lambda_i``) give the w-player an unbiased weighted
    gradient with weights ``1/k``; k rows ``J`` drawn uniformly without
    replacement give the unbiased estimate ``(n/k) L_i 1[i in J]`` of
    ``grad_lambda <L(w), lambda> = L(w)``; then
    ``lambda <- Proj_K(lambda + eta_lambda * estimate)`` (Euclidean). The
    action is ``a_t = lambda_t``. 2k rows per round: ``T = N / (2k)``; a row in
    both samples is evaluated (and counted) twice, as in the paper.

    Default ``eta_lambda = 2 R_Lambda / sqrt(T (sigma_lambda^2 + G_lambda^2))``
    with ``R_Lambda = 1``, ``sigma_lambda^2 = n^2 / k``, ``G_lambda^2 = n``
    (Appendix E, subsection S-AFL, Table 4); the matching w-player step is
    offered to a w-player whose step is unset (``suggest_w_lr``). Mohri et
    al. (2019, Theorem 2) bound the expected gap only, which bounds no single
    run's: no ``theory_bound`` is logged (``regret_bound`` is None; both
    points in docs/algorithms.md, "The p-players' regret bounds").

    ``S`` is the set's ``sample``, a ``harness.Draw``: its distinct rows with
    weights ``m_i / k`` (unbiased, ``E[m_i] = k lambda_i``; on the alpha-set a
    multiset, so a round evaluates at most 2k rows). The set must offer the
    Euclidean projection (``harness.EuclideanProjection``); ``setup`` refuses
    one that does not.
    """

    name: ClassVar[str] = "safl"
    state_version: ClassVar[int] = 1
    constraints: ClassVar[tuple[str, ...] | None] = None  # any set that supports() accepts
    params: ClassVar[dict[str, Param]] = {
        "eta": Param(float, low=0.0, low_open=True, nullable=True,
                     doc="lambda step size; None: Appendix E, subsection S-AFL"),
        "eta_scale": scale_param("eta"),
    }

    @classmethod
    def supports(cls, constraint) -> str | None:
        """A set with a sampler and a Euclidean projection (``EuclideanProjection``)."""
        why = needs_draws(constraint)
        if why is not None:
            return why
        if not isinstance(constraint, harness.EuclideanProjection):
            return (f"steps by Euclidean projection onto K; '{constraint.name}' has no "
                    "euclidean_project(v) "
                    "(harness.EuclideanProjection)")
        return None

    def __init__(self, eta=None, eta_scale=1.0) -> None:
        self.eta = eta
        self.eta_scale = eta_scale

    def rows_per_round(self, constraint) -> int:
        return 2 * constraint.k

    def setup(self, constraint, horizon: int) -> dict[str, float]:
        n, k = constraint.n, constraint.k
        if not isinstance(constraint, harness.EuclideanProjection):
            raise harness.ConfigError(
                f"The p_player '{self.name}' steps by Euclidean projection onto K; the "
                f"constraint set '{constraint.name}' has no euclidean_project(v) method "
                "(harness.EuclideanProjection).")
        self.constraint_ = constraint
        self.horizon_ = horizon
        self.lambda_variance_ = n * n / k + n
        self.eta_ = scaled_step(self.name, "eta", self.eta, self.eta_scale,
                                2.0 / math.sqrt(horizon * self.lambda_variance_))
        self.lam_ = np.full(n, 1.0 / n)
        self.all_rows_ = np.arange(n)
        self.perm_ = np.arange(n, dtype=np.int64)
        self.zeros_ = np.zeros(k)  # the lambda sample's rows have no batch weight
        caps = constraint.row_caps()
        self.set_state_ = self.state_ = None
        if caps is not None:  # a capped simplex: the kernels, so both paths agree
            caps = np.ascontiguousarray(caps, dtype=np.float64)
            self.set_state_ = capped_set_state(caps, k, "depround",
                                               abs(float(caps.sum()) - 1.0) <= 1e-12)
            self.state_ = SAFLState(self.lam_, np.empty(n), self.all_rows_,
                                    float(self.eta_ * n / k), self.perm_,
                                    np.sort(self.lam_),
                                    bool(np.all(caps == caps[0])), np.empty(n), np.empty(n))
        return {"eta": self.eta_}

    def suggest_w_lr(self, radius: float, grad_bound: float, horizon: int) -> float:
        """Appendix E's (subsection S-AFL) w-player step ``2 R_W / sqrt(T (sigma_w^2 + G_w^2))``
        (the w-player's ``lr_scale`` multiplies it)."""
        return 2.0 * radius / math.sqrt(horizon * 5.0 * grad_bound * grad_bound)

    @property
    def p(self) -> np.ndarray:
        return self.lam_

    def propose(self, rng: np.random.Generator) -> Proposal:
        K = self.constraint_
        for_w, mult = K.sample(self.lam_, rng)
        self.rows_, weights = _with_lambda_rows(
            np.ascontiguousarray(for_w, dtype=np.int64), np.ascontiguousarray(mult), K.k,
            self.perm_, rng)
        rows = self.rows_
        self.for_lambda_ = rows[rows.size - K.k:]
        # a copy: on a capped simplex observe steps lambda in place
        return Proposal(rows, weights, self.all_rows_, self.lam_.copy())

    def observe(self, losses: np.ndarray) -> None:
        """The projected ascent step of Appendix E (subsection S-AFL): on a
        capped simplex ``safl_observe``, the kernel the compiled path runs too;
        on a set of another form its ``euclidean_project``."""
        if self.state_ is not None:
            safl_observe(self.state_, self.set_state_, self.rows_, self.zeros_,
                         np.ascontiguousarray(losses, dtype=np.float64))
            return
        K = self.constraint_
        step = np.zeros(K.n)
        step[self.for_lambda_] = (self.eta_ * K.n / K.k) * losses[-K.k:]
        self.lam_ = K.euclidean_project(self.lam_ + step)

    def compiled(self, constraint: Compiled | None) -> Compiled | None:
        """The compiled form (``harness.engine``) on a capped simplex:
        ``safl_propose``/``safl_observe`` on the player's state (``SAFLState``;
        the Python ``observe`` runs the same kernel); None on any other set,
        and for a subclass that replaces a method the kernels stand for."""
        if self.state_ is None:
            return None
        return player_form(self, StochasticAFL, constraint, "plugins.p_players.safl:safl")

    def regret_bound(self, rounds: int) -> float | None:
        """None: Mohri et al.'s guarantee bounds the expected gap, not the gap of
        a run (class docstring)."""
        return None


@njit(cache=True, error_model="numpy")
def safl_propose(ps, ks, rng):  # pragma: no cover - compiled
    """``StochasticAFL.propose``: the w-player's draw ``S ~ lambda_t`` (the set's
    sampler, weights ``m / k``) then k rows ``J`` uniformly without replacement
    (weight 0), in that order, as Appendix E (subsection S-AFL) plays a round."""
    for_w, mult = capped_set_sample(ks, ps.lam, rng)
    return _with_lambda_rows(for_w, mult, ks.k, ps.perm, rng)


@njit(cache=True, error_model="numpy")
def _with_lambda_rows(for_w, mult, k, perm, rng):  # pragma: no cover - compiled
    """The round's rows: the w-player's draw ``for_w`` (weights ``mult / k``)
    then k rows uniformly without replacement (``draws.choice`` on the
    identity ``perm``, weight 0)."""
    n = perm.size
    for_lambda = choice(rng, n, k, perm, np.empty(k, dtype=np.int64))
    m = for_w.size
    rows = np.empty(m + k, dtype=np.int64)
    weights = np.zeros(m + k)
    for j in range(m):
        rows[j] = for_w[j]
        weights[j] = mult[j] / k
    for j in range(k):
        rows[m + j] = for_lambda[j]
    return rows, weights


@njit(cache=True, error_model="numpy")
def safl_observe(ps, ks, rows, weights, losses):  # pragma: no cover - compiled
    """``StochasticAFL.observe``: ``lambda <- Proj_K(lambda + eta (n/k) L_J 1_J)``
    (Appendix E, subsection S-AFL); the action is ``lambda_t``, the point
    before the step, on every row. With one cap for every row (the k-set, the
    simplex) the projection is ``_project_one_cap``, else ``K.euclidean_project``
    (``capped_set_euclidean``). The rows of the lambda sample are the last k
    of ``rows``; ``ks`` is read for k and the caps only."""
    lam, before, coef, ordered = ps.lam, ps.before, ps.coef, ps.ordered
    k = ks.k
    n = lam.size
    first = rows.size - k
    for i in range(n):
        before[i] = lam[i]
    moved = rows[first:]
    stepped = np.empty(k)
    for j in range(k):
        stepped[j] = lam[moved[j]] + coef * losses[first + j]
    if ps.one_cap:
        _project_one_cap(before, moved, stepped, lam, ordered, ks.caps[0], ps.merged, ps.low)
    else:
        v = np.empty(n)
        for i in range(n):
            v[i] = before[i] + 0.0
        for j in range(k):
            v[moved[j]] = stepped[j]
        lam[:] = capped_set_euclidean(ks, v)
    return weights, ps.all_rows, before


@njit(cache=True, error_model="numpy")
def _project_one_cap(old, moved, stepped, lam, ordered, cap, u, low):  # pragma: no cover - compiled
    """``euclidean_projection_row_caps(v, caps)`` with every cap ``cap``, written
    into ``lam``, where ``v`` is ``old`` but ``stepped`` on the rows ``moved``
    and ``ordered`` holds ``old`` sorted; ``ordered`` then holds the new ``lam``
    sorted. The same breakpoint walk on the same sorted arrays (``np.sort(v)``,
    and ``np.sort(v - caps)``, which is ``np.sort(v) - cap`` when the cap is
    shared), but ``np.sort(v)`` comes from ``ordered`` with the moved rows'
    values taken out and put back (a merge, O(n)), and the new ``lam =
    clip(v - tau, 0, cap)``, a nondecreasing map, keeps the order. ``u`` and
    ``low`` (n each) are scratch space."""
    n = old.size
    m = moved.size
    gone = np.empty(m)
    come = stepped.copy()
    for j in range(m):
        gone[j] = old[moved[j]]
    gone.sort()
    come.sort()
    out = 0
    g = 0
    c = 0
    for i in range(n):
        x = ordered[i]
        if g < m and x == gone[g]:
            g += 1
            continue
        while c < m and come[c] < x and out < n:
            u[out] = come[c]
            out += 1
            c += 1
        if out == n:
            break
        u[out] = x
        out += 1
    while c < m and out < n:
        u[out] = come[c]
        out += 1
        c += 1
    if g != m or c != m or out != n:  # ordered was not old sorted: sort afresh
        for i in range(n):
            u[i] = old[i] + 0.0
        for j in range(m):
            u[moved[j]] = stepped[j]
        u.sort()
    for i in range(n):
        low[i] = u[i] - cap
    tau = sorted_breakpoint_threshold(u, low)
    for i in range(n):
        lam[i] = min(max((old[i] + 0.0) - tau, 0.0), cap)
        ordered[i] = min(max(u[i] - tau, 0.0), cap)
    for j in range(m):
        lam[moved[j]] = min(max(stepped[j] - tau, 0.0), cap)


@harness.hookimpl
def register_p_players(register):
    register(StochasticAFL)
