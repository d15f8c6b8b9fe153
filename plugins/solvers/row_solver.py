"""What the built-in row solvers (``prospect``, ``lsvrg``, ``sgd``) share: the
inputs of their numba kernels, the default constant step and the counters.

**The default step.** With ``nu > 0`` (or no ball) the step is the smooth one,
``1 / (n c_max L + mu)`` (``plugins.solvers.spectral.default_step``). With ``nu =
0`` in a ball, ``F`` is not smooth (its best response jumps as the order of
the losses changes) and a constant step of that size does not converge: on
breast cancer at k = 20 and radius 1 it ends above ``F(0)``. There the
default is the smaller of it and the subgradient method's constant step for
the budget, ``B / (n c_max G sqrt(T))`` (``G`` the rows' gradient bound over
the ball, ``model.grad_bound``; ``n c_max G`` bounds the estimators' norm;
``T`` the steps the budget allows), whose error after T steps is
``O(B n c_max G / sqrt(T))`` (e.g. Nesterov 2004, Theorem 3.2.2). ``lr_scale``
multiplies the default (``plugins.lib.steps``); ``lr_default`` is logged
unscaled beside the ``lr`` in use. ``lr_smooth_`` keeps the smooth step before
that cap (``sgd``'s schedules start from it).

On the paper's problem on Boston (k = 20, ``nu = mu = 0``, radius 1) the tuning
protocol's multiplier of this default is 27 for Prospect and LSVRG
(``tools/step_table.py``): ``G`` is the worst case over the ball of every
row's gradient and ``n c_max G`` the worst case of the estimator, where the
rows that carry weight near the optimum have far smaller gradients. No
theory of these methods at ``nu = 0`` gives a larger step, so the default
stays the subgradient method's.

**Counters** (``docs/tracking.md``, Counters): ``counts_[0]`` data points
(rows evaluated at a point, once per step), ``counts_[1]`` per-row gradients
formed; the kernels write them, ``_sync`` copies them to ``data_points`` and
``grad_evals``.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np

from harness import Param
from plugins.lib.steps import scale_param, scaled_step
from plugins.solvers.spectral import default_step, row_data, row_smoothness, solver_inputs

#: the ``lr`` parameter of every row solver
LR_PARAM = Param(float, low=0.0, low_open=True, nullable=True,
                 doc="constant step; None: 1 / (n max_i c_i L + mu), L the rows' smoothness "
                     "(nu = 0 in a ball: at most B / (n max_i c_i G sqrt(steps)))")
#: the ``lr_scale`` parameter of every row solver (``plugins.lib.steps``)
LR_SCALE_PARAM = scale_param("lr")


class RowSolver:
    """Base of the row solvers: ``_prepare`` reads the problem once in ``setup``;
    ``counts_`` (data points, gradients formed, ...) is written by the kernels
    and copied to ``data_points`` and ``grad_evals`` by ``_sync``."""

    name: str
    #: the parameters of a solver with one constant step (``sgd`` adds its own)
    params: ClassVar[dict[str, Param]] = {"lr": LR_PARAM, "lr_scale": LR_SCALE_PARAM}

    def __init__(self, lr: float | None = None, lr_scale: float = 1.0) -> None:
        self.lr = lr
        self.lr_scale = lr_scale
    lr_scale: float = 1.0

    def _prepare(self, problem: Any, steps: int) -> tuple[np.ndarray, np.ndarray]:
        """The model scalars, row caps, ``n``, ``nu``, the rows' smoothness and the
        constant step (the default, module docstring, for ``steps`` steps, times
        ``lr_scale``, unless ``lr`` is given); returns the kernels' ``X`` and ``y``."""
        self.spec_, self.caps_ = solver_inputs(self.name, problem)
        X, y = row_data(problem)
        self.n_ = X.shape[0]
        self.nu_ = float(problem.nu)
        self.smoothness_ = row_smoothness(problem.model, X)
        self.lr_smooth_ = default_step(self.n_, self.caps_, self.smoothness_, problem.mu)
        self.lr_default_ = self.lr_smooth_
        radius, grad_bound = float(problem.radius), float(problem.model.grad_bound)
        if self.nu_ == 0.0 and math.isfinite(radius) and math.isfinite(grad_bound):
            spread = self.n_ * float(np.max(self.caps_)) * grad_bound
            subgradient = radius / (spread * math.sqrt(max(steps, 1)))
            self.lr_default_ = min(self.lr_default_, subgradient)
        self.lr_ = scaled_step(self.name, "lr", self.lr, self.lr_scale, self.lr_default_)
        return X, y

    def _logged(self) -> dict[str, Any]:
        return {"lr": self.lr_, "lr_default": self.lr_default_, "smoothness": self.smoothness_,
                "sigma_max": float(np.max(self.caps_))}

    def _sync(self) -> None:
        self.data_points = int(self.counts_[0])
        self.grad_evals = int(self.counts_[1])

    @property
    def passes(self) -> float:
        return self.data_points / self.n_
