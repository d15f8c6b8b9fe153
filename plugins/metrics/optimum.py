"""The exact optimum ``OPT = min_{w in W} max_{p in K} <L(w), p>`` of a small
problem, by a convex solver, certified by the harness's own numerics.

The paper's problem (Section 2) as a convex program through the
Rockafellar-Uryasev form (Rockafellar and Uryasev 2000, Theorem 1), solved by
cvxpy (Clarabel, then SCS: ``ATTEMPTS``); ``F*`` of ``harness.problem`` (``mu``,
``nu``) likewise through the rows' conjugates. ``certify`` accepts OPT only
inside a certified interval ``upper - lower <= rtol * |upper| + atol``;
``polish`` narrows it by Newton's method when ``nu > 0`` and ``mu > 0``.
Derivation: docs/algorithms.md, "Exact optimum".
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from harness.dual import dual_lower_bound, enclose_value
from harness.gap import InnerSolution, certified_min, polish_strongly_convex, project_ball
from harness.problem import Problem
from plugins.lib.capped import capped_simplex_euclidean

#: bump when the problem's formulation, the record's fields or its accuracy change
#: (2: OPT polished to machine precision on smooth, strongly convex problems)
CACHE_FORMAT = 2
SOLVERS = ("CLARABEL", "SCS")
#: (solver, options) tried in order. Clarabel's interior point can stop with
#: "insufficient progress" on the exponential cones (breast cancer, k = 10);
#: shorter steps or more static regularisation get through. SCS at its
#: default accuracy (1e-4) is too coarse for a reference line (the certified
#: interval on Boston is 1e-3 relative at 1e-5); 1e-7 passes, slowly.
ATTEMPTS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("CLARABEL", {}),
    ("CLARABEL", {"max_step_fraction": 0.9}),
    ("CLARABEL", {"static_regularization_constant": 1e-6}),
    ("SCS", {"eps_abs": 1e-7, "eps_rel": 1e-7, "max_iters": 200_000}),
)
#: each solver's name for its wall-clock limit in seconds
TIME_LIMIT_OPTION = {"CLARABEL": "time_limit", "SCS": "time_limit_secs"}


class OptimumUnavailable(RuntimeError):
    """OPT could not be computed (or certified); the message says why."""


@dataclass
class Optimum:
    """A certified OPT: ``lower <= OPT <= value`` with ``value - lower`` small."""

    value: float
    lower: float
    solver: str
    status: str
    solve_time_s: float
    w: list[float] = field(default_factory=list)
    attempts: list[str] = field(default_factory=list)
    #: whether the conic answer was polished (``polish``) and the seconds that took
    #: (included in ``solve_time_s``)
    polished: bool = False
    polish_time_s: float = 0.0

    def record(self) -> dict[str, Any]:
        return asdict(self)


def capped_value(losses: np.ndarray, caps: np.ndarray) -> tuple[float, np.ndarray]:
    """``max_{p in K} <losses, p>`` over ``K = {0 <= p <= caps, sum p = 1}`` and an
    argmax: fill the largest losses up to their caps (greedy is exact for a box
    and one equality). O(n log n)."""
    order = np.argsort(-losses, kind="stable")
    filled = np.cumsum(caps[order])
    p = np.zeros_like(losses, dtype=np.float64)
    last = int(np.searchsorted(filled, 1.0))
    p[order[:last]] = caps[order[:last]]
    if last < losses.size:
        p[order[last]] = 1.0 - (filled[last - 1] if last > 0 else 0.0)
    return float(losses @ p), p


def project_capped(v: np.ndarray, caps: np.ndarray) -> np.ndarray:
    """Euclidean projection of ``v`` onto ``{0 <= p <= caps, sum p = 1}``:
    ``p = clip(v - nu, 0, caps)`` with ``nu`` the root of ``sum p = 1`` (Brent)."""
    v = np.asarray(v, dtype=np.float64)

    def excess(nu: float) -> float:
        return float(np.clip(v - nu, 0.0, caps).sum()) - 1.0

    lo, hi = float(np.min(v)) - 1.0 - float(caps.max()), float(np.max(v))
    from scipy.optimize import brentq  # imported on use: 0.25 s the CLI pays on a cached OPT

    p = np.clip(v - brentq(excess, lo, hi, xtol=1e-15, rtol=4 * np.finfo(float).eps),
                0.0, caps)
    # the last rounding error of sum p = 1 goes to a row with room on both sides
    room = np.flatnonzero((p > 0) & (p < caps))
    if room.size:
        j = room[np.argmax(np.minimum(p[room], caps[room] - p[room]))]
        p[j] += 1.0 - p.sum()
    return p


def cache_key(X: np.ndarray, y: np.ndarray, model: Any, caps: np.ndarray,
              radius: float, *, mu: float = 0.0, nu: float = 0.0) -> str:
    """SHA-256 of everything OPT depends on: the data's bytes, the model (name,
    parameter count, loss scale), the caps of K, the radius B and, when not
    both zero, ``mu`` and ``nu`` (the paper's problem is hashed as
    before they existed; ``CACHE_FORMAT`` is part of every key)."""
    h = hashlib.sha256()
    h.update(f"minimax-bench OPT v{CACHE_FORMAT}\n".encode())
    for a in (np.ascontiguousarray(X, dtype=np.float64), np.ascontiguousarray(y),
              np.ascontiguousarray(caps, dtype=np.float64)):
        h.update(f"{a.dtype.str}{a.shape}".encode())
        h.update(a.tobytes())
    h.update(f"{model.name}|{model.n_params}|{float(model.scale_)!r}|{float(radius)!r}".encode())
    if mu != 0.0 or nu != 0.0:
        h.update(f"|mu={float(mu)!r}|nu={float(nu)!r}".encode())
    return h.hexdigest()


def load_cached(cache_dir: Path, key: str) -> Optimum | None:
    """A certified OPT stored under ``key``, or None (missing or unreadable)."""
    path = cache_dir / f"opt-{key}.json"
    try:
        record = json.loads(path.read_text())
        if record.get("key") != key or record.get("format") != CACHE_FORMAT:
            return None
        return Optimum(**record["optimum"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def store(cache_dir: Path, key: str, optimum: Optimum, about: dict[str, Any]) -> Path:
    """Write the record atomically (parallel jobs may store the same key)."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    path = cache_dir / f"opt-{key}.json"
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"format": CACHE_FORMAT, "key": key, "about": about,
                               "optimum": optimum.record()}, indent=1))
    os.replace(tmp, path)
    return path


