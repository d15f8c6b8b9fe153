"""SGD's kernels (``plugins.solvers.sgd``: the Rockafellar-Uryasev form on row
caps, the mini-batch estimator on a spectrum, and the draws and steps of the
mini-batch estimator on ``subset(b)``), a template of ``harness.kernels``:
``plugins.solvers.row_solver.row_kernels`` binds ``m_row_loss``,
``m_row_grad`` and ``m_row_scratch`` to the model's row roles and ``njit`` to
numba's (or to the identity, for a model without compiled row kernels).
Importing this module as itself raises ImportError."""
# ruff: noqa: F821 - the free names are bound by the header harness.kernels writes

import math

import numpy as np

from harness.gap import project_ball_inplace
from harness.kernels import guard
from plugins.lib.permutahedron import kl_pav_sorted, pav_sorted
from plugins.solvers.sgd import ru_weight

guard(globals(), ("njit", "m_row_loss", "m_row_grad", "m_row_scratch"), __name__)


@njit(cache=True, inline="always", error_model="numpy")
def schedule_average(schedule, t0, t, w, avg, tau):  # pragma: no cover - compiled
    """The schedule's factor ``f_t`` for step ``t`` (steps before this one), with
    the point ``w`` where this step's gradients are taken added to the average
    ``avg`` at the schedule's weight (``tau[1]``: the total weight so far)."""
    if schedule == 1:
        f = t0 / (t0 + t)
        weight = t0 - 1.0 + t
    elif schedule == 2:
        f = math.sqrt(t0 / (t0 + t))
        weight = 1.0
    else:
        f = 1.0
        weight = 1.0
    tau[1] += weight
    share = weight / tau[1]
    for j in range(w.size):
        avg[j] += share * (w[j] - avg[j])
    return f


@njit(cache=True, error_model="numpy")
def sgd_row_grad(ms, X, y, i, w, tau, caps, nu, g, z, kl=False):  # pragma: no cover - compiled
    """Row i's weight ``s_i = n phi_i'(L_i(w) - tau)`` (``ru_weight``; ``kl``: the
    KL penalty's), returned, and ``s_i grad
    L_i(w)`` written into ``g`` (0 when ``s_i = 0``: that gradient is not
    formed): row i's term ``tau + n phi_i(L_i(w) - tau) + (mu/2)||w||^2`` of
    ``G`` has w-gradient ``g + mu w`` and tau-gradient ``1 - s_i`` (one
    uniform row's unbiased estimate of the gradient of ``G``)."""
    n = X.shape[0]
    loss = m_row_loss(ms, X, y, i, w, z)
    s = ru_weight(loss - tau, caps[i], nu, n, kl)
    if s == 0.0:
        for j in range(w.size):
            g[j] = 0.0
        return s
    m_row_grad(ms, X, y, i, w, z, g)
    for j in range(w.size):
        g[j] *= s
    return s


@njit(cache=True, error_model="numpy")
def sgd_steps(ms, X, y, w, avg, tau, caps, nu, kl, mu, lr, tau_lr, radius, batch, schedule, t0,
              tau_lo, tau_hi, rng, until, counts, mark, slot, gb,
              sb):  # pragma: no cover - compiled
    """Mini-batch steps on ``(w, tau[0])`` until ``counts[0] >= until``; ``avg``
    kept as the schedule's average of the points where the gradients are
    taken (``tau[1]``: its total weight). A row drawn again in the same step
    reuses its first draw's weight and gradient (``mark[i]``: the step that
    last evaluated row i, ``slot[i]``: its draw there; ``gb``, ``sb``: the
    step's gradients and weights by draw)."""
    n = X.shape[0]
    p = w.size
    gw = np.empty(p)
    z = np.empty(m_row_scratch(ms))
    while counts[0] < until:
        t = counts[2]  # steps before this one
        f = schedule_average(schedule, t0, t, w, avg, tau)
        tt = tau[0]
        st = 0.0
        for j in range(p):
            gw[j] = 0.0
        for d in range(batch):
            i = rng.integers(0, n)
            if mark[i] == t:  # drawn before in this step: the same point, not evaluated again
                e = slot[i]
                sb[d] = sb[e]
                for j in range(p):
                    gb[d, j] = gb[e, j]
            else:
                mark[i] = t
                slot[i] = d
                sb[d] = sgd_row_grad(ms, X, y, i, w, tt, caps, nu, gb[d], z, kl)
                counts[0] += 1
                if sb[d] != 0.0:
                    counts[1] += 1
            st += sb[d]
            for j in range(p):
                gw[j] += gb[d, j]
        eta = lr * f
        for j in range(p):
            w[j] -= eta * (gw[j] / batch + mu * w[j])
        tt = tt - tau_lr * f * (1.0 - st / batch)
        tau[0] = min(max(tt, tau_lo), tau_hi)
        project_ball_inplace(w, radius)
        counts[2] += 1


