"""OPT of a problem too large for one convex solve, over a capped set, by a
working set of rows (an active-set method), certified as the direct solve is.

For ``K = {0 <= p_i <= c_i, sum p = 1}`` and a set ``S`` of rows with
``sum_{i in S} c_i >= 1``, ``K_S = {p in K : p_i = 0 outside S}`` is a
nonempty subset of ``K``. Hence:

* every ``p`` in ``K_S`` gives ``D(p) = min_{||w|| <= B} <L(w), p> <= OPT``
  (the min-max inequality, Section 2 of the paper), and ``D(p)`` involves the
  rows of ``S`` only: the certified lower end of the subproblem ``OPT_S``
  (same rows' caps, same ball) is a certified lower bound of OPT;
* every ``w`` in the ball gives ``OPT <= F(w) = max_{p in K} <L(w), p>`` on the
  whole data set (one streamed pass: for the k-set, the average of the k
  largest losses).

With ``w_S`` the subproblem's solution, ``F(w_S) = F_S(w_S)`` when the best
response to ``w_S`` on the whole data set lies in ``S``; the interval
``[lower, F(w_S)]`` is then as tight as the subproblem's. ``S`` grows from the
rows of the largest losses at a start ``w`` by the rows of the largest losses
at ``w_S`` not yet in ``S`` until the interval meets ``rtol |OPT| + atol`` or a
limit is reached. The stopping rule reads only the interval (the full ``F``,
never ``F_S``), so an ``S`` that misses part of the best response is never
accepted on the subproblem's word. Derivation and measurements:
docs/algorithms.md, "Exact optimum", "Large n: a working set of rows".

A subproblem of at most ``conic_size`` entries (rows x parameters) is solved
by ``optimum.solve`` (cvxpy, then ``optimum.certify``); a larger one by the
smooth path (``smooth_subproblem``), its lower end certified by
``harness.gap.certified_min`` at its dual point.

The problem is the paper's (``nu = 0``): the penalty of ``harness.problem``,
chi2 or kl, plays no part, and ``plugins.metrics.reference`` solves a problem
with ``nu > 0`` directly instead (``reference.choose_method``).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from harness import stream
from harness.gap import certified_min, project_ball
from harness.problem import Problem
from plugins.metrics import optimum

#: the largest subproblem (rows x parameters) given to the conic solver; beyond
#: it the smooth path (measured, linear_mse d = 20 on a loaded 2-core machine:
#: Clarabel 18 s for 20,000 rows and more than 600 s for 100,000)
CONIC_SIZE = 200_000
#: the working set starts from, and grows by, this many times the rows of a best response
MARGIN = 2.0
#: the name of the method in ``Optimum.solver``
NAME = "working set"


@dataclass
class Round:
    """One round: ``|S|``, the interval after it, the best response's rows
    outside ``S`` at ``w_S``, the subproblem's solver and the seconds taken."""

    rows: int
    lower: float
    upper: float
    missing: int
    solver: str
    seconds: float

    def note(self) -> str:
        return (f"|S| = {self.rows:,}: [{self.lower:.10g}, {self.upper:.10g}] (width "
                f"{self.upper - self.lower:.2g}), {self.missing:,} row(s) of the best response "
                f"outside S, {self.solver}, {self.seconds:.1f} s")


@dataclass
class Limits:
    """When the working set stops growing without meeting the tolerance."""

    rounds: int = 20
    rows: int = 1_000_000
    seconds: float = 3600.0
    margin: float = MARGIN
    #: rows of the first working set (None: ``margin`` times the best response's)
    initial: int | None = None
    conic_size: int = CONIC_SIZE
    solvers: tuple[str, ...] = optimum.SOLVERS
    time_limit: float | None = None
    start: np.ndarray | None = field(default=None, repr=False)


def full_losses(model: Any, w: np.ndarray, X: Any, y: np.ndarray) -> np.ndarray:
    """``L(w)`` over every row, streamed in chunks (``harness.stream``)."""
    return stream.raw_losses(model, w, X, y) / float(model.scale_)


def top_rows(losses: np.ndarray, count: int) -> np.ndarray:
    """The ``count`` rows of the largest losses, largest first (O(n) selection)."""
    n = losses.size
    count = min(max(int(count), 0), n)
    if count == 0:
        return np.zeros(0, dtype=np.int64)
    part = np.argpartition(losses, n - count)[n - count:] if count < n else np.arange(n)
    return part[np.argsort(-losses[part], kind="stable")]


