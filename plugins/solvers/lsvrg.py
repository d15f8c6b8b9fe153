"""LSVRG (Mehta, Roulet, Pillutla, Liu and Harchaoui, "Stochastic Optimization
for Spectral Risk Measures", AISTATS 2023, Algorithm "LSVRG"): SVRG for a
spectral risk, with the spectral weights of the sorted losses frozen at an
anchor refreshed every n steps (smoothed when ``nu > 0``, as in the authors'
code for the problem ``F``). The steps between two anchors read the set only
through the anchor's best response ``q~``, so LSVRG runs on any set and either
penalty: ``q~`` is the inner maximiser at the anchor, ``Problem.inner``.

Its kernels are the template ``plugins.solvers.lsvrg_kernels``, run on any
model through the model's row roles (``plugins.solvers.row_solver``)."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

import harness
from plugins.solvers.row_solver import RowSolver
from plugins.solvers.set_form import SetForm, kernel_form, penalty_of


class LSVRG(RowSolver):
    """LSVRG of Mehta et al. (2023) on ``F`` (``harness.problem``).

    LSVRG (Mehta et al., AISTATS 2023): every n steps an anchor ``w~`` with its
    best response ``q~`` and full weighted gradient ``g~``; each step one
    uniformly drawn row, ``w <- w - lr (n sigma_j (g - g~_j) + g~ + mu w)``, then,
    with a finite radius, a projection onto the ball. The anchor's best
    response ``q~``: on row caps or a spectrum with the chi-square penalty (or
    ``nu = 0``) the compiled one (``best_response_dense``, anchors inside the
    kernel); on any other set, or with the KL penalty, ``Problem.inner`` on the
    anchor's losses, in Python between kernel calls (``general_``). Default
    step ``1 / (c n sigma_max L + mu)``, ``sigma_max`` the largest weight a
    point of K gives a row (the largest cap or spectrum entry, else the set's
    ``max_weight()``, else 1: ``set_form.largest_weight``), ``c = 1`` (as
    Prospect's). ``counts_``: data points, gradients, steps since the anchor,
    steps.
    Derivation: docs/algorithms.md, "LSVRG: the step, its default and its
    counters".
    """

    name: ClassVar[str] = "lsvrg"
    #: linear convergence on a smooth, strongly convex problem: the contract
    #: suite's model check asks this accuracy of it (``harness.protocols.Solver``)
    contract_accuracy: ClassVar[float] = 1e-8
    template: ClassVar[str] = "plugins.solvers.lsvrg_kernels"
    #: the penalties ``D`` of ``F`` it solves (``harness.problem``)
    penalties: ClassVar[tuple[str, ...]] = ("chi2", "kl")
    #: the saved state's version (``harness.state``): 2, the set's form may be
    #: None and ``general_`` says whether anchors are ``Problem.inner``'s (1: the
    #: set's form, ``SetForm``, in place of the row caps)
    state_version: ClassVar[int] = 2

    def _form(self, problem: Any) -> SetForm | None:
        """The compiled best response's form (``kernel_form``), or None: the
        anchors are ``Problem.inner``'s."""
        return kernel_form(problem.constraint, penalty_of(problem), float(problem.nu))

    def setup(self, problem: Any, budget: int) -> dict[str, Any]:
        X, y = self._prepare(problem, budget)
        kernels, ms = self._kernels(problem)
        n, p = self.n_, problem.n_params
        self.general_ = self.form_ is None
        self.w = np.zeros(p)
        self.anchor_ = np.zeros(p)
        self.anchor_q_ = np.zeros(n)
        self.anchor_grad_ = np.zeros(p)
        # counters: data points, gradients formed, steps since the anchor, steps
        self.counts_ = np.zeros(4, dtype=np.int64)
        if self.general_:
            self._anchor(kernels, ms, X, y, problem)
        else:
            kernels.lsvrg_anchor(ms, X, y, self.w, self.anchor_, self.anchor_q_,
                                 self.anchor_grad_, self.form_, self.nu_, self.counts_)
        self._sync()
        return {**self._logged(), "epoch_length": n}

    def _anchor(self, kernels, ms, X, y, problem: Any) -> None:
        """The anchor at ``w`` through the set's protocol: the losses and the
        gradient by the kernels, ``q~ = Problem.inner(losses)`` between them."""
        n = self.n_
        Z = np.empty((n, kernels.m_row_scratch(ms)))
        losses = np.empty(n)
        kernels.anchor_losses(ms, X, y, self.w, self.anchor_, self.anchor_grad_, losses, Z)
        _, q = problem.inner(losses)
        self.anchor_q_[:] = q
        kernels.anchor_gradient(ms, X, y, self.w, self.anchor_q_, self.anchor_grad_, Z,
                                self.counts_)

    def _steps(self, kernels, ms, X, y, problem: Any, rng, until: int) -> None:
        mu, radius = float(problem.mu), float(problem.radius)
        if not self.general_:
            kernels.lsvrg_steps(ms, X, y, self.w, self.anchor_, self.anchor_q_,
                                self.anchor_grad_, self.form_, self.nu_, self.lr_, mu, radius,
                                rng, until, self.counts_)
            return
        counts = self.counts_
        while counts[0] < until:
            if counts[2] == self.n_:
                self._anchor(kernels, ms, X, y, problem)
                continue
            kernels.lsvrg_between_anchors(ms, X, y, self.w, self.anchor_, self.anchor_q_,
                                          self.anchor_grad_, self.lr_, mu, radius, rng, until,
                                          counts)

    @property
    def q(self) -> np.ndarray:
        """The anchor's best response ``q~`` (a point of K)."""
        return self.anchor_q_.copy()


@harness.hookimpl
def register_solvers(register):
    register(LSVRG)
