"""Prospect (Mehta, Roulet, Pillutla and Harchaoui, "Distributionally Robust
Optimization with Bias and Variance Reduction", ICLR 2024, Algorithm 1
"Prospect"): a SAGA-type method for ``F`` with per-row tables of losses,
gradients and dual weights, linearly convergent for ``nu > 0`` with one
constant step and no dual step size."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
from numba import njit

import harness
from plugins.lib.row_solver import RowSolver
from plugins.lib.spectral import (
    BestResponse,
    br_update,
    br_weight,
    project_ball_inplace,
    row_data,
    row_loss_grad,
)


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
    step, so ``lambda`` is never formed: ``plugins.lib.spectral.BestResponse``
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
    (``plugins.lib.spectral.STEP_CONSTANT``) is the largest step of that order
    and lands next to the authors' tuned steps (0.012 against their 0.01 on
    concrete).

    Counters: the initialisation evaluates every row's loss and gradient at
    ``w_0`` (n data points, n gradient evaluations); each step one row
    (1 data point, 1 gradient evaluation).
    """

    name: ClassVar[str] = "prospect"
    def setup(self, problem: Any, budget: int) -> dict[str, Any]:
        X, y = self._prepare(problem, budget)
        n, p = self.n_, problem.n_params
        self.w = np.zeros(p)
        self.losses_ = np.empty(n)
        self.grads_ = np.empty((n, p))
        prospect_init(self.spec_, X, y, self.w, self.losses_, self.grads_)
        self.table_ = BestResponse(self.losses_, self.caps_, problem.nu)
        self.rho_ = self.table_.q()
        self.gbar_ = self.grads_.T @ self.rho_
        self.steps_ = 0
        self.data_points = n
        self.grad_evals = n
        return self._logged()

    def advance(self, problem: Any, rng: np.random.Generator, until: int) -> None:
        steps = int(until) - self.data_points
        if steps <= 0:
            return
        X, y = row_data(problem)
        self.steps_ = int(prospect_steps(
            self.spec_, X, y, self.w, self.losses_, self.grads_, self.rho_, self.gbar_,
            self.table_.state, self.lr_, float(problem.mu), float(problem.radius),
            rng, steps, self.steps_))
        self.data_points += steps
        self.grad_evals += steps

    @property
    def q(self) -> np.ndarray:
        """``lambda = q(l)``, the best response to the loss table (a point of K)."""
        return self.table_.q()


@njit(cache=True, error_model="numpy")
def prospect_init(spec, X, y, w, losses, grads):  # pragma: no cover - compiled
    """The tables at ``w``: every row's loss and gradient."""
    z = np.empty(max(spec[2], 1))
    for i in range(X.shape[0]):
        losses[i] = row_loss_grad(spec, X, y, i, w, grads[i], z)


@njit(cache=True, error_model="numpy")
def prospect_steps(spec, X, y, w, losses, grads, rho, gbar, br, lr, mu, radius,
                   rng, steps, done):  # pragma: no cover - compiled
    """``steps`` steps of Algorithm 1 (class docstring); ``done`` steps so far
    (``gbar`` is recomputed from the tables every n steps). Returns the new
    count."""
    n, p = grads.shape
    g = np.empty(p)
    z = np.empty(max(spec[2], 1))
    shrink = 1.0 / (1.0 + lr * mu)
    for _ in range(steps):
        i = rng.integers(0, n)
        lam = br_weight(br, i)
        loss = row_loss_grad(spec, X, y, i, w, g, z)
        a = n * lam
        b = n * rho[i]
        for j in range(p):
            w[j] = (w[j] - lr * (a * g[j] - b * grads[i, j] + gbar[j])) * shrink
        project_ball_inplace(w, radius)
        br_update(br, i, loss, n)
        losses[i] = loss
        for j in range(p):
            gbar[j] += lam * g[j] - rho[i] * grads[i, j]
            grads[i, j] = g[j]
        rho[i] = lam
        done += 1
        if done % n == 0:
            for j in range(p):
                gbar[j] = 0.0
            for r in range(n):
                if rho[r] != 0.0:
                    for j in range(p):
                        gbar[j] += rho[r] * grads[r, j]
    return done


@harness.hookimpl
def register_solvers(register):
    register(Prospect)
