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
    x = project_ball(np.asarray(w0, dtype=np.float64), radius)
    f_x, g_x = _finite(value_grad(x), x)
    best_w, upper = x, f_x
    lower = ball_lower_bound(f_x, g_x, x, radius)
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
        lower = max(lower, ball_lower_bound(f_new, g_new, x_new, radius))
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
        lower = max(lower, ball_lower_bound(f_z, g_z, z, radius))
        L *= 0.9  # let the step grow again
    return InnerSolution(lower, upper, best_w, it, L)


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
