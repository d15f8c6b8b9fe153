"""A certified lower bound on the dual function of the problem ``F``
(``harness.problem.Problem``), so that ``F(w) - lower`` is a certified
duality gap for any ``w`` and any ``q`` in ``K``, and that gap computed to
the resolution float64 allows (``certified_gap``).

For ``q`` in ``K`` (min-max inequality, ``F``'s inner objective being
concave in ``q`` and convex in ``w``),

    D(q) = min_{||w|| <= B} <L(w), q> + (mu/2) ||w||^2 - nu D(q || 1/n)
         <= min_w F(w),

with ``D(q || 1/n)`` the problem's penalty (chi2: ``(n/2) ||q - 1/n||^2``; kl:
``sum_i q_i log(n q_i)``), whichever it is,

and the minimum over ``w`` is replaced by a provable lower bound, so a loose
inner solve can only overstate the gap. With ``mu > 0`` the inner objective
``h(w) = <L(w), q> + (mu/2) ||w||^2`` is ``mu``-strongly convex: Newton's
method drives ``||grad h||`` to its rounding floor and ``h(v) - ||grad
h(v)||^2 / (2 mu)`` (over a ball: Lagrangian duality, ``harness.gap.
polish_strongly_convex``) closes on the minimum; a linear least-squares ``h``
(``linear_mse``) is a quadratic, solved in one Newton step. With ``mu = 0``
it is Frank-Wolfe over the finite ball (``harness.gap.certified_min``),
accurate to its tolerances.

``certified_gap(problem, w, q)`` bounds ``F(w) - F*`` from above by
``F(w) - max(D(q(w)), D(q))``: ``q(w)`` is the inner maximiser at ``w`` in
closed form (``Problem.inner``: the Euclidean projection ``proj_K(1/n +
L/(nu n))`` for chi2, the KL projection of ``exp(L/nu)`` for kl, or the
linear maximisation oracle when ``nu = 0``), which is the optimal
dual point at the optimum, so the gap vanishes there to second order;
``q`` is a solver's own dual iterate, if it has one.

Rounding. The sums over rows are the large ones (``n`` terms), so they are
taken exactly rounded (``math.fsum``) and enclosed with their rounding
(``enclose_value``: ``F(w)`` between the value at a feasible ``q`` and the
Lagrangian dual value ``tau + sum_i phi_i(L_i - tau)`` of the inner maximum,
which bounds it from above for any ``tau``; ``q``'s own rounding is repaired
to ``sum q = 1`` up to an ulp of one row, ``_feasible``, whose effect is
bounded, ``_moved_mass``; the penalty's sum is enclosed term by term with
each term's rounding, ``_penalty``). Left out of every enclosure is the rounding of each row's loss
inside the model (a few ulps of each loss, which averages to a few ulps of
``F``: ``tests/test_opt_polish.py`` checks the enclosure against ``F`` in
80-bit arithmetic), and the gradient's, which moves a strong-convexity bound
by ``||grad|| * error / mu`` (below 1e-20 of ``F`` at the floor).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from harness import stream
from harness.gap import UNIT_ROUNDOFF, certified_min, polish_strongly_convex

_U = UNIT_ROUNDOFF


def dual_lower_bound(problem: Any, q: np.ndarray, w0: np.ndarray, *,
                     abs_tol: float = 1e-10, rel_tol: float = 1e-9,
                     max_iter: int = 3000) -> tuple[float, np.ndarray]:
    """``(lower, w_inner)``: ``lower <= D(q)`` for ``q`` in ``K`` (the caller's
    duty: ``problem.constraint.contains(q)``), and the inner solve's best
    ``w`` (a warm start for the next call). The inner objective runs over the
    rows with ``q_i > 0`` only, streamed in chunks.

    With ``mu > 0`` the inner minimum is polished by Newton's method until its
    certified interval is at most ``max(abs_tol, rel_tol |h|)`` (``abs_tol =
    rel_tol = 0``: to the rounding floor) and the sums are enclosed with
    their rounding; with ``mu = 0``, Frank-Wolfe over the ball to the same
    tolerances (at most ``max_iter`` iterations)."""
    q = np.asarray(q, dtype=np.float64)
    n = problem.n
    if q.shape != (n,):
        raise ValueError(f"q has shape {q.shape}, expected ({n},)")
    radius, mu, nu = float(problem.radius), float(problem.mu), float(problem.nu)
    if mu > 0.0:
        return _strongly_convex_dual(problem, q, w0, abs_tol, rel_tol)
    rows = np.flatnonzero(q)
    value_grad = stream.weighted_value_grad(problem.model, problem.X, problem.y, rows, q[rows])
    if math.isinf(radius):
        raise ValueError("the dual function has no certified bound with mu = 0 and no ball")
    inner = certified_min(value_grad, w0, radius, abs_tol=abs_tol, rel_tol=rel_tol,
                          max_iter=max_iter)
    return inner.lower - _penalty(q, nu, problem.penalty)[1], inner.w


def _strongly_convex_dual(problem: Any, q: np.ndarray, w0: np.ndarray, abs_tol: float,
                          rel_tol: float) -> tuple[float, np.ndarray]:
    """``dual_lower_bound`` with ``mu > 0``: Newton polish, sums enclosed."""
    n, mu, nu, penalty = problem.n, float(problem.mu), float(problem.nu), problem.penalty
    q, residual, moved = _feasible(q, _caps(problem.constraint))
    rows = np.flatnonzero(q)
    weights = q[rows]
    weighted = stream.weighted_value_grad(problem.model, problem.X, problem.y, rows, weights)

    def value_grad(w: np.ndarray) -> tuple[float, np.ndarray]:
        f, g = weighted(w)
        return f + 0.5 * mu * float(w @ w), g + mu * w

    def enclose(w: np.ndarray) -> tuple[float, float]:
        losses = _row_losses(problem, w, rows)
        terms = weights * losses
        value = _exact_sum(terms) + 0.5 * mu * _exact_sum(w * w)
        slack = 3.0 * _U * (_magnitude(terms) + 0.5 * mu * _magnitude(w * w)) + 1e-300
        return value - slack, value + slack

    inner = polish_strongly_convex(value_grad, w0, mu, float(problem.radius), enclose=enclose,
                                   abs_tol=abs_tol, rel_tol=rel_tol)
    _, penalty_high, _ = _penalty(q, nu, penalty)
    repair = 0.0
    if residual != 0.0:  # what the last ``residual`` of mass at row ``moved`` can change
        loss = _row_losses(problem, inner.w, np.array([max(moved, 0)]))[0]
        repair = _moved_mass(residual, moved, float(loss), float(q[max(moved, 0)]), nu, n,
                             penalty)
    return inner.lower - penalty_high - repair, inner.w


@dataclass
class CertifiedGap:
    """``F(w) - F* <= gap`` (certified): ``gap = value - lower`` with ``value >=
    F(w)`` and ``lower <= D(q) <= F*`` for the dual point ``q`` (in ``K``: the
    candidate moved into it by ``_feasible``); ``w_inner`` is the inner
    minimiser of that ``D(q)``, a warm start for the next call."""

    gap: float
    value: float
    lower: float
    q: np.ndarray
    w_inner: np.ndarray


def certified_gap(problem: Any, w: np.ndarray, q: np.ndarray | None = None,
                  w_inner: np.ndarray | None = None, *,
                  losses: np.ndarray | None = None) -> CertifiedGap:
    """A certified upper bound on ``F(w) - F*`` at the resolution float64 allows
    (module docstring): ``F(w)``'s enclosure (``enclose_value``) minus the
    larger dual bound of ``q(w)`` (the closed-form inner maximiser at ``w``)
    and of ``q`` (a solver's dual iterate in ``K``, optional), each inner
    minimum polished from ``w_inner`` (default ``w``) to its rounding floor when
    ``mu > 0``. With ``mu = 0`` (a finite ball: Frank-Wolfe to
    ``dual_lower_bound``'s default tolerances) ``q(w)`` is used only without a
    ``q``. ``losses``: ``L(w)`` if already computed.

    Cost: the losses at ``w`` (one pass, skipped when given), a projection, and
    per dual point a few Newton steps of ``dim + 2`` gradient passes over the
    rows with ``q_i > 0`` (one step when the model is linear least squares
    and the ball inactive), plus exactly rounded sums over ``n`` terms."""
    w = np.asarray(w, dtype=np.float64)
    losses = problem.losses(w) if losses is None else np.asarray(losses, dtype=np.float64)
    _, value, q_w = enclose_value(problem, w, losses)
    start = w if w_inner is None else np.asarray(w_inner, dtype=np.float64)
    tol = {"abs_tol": 0.0, "rel_tol": 0.0} if problem.mu > 0 else {}
    best: tuple[float, np.ndarray, np.ndarray] | None = None
    caps = _caps(problem.constraint)
    # with mu = 0 each dual bound is a Frank-Wolfe solve of up to max_iter passes:
    # the closed form's only when there is no other
    closed_form = q_w if q is None or problem.mu > 0 else None
    for candidate in (closed_form, q):
        if candidate is None:
            continue
        if caps is not None:  # the point whose D is bounded: in K, sum exactly 1
            candidate = _feasible(np.asarray(candidate, dtype=np.float64), caps)[0]
        lower, inner_w = dual_lower_bound(problem, candidate, start, **tol)
        if best is None or lower > best[0]:
            best = (lower, np.asarray(candidate, dtype=np.float64), inner_w)
    assert best is not None
    lower, q_best, inner_w = best
    return CertifiedGap(value - lower, value, lower, q_best, inner_w)


def enclose_value(problem: Any, w: np.ndarray,
                  losses: np.ndarray | None = None) -> tuple[float, float, np.ndarray]:
    """``(low, high, q)`` with ``low <= F(w) <= high`` for the losses as the model
    computes them (their own rounding is left out: module docstring), and ``q``
    the inner maximiser. The regulariser's sum is exactly rounded too."""
    w = np.asarray(w, dtype=np.float64)
    losses = problem.losses(w) if losses is None else np.asarray(losses, dtype=np.float64)
    low, high, q = enclose_inner(problem, losses)
    reg = 0.5 * float(problem.mu) * _exact_sum(w * w)
    slack = 2.0 * _U * reg
    return low + reg - slack, high + reg + slack, q


def enclose_inner(problem: Any, losses: np.ndarray) -> tuple[float, float, np.ndarray]:
    """``(low, high, q)`` with ``low <= max_{q in K} <losses, q> - nu D(q || 1/n) <=
    high`` and ``q`` the set's maximiser (``Problem.inner``).

    ``low`` is the objective at ``q`` made exactly feasible (``_feasible``);
    ``high`` the Lagrangian dual ``G(tau) = tau + sum_i phi_i(losses_i - tau)``
    with ``phi_i(z) = max_{0 <= q <= c_i} q z - nu d(q)``, ``d`` the penalty's
    per-row term (chi2: ``(n/2)(q - 1/n)^2``, ``_lagrangian``; kl: ``q log(n
    q)``, ``_lagrangian_kl``), an upper bound for any ``tau``, taken at the
    ``tau`` that ``q`` reveals (exact up to rounding: ``G`` is flat at its
    minimum, so ``tau``'s error enters to second order). Each is an exactly
    rounded sum, enclosed with its rounding. A set that is not a capped simplex
    gets the value at ``q`` with an allowance for an n-term sum at both ends."""
    losses = np.asarray(losses, dtype=np.float64)
    n, nu, penalty = losses.size, float(problem.nu), problem.penalty
    _, q = problem.inner(losses)
    caps = _caps(problem.constraint)
    if caps is None:  # no dual form at hand: the plain value, with a summation allowance
        penalty_value, _, penalty_size = _penalty(q, nu, penalty)
        value = _exact_sum(losses * q) - penalty_value
        slack = (n + 4) * _U * (_magnitude(losses * q) + penalty_size)
        return value - slack, value + slack, q
    q_feasible, residual, moved = _feasible(q, caps)
    terms = losses * q_feasible
    _, penalty_high, _ = _penalty(q_feasible, nu, penalty)
    low = (_exact_sum(terms) - penalty_high - 2.0 * _U * _magnitude(terms)
           - _moved_mass(residual, moved, float(losses[max(moved, 0)]),
                         float(q_feasible[max(moved, 0)]), nu, n, penalty))
    if penalty == "kl" and nu > 0.0:
        high = min(_lagrangian_kl(losses, caps, nu, tau) for tau in _taus_kl(losses, q, caps, nu))
    else:
        high = min(_lagrangian(losses, caps, nu, tau) for tau in _taus(losses, q, caps, nu))
    return low, high, q


def _lagrangian(losses: np.ndarray, caps: np.ndarray, nu: float, tau: float) -> float:
    """An upper bound on ``G(tau) = tau + sum_i phi_i(losses_i - tau)`` (docstring of
    ``enclose_inner``): the exactly rounded sum plus its rounding, and the
    second-order shortfall of each row's maximiser ``q_i``, computed in
    float64 instead of exactly."""
    n = losses.size
    z = losses - tau
    if nu == 0.0:
        terms = caps * np.maximum(z, 0.0)
        total = _exact_sum(terms)
        return total + tau + 3.0 * _U * (total + abs(tau)) + 1e-300
    q = np.clip(1.0 / n + z / (nu * n), 0.0, caps)
    gain = q * z
    shift = q - 1.0 / n
    cost = (0.5 * nu * n) * (shift * shift)
    total_cost = _exact_sum(cost)
    value = tau + _exact_sum(gain) - total_cost
    slack = (4.0 * _U * (abs(tau) + _magnitude(gain) + total_cost)
             + nu * _U * _magnitude(shift)
             + 0.5 * nu * n * n * (4.0 * _U * float(np.max(caps))) ** 2 + 1e-300)
    return value + slack


def _taus(losses: np.ndarray, q: np.ndarray, caps: np.ndarray, nu: float) -> list[float]:
    """The multiplier ``tau`` of ``sum q = 1`` that the maximiser ``q`` reveals: the
    median over its free rows (``0 < q_i < c_i``) of ``losses_i - nu n (q_i -
    1/n)`` (``nu = 0``: the smallest loss on the support); without a free row,
    the middle of the interval the rows at 0 and at their caps leave."""
    n = losses.size
    free = (q > 0.0) & (q < caps)
    if nu == 0.0:
        support = q > 0.0
        return [float(np.min(losses[support]))] if support.any() else [0.0]
    if free.any():
        return [float(np.median(losses[free] - nu * n * (q[free] - 1.0 / n)))]
    zero, full = q <= 0.0, q >= caps
    low = float(np.max(losses[zero] + nu)) if zero.any() else -math.inf
    high = float(np.min(losses[full] - nu * (n * caps[full] - 1.0))) if full.any() else math.inf
    if math.isinf(low) and math.isinf(high):
        return [0.0]
    if math.isinf(low) or math.isinf(high):
        return [high if math.isinf(low) else low]
    return [0.5 * (low + high), low, high]


def _lagrangian_kl(losses: np.ndarray, caps: np.ndarray, nu: float, tau: float) -> float:
    """An upper bound on ``G(tau) = tau + sum_i phi_i(losses_i - tau)`` for the KL
    penalty (``enclose_inner``): ``phi_i(z) = max_{0 <= q <= c_i} q z - nu q log(n
    q)`` is attained at ``q_i = min(c_i, exp(z/nu - 1)/n)``, so ``phi_i(z) = (nu/n)
    exp(z/nu - 1)`` below the cap and ``c_i (z - nu log(n c_i))`` at it, both
    positive. Each is computed in closed form (no maximiser's shortfall) and
    enclosed with its rounding: the exponent's, ``u (3 |z|/nu + 2)``, is
    relative for the exponential, doubled for the exponential's own; the cap's
    is ``4 u c_i (|z| + nu (|log(n c_i)| + 1))``. The first form is an upper
    bound everywhere (the supremum over all ``q >= 0``), so it is kept where
    rounding could misjudge the side of the cap (the two agree there to second
    order)."""
    n = losses.size
    z = losses - tau
    exponent = z / nu - 1.0
    log_cap = np.log(n * caps)
    margin = 8.0 * _U * (np.abs(exponent) + np.abs(log_cap) + 1.0)
    capped = exponent >= log_cap + margin
    with np.errstate(over="ignore"):
        free = (nu / n) * np.exp(np.where(capped, 0.0, exponent))
    free_slack = free * (2.0 * _U * (3.0 * np.abs(z) / nu + 2.0) + 4.0 * _U)
    at_cap = caps * (z - nu * log_cap)
    cap_slack = 4.0 * _U * caps * (np.abs(z) + nu * (np.abs(log_cap) + 1.0))
    phi = np.where(capped, at_cap, free)
    if not np.all(np.isfinite(phi)):
        return math.inf
    total = _exact_sum(phi)
    slack = _magnitude(np.where(capped, cap_slack, free_slack))
    return tau + total + 3.0 * _U * (abs(tau) + total) + (1.0 + 4.0 * _U) * slack + 1e-300


def _taus_kl(losses: np.ndarray, q: np.ndarray, caps: np.ndarray, nu: float) -> list[float]:
    """The multiplier ``tau`` of ``sum q = 1`` that the KL maximiser ``q`` reveals: the
    median over its free rows (``0 < q_i < c_i``) of ``losses_i - nu (log(n q_i) +
    1)``; without a free row, the least such value over the rows at their caps
    (the capped rows' own bound on ``tau``), else the simplex's ``nu (log sum_i
    exp(losses_i/nu) - log n - 1)``."""
    n = losses.size
    free = (q > 0.0) & (q < caps)
    if free.any():
        return [float(np.median(losses[free] - nu * (np.log(n * q[free]) + 1.0)))]
    full = q >= caps
    if full.any():
        return [float(np.min(losses[full] - nu * (np.log(n * caps[full]) + 1.0)))]
    top = float(np.max(losses))
    lse = top / nu + math.log(float(np.sum(np.exp((losses - top) / nu))))
    return [nu * (lse - math.log(n) - 1.0)]


def _penalty(q: np.ndarray, nu: float, penalty: str = "chi2") -> tuple[float, float, float]:
    """``nu D(q || 1/n)`` exactly rounded, an upper bound on it, and the size of its
    terms (for a summation allowance). chi2: ``(nu n/2) ||q - 1/n||^2``; kl: ``nu
    sum_i t_i``, ``t_i = q_i log(n q_i)`` over the rows with ``q_i > 0`` (0
    elsewhere), size ``nu sum_i |t_i|``, each term's rounding at most ``u (3
    |t_i| + 4 q_i)`` (the product ``n q_i``, the logarithm's own error and the
    last product)."""
    if nu == 0.0:
        return 0.0, 0.0, 0.0
    n = q.size
    if penalty == "kl":
        pos = q > 0.0
        t = q[pos] * np.log(n * q[pos])
        value = nu * _exact_sum(t)
        size = nu * _magnitude(t)
        slack = nu * _U * (3.0 * _magnitude(t) + 4.0 * _magnitude(q[pos])) + 2.0 * _U * size
        return value, value + slack + 1e-300, size
    shift = q - 1.0 / n
    cost = (0.5 * nu * n) * (shift * shift)
    value = _exact_sum(cost)
    high = value + 4.0 * _U * value + nu * _U * _magnitude(shift) + 1e-300
    return value, high, high


def _caps(constraint: Any) -> np.ndarray | None:
    """The caps of a capped simplex ``{0 <= q_i <= c_i, sum q = 1}``, or None."""
    # the protocol's row_caps() first: a set's ``caps`` attribute may be its config
    # (the alpha-set's mapping), not numbers
    row_caps = getattr(constraint, "row_caps", None)
    caps = row_caps() if callable(row_caps) else getattr(constraint, "caps", None)
    return None if caps is None else np.asarray(caps, dtype=np.float64)


def _feasible(q: np.ndarray, caps: np.ndarray | None) -> tuple[np.ndarray, float, int]:
    """``q`` moved into ``K = {0 <= q_i <= c_i, sum q = 1}``, what remains of ``sum q
    - 1`` (exactly rounded: 0.0 means exactly 1; else about an ulp of one
    row, 1e-20 for ``q_i`` near 1e-4) and the row that took the correction
    (-1 if none).

    ``q`` is clipped to the caps, and ``1 - sum q`` is added to one row with
    room for it, a free row (``0 < q_i < c_i``) if there is one: where ``q``
    maximises a concave objective over ``K`` every free row has the same
    marginal value (the multiplier of ``sum q = 1``), so moving mass between
    free rows changes the objective only to second order. An excess larger
    than one row can take is first spread over the rows in proportion to
    their room. Raises ValueError when the caps cannot hold a unit of mass.
    Without caps, ``q`` as it is."""
    q = np.asarray(q, dtype=np.float64)
    if caps is None:
        return q, _excess(q), -1
    q = np.clip(q, 0.0, caps)
    excess = _excess(q)
    room = q if excess > 0.0 else caps - q
    if abs(excess) > float(np.max(room)):  # spread over the rows in proportion to their room
        total = _exact_sum(room)
        if not abs(excess) <= total:
            raise ValueError(f"q cannot be moved into the set: sum q - 1 = {excess!r}")
        q = np.clip(q - excess * (room / total), 0.0, caps)
        excess = _excess(q)
        room = q if excess > 0.0 else caps - q
    if excess == 0.0:
        return q, 0.0, -1
    fits = room >= abs(excess)
    free = fits & (q > 0.0) & (q < caps)
    pick = free if free.any() else fits
    j = int(np.flatnonzero(pick)[np.argmax(room[pick])]) if pick.any() else int(np.argmax(room))
    q = q.copy()
    q[j] = min(max(q[j] - excess, 0.0), caps[j])
    return q, _excess(q), j


def _excess(q: np.ndarray) -> float:
    """``sum q - 1``, exactly rounded."""
    return math.fsum([*q.tolist(), -1.0])


def _exact_sum(x: np.ndarray) -> float:
    """``sum x``, exactly rounded (``math.fsum``)."""
    return math.fsum(np.ravel(x).tolist())


def _magnitude(x: np.ndarray) -> float:
    """``sum |x|`` for a rounding allowance: numpy's pairwise sum (its own relative
    error, about ``log2(n)`` ulps, is immaterial in an allowance of a few ulps)."""
    return float(np.sum(np.abs(x)))


def _moved_mass(residual: float, j: int, loss_j: float, q_j: float, nu: float, n: int,
                penalty: str = "chi2") -> float:
    """How much the objective ``<l, q> - nu D(q || 1/n)`` can change when the
    ``residual`` mass ``sum q - 1`` is taken from row ``j`` (loss ``loss_j``), with a
    factor 2 of room for rounding. chi2: the first-order change ``residual (l_j -
    nu (n q_j - 1))`` and the second-order ``(nu n/2) residual^2``. kl: ``residual
    l_j`` and the change of ``nu g``, ``g(t) = t log(n t)``, between ``q_j`` and
    ``q_j - residual``: with ``r = |residual| < q_j / 2`` at most ``nu (r (|log(n
    q_j)| + 1) + r^2 / q_j)`` (``g'(t) = log(n t) + 1``, ``g''(t) = 1/t <= 2/q_j``
    there); otherwise both ends lie in ``[0, x]``, ``x = q_j + r``, where ``|g|
    <= x |log(n x)|`` if ``n x <= 1/e`` (``|g|`` grows up to ``t = 1/(e n)``), else
    ``max(x |log(n x)|, 1/(e n))``: twice that. For the dual function the change
    of the inner minimiser adds ``residual <grad h, grad L_j> / mu``, which
    vanishes with ``grad h`` at the inner solve's floor and is left out
    (``residual`` is an ulp of ``q_j``: the term is below 1e-30)."""
    if residual == 0.0:
        return 0.0
    r = abs(residual)
    if penalty == "kl" and nu > 0.0:
        if q_j > 2.0 * r:
            change = r * (abs(math.log(n * q_j)) + 1.0) + r * r / q_j
        else:
            x = q_j + r
            size = x * abs(math.log(n * x))
            if n * x > 1.0 / math.e:
                size = max(size, 1.0 / (math.e * n))
            change = 2.0 * size
        return 2.0 * (r * abs(loss_j) + nu * change) + 1e-300
    return 2.0 * (r * (abs(loss_j) + nu * abs(n * q_j - 1.0)) + 0.5 * nu * n * r * r) + 1e-300


def _row_losses(problem: Any, w: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``L_i(w)`` over the sorted ``rows``, read in chunks."""
    X, y, model = problem.X, problem.y, problem.model
    step = stream.chunk_rows(X.shape[1])
    out = np.empty(rows.size)
    for start in range(0, rows.size, step):
        r = rows[start:start + step]
        out[start:start + step] = model.raw_losses(w, np.asarray(X[r]), y[r])
    return out / problem.scale
