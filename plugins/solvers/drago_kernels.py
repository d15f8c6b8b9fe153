"""Drago's kernels (``plugins.solvers.drago``), a template of ``harness.kernels``:
``plugins.solvers.row_solver.row_kernels`` binds ``m_row_loss``, ``m_row_grad``
and ``m_row_scratch`` to the model's row roles and ``njit`` to numba's (or to
the identity, for a model without compiled row kernels). A step is
``drago_primal``, the dual step (``drago_dual_step`` on the set's form, or the
set's own projection from Python) and ``drago_tables``; ``drago_steps`` runs
them in one compiled call. Importing this module as itself raises ImportError."""
# ruff: noqa: F821 - the free names are bound by the header harness.kernels writes


from harness.gap import project_ball_inplace
from harness.kernels import guard
from plugins.solvers.drago import ALL_FRESH, drago_dual_step

guard(globals(), ("njit", "m_row_loss", "m_row_grad", "m_row_scratch"), __name__)


@njit(cache=True, error_model="numpy")
def drago_setup(ms, X, y, st):  # pragma: no cover - compiled
    """The tables at ``w_0`` (Algorithm 1's initialisation): every row's loss and
    gradient (n data points, n gradients: ``q_0 = 1/n`` weighs every row), both
    copies of each table equal, ``g_sum = sum_i G_i / n``."""
    n, p = st.G.shape
    for i in range(n):
        st.l_hat[i] = m_row_loss(ms, X, y, i, st.w, st.z)
        m_row_grad(ms, X, y, i, st.w, st.z, st.G[i])
        st.l_old[i] = st.l_hat[i]
        for j in range(p):
            st.G_old[i, j] = st.G[i, j]
    _gradient_sum(st)
    st.counts[0] += n
    st.counts[1] += n
    st.counts[3] = ALL_FRESH


@njit(cache=True, error_model="numpy")
def _gradient_sum(st):  # pragma: no cover - compiled
    """``g_sum = sum_i q_hat_i G_i`` and ``w_sum = sum_k W_k`` anew from the
    tables (every cycle of K: the running sums do not drift)."""
    n, p = st.G.shape
    for j in range(p):
        st.g_sum[j] = 0.0
        st.w_sum[j] = 0.0
    for i in range(n):
        a = st.q_hat[i]
        if a != 0.0:
            for j in range(p):
                st.g_sum[j] += a * st.G[i, j]
    for k in range(st.blocks.shape[0]):
        for j in range(p):
            st.w_sum[j] += st.blocks[k, j]


