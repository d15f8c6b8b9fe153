"""Prospect (Mehta, Roulet, Pillutla and Harchaoui, "Distributionally Robust
Optimization with Bias and Variance Reduction", ICLR 2024, Algorithm 1
"Prospect"): a SAGA-type method for ``F`` with per-row tables of losses,
gradients and dual weights, linearly convergent for ``nu > 0`` with one
constant step and no dual step size.

Its kernels are the template ``plugins.solvers.prospect_kernels``, run on any
model through the model's row roles (``plugins.solvers.row_solver``)."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

import harness
from plugins.solvers.best_response import BestResponse
from plugins.solvers.row_solver import RowSolver


class Prospect(RowSolver):
    """Algorithm 1 of Mehta et al. (2024) on ``F`` (``harness.problem``).

    Prospect (Mehta et al., ICLR 2024, Algorithm 1): one uniformly drawn row per
    step against the best response ``q(l)`` to a table of the rows' last losses,
    with a proximal step on ``(mu/2)||w||^2`` and, with a finite radius, a
    projection onto the ball. A step costs O(p + log n)
    (``plugins.solvers.best_response``). Default step ``1 / (c n sigma_max L +
    mu)``, ``sigma_max = max_i c_i``, ``c = 1`` (``row_solver.STEP_CONSTANT``).
    ``counts_``: data points, gradients, steps.
    Derivation: docs/algorithms.md, "Prospect: the step, its default and its
    counters".
    """

    name: ClassVar[str] = "prospect"
    #: linear convergence on a smooth, strongly convex problem: the contract
    #: suite's model check asks this accuracy of it (``harness.protocols.Solver``)
    contract_accuracy: ClassVar[float] = 1e-8
    template: ClassVar[str] = "plugins.solvers.prospect_kernels"
    #: the saved state's version (``harness.state``): 2, the ``BRState`` with the
    #: set's form and its ``PoolTree`` (1: row caps only)
    state_version: ClassVar[int] = 2

    def setup(self, problem: Any, budget: int) -> dict[str, Any]:
        X, y = self._prepare(problem, budget)
        kernels, ms = self._kernels(problem)
        n, p = self.n_, problem.n_params
        self.w = np.zeros(p)
        self.losses_ = np.empty(n)
        self.grads_ = np.zeros((n, p))
        # counters: data points, gradients formed, steps
        self.counts_ = np.zeros(3, dtype=np.int64)
        Z = np.empty((n, kernels.m_row_scratch(ms)))
        kernels.prospect_losses(ms, X, y, self.w, self.losses_, Z, self.counts_)
        self.table_ = BestResponse(self.losses_, self.form_, problem.nu)
        self.rho_ = self.table_.q()
        kernels.prospect_grads(ms, X, y, self.w, self.rho_, Z, self.grads_, self.counts_)
        self.gbar_ = self.grads_.T @ self.rho_
        self._sync()
        return self._logged()

    def _steps(self, kernels, ms, X, y, problem: Any, rng, until: int) -> None:
        kernels.prospect_steps(ms, X, y, self.w, self.losses_, self.grads_, self.rho_,
                               self.gbar_, self.table_.state, self.lr_, float(problem.mu),
                               float(problem.radius), rng, until, self.counts_)

    @property
    def q(self) -> np.ndarray:
        """``lambda = q(l)``, the best response to the loss table (a point of K)."""
        return self.table_.q()


@harness.hookimpl
def register_solvers(register):
    register(Prospect)
