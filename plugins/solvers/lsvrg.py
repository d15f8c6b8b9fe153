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

    LSVRG (Mehta et al., AISTATS 2023): every n steps an anchor ``w~`` with its
    best response ``q~`` and full weighted gradient ``g~``; each step one
    uniformly drawn row, ``w <- w - lr (n sigma_j (g - g~_j) + g~ + mu w)``, then,
    with a finite radius, a projection onto the ball. The anchor's best
    response is the set's dense one (``best_response_dense``: row caps or a
    spectrum). Default step ``1 / (c n sigma_max L + mu)``, ``sigma_max`` the
    largest cap or spectrum entry, ``c = 1`` (as Prospect's).
    ``counts_``: data points, gradients, steps since the anchor, steps.
    Derivation: docs/algorithms.md, "LSVRG: the step, its default and its
    counters".
    """

    name: ClassVar[str] = "lsvrg"
    #: linear convergence on a smooth, strongly convex problem: the contract
    #: suite's model check asks this accuracy of it (``harness.protocols.Solver``)
    contract_accuracy: ClassVar[float] = 1e-8
    template: ClassVar[str] = "plugins.solvers.lsvrg_kernels"
    #: the saved state's version (``harness.state``): 1, the set's form
    #: (``SetForm``) in place of the row caps
    state_version: ClassVar[int] = 1

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
                             self.anchor_grad_, self.form_, self.nu_, self.counts_)
        self._sync()
        return {**self._logged(), "epoch_length": n}

    def _steps(self, kernels, ms, X, y, problem: Any, rng, until: int) -> None:
        kernels.lsvrg_steps(ms, X, y, self.w, self.anchor_, self.anchor_q_, self.anchor_grad_,
                            self.form_, self.nu_, self.lr_, float(problem.mu),
                            float(problem.radius), rng, until, self.counts_)

    @property
    def q(self) -> np.ndarray:
        """The anchor's best response ``q~`` (a point of K)."""
        return self.anchor_q_.copy()


@harness.hookimpl
def register_solvers(register):
    register(LSVRG)
