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

    Tables: the losses ``l_j``, gradients ``G_j`` and weights ``rho_j`` of the
    rows at the point each was last visited, ``lambda = q(l)`` the (smoothed)
    best response to the loss table and ``gbar = sum_j rho_j G_j``. A step
    draws a row i uniformly, ``g = grad l_i(w)``, and

        v = n lambda_i g - n rho_i G_i + gbar,   w <- (w - lr v) / (1 + lr mu)

    (the proximal step on ``(mu/2)||w||^2``), then ``l_i <- l_i(w_old)``,
    ``lambda <- q(l)``, ``gbar += lambda_i g - rho_i G_i``, ``rho_i <-
    lambda_i``, ``G_i <- g``, with ``lambda_i`` read before the loss table
    changes (as the authors' code does). With a finite radius the iterate is
    then projected onto the ball (the projected variant; the paper's analysis
    is for the unconstrained problem).

    Only ``lambda_i`` of the sampled row is read, and one loss changes per
    step, so ``lambda`` is never formed: ``plugins.solvers.best_response.BestResponse``
    keeps the sorted ``1/n + l/(nu n)`` in a counted B+ tree (O(log n) per
    changed loss) and finds the threshold of the projection by Newton's
    method from the last one (two O(log n) evaluations in the common case, an
    O(log^2 n) search otherwise). A step costs O(p + log n) (p parameters)
    where the authors' code sorts and pools all n rows.
    ``gbar`` is recomputed as ``G^T rho`` every n steps (O(p) per step
    amortised) so that its running sum does not drift.

    Default step ``1 / (c n sigma_max L + mu)``: the analysis of Prospect (and
    that of LSVRG, Mehta et al. AISTATS 2023) takes constant steps of order
    ``1 / (n sigma_max L)``, ``L`` the smoothness of the row losses and
    ``sigma_max = max_i c_i`` the largest weight the best response gives a
    row (``n sigma_max = n / k = 2`` for the superquantile at level 1/2): the
    factor ``n lambda_i`` of the step's stochastic term is at most ``n
    sigma_max``, so ``n sigma_max L`` bounds the smoothness of each term of
    the estimator. The theorems' absolute constants are worst-case; ``c = 1``
    (``plugins.solvers.row_solver.STEP_CONSTANT``) is the largest step of that order
    and lands next to the authors' tuned steps (0.012 against their 0.01 on
    concrete). On ``experiment=prospect`` (640,000 data points) every
    multiplier of the tuning protocol's grid from 3^-2 to 3^0 ends within
    1e-10 of the best objective on all five sets (the protocol's selection
    among them is rounding). After 20 passes the protocol selects 3^-4 (the
    grid's edge) on kin8nm and 3^-3 on power, the two sets with n near 1e4,
    where the default is too large early on (the authors' tuned steps there,
    1e-4 and 1e-3, against 0.028 and 0.029); 3^0 or 3^1 on the other three.
    With ``nu = 0`` in a ball the default is the subgradient method's step
    for the budget, which the protocol finds 27 times too small on Boston at
    k = 20: ``plugins.solvers.row_solver`` says why it stays. Measured by
    ``tools/step_table.py``.

    A row whose weight ``lambda_i`` (read before the step) is 0 enters the
    step and the tables only times 0, so its gradient is not formed: the
    step evaluates its loss (for the loss table) and uses ``g = 0``, and the
    initial tables form the gradients of the rows with ``rho_j != 0`` only
    (``G_j = 0`` for the others, read only times ``rho_j``): skipping those
    gradients changes the iterates by the sign of a zero at most. The first
    step, at ``w_0``, reads its row from the tables (``v = gbar``, the
    tables unchanged): the full step would weigh the row by ``lambda_i =
    br_weight(br, i)`` where the tables hold ``rho_i`` from
    ``BestResponse.q()``, the same projection through another threshold
    search, and the two differ by rounding (of order 1e-17 or less),
    so the skipped step differs from the full one by ``n (lambda_i - rho_i)
    G_i``, which is negligible.

    Counters (``docs/tracking.md``, Counters): the initialisation evaluates
    every row's loss at ``w_0`` (n data points) and forms ``|{j: rho_j !=
    0}|`` gradients; each step evaluates one row at ``w`` (1 data point) and
    forms its gradient when ``lambda_i != 0`` (1 or 0), except the first,
    taken at ``w_0`` from the tables (0 and 0). ``counts_``: data points,
    gradients, steps.
    """

    name: ClassVar[str] = "prospect"
    template: ClassVar[str] = "plugins.solvers.prospect_kernels"
    #: the saved state's version (``harness.state``): 1, the best response's
    #: state a ``BRState`` read by field
    state_version: ClassVar[int] = 1

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
        self.table_ = BestResponse(self.losses_, self.caps_, problem.nu)
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