def _formulate(X: np.ndarray, y: np.ndarray, model: Any, caps: np.ndarray, radius: float,
               mu: float = 0.0, nu: float = 0.0):
    import cvxpy as cp

    w = cp.Variable(model.n_params)
    tau = cp.Variable()
    losses = model.cvx_raw_losses(w, X, y) / model.scale_
    if mu == 0.0 and nu == 0.0:  # the paper's problem, exactly as cached records were made
        u = cp.Variable(X.shape[0], nonneg=True)
        excess = u >= losses - tau
        problem = cp.Problem(cp.Minimize(tau + caps @ u), [excess, cp.norm(w, 2) <= radius])
        return problem, w, excess
    e = cp.Variable(X.shape[0])
    excess = e >= losses - tau
    objective = tau + conjugate_phi(cp, e, caps, nu) + 0.5 * mu * cp.sum_squares(w)
    constraints = [excess] if math.isinf(radius) else [excess, cp.norm(w, 2) <= radius]
    return cp.Problem(cp.Minimize(objective), constraints), w, excess


def conjugate_phi(cp: Any, z: Any, caps: np.ndarray, nu: float) -> Any:
    """``sum_i phi_i(z_i)`` as a cvxpy expression (module docstring): with ``nu > 0``
    ``min_v sum_i (z_i - v_i)^2 / (2 nu n) + (z_i - v_i) / n + c_i max(v_i, 0)``
    (partial minimisation over a new variable ``v``: convex, nondecreasing in
    ``z``); with ``nu = 0`` ``sum_i c_i max(z_i, 0)``."""
    if nu == 0.0:
        return caps @ cp.pos(z)
    n = caps.size
    v = cp.Variable(n)
    return (cp.sum_squares(z - v) / (2.0 * nu * n) + cp.sum(z - v) / n
            + caps @ cp.pos(v))


def solve(X: np.ndarray, y: np.ndarray, model: Any, caps: np.ndarray, radius: float,
          solvers: tuple[str, ...] = SOLVERS, rtol: float = 1e-5,
          time_limit: float | None = None, atol: float = 1e-8, *,
          mu: float = 0.0, nu: float = 0.0) -> Optimum:
    """OPT of the scaled problem (``F*`` with ``mu``, ``nu``) by the first
    attempt (``ATTEMPTS``, restricted to ``solvers``) whose answer ``certify``
    accepts with ``upper - lower <= rtol * |upper| + atol``, each attempt
    stopped after ``time_limit`` seconds; raises ``OptimumUnavailable`` naming
    every attempt, ValueError for an invalid ``mu``, ``nu`` or ``radius``."""
    _check_regularisation(radius, mu, nu)
    try:
        import cvxpy as cp
    except ImportError as err:
        raise OptimumUnavailable("cvxpy is not installed (pip install "
                                 "'minimax-bench[exact]')") from err
    if getattr(model, "cvx_raw_losses", None) is None:
        raise OptimumUnavailable(f"the model '{model.name}' has no convex formulation "
                                 "(cvx_raw_losses)")
    X = np.asarray(X, dtype=np.float64)
    attempts: list[str] = []
    for solver, options in ATTEMPTS:
        if solver not in solvers:
            continue
        if time_limit is not None:
            options = {**options, TIME_LIMIT_OPTION[solver]: time_limit}
        outcome = _attempt(cp, X, y, model, caps, radius, solver, options, rtol, atol,
                           mu, nu)
        if isinstance(outcome, Optimum):
            outcome.attempts = [*attempts, outcome.attempts[0]]
            return outcome
        attempts.append(outcome)
    raise OptimumUnavailable("no solver gave a certified optimum (" + "; ".join(attempts) + ")")


