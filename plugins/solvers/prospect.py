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
from plugins.solvers.set_form import SetForm, penalty_of, set_form


class Prospect(RowSolver):
    """Algorithm 1 of Mehta et al. (2024) on ``F`` (``harness.problem``).

    Prospect (Mehta et al., ICLR 2024, Algorithm 1): one uniformly drawn row per
    step against the best response ``q(l)`` to a table of the rows' last losses,
    with a proximal step on ``(mu/2)||w||^2`` and, with a finite radius, a
    projection onto the ball. A step costs O(p + log n)
    (``plugins.solvers.best_response``), on row caps or a spectrum with the
    chi-square penalty (or ``nu = 0``) only: another set, or the KL penalty, is
    refused (``_form``). Default step ``1 / (c n sigma_max L +
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
    #: the penalties ``D`` of ``F`` it solves: the chi-square one only (its O(log n)
    #: best response maintains a Euclidean projection)
    penalties: ClassVar[tuple[str, ...]] = ("chi2",)
    #: the saved state's version (``harness.state``): 2, the ``BRState`` with the
    #: set's form and its ``PoolTree`` (1: row caps only)
    state_version: ClassVar[int] = 2

    def _form(self, problem: Any) -> SetForm:
        """The set's row caps or spectrum (``set_form``), with the chi-square
        penalty or ``nu = 0``; else a ``ConfigError``: the one-row update of
        ``BestResponse`` maintains the Euclidean projection of ``1/n + l/(nu
        n)`` onto those two forms (or their LMO), not a KL projection nor any
        other set's projection."""
        penalty, nu = penalty_of(problem), float(problem.nu)
        if nu > 0.0 and penalty not in self.penalties:
            raise harness.ConfigError(
                f"The solver 'prospect' solves the chi-square shift cost only "
                f"(problem.penalty=chi2, or nu = 0): its O(log n) update maintains the "
                f"Euclidean projection of 1/n + l/(nu n) onto K. Got problem.penalty="
                f"{penalty!r} with nu={nu!r}: use solver=lsvrg, sgd or full_batch.")
        try:
            return set_form(self.name, problem.constraint)
        except harness.ConfigError as err:
            raise harness.ConfigError(
                f"{err} Prospect's O(log n) update is specific to those two forms: on "
                "another set use solver=lsvrg, sgd or full_batch.") from err

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
