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
minimum (``certified_dual``).

To machine precision: ``polish_strongly_convex`` minimises a ``mu``-strongly
convex ``h`` by Newton's method (Hessian-vector products by gradient
differences) until ``||grad h||`` reaches its rounding floor, where the
strong-convexity bound closes on ``h(w)`` (over an active ball: Lagrangian
duality with the ball's multiplier). ``harness.dual`` applies it to the dual
function of ``harness.problem`` and ``plugins.metrics.optimum`` to ``F`` itself.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numba import njit

ValueGrad = Callable[[np.ndarray], tuple[float, np.ndarray]]


def ball_lower_bound(value: float, grad: np.ndarray, w: np.ndarray, radius: float) -> float:
    """``F(w) - <grad, w> - radius * ||grad||``: a lower bound on ``min_{||u||<=radius} F``."""
    return value - float(grad @ w) - radius * math.sqrt(float(grad @ grad))


@njit(cache=True, inline="always", error_model="numpy")
def scale_into_ball(w, sq_norm, radius):  # pragma: no cover - compiled
    """``w <- w radius / ||w||`` if ``||w||^2 = sq_norm > radius^2``: the one
    projection onto the ball, the squared norm summed by the caller (index
    order in the kernels, BLAS in ``project_ball``)."""
    if sq_norm > radius * radius:
        f = radius / math.sqrt(sq_norm)
        for j in range(w.size):
            w[j] *= f


@njit(cache=True, error_model="numpy")
def project_ball_inplace(w, radius):  # pragma: no cover - compiled
    """``scale_into_ball`` with the sum of squares in index order; nothing when
    ``radius`` is infinite. The solvers' and the w-players' kernels call it."""
    if radius == np.inf:
        return
    s = 0.0
    for j in range(w.size):
        s += w[j] * w[j]
    scale_into_ball(w, s, radius)


def project_ball(w: np.ndarray, radius: float) -> np.ndarray:
    """The projection of ``w`` onto ``||.|| <= radius``: ``scale_into_ball`` on a
    float64 copy, the squared norm by BLAS (``w @ w``)."""
    out = np.array(w, dtype=np.float64)
    if radius != math.inf:
        scale_into_ball(out, float(out @ out), float(radius))
    return out


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


# ---------------------------------------------------------------------------
# strongly convex minimisation to machine precision
# ---------------------------------------------------------------------------

#: up to this many parameters Newton's conjugate gradients run to the rounding floor
DENSE_CG = 100

#: the unit roundoff of float64 (half an ulp of 1)
UNIT_ROUNDOFF = 2.0 ** -53

#: an enclosure ``w -> (low, high)`` of ``h(w)`` (``low <= h(w) <= high``)
Enclosure = Callable[[np.ndarray], tuple[float, float]]


def polish_strongly_convex(
    value_grad: ValueGrad,
    w0: np.ndarray,
    mu: float,
    radius: float = math.inf,
    *,
    enclose: Enclosure | None = None,
    abs_tol: float = 0.0,
    rel_tol: float = 0.0,
    max_newton: int = 60,
) -> InnerSolution:
    """``lower <= min_{||w|| <= radius} h(w) <= upper`` for a ``mu``-strongly convex
    ``h`` with a continuous gradient (``value_grad``), the interval as narrow as
    float64 allows.

    Newton's method (``_newton``: conjugate gradients on Hessian-vector
    products by gradient differences, a step accepted when ``h`` decreases or,
    once the changes of ``h`` are below its rounding, when ``||grad h||``
    does) drives ``||grad h||`` to its rounding floor, so the strong-convexity
    bound ``h(w) - ||grad h(w)||^2 / (2 mu)`` (``strongly_convex_lower_bound``)
    closes on ``h(w)``. Over a ball whose constraint is active, the Lagrange
    multiplier ``lam`` of ``||w|| <= radius`` is found by a root search of
    ``||w(lam)|| = radius`` with ``w(lam) = argmin h + (lam/2) ||.||^2``
    (each a Newton solve, warm-started), and the bound is Lagrangian duality,
    valid for any ``lam >= 0``:

        min_{||w|| <= radius} h
            >= h_lam(v) - ||grad h_lam(v)||^2 / (2 (mu + lam)) - lam radius^2 / 2,

    (``h_lam = h + (lam/2) ||.||^2``, any ``v``), with the point ``w(lam)``
    projected onto the ball as the feasible ``w``; its error in ``lam`` is of
    second order. ``enclose(w) -> (low, high)`` encloses ``h(w)`` more
    accurately than ``value_grad``'s value (default: that value at both ends);
    the final bounds read it at the returned points, so the interval holds up
    to the rounding ``enclose`` leaves out and to the gradient's own rounding
    (it moves the bound by about ``||grad|| * error / mu``: below 1e-20 of
    ``h`` where ``||grad||`` is at its floor). Newton stops when
    ``||grad||^2 / (2 mu) <= max(abs_tol, rel_tol |h|)``, after ``max_newton``
    steps, or when a step no longer reduces ``||grad||`` (the floor).
    """
    if not (mu > 0.0 and math.isfinite(mu)):
        raise ValueError(f"mu must be finite and > 0, got {mu!r}")
    if enclose is None:
        def enclose(w: np.ndarray) -> tuple[float, float]:
            f = _finite(value_grad(w), w)[0]
            return f, f

    w0 = project_ball(np.asarray(w0, dtype=np.float64), radius)
    sol = _newton(value_grad, w0, mu, abs_tol, rel_tol, max_newton)
    w, g = sol.w, sol.g
    if math.isinf(radius) or float(w @ w) <= radius * radius:
        low, high = enclose(w)
        lower = low - float(g @ g) / (2.0 * mu)
        if not math.isinf(radius):
            lower = max(lower, strongly_convex_lower_bound(low, g, w, mu, radius))
        # (a lower end above the upper one is rounding: the upper end bounds both)
        return InnerSolution(min(lower, high), high, w, sol.steps, math.nan)
    return _on_the_sphere(value_grad, sol, mu, radius, enclose, abs_tol, rel_tol, max_newton)


@dataclass
class _NewtonPoint:
    """The point of least ``||grad||`` a Newton run reached, and its cost."""

    w: np.ndarray
    f: float
    g: np.ndarray
    steps: int


def _newton(value_grad: ValueGrad, w: np.ndarray, mu: float, abs_tol: float,
            rel_tol: float, max_newton: int) -> _NewtonPoint:
    """Newton's method on a ``mu``-strongly convex ``h``, returning the evaluated
    point of smallest ``||grad h||`` (the narrowest strong-convexity bound).

    The Newton direction solves ``H p = -g`` by conjugate gradients (at most
    ``dim + 5`` iterations, to a relative residual of 1e-12 up to ``DENSE_CG``
    parameters, of ``min(0.1, sqrt(||g||))`` beyond)
    with ``H v = (grad h(w + t v) - grad h(w)) / t``, exact for a quadratic
    (a linear least-squares ``h`` converges in one step) and a good Newton
    direction elsewhere. A step ``w + a p`` (``a`` halved from 1) is taken
    when it decreases ``h`` by Armijo's rule or, where the change of ``h`` is
    within its rounding, when it decreases ``||grad h||``; three such steps in
    a row that do not quarter the best ``||grad h||^2`` end the run (its
    rounding floor)."""
    f, g = _finite(value_grad(w), w)
    best = _NewtonPoint(w, f, g, 0)
    best_g2 = g2 = float(g @ g)
    stalls = 0
    for step in range(1, max_newton + 1):
        if g2 / (2.0 * mu) <= max(abs_tol, rel_tol * abs(f)) or g2 == 0.0:
            break
        p = _newton_direction(value_grad, w, g, mu)
        slope = float(g @ p)
        if not slope < 0.0:  # (rounding) fall back to the gradient
            p, slope = -g / mu, -g2 / mu
        noise = 64.0 * UNIT_ROUNDOFF * abs(f)
        a, moved, flat = 1.0, False, 0
        for _ in range(60):
            trial = w + a * p
            try:
                f_new, g_new = _finite(value_grad(trial), trial)
            except FloatingPointError:
                a *= 0.5
                continue
            g2_new = float(g_new @ g_new)
            within = abs(f_new - f) <= noise  # h's change is rounding: ||grad|| decides
            if (g2_new < g2) if within else (f_new <= f + 1e-4 * a * slope):
                moved = True
                break
            flat = flat + 1 if within else 0
            if flat >= 4:  # shorter steps in h's rounding: no gain in sight
                break
            a *= 0.5
        if not moved:
            break
        # steps within h's rounding that do not quarter the best ||grad||^2: the floor
        stalls = stalls + 1 if within and g2_new > 0.25 * best_g2 else 0
        w, f, g, g2 = trial, f_new, g_new, g2_new
        if g2 < best_g2:
            best, best_g2 = _NewtonPoint(w, f, g, step), g2
        best.steps = step
        if stalls >= 3:
            break
    return best


def _newton_direction(value_grad: ValueGrad, w: np.ndarray, g: np.ndarray,
                      mu: float) -> np.ndarray:
    """Conjugate gradients on ``H p = -g`` with finite-difference products ``H v``."""
    size = math.sqrt(float(w @ w))
    scale = 1e-6 * max(1.0, size)
    g_norm = math.sqrt(float(g @ g))
    # a few parameters: solve to rounding (a quadratic then takes one step); many:
    # the inexact Newton forcing term (superlinear, fewer products per step)
    tol = (1e-12 if w.size <= DENSE_CG else min(0.1, math.sqrt(g_norm))) * g_norm
    p = np.zeros_like(w)
    r = -g
    d = r.copy()
    rr = float(r @ r)
    for _ in range(w.size + 5):
        d_norm = math.sqrt(float(d @ d))
        if d_norm == 0.0:
            break
        t = scale / d_norm
        try:
            Hd = (_finite(value_grad(w + t * d), w)[1] - g) / t
        except FloatingPointError:
            break
        dHd = float(d @ Hd)
        if not dHd > 0.0:  # (rounding or a kink) keep what was found
            break
        alpha = rr / dHd
        p = p + alpha * d
        r = r - alpha * Hd
        rr_new = float(r @ r)
        if math.sqrt(rr_new) <= tol:
            break
        d = r + (rr_new / rr) * d
        rr = rr_new
    return p if np.any(p) else -g / mu


def _on_the_sphere(value_grad: ValueGrad, free: _NewtonPoint, mu: float, radius: float,
                   enclose: Enclosure, abs_tol: float, rel_tol: float,
                   max_newton: int) -> InnerSolution:
    """``polish_strongly_convex`` when the unconstrained minimiser (``free``) lies
    outside the ball: the multiplier search and the Lagrangian bound. Should
    the search fail (Newton stopped early: ``max_newton`` or tolerances), the
    multiplier with the best Lagrangian bound among those tried is used: the
    bound holds for any."""
    from scipy.optimize import brentq  # imported on use, as in _lbfgs_certified

    solved: dict[float, _NewtonPoint] = {0.0: free}
    last = [free.w]

    def point(lam: float) -> _NewtonPoint:
        if lam not in solved:
            def h_lam(v: np.ndarray) -> tuple[float, np.ndarray]:
                f, g = value_grad(v)
                return f + 0.5 * lam * float(v @ v), g + lam * v

            solved[lam] = _newton(h_lam, last[0], mu + lam, abs_tol, rel_tol, max_newton)
            last[0] = solved[lam].w
        return solved[lam]

    def excess(lam: float) -> float:  # increasing in lam; negative at lam = 0
        w = point(lam).w
        return 1.0 / math.sqrt(float(w @ w)) - 1.0 / radius

    def rough(lam: float) -> float:  # the Lagrangian bound in plain float64
        at = solved[lam]
        return at.f - float(at.g @ at.g) / (2.0 * (mu + lam)) - 0.5 * lam * radius * radius

    # the multiplier the KKT conditions give at the projected point, as a start
    w_in = project_ball(free.w, radius)
    g_in = _finite(value_grad(w_in), w_in)[1]
    high = max(-float(g_in @ w_in) / (radius * radius), mu, 1e-12)
    try:
        for _ in range(200):
            if excess(high) >= 0.0:
                break
            high *= 2.0
        else:
            raise ValueError("no multiplier brings the minimiser into the ball")
        lam = high if excess(high) == 0.0 else brentq(excess, 0.0, high, xtol=1e-300,
                                                      rtol=4 * np.finfo(float).eps, maxiter=200)
        point(lam)
    except (ValueError, RuntimeError):
        lam = max(solved, key=rough)
    at = solved[lam]
    h_low = enclose(at.w)[0]
    lagrangian = (h_low + 0.5 * lam * float(at.w @ at.w) * (1.0 - 4 * UNIT_ROUNDOFF)
                  - float(at.g @ at.g) / (2.0 * (mu + lam))
                  - 0.5 * lam * radius * radius * (1.0 + 4 * UNIT_ROUNDOFF))
    w = project_ball(at.w, radius)
    f, g = _finite(value_grad(w), w)
    low_w, high_w = enclose(w)
    lower = max(lagrangian, strongly_convex_lower_bound(low_w, g, w, mu, radius),
                ball_lower_bound(low_w, g, w, radius))
    return InnerSolution(min(lower, high_w), high_w, w, sum(s.steps for s in solved.values()),
                         math.nan)


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
