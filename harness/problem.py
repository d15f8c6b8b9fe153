"""The problem every solver solves: the paper's OPT, regularised and smoothed
as the DRO literature writes it.

    F(w) = max_{q in K} [ <L(w), q> - nu D(q || 1/n) ] + (mu / 2) ||w||^2,

over ``||w|| <= radius`` (``radius`` may be infinite when ``mu > 0``), with
``L(w)`` the model's per-row losses over its loss scale (``raw / scale``, never
clipped), and ``D`` the f-divergence of ``penalty``:

* ``chi2`` (the default): the chi-square shift cost ``D(q) = (n/2) ||q - 1/n||^2
  = (1/(2n)) sum_i (n q_i - 1)^2``;
* ``kl``: the Kullback-Leibler divergence ``D(q) = KL(q || 1/n) = sum_i q_i
  log(n q_i)`` (``0 log 0 = 0``).

``mu = nu = 0`` with a finite ball is the paper's problem ``min_w max_{p in K}
<L(w), p>`` (Section 2), the default; with ``nu = 0`` the penalty plays no part.

With ``nu > 0`` the inner maximum is attained, for ``chi2``, at the Euclidean
projection ``q = proj_K(1/n + L / (nu n))`` (complete the square: ``<l, q> -
(nu n/2) ||q - 1/n||^2 = -(nu n/2) ||q - (1/n + l/(nu n))||^2 + const``); for
``kl`` at the KL (Bregman) projection onto K of the weights ``exp(L / nu)``
(``<l, q> - nu KL(q || 1/n) = -nu KL(q || softmax(l/nu)) + const`` on the
simplex); with ``nu = 0`` at the set's linear maximisation oracle. The k-set
with ``k = n/2`` is the superquantile at level 0.5 of Mehta et al. (ICLR
2024). Derivations: docs/algorithms.md, "f-divergence penalties: chi-square
and KL".
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

#: the divergences ``D(q || 1/n)`` of the inner maximum (``problem.penalty``)
PENALTIES = ("chi2", "kl")
#: the method of the constraint set each penalty's inner maximiser calls
PENALTY_ORACLES = {"chi2": "euclidean_project", "kl": "project"}
_ORACLE_WORDS = {"chi2": "the Euclidean projection of 1/n + L/(nu n)",
                 "kl": "the KL projection of the weights exp(L/nu)"}

#: the problem's values (the config's ``problem`` block)
PROBLEM_PARAMS: dict[str, Param] = {
    "mu": Param(float, default=0.0, low=0.0, doc="l2 penalty (mu / 2) ||w||^2"),
    "mu_times_n": Param(float, low=0.0, nullable=True,
                        doc="mu given as mu * n (1: mu = 1/n, the DRO papers' l2_reg); "
                            "None: mu as given"),
    "nu": Param(float, default=0.0, low=0.0,
                doc="weight of the penalty nu D(q || 1/n) of the inner maximum"),
    "nu_times_n": Param(float, low=0.0, nullable=True,
                        doc="nu given as nu * n (the chi-square term written (nu'/2) "
                            "||q - 1/n||^2 has nu' = nu n); None: nu as given"),
    "penalty": Param(str, default="chi2", choices=PENALTIES,
                     doc="the divergence D: chi2 = (n/2) ||q - 1/n||^2, "
                         "kl = KL(q || 1/n) = sum_i q_i log(n q_i)"),
    "radius": Param(float, low=0.0, low_open=True, nullable=True,
                    doc="radius B of the ball W; None: the w-player's radius"),
    "ball": Param(bool, default=True, doc="false: no ball at all (needs mu > 0)"),
}


def problem_values(block: Any, n: int) -> dict[str, Any]:
    """The validated ``problem`` block of a config for ``n`` rows, ``mu`` resolved
    from ``mu_times_n`` and ``nu`` from ``nu_times_n`` when those are given."""
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
    if values["nu_times_n"] is not None:
        if values["nu"]:
            raise ConfigError(f"Set one of problem.nu and problem.nu_times_n, not both. Got "
                              f"nu={values['nu']!r} and nu_times_n={values['nu_times_n']!r}.")
        values["nu"] = values["nu_times_n"] / n
    return values


def kl_terms(q: np.ndarray) -> np.ndarray:
    """``q_i log(n q_i)`` per row (0 where ``q_i = 0``), ``n = q.size``: the terms of
    ``KL(q || 1/n)``."""
    q = np.asarray(q, dtype=np.float64)
    out = np.zeros(q.size)
    pos = q > 0.0
    out[pos] = q[pos] * np.log(q.size * q[pos])
    return out


def kl_divergence(q: np.ndarray) -> float:
    """``KL(q || 1/n) = sum_i q_i log(n q_i)`` (``inf`` if some ``q_i < 0``)."""
    q = np.asarray(q, dtype=np.float64)
    if np.any(q < 0.0):
        return math.inf
    return float(np.sum(kl_terms(q)))


@dataclass
class Problem:
    """``F`` over the data set ``X, y`` with a set-up model and constraint set,
    the penalty ``nu D(q || 1/n)`` of the divergence ``penalty`` (``PENALTIES``).

    With ``nu > 0`` the set must offer what the penalty's maximiser needs (chi2:
    ``euclidean_project``; kl: the KL projection ``project(weights, gamma,
    log_domain=True)``): ``ConfigError`` otherwise."""

    X: Any
    y: np.ndarray
    model: Any
    constraint: Any
    mu: float = 0.0
    nu: float = 0.0
    radius: float = math.inf
    penalty: str = "chi2"

    def __post_init__(self) -> None:
        if self.penalty not in PENALTIES:
            raise ConfigError(f"The 'penalty' parameter of the problem must be one of "
                              f"{list(PENALTIES)}. Got {self.penalty!r} instead.")
        if self.nu > 0.0:
            method = PENALTY_ORACLES[self.penalty]
            if not callable(getattr(self.constraint, method, None)):
                name = getattr(self.constraint, "name", type(self.constraint).__name__)
                raise ConfigError(
                    f"problem.penalty={self.penalty} with nu={self.nu!r} > 0 maximises over K "
                    f"by the set's {method}() ({_ORACLE_WORDS[self.penalty]}); the constraint "
                    f"set '{name}' has none. Use problem.nu=0 or a set that has it.")

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

    def divergence(self, q: np.ndarray) -> float:
        """``D(q || 1/n)`` of the penalty: chi2 ``(n/2) ||q - 1/n||^2``, kl ``sum_i
        q_i log(n q_i)`` (``0 log 0 = 0``; ``inf`` where some ``q_i < 0``)."""
        q = np.asarray(q, dtype=np.float64)
        n = q.size
        if self.penalty == "kl":
            return kl_divergence(q)
        shift = q - 1.0 / n
        return 0.5 * n * float(shift @ shift)

    def inner(self, losses: np.ndarray) -> tuple[float, np.ndarray]:
        """``max_{q in K} <losses, q> - nu D(q || 1/n)`` and its maximiser (module
        docstring): the set's LMO (``nu = 0``), its Euclidean projection of ``1/n +
        losses / (nu n)`` (chi2) or its KL projection of ``exp(losses / nu)``
        (kl), the log-weights shifted by their maximum (the projection does not
        change when every weight is multiplied by one factor)."""
        if self.nu == 0.0:
            return self.constraint.lmo(losses)
        losses = np.asarray(losses, dtype=np.float64)
        n = losses.size
        if self.penalty == "kl":
            log_w = losses / self.nu
            log_w = log_w - float(np.max(log_w))
            q = self.constraint.project(log_w, 0.0, log_domain=True)
            return float(losses @ q) - self.nu * self.divergence(q), q
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

    def describe(self) -> dict[str, float | str]:
        return {"mu": self.mu, "nu": self.nu, "radius": self.radius, "penalty": self.penalty}