@njit(cache=True, inline="always", error_model="numpy")
def draw_batch(ms, X, y, w, batch, rng, perm, rows, losses, Z):  # pragma: no cover - compiled
    """b distinct rows uniformly, the first b of ``perm`` after a partial
    Fisher-Yates shuffle (b draws from ``rng``), into ``rows``, their losses at
    ``w`` into ``losses`` and the scratch of draw d into ``Z[d]``."""
    n = X.shape[0]
    for d in range(batch):
        k = d + rng.integers(0, n - d)
        r = perm[k]
        perm[k] = perm[d]
        perm[d] = r
        rows[d] = r
        losses[d] = m_row_loss(ms, X, y, r, w, Z[d])


@njit(cache=True, inline="always", error_model="numpy")
def weighted_step(ms, X, y, w, weights, index, rows, Z, g, gw, eta, mu,
                  radius, counts):  # pragma: no cover - compiled
    """One mini-batch step: ``w <- w - eta (sum_d weights_d grad l_(rows_e)(w) + mu
    w)``, ``e = index[d]`` the draw of the d-th weight (its scratch ``Z[e]`` left by
    its loss), a gradient formed only where the weight is nonzero (``counts[1]``),
    then projected onto the ball; one step (``counts[2]``)."""
    p = w.size
    for j in range(p):
        gw[j] = 0.0
    for d in range(weights.size):
        if weights[d] == 0.0:
            continue
        e = index[d]
        m_row_grad(ms, X, y, rows[e], w, Z[e], g)
        counts[1] += 1
        for j in range(p):
            gw[j] += weights[d] * g[j]
    for j in range(p):
        w[j] -= eta * (gw[j] + mu * w[j])
    project_ball_inplace(w, radius)
    counts[2] += 1


@njit(cache=True, error_model="numpy")
def sgd_spectral_steps(ms, X, y, w, avg, tau, form, nu, kl, mu, lr, radius, batch, schedule,
                       t0, rng, until, counts, perm):  # pragma: no cover - compiled
    """Mini-batch steps on a spectrum (``form.sigma``: the spectrum over ``batch``
    rows) until ``counts[0] >= until``, ``avg`` and ``tau[1]`` as in
    ``sgd_steps``: b distinct rows (``draw_batch``), their losses sorted
    ascending (ties by draw), weights ``sigma`` (``nu = 0``), the projection of
    ``1/b + l/(nu n)`` onto ``P(sigma)`` (``pav_sorted``) or, ``kl``, the KL
    projection of ``exp(l/nu)`` onto it (``kl_pav_sorted``), and ``w <- w - eta_t
    (sum_j q_j grad l_j + mu w)``. A row with weight 0 is evaluated, its
    gradient not formed."""
    n = X.shape[0]
    p = w.size
    sigma = form.sigma
    rows = np.empty(batch, dtype=np.int64)
    losses = np.empty(batch)
    Z = np.empty((batch, m_row_scratch(ms)))
    s = np.empty(batch)
    qs = np.empty(batch)
    sums = np.empty(batch)
    sizes = np.empty(batch, dtype=np.int64)
    mass = np.empty(batch)
    fixed = np.empty(batch, dtype=np.bool_)
    g = np.empty(p)
    gw = np.empty(p)
    while counts[0] < until:
        f = schedule_average(schedule, t0, counts[2], w, avg, tau)
        draw_batch(ms, X, y, w, batch, rng, perm, rows, losses, Z)
        counts[0] += batch
        order = np.argsort(losses, kind="mergesort")
        if nu > 0.0 and kl:
            for d in range(batch):
                s[d] = losses[order[d]] / nu
            kl_pav_sorted(s, sigma, qs, fixed, sums, mass, sizes)
        elif nu > 0.0:
            for d in range(batch):
                s[d] = 1.0 / batch + losses[order[d]] / (nu * n)
            pav_sorted(s, sigma, qs, sums, sizes)
        else:
            for d in range(batch):
                qs[d] = sigma[d]
        weighted_step(ms, X, y, w, qs, order, rows, Z, g, gw, lr * f, mu, radius, counts)


@njit(cache=True, error_model="numpy")
def sgd_batch_losses(ms, X, y, w, batch, rng, perm, rows, losses, Z,
                     counts):  # pragma: no cover - compiled
    """The draw of a mini-batch step on ``subset(b)`` (``draw_batch``): b data
    points; the caller computes the batch's weights from ``losses``."""
    draw_batch(ms, X, y, w, batch, rng, perm, rows, losses, Z)
    counts[0] += batch


@njit(cache=True, error_model="numpy")
def sgd_batch_step(ms, X, y, w, avg, tau, q, rows, Z, mu, lr, radius, schedule, t0,
                   counts):  # pragma: no cover - compiled
    """The step of a mini-batch on ``subset(b)`` after ``sgd_batch_losses``, with
    the batch's weights ``q`` (by draw): ``w`` added to the average
    (``schedule_average``), ``w <- w - eta_t (sum_d q_d grad l_(rows_d)(w) + mu
    w)`` (a gradient formed where ``q_d != 0``, from the scratch ``Z[d]`` its
    loss left), projected onto the ball."""
    p = w.size
    f = schedule_average(schedule, t0, counts[2], w, avg, tau)
    weighted_step(ms, X, y, w, q, np.arange(rows.size), rows, Z, np.empty(p), np.empty(p),
                  lr * f, mu, radius, counts)
