"""The exact optimum ``OPT = min_{w in W} max_{p in K} <L(w), p>`` of a small
problem, by a convex solver, certified by the harness's own numerics.

For ``K = {p : 0 <= p_i <= c_i, sum p = 1}`` (the caps ``c`` are the set's
``row_caps()``: the k-set: ``c_i = 1/k``; the simplex: ``k = 1``; an
alpha-set: ``c_i = alpha_i``) linear-programming duality gives

    max_{p in K} <l, p> = min_tau  tau + sum_i c_i (l_i - tau)_+

(Rockafellar and Uryasev 2000, Theorem 1, for the k-set: CVaR at level
``alpha = k/n``), so OPT is the convex program

    min_{||w|| <= B, tau, u >= 0}  tau + <c, u>   s.t.  u_i >= loss_i(w) / s - tau

with ``s`` the model's loss scale and ``W`` the l2-ball of radius ``B`` over all
parameters, bias included (the game's problem exactly). cvxpy solves it
(Clarabel, retried with safer settings, then SCS: ``ATTEMPTS``); the model
supplies its raw losses as a cvxpy expression (``cvx_raw_losses``). The
multipliers of the constraints ``u_i >= ...`` are the saddle point's ``p``.

The solver's answer is not trusted as is. ``certify`` sandwiches OPT:

* ``upper = max_{p in K} <L(w*), p>`` at the solver's ``w*`` (projected onto the
  ball), evaluated with the model's numpy losses and the exact oracle: the
  objective of a feasible point, so ``OPT <= upper``;
* ``lower`` = a certified lower bound (``harness.gap.certified_min``,
  Frank-Wolfe bound) on ``min_{w in W} <L(w), p*>`` with the solver's ``p*``
  projected onto ``K``: for any ``p`` in ``K`` this minimum is at most OPT.

The value used as OPT is ``upper``; it is accepted only if ``upper - lower
<= rtol * |upper| + atol``, so a solver that stops early or returns a wrong
point is reported as a failure, never as a wrong OPT. The absolute part
matters when OPT is near 0 (Boston with ``B = 10``: OPT is about 1e-4 and the
solvers agree to about 2e-9, which no useful ``rtol`` alone accepts).

The regularised, smoothed problem of ``harness.problem`` (keywords ``mu``,
``nu``; ``radius`` may be ``inf`` when ``mu > 0``),

    F* = min_{||w|| <= B} max_{q in K} <L(w), q> - (nu n/2) ||q - 1/n||^2 + (mu/2) ||w||^2,

is solved the same way. With ``nu > 0`` Lagrangian duality on ``sum q = 1``
(multiplier ``tau``) separates the rows:

    max_{q in K} <l, q> - (nu n/2) ||q - 1/n||^2 = min_tau  tau + sum_i phi_i(l_i - tau),
    phi_i(z) = max_{0 <= q <= c_i} q z - (nu n/2) (q - 1/n)^2
             = min_v  (z - v)^2 / (2 nu n) + (z - v) / n + c_i max(v, 0),

the second line because ``phi_i`` is the conjugate of the sum of
``f(q) = (nu n/2)(q - 1/n)^2`` (conjugate ``f*(s) = s/n + s^2/(2 nu n)``) and
the indicator of ``[0, c_i]`` (conjugate ``c_i max(v, 0)``), hence the
infimal convolution of the two conjugates (``conjugate_phi``).
``phi_i`` is convex and nondecreasing, so with ``e_i >= loss_i(w)/s - tau``
the program is DCP, and the constraints' multipliers are again ``q``
(``phi_i'(z)`` is the maximising ``q``). With ``nu = 0``, ``phi_i(z) = c_i
max(z, 0)``: the Rockafellar-Uryasev program above. ``certify`` then takes
``upper = F`` at the solver's ``w`` (``Problem.value``, numpy) and ``lower`` =
a certified lower bound on the dual function ``D(q)`` at the solver's ``q``
projected onto K (``harness.dual.dual_lower_bound``). With ``mu = nu = 0``
and a finite ball, formulation and results are exactly those of the paper's
problem.

Polishing. With ``nu > 0`` and ``mu > 0`` ``F`` is ``C^1`` (the inner
maximiser ``q(w) = proj_K(1/n + L/(nu n))`` is unique; ``Problem.
value_and_grad``) and ``mu``-strongly convex, so the conic answer, accurate to
about 1e-9, is only a starting point: ``polish`` runs Newton's method on ``F``
from it (``harness.gap.polish_strongly_convex``) until ``||grad F||`` reaches
its rounding floor, and certifies ``F* >= F(w) - ||grad F(w)||^2 / (2 mu)``
(over an active ball: the Lagrangian bound with the ball's multiplier).
``F(w)`` is read through its enclosure (``harness.dual.enclose_value``:
exactly rounded sums over the rows, the inner maximum between its value at a
feasible ``q`` and its Lagrangian dual), so the record's ``value`` is an upper
bound on ``F(w)``, hence on ``F*``, and ``lower`` a lower bound on ``F*``, up to
the rounding of each row's loss inside the model (a few ulps of each loss;
checked against an 80-bit evaluation in ``tests/test_opt_polish.py``). The
interval is then about 1e-15 of ``|F*|`` wide (``tools/opt_table.py``: 1.2e-15
to 2e-15 on the five regression sets of ``experiment=prospect``), against
about 1e-9 from the conic solver alone. The nonsmooth problem (``nu = 0``)
keeps the conic interval.
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
