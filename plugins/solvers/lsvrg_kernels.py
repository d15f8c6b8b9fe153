"""LSVRG's kernels (``plugins.solvers.lsvrg``), a template of
``harness.kernels``: ``plugins.solvers.row_solver.row_kernels`` binds
``m_row_loss``, ``m_row_grad`` and ``m_row_scratch`` to the model's row roles
and ``njit`` to numba's (or to the identity, for a model without compiled
row kernels). Importing this module as itself raises ImportError."""
# ruff: noqa: F821 - the free names are bound by the header harness.kernels writes

import numpy as np

from harness.gap import project_ball_inplace
from harness.kernels import guard
from plugins.solvers.best_response import best_response_dense

guard(globals(), ("njit", "m_row_loss", "m_row_grad", "m_row_scratch"), __name__)


@njit(cache=True, error_model="numpy")
def lsvrg_anchor(ms, X, y, w, anchor, q, grad, form, nu, counts):  # pragma: no cover - compiled
    """The anchor at ``w``: ``q~ = q(l(w))`` (``best_response_dense`` on the set's
    ``form``) and ``g~ = sum_j q~_j grad l_j(w)``:
    every row's loss (n data points), then the gradients of the rows with
    ``q~_j != 0`` from what their loss evaluation left (no other is formed)."""
    n = X.shape[0]
    p = w.size
    Z = np.empty((n, m_row_scratch(ms)))
    g = np.empty(p)
    losses = np.empty(n)
    for j in range(p):
        anchor[j] = w[j]
        grad[j] = 0.0
    for i in range(n):
        losses[i] = m_row_loss(ms, X, y, i, w, Z[i])
    q[:] = best_response_dense(losses, form, nu)
    formed = 0
    for i in range(n):
        if q[i] != 0.0:  # a zero weight adds nothing: its gradient is not formed
            m_row_grad(ms, X, y, i, w, Z[i], g)
            formed += 1
            for j in range(p):
                grad[j] += q[i] * g[j]
    counts[0] += n
    counts[1] += formed
    counts[2] = 0


@njit(cache=True, error_model="numpy")
def lsvrg_steps(ms, X, y, w, anchor, q, grad, form, nu, lr, mu, radius, rng, until,
                counts):  # pragma: no cover - compiled
    """Steps (and anchors every n steps) until ``counts[0] >= until``. A step
    whose row has ``q~_i = 0``, and the first step after an anchor (``w =
    w~``, so ``g = g~_i`` bit for bit), evaluate nothing: their stochastic
    term is zero."""
    n = X.shape[0]
    p = w.size
    g = np.empty(p)
    ga = np.empty(p)
    z = np.empty(m_row_scratch(ms))
    while counts[0] < until:
        if counts[2] == n:
            lsvrg_anchor(ms, X, y, w, anchor, q, grad, form, nu, counts)
            continue
        i = rng.integers(0, n)
        a = n * q[i]
        if a != 0.0 and counts[2] != 0:  # (the first step after an anchor has w = w~)
            m_row_loss(ms, X, y, i, w, z)
            m_row_grad(ms, X, y, i, w, z, g)
            m_row_loss(ms, X, y, i, anchor, z)
            m_row_grad(ms, X, y, i, anchor, z, ga)
            for j in range(p):
                w[j] -= lr * (a * (g[j] - ga[j]) + grad[j] + mu * w[j])
            counts[0] += 2
            counts[1] += 2
        else:
            for j in range(p):
                w[j] -= lr * (grad[j] + mu * w[j])
        project_ball_inplace(w, radius)
        counts[2] += 1
        counts[3] += 1
