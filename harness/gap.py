"""The certified dual gap (paper, eq. (Dual Gap)).

``gap(w_bar, a_bar) = max_{p in K} <L(w_bar), p> - min_{w in W} <L(w), a_bar>``.
The max term is exact (the constraint set's linear maximisation oracle). The
min term is a convex problem over the l2-ball ``W = {||w|| <= B}``; it is
solved approximately and replaced by a *provable lower bound*: for convex
``F`` and any ``v``,

    min_{||w|| <= B} F(w) >= F(v) + min_{||u|| <= B} <grad F(v), u - v>
                           = F(v) - <grad F(v), v> - B ||grad F(v)||,

(the Frank-Wolfe / duality bound). So a loose inner solve can only overstate
the gap, never understate it.

With an l2 penalty, ``h = F + (mu/2) ||.||^2`` is ``mu``-strongly convex and
``min h >= h(v) - ||grad h(v)||^2 / (2 mu)`` at any ``v`` (over a ball: the
minimum of the quadratic minorant there), which also certifies an unbounded
minimum (``certified_dual``; ``harness.dual`` applies it to ``harness.problem``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

ValueGrad = Callable[[np.ndarray], tuple[float, np.ndarray]]


def ball_lower_bound(value: float, grad: np.ndarray, w: np.ndarray, radius: float) -> float:
    """``F(w) - <grad, w> - radius * ||grad||``: a lower bound on ``min_{||u||<=radius} F``."""
    return value - float(grad @ w) - radius * math.sqrt(float(grad @ grad))


def project_ball(w: np.ndarray, radius: float) -> np.ndarray:
    norm = math.sqrt(float(w @ w))
    return w * (radius / norm) if norm > radius else w


@dataclass
class InnerSolution:
    """Result of ``certified_min``: ``lower <= min F <= upper``, attained near ``w``."""

    lower: float
    upper: float
    w: np.ndarray
    iterations: int
    lipschitz: float


def certified_min(
    value_grad: ValueGrad,
    w0: np.ndarray,
    radius: float,
    *,
    lipschitz: float = 1.0,
    abs_tol: float = 1e-8,
    rel_tol: float = 1e-6,
    max_iter: int = 3000,
) -> InnerSolution:
    """Minimise a smooth convex ``F`` over the l2-ball by projected accelerated
    gradient (FISTA with backtracking, Beck and Teboulle 2009), keeping the best
    Frank-Wolfe lower bound seen at any evaluated point.

    Stops when ``upper - lower <= max(abs_tol, rel_tol * |upper|)`` or after
    ``max_iter`` iterations; the lower bound is valid either way.
    """
    def bound(f: float, g: np.ndarray, x: np.ndarray) -> float:
        return ball_lower_bound(f, g, x, radius)

    return _fista(value_grad, w0, radius, bound, lipschitz, abs_tol, rel_tol, max_iter)


def _fista(value_grad: ValueGrad, w0: np.ndarray, radius: float,
           bound: Callable[[float, np.ndarray, np.ndarray], float], lipschitz: float,
           abs_tol: float, rel_tol: float, max_iter: int) -> InnerSolution:
    """The loop of ``certified_min`` with the lower bound ``bound(F(v), grad F(v), v)``
    taken at every evaluated point (a radius of ``inf`` leaves ``w`` unprojected)."""
    x = project_ball(np.asarray(w0, dtype=np.float64), radius)
    f_x, g_x = _finite(value_grad(x), x)
    best_w, upper = x, f_x
    lower = bound(f_x, g_x, x)
    z, t, L = x, 1.0, lipschitz
    f_z, g_z = f_x, g_x
    it = 0
    for it in range(1, max_iter + 1):  # noqa: B007 - reported
        while True:  # backtracking on the quadratic upper model at z
            x_new = project_ball(z - g_z / L, radius)
            f_new, g_new = _finite(value_grad(x_new), x_new)
            d = x_new - z
            if f_new <= f_z + float(g_z @ d) + 0.5 * L * float(d @ d) + 1e-15:
                break
            L *= 2.0
            if L > _MAX_LIPSCHITZ:
                raise FloatingPointError(
                    f"the inner solve's backtracking passed L = {_MAX_LIPSCHITZ:g} (the "
                    "objective is not smooth at this scale)")
        lower = max(lower, bound(f_new, g_new, x_new))
        if f_new < upper:
            best_w, upper = x_new, f_new
        if upper - lower <= max(abs_tol, rel_tol * abs(upper)):
            break
        if f_new > f_x:  # restart momentum when it stops helping (O'Donoghue and Candes)
            t = 1.0
        t_new = 0.5 * (1.0 + math.sqrt(1.0 + 4.0 * t * t))
        z = x_new + ((t - 1.0) / t_new) * (x_new - x)
        x, f_x, t = x_new, f_new, t_new
        f_z, g_z = _finite(value_grad(z), z)
        lower = max(lower, bound(f_z, g_z, z))
        L *= 0.9  # let the step grow again
    return InnerSolution(lower, upper, best_w, it, L)


def strongly_convex_lower_bound(value: float, grad: np.ndarray, w: np.ndarray, mu: float,
                                radius: float = math.inf) -> float:
    """A lower bound on ``min_{||u|| <= radius} h(u)`` for a ``mu``-strongly
    convex ``h`` from ``h(w)`` and ``grad h(w)`` (``mu > 0``): the minimum over
    the ball of the quadratic minorant ``h(w) + <g, u - w> + (mu/2) ||u - w||^2``,
    attained at ``u = proj_ball(w - g / mu)``. Unconstrained (or when that
    point is inside the ball) it is ``h(w) - ||g||^2 / (2 mu)``; over the ball it
    is at least that and at least the Frank-Wolfe bound ``ball_lower_bound``."""
    centre = w - grad / mu
    if math.isinf(radius) or float(centre @ centre) <= radius * radius:
        return value - float(grad @ grad) / (2.0 * mu)
    d = project_ball(centre, radius) - w
    return value + float(grad @ d) + 0.5 * mu * float(d @ d)


class _Certified(Exception):
    """Raised inside scipy's L-BFGS once the bound is tight enough."""


