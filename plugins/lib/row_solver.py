"""What the built-in row solvers (``prospect``, ``lsvrg``, ``sgd``) share: the
inputs of their numba kernels, the default constant step and the counters."""

from __future__ import annotations

from typing import Any

import numpy as np

from harness import Param
from plugins.lib.spectral import default_step, row_data, row_smoothness, solver_inputs

#: the ``lr`` parameter of every row solver
LR_PARAM = Param(float, low=0.0, low_open=True, nullable=True,
                 doc="constant step; None: 1 / (n max_i c_i L + mu), L the rows' smoothness")


class RowSolver:
    """Base of the row solvers: ``_prepare`` reads the problem once in ``setup``;
    ``counts_`` (data points, gradient evaluations, ...) is written by the kernels
    and copied to ``data_points`` and ``grad_evals`` by ``_sync``."""

    name: str
    lr: float | None

    def _prepare(self, problem: Any) -> tuple[np.ndarray, np.ndarray]:
        """The model scalars, row caps, ``n``, ``nu``, the rows' smoothness and the
        constant step (the default ``1 / (n max_i c_i L + mu)`` unless ``lr`` is
        given); returns the kernels' ``X`` and ``y``."""
        self.spec_, self.caps_ = solver_inputs(self.name, problem)
        X, y = row_data(problem)
        self.n_ = X.shape[0]
        self.nu_ = float(problem.nu)
        self.smoothness_ = row_smoothness(problem.model, X)
        self.lr_default_ = default_step(self.n_, self.caps_, self.smoothness_, problem.mu)
        self.lr_ = self.lr_default_ if self.lr is None else float(self.lr)
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
