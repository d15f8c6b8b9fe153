"""LSVRG (Mehta, Roulet, Pillutla, Liu and Harchaoui, "Stochastic Optimization
for Spectral Risk Measures", AISTATS 2023, Algorithm "LSVRG"): SVRG for a
spectral risk, with the spectral weights of the sorted losses frozen at an
anchor refreshed every n steps (smoothed when ``nu > 0``, as in the authors'
code for the problem ``F``)."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
from numba import njit

import harness
from plugins.lib.vecmath import project_ball_inplace
from plugins.solvers.row_solver import RowSolver
from plugins.solvers.spectral import (
    best_response_dense,
    row_data,
    row_grad,
    row_loss,
    row_loss_grad,
    row_scratch,
)


class LSVRG(RowSolver):
    """LSVRG of Mehta et al. (2023) on ``F`` (``harness.problem``).

    Every n steps, at the anchor ``w~``: all losses, the spectral weights
    ``sigma`` of the sorted losses (the best response ``q~ = q(l(w~))``:
    smoothed when ``nu > 0``, the LMO when ``nu = 0``) and the full weighted
    gradient ``g~ = sum_j q~_j grad l_j(w~)``. Each step draws a rank
    uniformly; the row at that rank of the anchor's order gives ``g`` at ``w``
    and ``g~_j`` at ``w~``, and

        w <- w - lr (n sigma_j (g - g~_j) + g~ + mu w).

    A uniform rank of the anchor's order is a uniform row, and ``sigma`` at
    that rank is ``q~`` of that row, so the kernel draws the row and reads
    ``q~_j`` without sorting (the anchor's O(n log n) is the projection's).
    With a finite radius the iterate is then projected onto the ball (the
    projected variant; the analysis is for the unconstrained problem).

    Default step ``1 / (c n sigma_max L + mu)``, ``sigma_max = max_i c_i``,
    ``L`` the rows' smoothness: the analysis of LSVRG takes constant steps of
    order ``1 / (n sigma_max L)`` (each term ``n sigma_j (grad l_j(w) - grad
    l_j(w~))`` of the estimator is ``n sigma_max L``-Lipschitz in ``w``), as
    does Prospect's (Mehta et al. ICLR 2024); ``c = 1``, see
    ``plugins.solvers.prospect.Prospect``. On ``experiment=prospect`` (640,000 data
    points) the tuning protocol's multiplier is between 3^-3 and 3^1 on the
    five sets, and within 1e-10 of the best objective at 1 except on kin8nm
    (6e-10 above); after 20 passes it is 3^-4 (the grid's edge) on kin8nm and
    3^-2 on power, the two sets with n near 1e4, where the default is too
    large early on (the authors' tuned steps there, 1e-4 and 3e-3, against
    0.028 and 0.029). With ``nu = 0`` on Boston at k = 20 it is 27
    (``plugins.solvers.row_solver`` says why the default stays). Measured by
    ``tools/step_table.py``.

    A row with ``q~_j = 0`` adds nothing to ``g~`` and its stochastic term
    ``n sigma_j (g - g~_j)`` is zero, so neither is formed: the anchor forms
    the gradients of the rows with ``q~_j != 0`` only, and a step that draws
    a row with ``q~_j = 0`` evaluates nothing and moves along ``-(g~ + mu
    w)`` (the same iterate, bit for bit, as forming the term and multiplying
    it by zero). So does the first step after an anchor, where ``w = w~``
    and the term is ``g - g~_j = 0`` exactly.

    Counters (``docs/tracking.md``, Counters): each anchor evaluates every
    row's loss at ``w~`` (n data points) and forms ``|{j: q~_j != 0}|``
    gradients (the first anchor is computed in ``setup``, at ``w_0``); a step
    whose row has ``q~_i != 0`` evaluates that row at two points, ``w`` and
    ``w~`` (2 data points, 2 gradients), any other step (and the first after
    an anchor) nothing (0 and 0).
    ``counts_``: data points, gradients, steps since the anchor, steps.
    """

    name: ClassVar[str] = "lsvrg"
    def setup(self, problem: Any, budget: int) -> dict[str, Any]:
        X, y = self._prepare(problem, budget)
        n, p = self.n_, problem.n_params
        self.w = np.zeros(p)
        self.anchor_ = np.zeros(p)
        self.anchor_q_ = np.zeros(n)
        self.anchor_grad_ = np.zeros(p)
        # counters: data points, gradients formed, steps since the anchor, steps
        self.counts_ = np.zeros(4, dtype=np.int64)
        lsvrg_anchor(self.spec_, X, y, self.w, self.anchor_, self.anchor_q_,
                     self.anchor_grad_, self.caps_, self.nu_, self.counts_)
        self._sync()
        return {**self._logged(), "epoch_length": n}

    def advance(self, problem: Any, rng: np.random.Generator, until: int) -> None:
        if until <= self.data_points:
            return
        X, y = row_data(problem)
        lsvrg_steps(self.spec_, X, y, self.w, self.anchor_, self.anchor_q_, self.anchor_grad_,
                    self.caps_, self.nu_, self.lr_, float(problem.mu), float(problem.radius),
                    rng, int(until), self.counts_)
        self._sync()

    @property
    def q(self) -> np.ndarray:
        """The anchor's best response ``q~`` (a point of K)."""
        return self.anchor_q_.copy()


@njit(cache=True, error_model="numpy")
def lsvrg_anchor(spec, X, y, w, anchor, q, grad, caps, nu, counts):  # pragma: no cover - compiled
    """The anchor at ``w``: ``q~ = q(l(w))`` and ``g~ = sum_j q~_j grad l_j(w)``:
    every row's loss (n data points), then the gradients of the rows with
    ``q~_j != 0`` from what their loss evaluation left (no other is formed)."""
    n = X.shape[0]
    p = w.size
    Z = np.empty((n, row_scratch(spec)))
    g = np.empty(p)
    losses = np.empty(n)
    for j in range(p):
        anchor[j] = w[j]
        grad[j] = 0.0
    for i in range(n):
        losses[i] = row_loss(spec, X, y, i, w, Z[i])
    q[:] = best_response_dense(losses, caps, nu)
    formed = 0
    for i in range(n):
        if q[i] != 0.0:  # a zero weight adds nothing: its gradient is not formed
            row_grad(spec, X, y, i, Z[i], g)
            formed += 1
            for j in range(p):
                grad[j] += q[i] * g[j]
    counts[0] += n
    counts[1] += formed
    counts[2] = 0


@njit(cache=True, error_model="numpy")
def lsvrg_steps(spec, X, y, w, anchor, q, grad, caps, nu, lr, mu, radius, rng, until,
                counts):  # pragma: no cover - compiled
    """Steps (and anchors every n steps) until ``counts[0] >= until``. A step
    whose row has ``q~_i = 0``, and the first step after an anchor (``w =
    w~``, so ``g = g~_i`` bit for bit), evaluate nothing: their stochastic
    term is zero."""
    n = X.shape[0]
    p = w.size
    g = np.empty(p)
    ga = np.empty(p)
    z = np.empty(row_scratch(spec))
    while counts[0] < until:
        if counts[2] == n:
            lsvrg_anchor(spec, X, y, w, anchor, q, grad, caps, nu, counts)
            continue
        i = rng.integers(0, n)
        a = n * q[i]
        if a != 0.0 and counts[2] != 0:  # (the first step after an anchor has w = w~)
            row_loss_grad(spec, X, y, i, w, g, z)
            row_loss_grad(spec, X, y, i, anchor, ga, z)
            for j in range(p):
                w[j] -= lr * (a * (g[j] - ga[j]) + grad[j] + mu * w[j])
            counts[0] += 2
            counts[1] += 2
        else:
            for j in range(p):
                w[j] -= lr * (grad[j] + mu * w[j])
        project_ball_inplace(w, radius)
        counts[2] += 1
        counts[3] += 1


@harness.hookimpl
def register_solvers(register):
    register(LSVRG)