def certified_dual(
    value_grad: ValueGrad,
    w0: np.ndarray,
    radius: float,
    mu: float,
    *,
    lipschitz: float = 1.0,
    abs_tol: float = 1e-10,
    rel_tol: float = 1e-9,
    max_iter: int = 5000,
) -> InnerSolution:
    """``lower <= min_{||w|| <= radius} g(w) + (mu/2) ||w||^2 <= upper`` for a convex
    ``g`` given by ``value_grad`` (``mu >= 0``; ``radius`` may be ``inf`` when
    ``mu > 0``).

    A finite ball: the accelerated projected gradient of ``certified_min`` on
    ``h = g + (mu/2) ||.||^2``, the lower bound at each evaluated point being
    the larger of the Frank-Wolfe bound and, for ``mu > 0``, the
    strong-convexity bound (``strongly_convex_lower_bound``), which is tight
    to second order where the ball is inactive. No ball: L-BFGS (scipy) on
    ``h`` with the strong-convexity bound ``h(w) - ||grad h(w)||^2 / (2 mu)``
    at each evaluated point. Both stop when ``upper - lower <= max(abs_tol,
    rel_tol |upper|)`` (else after ``max_iter`` iterations); the bound is
    valid either way, since it holds at any point.
    """
    if mu < 0.0 or not math.isfinite(mu):
        raise ValueError(f"mu must be finite and >= 0, got {mu!r}")
    if math.isinf(radius) and mu == 0.0:
        raise ValueError("an unbounded minimum needs mu > 0 (strong convexity) to be certified")

    def h(w: np.ndarray) -> tuple[float, np.ndarray]:
        f, g = value_grad(w)
        return f + 0.5 * mu * float(w @ w), g + mu * w

    def bound(f: float, g: np.ndarray, x: np.ndarray) -> float:
        fw = -math.inf if math.isinf(radius) else ball_lower_bound(f, g, x, radius)
        return max(fw, strongly_convex_lower_bound(f, g, x, mu, radius)) if mu > 0 else fw

    if not math.isinf(radius):
        return _fista(h, w0, radius, bound, lipschitz, abs_tol, rel_tol, max_iter)
    return _lbfgs_certified(h, np.asarray(w0, dtype=np.float64), bound, abs_tol, rel_tol,
                            max_iter)


def _lbfgs_certified(h: ValueGrad, w0: np.ndarray,
                     bound: Callable[[float, np.ndarray, np.ndarray], float],
                     abs_tol: float, rel_tol: float, max_iter: int) -> InnerSolution:
    """Unconstrained minimisation of ``h`` by scipy's L-BFGS-B, keeping the best
    value and the best ``bound`` over every evaluated point."""
    from scipy.optimize import minimize

    upper, lower, best_w = math.inf, -math.inf, w0

    def tracked(w: np.ndarray) -> tuple[float, np.ndarray]:
        nonlocal upper, lower, best_w
        w = np.array(w, dtype=np.float64)
        f, g = _finite(h(w), w)
        if f < upper:
            upper, best_w = f, w
        lower = max(lower, bound(f, g, w))
        if upper - lower <= max(abs_tol, rel_tol * abs(upper)):
            raise _Certified
        return f, g

    iterations = 0
    for _ in range(3):  # a restart clears a curvature memory that stopped making progress
        try:
            result = minimize(tracked, best_w, jac=True, method="L-BFGS-B",
                              options={"maxiter": max_iter, "maxfun": 2 * max_iter,
                                       "ftol": 0.0, "gtol": 0.0, "maxcor": 20})
        except _Certified:
            break
        iterations += int(result.nit)
    return InnerSolution(lower, upper, best_w, iterations, math.nan)


#: a smoothness constant no scaled loss reaches (losses in [0, 1], bounded
#: gradients): backtracking past it means the objective is not finite-valued
_MAX_LIPSCHITZ = 1e200


def _finite(value_grad_at: tuple[float, np.ndarray], x: np.ndarray) -> tuple[float, np.ndarray]:
    """The objective's value and gradient, or FloatingPointError when either
    is not finite (an endless backtracking otherwise)."""
    f, g = value_grad_at
    if not (math.isfinite(f) and np.all(np.isfinite(g))):
        raise FloatingPointError(
            f"the inner objective is not finite at ||w|| = {float(np.linalg.norm(x)):.6g} "
            f"(value {f!r}); are the average action a_bar and the losses finite?")
    return f, g
