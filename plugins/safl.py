"""Stochastic AFL (Mohri, Sivek, Suresh 2019) as the paper runs it (Section 6;
Appendix E, subsection S-AFL)."""

from __future__ import annotations

import math
from typing import ClassVar

import numpy as np

import harness
from harness import Param, Proposal


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
    (Appendix E, subsection S-AFL, Table 4). The matching w-player step,
    ``2 B / sqrt(T (sigma_w^2 + G_w^2))``, is offered to a w-player whose
    step is unset (``suggest_w_lr``), with ``G_w`` the model's proven
    per-example gradient bound and ``sigma_w <= 2 G_w`` (that subsection's own
    argument) instead of Table 4's constants, which bound unscaled losses.
    The guarantee (Mohri et al. 2019, Theorem 2) holds in expectation only:
    ``E[gap] <= 3 R_W sqrt((sigma_w^2 + G_w^2) / T) + 3 R_Lambda
    sqrt((sigma_lambda^2 + G_lambda^2) / T)`` for the averages after T rounds.
    No ``theory_bound`` is logged for S-AFL (``regret_bound`` is None): a bound
    on the expected gap does not bound the gap of one run, which is what
    ``theory_bound`` is read as (a bound at least the certified ``dual_gap``
    of the run, with a stated probability); and the w-player's deterministic
    OGD bound that the game adds does not hold here, since the w-player steps
    on a sampled gradient, not on the gradient of ``<L(w_t), a_t>``.

    ``S`` is the set's ``sample``, a ``harness.Draw``: its distinct rows with
    weights ``m_i / k`` (unbiased, ``E[m_i] = k lambda_i``; on the alpha-set a
    multiset, so a round evaluates at most 2k rows). The set must offer the
    Euclidean projection (``harness.EuclideanProjection``); ``setup`` refuses
    one that does not.
    """

    name: ClassVar[str] = "safl"
    constraints: ClassVar[tuple[str, ...] | None] = None  # any set that supports() accepts
    params: ClassVar[dict[str, Param]] = {
        "eta": Param(float, low=0.0, low_open=True, nullable=True,
                     doc="lambda step size; None: Appendix E, subsection S-AFL"),
    }

    @classmethod
    def supports(cls, constraint) -> str | None:
        """A set with a Euclidean projection (``harness.EuclideanProjection``)."""
        if not isinstance(constraint, harness.EuclideanProjection):
            return (f"steps by Euclidean projection onto K; '{constraint.name}' has no "
                    "euclidean_project(v) "
                    "(harness.EuclideanProjection)")
        return None

    def __init__(self, eta=None) -> None:
        self.eta = eta

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
        self.eta_ = self.eta if self.eta is not None else 2.0 / math.sqrt(
            horizon * self.lambda_variance_)
        self.lam_ = np.full(n, 1.0 / n)
        self.all_rows_ = np.arange(n)
        self.zeros_ = np.zeros(k)  # the lambda sample's rows have no batch weight
        return {"eta": self.eta_}

    def suggest_w_lr(self, radius: float, grad_bound: float, horizon: int) -> float:
        """Appendix E's (subsection S-AFL) w-player step ``2 R_W / sqrt(T (sigma_w^2 + G_w^2))``."""
        return 2.0 * radius / math.sqrt(horizon * 5.0 * grad_bound * grad_bound)

    @property
    def p(self) -> np.ndarray:
        return self.lam_

    def propose(self, rng: np.random.Generator) -> Proposal:
        K = self.constraint_
        for_w, mult = K.sample(self.lam_, rng)
        self.for_lambda_ = rng.choice(K.n, size=K.k, replace=False)
        weights = np.concatenate((mult / K.k, self.zeros_))
        rows = np.concatenate((for_w, self.for_lambda_))
        return Proposal(rows, weights, self.all_rows_, self.lam_)

    def observe(self, losses: np.ndarray) -> None:
        K = self.constraint_
        step = np.zeros(K.n)
        step[self.for_lambda_] = (self.eta_ * K.n / K.k) * losses[-K.k:]
        self.lam_ = K.euclidean_project(self.lam_ + step)

    def regret_bound(self, rounds: int) -> float | None:
        """None: Mohri et al.'s guarantee bounds the expected gap, not the gap of
        a run (class docstring)."""
        return None


@harness.hookimpl
def register_p_players(register):
    register(StochasticAFL)