def best_response(losses: np.ndarray, caps: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
    """``(F, rows, p_rows)``: ``max_{p in K} <losses, p>`` and the greedy argmax's
    support (the largest losses filled up to their caps, ``optimum.capped_value``)
    found among the top ``ceil(1 / min c) + 1`` rows without sorting all n."""
    n = losses.size
    guess = min(n, int(math.ceil(1.0 / float(caps.min()))) + 1)
    while True:
        rows = top_rows(losses, guess)
        if guess == n or float(caps[rows].sum()) >= 1.0:
            break
        guess = min(n, 2 * guess)
    filled = np.cumsum(caps[rows])
    last = min(int(np.searchsorted(filled, 1.0)), rows.size - 1)
    p = caps[rows[:last + 1]].copy()
    p[last] = 1.0 - (filled[last - 1] if last > 0 else 0.0)
    support = rows[:last + 1]
    return float(losses[support] @ p), support, p


def working_set_optimum(X: Any, y: np.ndarray, model: Any, caps: np.ndarray, radius: float,
                        rtol: float = 1e-5, atol: float = 1e-8,
                        limits: Limits | None = None) -> optimum.Optimum:
    """A certified interval ``lower <= OPT <= value`` for the paper's problem over
    the capped set of ``caps`` (``mu = nu = 0``, the ball of ``radius``) by a
    working set of rows (module docstring). ``X`` may be a memory map: it is
    read in chunks (one pass per round) and at the rows of ``S``.

    Returns the interval as it stands when it meets ``rtol |value| + atol``
    (status ``optimal``) or when a limit of ``limits`` is reached first (status
    ``bounded``; ``attempts`` says how wide and why it stopped); raises
    ``optimum.OptimumUnavailable`` if no subproblem could be certified."""
    limits = limits or Limits()
    caps = np.ascontiguousarray(caps, dtype=np.float64)
    n = int(X.shape[0])
    if caps.shape != (n,) or not np.all(caps > 0) or float(caps.sum()) < 1.0:
        raise ValueError("the caps must be positive, one per row, and sum to at least 1")
    began = time.perf_counter()
    w = np.zeros(model.n_params) if limits.start is None else np.asarray(limits.start, float)
    w = project_ball(w, radius)
    losses = full_losses(model, w, X, y)
    upper, response, _ = best_response(losses, caps)
    best_w, lower = w, -math.inf
    size = int(limits.margin * response.size) if limits.initial is None else limits.initial
    S = np.union1d(response, top_rows(losses, size))
    rounds: list[Round] = []
    stop = "the round limit"
    for _ in range(limits.rounds):
        started = time.perf_counter()
        sub = _subproblem(X, y, model, caps, radius, S, best_w, upper, rtol, atol, limits)
        if sub is None:
            break
        w_S, sub_lower, label = sub
        lower = max(lower, sub_lower)
        losses = full_losses(model, w_S, X, y)
        value, response, _ = best_response(losses, caps)
        if value < upper:
            upper, best_w = value, w_S
        missing = np.setdiff1d(response, S, assume_unique=True)
        rounds.append(Round(S.size, lower, upper, missing.size, label,
                            time.perf_counter() - started))
        if upper - lower <= rtol * abs(upper) + atol:
            stop = ""
            break
        new = np.setdiff1d(top_rows(losses, int(limits.margin * response.size)), S)
        if new.size == 0:  # S holds the best response: the subproblem's interval is the
            # limit, and rows below the threshold often make it better posed
            new = np.setdiff1d(top_rows(losses, S.size + response.size), S)
        if new.size == 0:
            stop = "no row to add (S holds every row)"
            break
        if S.size + new.size > limits.rows:
            stop = f"the row limit ({limits.rows:,} rows)"
            break
        if time.perf_counter() - began > limits.seconds:
            stop = f"the time limit ({limits.seconds:g} s)"
            break
        S = np.union1d(S, new)
    if not rounds:
        raise optimum.OptimumUnavailable(f"{NAME}: no subproblem on {S.size:,} rows could be "
                                         "certified")
    width = upper - lower
    met = not stop
    status = "optimal" if met else "bounded"
    summary = (f"{NAME}: |S| = {rounds[-1].rows:,} of {n:,} rows after {len(rounds)} "
               f"round(s), interval width {width:.3g} ({width / abs(upper):.2g} relative) "
               + ("within" if met else "wider than")
               + f" rtol={rtol:g} x |OPT| + atol={atol:g}"
               + ("" if met else f"; stopped by {stop}"))
    elapsed = time.perf_counter() - began
    return optimum.Optimum(upper, lower, f"{NAME} ({rounds[-1].solver})", status, elapsed,
                           [float(v) for v in best_w],
                           [*(r.note() for r in rounds), summary],
                           working_set={"rows": int(rounds[-1].rows), "n": n,
                                        "rounds": len(rounds), "met_tolerance": met})


def _subproblem(X: Any, y: np.ndarray, model: Any, caps: np.ndarray, radius: float,
                S: np.ndarray, w0: np.ndarray, upper: float, rtol: float, atol: float,
                limits: Limits) -> tuple[np.ndarray, float, str] | None:
    """``(w_S, lower, solver)``: the subproblem on the rows ``S`` (sorted), its
    solution and the certified lower end of ``OPT_S``; None if not certified."""
    Xs = np.asarray(X[S], dtype=np.float64)
    ys, cs = y[S], caps[S]
    if S.size * model.n_params <= limits.conic_size:
        # the first attempt within the tolerance, else the first certified at all: a
        # certified interval a little wider than the tolerance still bounds OPT
        for tol in (rtol, math.inf):
            try:
                found = optimum.solve(Xs, ys, model, cs, radius, limits.solvers, tol,
                                      limits.time_limit, atol)
            except optimum.OptimumUnavailable:
                continue
            return np.asarray(found.w), found.lower, found.solver
    try:
        w_S, lower = smooth_subproblem(Xs, ys, model, cs, radius, w0, upper, rtol, atol)
    except (optimum.OptimumUnavailable, ValueError, FloatingPointError):
        return None
    return w_S, lower, "smoothed"


def smooth_subproblem(X: np.ndarray, y: np.ndarray, model: Any, caps: np.ndarray,
                      radius: float, w0: np.ndarray, scale: float, rtol: float,
                      atol: float) -> tuple[np.ndarray, float]:
    """``(w, lower)`` for the subproblem through its smoothed, strongly convex
    neighbour: scipy's L-BFGS-B from ``w0``, then ``optimum.polish`` (Newton), on
    ``F`` with ``mu`` and
    ``nu`` small enough that ``F`` moves by at most ``eps = rtol scale / 8``
    (``(mu/2) B^2 <= eps/2`` and ``(nu n/2) ||q - 1/n||^2 <= (nu n/2) max c <=
    eps/2``), then ``lower`` = a certified lower bound (``certified_min``) of
    ``D(q)`` at the smoothed maximiser ``q`` projected onto ``K``, which holds
    for the paper's problem whatever ``mu`` and ``nu`` were."""
    n = X.shape[0]
    eps = rtol * abs(scale) / 8.0 + atol / 8.0
    mu, nu = eps / radius ** 2, eps / (n * float(caps.max()))
    smoothed = Problem(X, y, model, optimum.CappedSet(caps), mu, nu, radius)
    from scipy.optimize import minimize  # imported on use, as in optimum.project_capped

    def value_grad(v: np.ndarray) -> tuple[float, np.ndarray]:
        value, grad, _ = smoothed.value_and_grad(v)
        return value, grad

    with np.errstate(over="ignore", invalid="ignore"):
        rough = minimize(value_grad, np.asarray(w0, dtype=np.float64), jac=True,
                         method="L-BFGS-B", options={"maxiter": 2000, "maxcor": 20})
    w = optimum.polish(smoothed, np.asarray(rough.x, dtype=np.float64)).w
    q = optimum.project_capped(smoothed.inner(smoothed.losses(w))[1], caps)
    support = np.flatnonzero(q)
    Xq, yq, pq = X[support], y[support], q[support]
    inner = certified_min(lambda v: model.value_and_grad(v, Xq, yq, pq), w, radius,
                          abs_tol=atol / 16.0, rel_tol=rtol / 16.0, max_iter=5000)
    if not math.isfinite(inner.lower):
        raise FloatingPointError("non-finite lower bound")
    return w, inner.lower
