"""Prospect's kernels (``plugins.solvers.prospect``), a template of
``harness.kernels``: ``plugins.solvers.row_solver.row_kernels`` binds
``m_row_loss``, ``m_row_grad`` and ``m_row_scratch`` to the model's row roles
and ``njit`` to numba's (or to the identity, for a model without compiled
row kernels). Importing this module as itself raises ImportError."""
# ruff: noqa: F821 - the free names are bound by the header harness.kernels writes

import numpy as np

from harness.gap import project_ball_inplace
from harness.kernels import guard
from plugins.solvers.best_response import br_update, br_weight

guard(globals(), ("njit", "m_row_loss", "m_row_grad", "m_row_scratch"), __name__)


@njit(cache=True, error_model="numpy")
def prospect_losses(ms, X, y, w, losses, Z, counts):  # pragma: no cover - compiled
    """The loss table at ``w``: every row's loss (``Z[i]``: what row i's
    evaluation leaves for its gradient)."""
    for i in range(X.shape[0]):
        losses[i] = m_row_loss(ms, X, y, i, w, Z[i])
    counts[0] += X.shape[0]


@njit(cache=True, error_model="numpy")
def prospect_grads(ms, X, y, w, rho, Z, grads, counts):  # pragma: no cover - compiled
    """The gradient table at the point ``w`` of ``prospect_losses``: the rows
    with ``rho_i != 0`` (the others stay 0: they are read only times ``rho_i``)."""
    for i in range(X.shape[0]):
        if rho[i] != 0.0:
            m_row_grad(ms, X, y, i, w, Z[i], grads[i])
            counts[1] += 1


@njit(cache=True, error_model="numpy")
def prospect_steps(ms, X, y, w, losses, grads, rho, gbar, br, lr, mu, radius,
                   rng, until, counts):  # pragma: no cover - compiled
    """Steps of Algorithm 1 (``Prospect``'s docstring) until ``counts[0] >=
    until``; ``counts[2]`` steps so far (``gbar`` is recomputed from the tables
    every n steps). A step whose row has ``lambda_i = 0`` evaluates its loss
    only: its gradient enters the step and the tables times ``lambda_i``, and
    is not formed (``G_i = 0``). The first step evaluates nothing: at ``w_0``
    the tables hold row i's loss and (where ``rho_i != 0``) gradient, so ``v =
    gbar`` and the tables stay."""
    n, p = grads.shape
    g = np.empty(p)
    z = np.empty(m_row_scratch(ms))
    shrink = 1.0 / (1.0 + lr * mu)
    while counts[0] < until:
        i = rng.integers(0, n)
        lam = br_weight(br, i)
        if counts[2] == 0:  # w = w_0: the tables hold row i there (v = gbar to rounding)
            for j in range(p):
                w[j] = (w[j] - lr * gbar[j]) * shrink
            project_ball_inplace(w, radius)
            counts[2] += 1
            continue
        loss = m_row_loss(ms, X, y, i, w, z)
        if lam != 0.0:
            m_row_grad(ms, X, y, i, w, z, g)
            counts[1] += 1
        else:
            for j in range(p):
                g[j] = 0.0
        counts[0] += 1
        a = n * lam
        b = n * rho[i]
        for j in range(p):
            w[j] = (w[j] - lr * (a * g[j] - b * grads[i, j] + gbar[j])) * shrink
        project_ball_inplace(w, radius)
        br_update(br, i, loss, n)
        losses[i] = loss
        for j in range(p):
            gbar[j] += lam * g[j] - rho[i] * grads[i, j]
            grads[i, j] = g[j]
        rho[i] = lam
        counts[2] += 1
        if counts[2] % n == 0:
            for j in range(p):
                gbar[j] = 0.0
            for r in range(n):
                if rho[r] != 0.0:
                    for j in range(p):
                        gbar[j] += rho[r] * grads[r, j]