def _attempt(cp: Any, X: np.ndarray, y: np.ndarray, model: Any, caps: np.ndarray,
             radius: float, solver: str, options: dict[str, Any],
             rtol: float, atol: float, mu: float = 0.0, nu: float = 0.0) -> Optimum | str:
    """One solve and its certificate: a certified ``Optimum``, or why not."""
    limit = options.get(TIME_LIMIT_OPTION[solver])
    label = solver + "".join(f" {k}={v}" for k, v in options.items()
                             if k not in ("max_iters", TIME_LIMIT_OPTION[solver]))
    if solver not in cp.installed_solvers():
        return f"{label}: not installed"
    problem, w, excess = _formulate(X, y, model, caps, radius, mu, nu)
    if not problem.is_dcp():
        raise OptimumUnavailable(f"the model '{model.name}' gave no convex (DCP) "
                                 "formulation of its losses")
    start = time.perf_counter()
    try:
        with warnings.catch_warnings():  # "may be inaccurate": the certificate decides
            warnings.simplefilter("ignore", UserWarning)
            problem.solve(solver=solver, **options)
    except (cp.error.SolverError, ArithmeticError, ValueError) as err:
        return f"{label}: {type(err).__name__}: {str(err)[:120]}"
    elapsed = time.perf_counter() - start
    if limit is not None and (problem.status == cp.USER_LIMIT or elapsed >= limit):
        label += f" (stopped at the time limit, {limit:g} s)"
    if problem.status not in (cp.OPTIMAL, cp.OPTIMAL_INACCURATE) or w.value is None:
        return f"{label}: status {problem.status}"
    dual = excess.dual_value
    try:
        value, lower = certify(X, y, model, caps, radius, np.asarray(w.value),
                               None if dual is None else np.asarray(dual), mu=mu, nu=nu)
    except (ValueError, FloatingPointError) as err:
        return f"{label}: certification failed: {err}"
    w_star = project_ball(np.asarray(w.value, dtype=np.float64), radius)
    note = f"{label}: {problem.status}"
    polished, polish_time = False, 0.0
    if smooth_and_strongly_convex(mu, nu):
        began = time.perf_counter()
        try:
            sharp = polish(Problem(X, y, model, CappedSet(caps), mu, nu, radius), w_star)
        except (ValueError, FloatingPointError) as err:
            note += f"; polishing failed ({type(err).__name__}: {err}), the conic interval kept"
        else:
            polish_time = time.perf_counter() - began
            note += (f"; polished by Newton in {polish_time:.2f} s: interval "
                     f"{value - lower:.2g} -> {sharp.upper - sharp.lower:.2g}")
            if sharp.upper <= value:
                value, w_star, polished = sharp.upper, sharp.w, True
            lower = max(lower, sharp.lower)
    if not value - lower <= rtol * abs(value) + atol:
        return (f"{label}: status {problem.status} but the certified interval "
                f"[{lower:.9g}, {value:.9g}] is wider than rtol={rtol:g} x |upper| "
                f"+ atol={atol:g}")
    return Optimum(value, lower, solver, problem.status, elapsed + polish_time,
                   [float(v) for v in w_star], [note], polished, polish_time)


def smooth_and_strongly_convex(mu: float, nu: float) -> bool:
    """Whether ``F`` is ``C^1`` (``nu > 0``: the inner maximiser is unique) and
    ``mu``-strongly convex (``mu > 0``): then OPT is polished to machine precision."""
    return mu > 0.0 and nu > 0.0