@njit(cache=True, error_model="numpy")
def drago_primal(ms, X, y, st, c, first, second):  # pragma: no cover - compiled
    """The first half of step t: the primal step from block I = ``first``, the
    losses of blocks K = (t-1) mod M and J = ``second`` at the new iterate, and
    the dual step's input ``st.v``.

    Primal: ``v_P = g_sum + (n/b)/(1+eta) sum_{i in I} (q_i grad L_i(w) - q_old_i
    G_old_i)``, then ``w <- (mu (beta - (M-1) C) w + mu C (w_sum - W_{K-1}) -
    v_P) / (mu (1 + beta))`` projected onto the ball (the minimiser of an
    isotropic quadratic), and ``W_K <- w``. Block I's gradients at ``w`` are the
    table's when it is at ``w`` (``counts[3]``), else formed where ``q_i != 0``.
    Dual input (``v_D = l_hat``, plus ``(n/b)/(1+eta) (L_J - l_old_J)`` on J and
    ``L_K - l_hat_K`` on K): chi-square, ``(1/n + beta q)/(1+beta) + v_D/(nu
    (1+beta) n)``; KL, ``(v_D + nu beta log q)/(nu (1+beta))``."""
    n, b, M = c.n, c.b, c.M
    p = st.w.size
    t = st.counts[2] + 1
    K = st.counts[2] % M
    eta = c.eta
    beta = 1.0 / (eta * (1.0 + eta))
    if not c.steady:
        beta *= 1.0 - (1.0 + eta) ** (1.0 - t)
    scale = (n / b) / (1.0 + eta)
    # -- primal: the variance-reduced gradient of block I
    delta, g = st.delta, st.g
    for j in range(p):
        delta[j] = 0.0
    fresh = st.counts[3] == ALL_FRESH or st.counts[3] == first
    for i in range(first * b, min(n, first * b + b)):
        a = st.q[i]
        if a != 0.0:
            if fresh:
                for j in range(p):
                    delta[j] += a * st.G[i, j]
            else:
                m_row_loss(ms, X, y, i, st.w, st.z)
                m_row_grad(ms, X, y, i, st.w, st.z, g)
                st.counts[0] += 1
                st.counts[1] += 1
                for j in range(p):
                    delta[j] += a * g[j]
        a = st.q_old[i]
        if a != 0.0:
            for j in range(p):
                delta[j] -= a * st.G_old[i, j]
    prev = K - 1 if K > 0 else M - 1
    keep = c.mu * (beta - (M - 1) * c.C)
    couple = c.mu * c.C
    denom = c.mu * (1.0 + beta)
    w = st.w
    for j in range(p):
        vp = st.g_sum[j] + scale * delta[j]
        w[j] = (keep * w[j] + couple * (st.w_sum[j] - st.blocks[prev, j]) - vp) / denom
    project_ball_inplace(w, c.radius)
    for j in range(p):
        st.w_sum[j] += w[j] - st.blocks[K, j]
        st.blocks[K, j] = w[j]
    # -- blocks K and J at the new iterate
    k0, k1 = K * b, min(n, K * b + b)
    for i in range(k0, k1):
        st.k_losses[i - k0] = m_row_loss(ms, X, y, i, w, st.Z[i - k0])
    st.counts[0] += k1 - k0
    j0, j1 = second * b, min(n, second * b + b)
    if second != K:
        for i in range(j0, j1):
            st.j_losses[i - j0] = m_row_loss(ms, X, y, i, w, st.z)
        st.counts[0] += j1 - j0
    # -- the dual step's input
    v = st.v
    if c.kl:
        s = 1.0 / (c.nu * (1.0 + beta))
        keep_q = beta / (1.0 + beta)
        for i in range(n):
            v[i] = s * st.l_hat[i] + keep_q * st.log_q[i]
    else:
        s = 1.0 / (c.nu * (1.0 + beta) * n)
        base = 1.0 / ((1.0 + beta) * n)
        keep_q = beta / (1.0 + beta)
        for i in range(n):
            v[i] = base + keep_q * st.q[i] + s * st.l_hat[i]
    for i in range(j0, j1):
        loss = st.k_losses[i - k0] if second == K else st.j_losses[i - j0]
        v[i] += s * scale * (loss - st.l_old[i])
    for i in range(k0, k1):
        v[i] += s * (st.k_losses[i - k0] - st.l_hat[i])


@njit(cache=True, error_model="numpy")
def drago_tables(ms, X, y, st, c):  # pragma: no cover - compiled
    """The second half of step t, once ``st.q`` holds ``q_t``: block K's tables
    move to their previous copies and take ``q_t``, its losses and the
    gradients at the new iterate (formed where ``q_t,i != 0``, from what the
    loss evaluation left in ``Z``; the others are 0: read only times their
    weight); ``g_sum`` follows (recomputed after each cycle of K)."""
    n, b, M = c.n, c.b, c.M
    p = st.w.size
    K = st.counts[2] % M
    k0, k1 = K * b, min(n, K * b + b)
    for i in range(k0, k1):
        a = st.q_hat[i]
        row, old = st.G[i], st.G_old[i]
        for j in range(p):
            if a != 0.0:
                st.g_sum[j] -= a * row[j]
            old[j] = row[j]
        st.q_old[i] = a
        a = st.q[i]
        if a != 0.0:
            m_row_grad(ms, X, y, i, st.w, st.Z[i - k0], row)
            st.counts[1] += 1
            for j in range(p):
                st.g_sum[j] += a * row[j]
        else:
            for j in range(p):
                row[j] = 0.0
        st.q_hat[i] = a
        st.l_old[i] = st.l_hat[i]
        st.l_hat[i] = st.k_losses[i - k0]
    st.counts[2] += 1
    st.counts[3] = K
    if st.counts[2] % M == 0:
        _gradient_sum(st)


@njit(cache=True, error_model="numpy")
def drago_steps(ms, X, y, st, c, form, rng, until):  # pragma: no cover - compiled
    """Steps until ``counts[0] >= until``: per step I then J drawn by
    ``rng.integers(0, M)``, ``drago_primal``, the dual step on the set's form
    (``drago_dual_step``) and ``drago_tables``. Returns 0, or the dual step's
    nonzero status (no KL projection)."""
    while st.counts[0] < until:
        first = rng.integers(0, c.M)
        second = rng.integers(0, c.M)
        drago_primal(ms, X, y, st, c, first, second)
        status = drago_dual_step(st, c, form)
        if status != 0:
            return status
        drago_tables(ms, X, y, st, c)
    return 0
