"""The chi-square ball ``K = {q in simplex : (1/(2n)) sum_i (n q_i - 1)^2 <=
radius}``: the distributions within chi-square divergence ``radius`` of the
uniform one, i.e. ``||q - u||^2 <= r^2`` with ``u = 1/n`` and ``r^2 = 2 radius /
n`` (the uncertainty set of Mehta, Diakonikolas and Harchaoui, "Drago",
NeurIPS 2024, Section 5). ``max_{q in K} <l, q>`` is the chi-square DRO
objective; ``radius >= (n - 1)/2`` makes the ball inactive (K is the
simplex: the max loss).

The numerics (the oracle, the Euclidean and the KL projections, each a point
``proj_simplex(t v)`` or its entropic analogue for one scalar found by a 1-D
root) are in ``plugins.lib.chi2_ball``; the derivations in docs/sets.md,
"The chi-square ball".
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

import harness
from harness import ConfigError, Draw, Param
from plugins.lib.capped import check_gamma, log_weights
from plugins.lib.chi2_ball import (
    chi2_ball_euclidean,
    chi2_ball_kl_projection,
    chi2_ball_lmo,
    least_rows,
    radius_sq,
)

#: the ``sampler`` of a set without one: ``sample`` raises, and the players that
#: draw from the set refuse it (``plugins.lib.capped.needs_draws``)
NO_SAMPLER = "none"


class Chi2Ball:
    """The chi-square ball ``{q in simplex : (1/(2n)) sum_i (n q_i - 1)^2 <=
    radius}`` around the uniform distribution (chi-square DRO).

    ``lmo`` and ``euclidean_project`` are ``proj_simplex(t v)`` for the ``t``
    that meets the sphere (a sort and an exact root), ``project`` the KL
    projection ``q_i = W(s w_i e^-eta) / s`` (Lambert's W, Newton's method on
    one scalar), ``contains`` checks the simplex and the ball,
    ``support_function`` is the cvxpy form of ``max_{q in K} <v, q>`` the exact
    optimum uses.

    ``k``: the fewest rows whose uniform distribution lies in K, ``ceil(n / (1 +
    2 radius))`` (the k-set's vertices ``1_I / k`` have divergence ``(n/k - 1)
    / 2``); it sizes the task metrics over the largest losses and the uniform
    player's batch. An extreme point of K weights no fixed number of rows and
    K has no row caps: ``row_caps()`` is None and there is no sampler
    (``sampler = "none"``), so the bandit p-players refuse the set; ``ftrl``,
    ``uniform`` and the solvers run on it.
    """

    name: ClassVar[str] = "chi2_ball"
    params: ClassVar[dict[str, Param]] = {
        "n": Param(int, low=1, doc="number of rows (set by the data set)"),
        "radius": Param(float, default=1.0, low=0.0, low_open=True,
                        doc="chi-square divergence from 1/n: (1/(2n)) sum (n q_i - 1)^2 "
                            "<= radius"),
    }

    def __init__(self, n: int, radius: float = 1.0) -> None:
        self.n = n
        self.radius = radius
        #: ``r^2``: the ball is ``||q - 1/n||^2 <= r_sq_``
        self.r_sq_ = radius_sq(n, radius)
        self.k = least_rows(n, radius)
        self.sampler = NO_SAMPLER

    def bind(self, dataset: Any) -> dict[str, int]:
        """The k derived from n and the radius (recorded as ``constraint.k``)."""
        return {"k": self.k}

    def label(self) -> str:
        """"chi2 ball radius=<radius>" (the report's name of K)."""
        return f"chi2 ball radius={self.radius:g}"

    def subset(self, m: int) -> Chi2Ball:
        """The ball of the same radius over ``m`` rows (a mini-batch's set)."""
        if not isinstance(m, int | np.integer) or m < 1:
            raise ValueError(f"m must be an int >= 1. Got {m!r} instead.")
        return Chi2Ball(int(m), self.radius)

    def max_weight(self) -> float:
        """``max_{q in K} max_i q_i = min(1, (1 + sqrt(2 radius (n - 1))) / n)``: one
        row at ``a``, the rest at ``(1 - a)/(n - 1)``, whose distance to ``1/n`` is
        ``(a - 1/n) sqrt(n/(n - 1))`` (the row solvers' ``sigma_max``)."""
        if self.n == 1:
            return 1.0
        return min(1.0, (1.0 + float(np.sqrt(2.0 * self.radius * (self.n - 1)))) / self.n)

    def row_caps(self) -> None:
        """None: K is not ``{0 <= q_i <= c_i, sum q = 1}``."""
        return None

    def lmo(self, losses: np.ndarray) -> tuple[float, np.ndarray]:
        """``max_{q in K} <losses, q>`` and its argmax ``proj_simplex(t losses)`` on
        the sphere, or the uniform distribution on the tied largest losses when
        it is inside (``plugins.lib.chi2_ball.chi2_ball_lmo``)."""
        losses = np.asarray(losses, dtype=np.float64)
        q = chi2_ball_lmo(losses, self.r_sq_)
        return float(np.dot(losses, q)), q

    def euclidean_project(self, v: np.ndarray) -> np.ndarray:
        """``argmin_{q in K} ||q - v||``: ``proj_simplex(v / (1 + lam))`` with ``lam
        >= 0`` putting it on the sphere, or 0 when ``proj_simplex(v)`` is inside.
        ``euclidean_project(1/n + l / (nu n))`` is the smoothed best response
        ``argmax_{q in K} <l, q> - nu (n/2) ||q - 1/n||^2``."""
        return chi2_ball_euclidean(v, self.r_sq_)

    def project(self, weights, gamma=0.0, *, log_domain=False, return_capped=False):
        """The KL projection of positive weights onto the ball of radius ``r / (1 -
        gamma)``, then mixed with the uniform distribution at rate ``gamma``:
        ``||(1 - gamma) q + gamma u - u|| = (1 - gamma) ||q - u||``, so the mix lies
        in K exactly when ``q`` lies in the wider ball. ``project(l / nu, 0.0,
        log_domain=True)`` is the KL-penalised best response ``argmax_{q in K} <l,
        q> - nu KL(q || 1/n)``. No row is capped: the mask of ``return_capped`` is
        all False."""
        check_gamma(gamma)
        log_w = log_weights(weights, log_domain)
        q = chi2_ball_kl_projection(log_w, self.r_sq_ / (1.0 - gamma) ** 2)
        p = q if gamma == 0.0 else (1.0 - gamma) * q + gamma / self.n
        return (p, np.zeros(self.n, dtype=bool)) if return_capped else p

    def sample(self, p: np.ndarray, rng: np.random.Generator) -> Draw:
        """No sampler: ConfigError."""
        raise ConfigError(
            f"The constraint set 'chi2_ball' ({self.label()}) has no sampler: its extreme "
            "points are not sets of k rows of weight 1/k, so only full-information players "
            "(ftrl, uniform) and the solvers run on it.")

    def compiled(self) -> None:
        """None: no compiled form (the game plays on it in Python)."""
        return None

    def contains(self, p: np.ndarray, atol: float = 1e-9) -> bool:
        """``p >= 0``, ``sum p = 1`` and ``||p - 1/n|| <= r``, each within ``atol``."""
        p = np.asarray(p, dtype=np.float64)
        if p.shape != (self.n,) or not np.all(np.isfinite(p)):
            return False
        if abs(float(np.sum(p)) - 1.0) > atol or float(np.min(p)) < -atol:
            return False
        return float(np.linalg.norm(p - 1.0 / self.n)) <= np.sqrt(self.r_sq_) + atol

    def support_function(self, cp: Any, v: Any) -> Any:
        """``sigma_K(v) = max_{q in K} <v, q>`` as a cvxpy expression, convex in
        ``v`` (an expression or variable of n entries; ``cp`` the cvxpy module).
        By Lagrange duality (multipliers ``s >= 0`` of ``q >= 0`` and ``tau`` of
        ``sum q = 1``; strong since ``u`` is inside the ball), ``sigma_K(v) =
        min_{tau, s >= 0} <v + s, u> + r ||v + s - tau 1||``: the expression holds
        the new variables ``s`` and ``tau`` and equals ``sigma_K(v)`` where it is
        minimised (in an objective, or on the small side of a constraint)."""
        s = cp.Variable(self.n, nonneg=True)
        tau = cp.Variable()
        shifted = v + s
        return cp.sum(shifted) / self.n + np.sqrt(self.r_sq_) * cp.norm(shifted - tau, 2)


@harness.hookimpl
def register_constraint_sets(register):
    register(Chi2Ball)
