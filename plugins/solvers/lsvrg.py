"""LSVRG (Mehta, Roulet, Pillutla, Liu and Harchaoui, "Stochastic Optimization
for Spectral Risk Measures", AISTATS 2023, Algorithm "LSVRG"): SVRG for a
spectral risk, with the spectral weights of the sorted losses frozen at an
anchor refreshed every n steps (smoothed when ``nu > 0``, as in the authors'
code for the problem ``F``).

Its kernels are the template ``plugins.solvers.lsvrg_kernels``, run on any
model through the model's row roles (``plugins.solvers.row_solver``)."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

import harness
from plugins.solvers.row_solver import RowSolver


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
    template: ClassVar[str] = "plugins.solvers.lsvrg_kernels"

    def setup(self, problem: Any, budget: int) -> dict[str, Any]:
        X, y = self._prepare(problem, budget)
        kernels, ms = self._kernels(problem)
        n, p = self.n_, problem.n_params
        self.w = np.zeros(p)
        self.anchor_ = np.zeros(p)
        self.anchor_q_ = np.zeros(n)
        self.anchor_grad_ = np.zeros(p)
        # counters: data points, gradients formed, steps since the anchor, steps
        self.counts_ = np.zeros(4, dtype=np.int64)
        kernels.lsvrg_anchor(ms, X, y, self.w, self.anchor_, self.anchor_q_,
                             self.anchor_grad_, self.caps_, self.nu_, self.counts_)
        self._sync()
        return {**self._logged(), "epoch_length": n}

    def _steps(self, kernels, ms, X, y, problem: Any, rng, until: int) -> None:
        kernels.lsvrg_steps(ms, X, y, self.w, self.anchor_, self.anchor_q_, self.anchor_grad_,
                            self.caps_, self.nu_, self.lr_, float(problem.mu),
                            float(problem.radius), rng, until, self.counts_)

    @property
    def q(self) -> np.ndarray:
        """The anchor's best response ``q~`` (a point of K)."""
        return self.anchor_q_.copy()


@harness.hookimpl
def register_solvers(register):
    register(LSVRG)
