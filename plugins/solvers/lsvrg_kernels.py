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


@njit(cache=True, inline="always", error_model="numpy")
def anchor_losses(ms, X, y, w, anchor, grad, losses, Z):  # pragma: no cover - compiled
    """The anchor's first half: ``w~ = w``, ``g~ = 0`` and every row's loss at
    ``w`` into ``losses``, the scratch of row i in ``Z[i]``."""
    for j in range(w.size):
        anchor[j] = w[j]
        grad[j] = 0.0
    for i in range(X.shape[0]):
        losses[i] = m_row_loss(ms, X, y, i, w, Z[i])


@njit(cache=True, inline="always", error_model="numpy")
def anchor_gradient(ms, X, y, w, q, grad, Z, counts):  # pragma: no cover - compiled
    """The anchor's second half, ``q~ = q`` given: ``g~ = sum_j q~_j grad
    l_j(w)`` from the scratch its loss evaluation left, formed for the rows
    with ``q~_j != 0`` only; n data points counted, the steps since the anchor
    reset."""
    n = X.shape[0]
    p = w.size
    g = np.empty(p)
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
def lsvrg_anchor(ms, X, y, w, anchor, q, grad, form, nu, counts):  # pragma: no cover - compiled
    """The anchor at ``w``: ``q~ = q(l(w))`` (``best_response_dense`` on the set's
    ``form``) and ``g~ = sum_j q~_j grad l_j(w)``:
    every row's loss (n data points), then the gradients of the rows with
    ``q~_j != 0`` from what their loss evaluation left (no other is formed)."""
    n = X.shape[0]
    Z = np.empty((n, m_row_scratch(ms)))
    losses = np.empty(n)
    anchor_losses(ms, X, y, w, anchor, grad, losses, Z)
    q[:] = best_response_dense(losses, form, nu)
    anchor_gradient(ms, X, y, w, q, grad, Z, counts)


@njit(cache=True, inline="always", error_model="numpy")
def lsvrg_step(ms, X, y, w, anchor, q, grad, lr, mu, radius, rng, counts, g, ga,
               z):  # pragma: no cover - compiled
    """One step on the anchor's ``q~`` and ``g~`` (``g``, ``ga``, ``z``:
    scratch). A step whose row has ``q~_i = 0``, and the first step after an
    anchor (``w = w~``, so ``g = g~_i`` bit for bit), evaluate nothing: their
    stochastic term is zero."""
    n = X.shape[0]
    p = w.size
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


@njit(cache=True, error_model="numpy")
def lsvrg_steps(ms, X, y, w, anchor, q, grad, form, nu, lr, mu, radius, rng, until,
                counts):  # pragma: no cover - compiled
    """Steps (``lsvrg_step``) and anchors every n steps (``lsvrg_anchor``) until
    ``counts[0] >= until``."""
    n = X.shape[0]
    p = w.size
    g = np.empty(p)
    ga = np.empty(p)
    z = np.empty(m_row_scratch(ms))
    while counts[0] < until:
        if counts[2] == n:
            lsvrg_anchor(ms, X, y, w, anchor, q, grad, form, nu, counts)
            continue
        lsvrg_step(ms, X, y, w, anchor, q, grad, lr, mu, radius, rng, counts, g, ga, z)


@njit(cache=True, error_model="numpy")
def lsvrg_between_anchors(ms, X, y, w, anchor, q, grad, lr, mu, radius, rng, until,
                          counts):  # pragma: no cover - compiled
    """Steps (``lsvrg_step``) until ``counts[0] >= until`` or the next anchor is
    due (``counts[2] == n``): the caller computes the anchor's ``q~``
    (``Problem.inner``) between two calls."""
    n = X.shape[0]
    p = w.size
    g = np.empty(p)
    ga = np.empty(p)
    z = np.empty(m_row_scratch(ms))
    while counts[0] < until and counts[2] < n:
        lsvrg_step(ms, X, y, w, anchor, q, grad, lr, mu, radius, rng, counts, g, ga, z)
