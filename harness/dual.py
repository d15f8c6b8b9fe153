"""A certified lower bound on the dual function of the problem ``F``
(``harness.problem.Problem``), so that ``F(w) - lower`` is a certified
duality gap for any ``w`` and any ``q`` in ``K``.

For ``q`` in ``K`` (min-max inequality, ``F``'s inner objective being
concave in ``q`` and convex in ``w``),

    D(q) = min_{||w|| <= B} <L(w), q> + (mu/2) ||w||^2 - (nu n/2) ||q - 1/n||^2
         <= min_w F(w),

and the minimum over ``w`` is replaced by a provable lower bound
(``harness.gap.certified_dual``: Frank-Wolfe over a finite ball, the
strong-convexity bound ``h(w) - ||grad h(w)||^2 / (2 mu)`` when ``mu > 0``),
so a loose inner solve can only overstate the gap.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from harness import stream
from harness.gap import certified_dual, certified_min


def dual_lower_bound(problem: Any, q: np.ndarray, w0: np.ndarray, *,
                     abs_tol: float = 1e-10, rel_tol: float = 1e-9,
                     max_iter: int = 3000) -> tuple[float, np.ndarray]:
    """``(lower, w_inner)``: ``lower <= D(q)`` for ``q`` in ``K`` (the caller's
    duty: ``problem.constraint.contains(q)``), and the inner solve's best
    ``w`` (a warm start for the next call). The inner objective runs over the
    rows with ``q_i > 0`` only, streamed in chunks."""
    q = np.asarray(q, dtype=np.float64)
    n = problem.n
    if q.shape != (n,):
        raise ValueError(f"q has shape {q.shape}, expected ({n},)")
    rows = np.flatnonzero(q)
    value_grad = stream.weighted_value_grad(problem.model, problem.X, problem.y, rows, q[rows])
    radius, mu = float(problem.radius), float(problem.mu)
    if mu > 0.0:
        inner = certified_dual(value_grad, w0, radius, mu, abs_tol=abs_tol, rel_tol=rel_tol,
                               max_iter=max_iter)
    elif math.isinf(radius):
        raise ValueError("the dual function has no certified bound with mu = 0 and no ball")
    else:
        inner = certified_min(value_grad, w0, radius, abs_tol=abs_tol, rel_tol=rel_tol,
                              max_iter=max_iter)
    shift = q - 1.0 / n
    return inner.lower - 0.5 * float(problem.nu) * n * float(shift @ shift), inner.w
