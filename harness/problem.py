"""The problem every solver solves: the paper's OPT, regularised and smoothed
as the DRO literature writes it.

    F(w) = max_{q in K} [ <L(w), q> - (nu n / 2) ||q - 1/n||^2 ] + (mu / 2) ||w||^2,

over ``||w|| <= radius`` (``radius`` may be infinite when ``mu > 0``), with
``L(w)`` the model's per-row losses over its loss scale (``raw / scale``, never
clipped). ``mu = nu = 0`` with a finite ball is the paper's problem
``min_w max_{p in K} <L(w), p>`` (Section 2), the default.

With ``nu > 0`` the inner maximum is attained at the Euclidean projection
``q = proj_K(1/n + L / (nu n))`` (complete the square: ``<l, q> - (nu n/2)
||q - 1/n||^2 = -(nu n/2) ||q - (1/n + l/(nu n))||^2 + const``); with
``nu = 0`` at the set's linear maximisation oracle. The k-set with ``k = n/2``
is the superquantile at level 0.5 of Mehta et al. (ICLR 2024).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from harness import stream
from harness.gap import project_ball
from harness.params import ConfigError, Param, validate

#: the problem's values (the config's ``problem`` block)
PROBLEM_PARAMS: dict[str, Param] = {
    "mu": Param(float, default=0.0, low=0.0, doc="l2 penalty (mu / 2) ||w||^2"),
    "mu_times_n": Param(float, low=0.0, nullable=True,
                        doc="mu given as mu * n (1: mu = 1/n, the DRO papers' l2_reg); "
                            "None: mu as given"),
    "nu": Param(float, default=0.0, low=0.0,
                doc="shift cost (nu n / 2) ||q - 1/n||^2 of the inner maximum"),
    "radius": Param(float, low=0.0, low_open=True, nullable=True,
                    doc="radius B of the ball W; None: the w-player's radius"),
    "ball": Param(bool, default=True, doc="false: no ball at all (needs mu > 0)"),
}


def problem_values(block: Any, n: int) -> dict[str, Any]:
    """The validated ``problem`` block of a config for ``n`` rows, ``mu`` resolved
    from ``mu_times_n`` when that is given."""
    block = block or {}
    if not isinstance(block, Mapping):
        raise ConfigError(f"The 'problem' config key must be a mapping. Got {block!r} "
                          "instead.")
    values = validate("the problem", PROBLEM_PARAMS, dict(block))
    if values["mu_times_n"] is not None:
        if values["mu"]:
            raise ConfigError(f"Set one of problem.mu and problem.mu_times_n, not both. Got "
                              f"mu={values['mu']!r} and mu_times_n={values['mu_times_n']!r}.")
        values["mu"] = values["mu_times_n"] / n
    return values


@dataclass
class Problem:
    """``F`` over the data set ``X, y`` with a set-up model and constraint set."""

    X: Any
    y: np.ndarray
    model: Any
    constraint: Any
    mu: float = 0.0
    nu: float = 0.0
    radius: float = math.inf

    @property
    def n(self) -> int:
        return int(self.X.shape[0])

    @property
    def n_params(self) -> int:
        return int(self.model.n_params)

    @property
    def scale(self) -> float:
        """The model's loss scale: ``L(w) = raw losses / scale``."""
        return float(self.model.scale_)

    def losses(self, w: np.ndarray) -> np.ndarray:
        """``L(w)`` over every row (streamed; never clipped)."""
        return stream.raw_losses(self.model, w, self.X, self.y) / self.scale

    def inner(self, losses: np.ndarray) -> tuple[float, np.ndarray]:
        """``max_{q in K} <losses, q> - (nu n / 2) ||q - 1/n||^2`` and its maximiser."""
        if self.nu == 0.0:
            return self.constraint.lmo(losses)
        n = losses.size
        q = self.constraint.euclidean_project(1.0 / n + losses / (self.nu * n))
        shift = q - 1.0 / n
        return float(losses @ q - 0.5 * self.nu * n * (shift @ shift)), q

    def regulariser(self, w: np.ndarray) -> float:
        return 0.5 * self.mu * float(w @ w)

    def value(self, w: np.ndarray, losses: np.ndarray | None = None) -> float:
        """``F(w)`` (``losses``: ``L(w)`` if already computed)."""
        value, _ = self.inner(self.losses(w) if losses is None else losses)
        return value + self.regulariser(w)

    def value_and_grad(self, w: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
        """``F(w)``, a (sub)gradient ``sum_i q_i grad L_i(w) + mu w`` at the inner
        maximiser ``q`` (the gradient when ``nu > 0`` and the losses are smooth),
        and ``q``: one pass over the data for the losses, one for the gradient."""
        value, q = self.inner(self.losses(w))
        rows = np.flatnonzero(q)
        _, grad = stream.weighted_value_grad(self.model, self.X, self.y, rows, q[rows])(w)
        return value + self.regulariser(w), grad + self.mu * w, q

    def project(self, w: np.ndarray) -> np.ndarray:
        """``w`` projected onto the ball (itself when the radius is infinite)."""
        return w if math.isinf(self.radius) else project_ball(w, self.radius)

    def describe(self) -> dict[str, float]:
        return {"mu": self.mu, "nu": self.nu, "radius": self.radius}