def polish(problem: Problem, w0: np.ndarray) -> InnerSolution:
    """``lower <= F* <= upper`` with ``upper = F(w)`` at the returned ``w``, to the
    resolution float64 allows, for a smooth, strongly convex ``F`` (module
    docstring): Newton's method from ``w0`` on ``Problem.value_and_grad`` and
    the strong-convexity certificate (``harness.gap.polish_strongly_convex``),
    with ``F`` read through its enclosure (``harness.dual.enclose_value``)."""
    if not smooth_and_strongly_convex(float(problem.mu), float(problem.nu)):
        raise ValueError(f"polishing needs mu > 0 and nu > 0; got mu={problem.mu!r}, "
                         f"nu={problem.nu!r}")

    def value_grad(w: np.ndarray) -> tuple[float, np.ndarray]:
        value, grad, _ = problem.value_and_grad(w)
        return value, grad

    def enclose(w: np.ndarray) -> tuple[float, float]:
        low, high, _ = enclose_value(problem, w)
        return low, high

    return polish_strongly_convex(value_grad, np.asarray(w0, dtype=np.float64),
                                  float(problem.mu), float(problem.radius), enclose=enclose)


def certify(X: np.ndarray, y: np.ndarray, model: Any, caps: np.ndarray, radius: float,
            w: np.ndarray, dual: np.ndarray | None, *, mu: float = 0.0,
            nu: float = 0.0) -> tuple[float, float]:
    """``(upper, lower)`` with ``lower <= OPT <= upper`` (see the module docstring).

    ``upper`` is the objective at ``w`` projected onto the ball; ``lower`` is
    the certified minimum of ``<L(.), p>`` for ``p`` = ``dual`` projected onto K
    (the oracle's argmax at ``w`` if there is no dual), started at ``w``. With
    ``mu`` or ``nu`` nonzero: ``upper = F(w)`` (``harness.problem.Problem.value``)
    and ``lower`` a certified lower bound on the dual function ``D(q)`` at that
    ``q`` (the inner maximiser at ``w`` if there is no dual).
    """
    if mu != 0.0 or nu != 0.0:
        return _certify_regularised(X, y, model, caps, radius, w, dual, mu, nu)
    w = project_ball(np.asarray(w, dtype=np.float64), radius)
    losses = model.raw_losses(w, X, y) / model.scale_
    upper, p_at_w = capped_value(losses, caps)
    p = p_at_w if dual is None or not np.all(np.isfinite(dual)) else project_capped(dual, caps)
    support = np.flatnonzero(p)
    Xs, ys, ps = X[support], y[support], p[support]
    inner = certified_min(lambda v: model.value_and_grad(v, Xs, ys, ps), w, radius,
                          abs_tol=1e-12, rel_tol=1e-9, max_iter=5000)
    if not (math.isfinite(upper) and math.isfinite(inner.lower)):
        raise FloatingPointError("non-finite objective or bound")
    if inner.lower > upper + 1e-9 * max(1.0, abs(upper)):
        raise FloatingPointError(f"lower bound {inner.lower!r} above the objective {upper!r}")
    return upper, min(inner.lower, upper)


def _check_regularisation(radius: float, mu: float, nu: float) -> None:
    if not (math.isfinite(mu) and mu >= 0.0 and math.isfinite(nu) and nu >= 0.0):
        raise ValueError(f"mu and nu must be finite and >= 0; got mu={mu!r}, nu={nu!r}")
    if math.isnan(radius) or (math.isinf(radius) and mu == 0.0):
        raise ValueError(f"the radius must be finite unless mu > 0; got radius={radius!r} "
                         f"with mu={mu!r}")


class CappedSet:
    """``K = {0 <= q_i <= c_i, sum q = 1}`` from its caps alone: the two
    methods ``harness.problem.Problem`` asks of a constraint set."""

    def __init__(self, caps: np.ndarray) -> None:
        self.caps = np.ascontiguousarray(caps, dtype=np.float64)

    def lmo(self, losses: np.ndarray) -> tuple[float, np.ndarray]:
        return capped_value(losses, self.caps)

    def euclidean_project(self, v: np.ndarray) -> np.ndarray:
        return capped_simplex_euclidean(v, self.caps)


def _certify_regularised(X: np.ndarray, y: np.ndarray, model: Any, caps: np.ndarray,
                         radius: float, w: np.ndarray, dual: np.ndarray | None,
                         mu: float, nu: float) -> tuple[float, float]:
    _check_regularisation(radius, mu, nu)
    problem = Problem(X, y, model, CappedSet(caps), mu, nu, radius)
    w = problem.project(np.asarray(w, dtype=np.float64))
    losses = problem.losses(w)
    upper = problem.value(w, losses)
    if dual is None or not np.all(np.isfinite(dual)):
        q = problem.inner(losses)[1]
    else:
        q = project_capped(np.asarray(dual, dtype=np.float64), caps)
    lower, _ = dual_lower_bound(problem, q, w, abs_tol=1e-12, rel_tol=1e-9, max_iter=5000)
    if not (math.isfinite(upper) and math.isfinite(lower)):
        raise FloatingPointError("non-finite objective or bound")
    if lower > upper + 1e-9 * max(1.0, abs(upper)):
        raise FloatingPointError(f"lower bound {lower!r} above the objective {upper!r}")
    return upper, min(lower, upper)
