"""The exact optimum ``OPT = min_{w in W} max_{p in K} <L(w), p>`` of a small
problem, by a convex solver, certified by the harness's own numerics.

Three forms of ``K``: a capped simplex ``{0 <= p_i <= c_i, sum p = 1}`` (its
caps), a permutahedron ``P(sigma)`` (its spectrum: a spectral risk), and any
set with a method ``support_function(cp, v)`` (the cvxpy expression of
``sigma_K(v) = max_{q in K} <v, q>``). The paper's problem (Section 2) as a
convex program through the Rockafellar-Uryasev form (Rockafellar and Uryasev
2000, Theorem 1), a spectral risk through its support function ``sum_j
(sigma_(j) - sigma_(j+1)) sum_largest(., j)`` over its distinct levels, solved
by cvxpy (Clarabel, then SCS: ``ATTEMPTS``); ``F*`` of ``harness.problem``
(``mu``, ``nu``, either penalty: chi2 or kl, the latter with exponential
cones) likewise through the conjugates. ``certify`` accepts OPT only inside a certified
interval ``upper - lower <= rtol * |upper| + atol``; ``polish`` narrows it by
Newton's method when ``nu > 0`` and ``mu > 0``, and starts from scipy's
L-BFGS-B instead of a conic solve where a spectral program is too large
(``SPECTRAL_CONIC_SIZE``). Derivation: docs/algorithms.md, "Exact optimum".
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

from harness import stream
from harness.dual import dual_lower_bound, enclose_value
from harness.gap import InnerSolution, certified_min, polish_strongly_convex, project_ball
from harness.problem import PENALTIES, Problem
from plugins.lib.capped import alpha_kl_projection, capped_simplex_euclidean
from plugins.lib.permutahedron import (
    permutahedron_kl_projection,
    permutahedron_lmo,
    permutahedron_projection,
)

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
#: the largest spectral program (distinct levels m times rows n: its size is O(m n))
#: solved by cvxpy; beyond it a smooth, strongly convex F is minimised by L-BFGS-B
#: and polished. Measured with Clarabel (linear_mse, d = 5, m = n): 2 s at
#: m n = 4e4, 19 s at 2e5 (docs/algorithms.md, "Exact optimum").
SPECTRAL_CONIC_SIZE = 200_000
#: the name of the smooth path in ``Optimum.solver``
LBFGS = "L-BFGS-B"


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
    #: a working set's final ``rows`` of ``n``, its ``rounds`` and whether the interval
    #: ``met_tolerance`` (``plugins.metrics.working_set``); empty for a direct solve
    working_set: dict[str, Any] = field(default_factory=dict)

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


def cache_key(X: np.ndarray, y: np.ndarray, model: Any, caps: np.ndarray | None,
              radius: float, *, mu: float = 0.0, nu: float = 0.0,
              spectrum: np.ndarray | None = None, penalty: str = "chi2",
              support: Any = None) -> str:
    """SHA-256 of everything OPT depends on: the data's bytes, the model (name,
    parameter count, loss scale), K (its caps, or the word ``spectrum`` and the
    spectrum's bytes, or for a ``support`` set what defines it: ``set_identity``),
    the radius B, when not both zero ``mu`` and ``nu``, and the penalty when it
    is kl with ``nu > 0`` (the paper's problem is hashed as before mu and nu
    existed, the chi-square problem as before penalties did; ``CACHE_FORMAT`` is
    part of every key). A capped set's key is the one it had before spectra."""
    penalty = _penalty_of(penalty, nu)
    caps, spectrum = _set_arrays(caps, spectrum, support)
    h = hashlib.sha256()
    h.update(f"minimax-bench OPT v{CACHE_FORMAT}\n".encode())
    _hash_rows(h, X)
    arrays = [np.ascontiguousarray(y)]
    if caps is not None:
        arrays.append(caps)
    for a in arrays:
        h.update(f"{a.dtype.str}{a.shape}".encode())
        h.update(a.tobytes())
    if spectrum is not None:
        h.update(f"spectrum{spectrum.dtype.str}{spectrum.shape}".encode())
        h.update(spectrum.tobytes())
    if support is not None:
        h.update(f"support|{set_identity(support)}".encode())
    h.update(f"{model.name}|{model.n_params}|{float(model.scale_)!r}|{float(radius)!r}".encode())
    if mu != 0.0 or nu != 0.0:
        h.update(f"|mu={float(mu)!r}|nu={float(nu)!r}".encode())
    if penalty != "chi2":
        h.update(f"|penalty={penalty}".encode())
    return h.hexdigest()


def set_identity(constraint: Any) -> str:
    """What defines a set known by its support function only, for the cache key:
    its class (module and name), its ``label()`` if it has one and the values of
    its declared ``params`` (``repr``, so no digit is lost)."""
    cls = type(constraint)
    parts = [f"{cls.__module__}.{cls.__qualname__}"]
    label = getattr(constraint, "label", None)
    if callable(label):
        parts.append(f"label={label()}")
    for key in sorted(getattr(cls, "params", None) or {}):
        if hasattr(constraint, key):
            parts.append(f"{key}={getattr(constraint, key)!r}")
    return "|".join(parts)


def _penalty_of(penalty: str, nu: float) -> str:
    """The penalty as it matters: ``chi2`` when ``nu = 0`` (no penalty term, the same
    problem and key whichever is named); ValueError for an unknown one."""
    if penalty not in PENALTIES:
        raise ValueError(f"The penalty must be one of {list(PENALTIES)}. Got {penalty!r} "
                         "instead.")
    return penalty if nu > 0.0 else "chi2"


def _hash_rows(h: Any, X: Any) -> None:
    """Feed ``X`` as float64 rows to the hash ``h`` in row chunks (``harness.stream``),
    so that a memory-mapped data set is never copied whole; the digest is the
    one of ``X``'s bytes in one piece (SHA-256 is incremental)."""
    n, d = (int(v) for v in X.shape)
    h.update(f"{np.dtype(np.float64).str}{(n, d)}".encode())
    for rows in stream.row_slices(n, d):
        h.update(np.ascontiguousarray(X[rows], dtype=np.float64).data)


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


def _formulate(X: np.ndarray, y: np.ndarray, model: Any, caps: np.ndarray | None,
               radius: float, mu: float = 0.0, nu: float = 0.0,
               spectrum: np.ndarray | None = None, penalty: str = "chi2",
               support: Any = None):
    import cvxpy as cp

    w = cp.Variable(model.n_params)
    if caps is None:
        if support is None:
            def sigma_K(u: Any) -> Any:
                return support_function(cp, u, spectrum)
        else:
            def sigma_K(u: Any) -> Any:
                return support.support_function(cp, u)
        return _formulate_support(cp, X, y, model, w, sigma_K, radius, mu, nu, penalty)
    tau = cp.Variable()
    losses = model.cvx_raw_losses(w, X, y) / model.scale_
    if mu == 0.0 and nu == 0.0:  # the paper's problem, exactly as cached records were made
        u = cp.Variable(X.shape[0], nonneg=True)
        excess = u >= losses - tau
        problem = cp.Problem(cp.Minimize(tau + caps @ u), [excess, cp.norm(w, 2) <= radius])
        return problem, w, excess
    e = cp.Variable(X.shape[0])
    excess = e >= losses - tau
    objective = tau + conjugate_phi(cp, e, caps, nu, penalty) + 0.5 * mu * cp.sum_squares(w)
    constraints = [excess] if math.isinf(radius) else [excess, cp.norm(w, 2) <= radius]
    return cp.Problem(cp.Minimize(objective), constraints), w, excess


def _formulate_support(cp: Any, X: np.ndarray, y: np.ndarray, model: Any, w: Any,
                       sigma_K: Any, radius: float, mu: float, nu: float, penalty: str):
    """``min support_inner(e) + (mu/2) ||w||^2`` over ``e >= L(w)`` and the ball: the
    inner maximum is nondecreasing in the losses (every ``q`` in K is ``>= 0``),
    so the epigraph is exact, and the constraint's multiplier is the inner
    maximiser ``q``."""
    e = cp.Variable(X.shape[0])
    excess = e >= model.cvx_raw_losses(w, X, y) / model.scale_
    objective = support_inner(cp, e, sigma_K, X.shape[0], nu, penalty)
    if mu != 0.0:
        objective = objective + 0.5 * mu * cp.sum_squares(w)
    constraints = [excess] if math.isinf(radius) else [excess, cp.norm(w, 2) <= radius]
    return cp.Problem(cp.Minimize(objective), constraints), w, excess


def conjugate_phi(cp: Any, z: Any, caps: np.ndarray, nu: float, penalty: str = "chi2") -> Any:
    """``sum_i phi_i(z_i)`` as a cvxpy expression (module docstring), ``phi_i(z) =
    max_{0 <= q <= c_i} q z - nu d(q)`` with ``d`` the penalty's per-row term, as
    the infimal convolution of the conjugates of ``nu d`` and of the box ``[0,
    c_i]`` (partial minimisation over a new variable ``v``: convex,
    nondecreasing in ``z``): chi2 ``min_v sum_i (z_i - v_i)^2 / (2 nu n) + (z_i -
    v_i) / n + c_i max(v_i, 0)``; kl ``min_v sum_i (nu/n) exp((z_i - v_i)/nu - 1)
    + c_i max(v_i, 0)``; with ``nu = 0`` ``sum_i c_i max(z_i, 0)``."""
    if nu == 0.0:
        return caps @ cp.pos(z)
    n = caps.size
    v = cp.Variable(n)
    if penalty == "kl":
        return (nu / n) * cp.sum(cp.exp((z - v) / nu - 1.0)) + caps @ cp.pos(v)
    return (cp.sum_squares(z - v) / (2.0 * nu * n) + cp.sum(z - v) / n
            + caps @ cp.pos(v))


def penalty_conjugate(cp: Any, s: Any, n: int, nu: float, penalty: str = "chi2") -> Any:
    """``(nu D)*(s)``, the conjugate of the penalty ``nu D(. || 1/n)`` as a cvxpy
    expression, convex and nondecreasing where it is used: chi2 (``D`` over R^n)
    ``<s, 1/n> + ||s||^2 / (2 nu n)``; kl (``D(q) = sum_i q_i log(n q_i)`` over
    R^n_+) ``sum_i (nu/n) exp(s_i/nu - 1)``."""
    if penalty == "kl":
        return (nu / n) * cp.sum(cp.exp(s / nu - 1.0))
    return cp.sum(s) / n + cp.sum_squares(s) / (2.0 * nu * n)


def spectral_levels(spectrum: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(j, coef)``: the support function of ``P(sigma)`` is ``sum coef * (sum of
    the j largest entries)`` with ``coef = sigma_(j) - sigma_(j+1) > 0`` over
    ``sigma`` sorted descending (``sigma_(n+1) = 0``), one term per distinct level."""
    desc = np.asarray(spectrum, dtype=np.float64)[::-1]
    coef = desc - np.append(desc[1:], 0.0)
    j = np.flatnonzero(coef > 0.0)
    return j + 1, coef[j]


def spectral_size(spectrum: np.ndarray) -> int:
    """``m n``, the order of the spectral program's size for ``m`` distinct levels."""
    return int(spectral_levels(spectrum)[0].size) * int(np.size(spectrum))


def support_function(cp: Any, u: Any, spectrum: np.ndarray) -> Any:
    """``h(u) = max_{q in P(sigma)} <u, q> = sum_i sigma_i u_(i)`` as a cvxpy
    expression (``spectral_levels``): convex and nondecreasing in ``u``."""
    sizes, coefs = spectral_levels(spectrum)
    terms = [float(c) * cp.sum_largest(u, int(j)) for j, c in zip(sizes, coefs, strict=True)]
    return terms[0] if len(terms) == 1 else cp.sum(cp.hstack(terms))


def spectral_inner(cp: Any, e: Any, spectrum: np.ndarray, nu: float,
                   penalty: str = "chi2") -> Any:
    """``max_{q in P(sigma)} <e, q> - nu D(q || 1/n)`` as a cvxpy expression
    (``support_inner`` with the permutahedron's ``support_function``)."""
    return support_inner(cp, e, lambda u: support_function(cp, u, spectrum), np.size(spectrum),
                         nu, penalty)


def support_inner(cp: Any, e: Any, sigma_K: Any, n: int, nu: float,
                  penalty: str = "chi2") -> Any:
    """``max_{q in K} <e, q> - nu D(q || 1/n)`` as a cvxpy expression, convex and
    nondecreasing in ``e``, from the support function ``sigma_K(u)`` of K (a
    cvxpy expression): with ``nu > 0`` by Fenchel duality ``min_u sigma_K(u) +
    (nu D)*(e - u)`` (``penalty_conjugate``; partial minimisation over a new
    variable ``u``), with ``nu = 0`` ``sigma_K(e)``. For a permutahedron and
    chi2: ``min_u h(u) + <e - u, 1/n> + ||e - u||^2 / (2 nu n)``."""
    if nu == 0.0:
        return sigma_K(e)
    u = cp.Variable(n)
    return sigma_K(u) + penalty_conjugate(cp, e - u, n, nu, penalty)


def solve(X: np.ndarray, y: np.ndarray, model: Any, caps: np.ndarray | None, radius: float,
          solvers: tuple[str, ...] = SOLVERS, rtol: float = 1e-5,
          time_limit: float | None = None, atol: float = 1e-8, *,
          mu: float = 0.0, nu: float = 0.0, spectrum: np.ndarray | None = None,
          conic_size: int = SPECTRAL_CONIC_SIZE, penalty: str = "chi2",
          support: Any = None) -> Optimum:
    """OPT of the scaled problem (``F*`` with ``mu``, ``nu``) by the first
    attempt (``ATTEMPTS``, restricted to ``solvers``) whose answer ``certify``
    accepts with ``upper - lower <= rtol * |upper| + atol``, each attempt
    stopped after ``time_limit`` seconds; raises ``OptimumUnavailable`` naming
    every attempt, ValueError for an invalid ``mu``, ``nu``, ``radius`` or set.

    ``K`` is the capped simplex of ``caps``, or (``caps=None``) the
    permutahedron of ``spectrum`` (ascending), or the set ``support`` (an
    object with ``support_function(cp, v)``, and the oracles ``Problem`` asks
    of a set to certify: ``lmo``, ``euclidean_project``, ``project`` for kl).
    ``penalty`` is the divergence of ``nu D(q || 1/n)`` (``harness.problem``).
    A spectral program larger than ``conic_size`` (``spectral_size``) is not
    given to cvxpy; where it is not, or every attempt failed, a smooth, strongly
    convex ``F`` over a set without caps is minimised by ``solve_smooth``, which
    such an ``F`` with the kl penalty tries first."""
    _check_regularisation(radius, mu, nu)
    penalty = _penalty_of(penalty, nu)
    caps, spectrum = _set_arrays(caps, spectrum, support)
    X = np.asarray(X, dtype=np.float64)
    smooth = caps is None and smooth_and_strongly_convex(mu, nu)
    if spectrum is not None and spectrum.size != X.shape[0]:
        raise ValueError(f"The spectrum must have one entry per row (n={X.shape[0]}). Got "
                         f"{spectrum.size} instead.")
    if smooth and penalty == "kl":
        # Clarabel stalls on the exponential cones of a set without caps and SCS
        # takes a minute where L-BFGS-B and the polish take a fraction of a second
        # (docs/algorithms.md, "f-divergence penalties"): the smooth path first
        first = [f"{penalty} over a set without caps: {LBFGS} first"]
        try:
            return solve_smooth(Problem(X, y, model, _constraint(caps, spectrum, support), mu,
                                        nu, radius, penalty), rtol, atol, first)
        except OptimumUnavailable as err:
            smooth, tried = False, [str(err)]
    else:
        tried = []
    if spectrum is not None and spectral_size(spectrum) > conic_size:
        levels = spectral_levels(spectrum)[0].size
        size = (f"the spectral program is too large for cvxpy ({levels:,} distinct levels x "
                f"{X.shape[0]:,} rows = {spectral_size(spectrum):,} > {conic_size:,})")
        if tried:
            raise OptimumUnavailable("; ".join([*tried, size]))
        if not smooth:
            raise OptimumUnavailable(f"{size}, and F is not smooth and strongly convex "
                                     f"(mu={mu!r}, nu={nu!r}; L-BFGS-B and Newton's polish "
                                     "need mu > 0 and nu > 0)")
        outcome: Optimum | list[str] = [size]
    else:
        try:
            outcome = _conic(X, y, model, caps, radius, solvers, rtol, time_limit, atol,
                             mu, nu, spectrum, penalty, support)
        except OptimumUnavailable as err:
            if not smooth:
                raise OptimumUnavailable("; ".join([*tried, str(err)])) from err
            outcome = [str(err)]
    if isinstance(outcome, Optimum):
        outcome.attempts = [*tried, *outcome.attempts]
        return outcome
    if smooth:
        return solve_smooth(Problem(X, y, model, _constraint(caps, spectrum, support), mu, nu,
                                    radius, penalty), rtol, atol, outcome)
    raise OptimumUnavailable("no solver gave a certified optimum ("
                             + "; ".join([*tried, *outcome]) + ")")


def _conic(X: np.ndarray, y: np.ndarray, model: Any, caps: np.ndarray | None, radius: float,
           solvers: tuple[str, ...], rtol: float, time_limit: float | None, atol: float,
           mu: float, nu: float, spectrum: np.ndarray | None, penalty: str = "chi2",
           support: Any = None) -> Optimum | list[str]:
    """The cvxpy attempts of ``solve``: the first certified ``Optimum``, or why each failed."""
    try:
        import cvxpy as cp
    except ImportError as err:
        raise OptimumUnavailable("cvxpy is not installed (pip install "
                                 "'minimax-bench[exact]')") from err
    if getattr(model, "cvx_raw_losses", None) is None:
        raise OptimumUnavailable(f"the model '{model.name}' has no convex formulation "
                                 "(cvx_raw_losses)")
    attempts: list[str] = []
    for solver, options in ATTEMPTS:
        if solver not in solvers:
            continue
        if time_limit is not None:
            options = {**options, TIME_LIMIT_OPTION[solver]: time_limit}
        outcome = _attempt(cp, X, y, model, caps, radius, solver, options, rtol, atol,
                           mu, nu, spectrum, penalty, support)
        if isinstance(outcome, Optimum):
            outcome.attempts = [*attempts, outcome.attempts[0]]
            return outcome
        attempts.append(outcome)
    return attempts


def _attempt(cp: Any, X: np.ndarray, y: np.ndarray, model: Any, caps: np.ndarray | None,
             radius: float, solver: str, options: dict[str, Any],
             rtol: float, atol: float, mu: float = 0.0, nu: float = 0.0,
             spectrum: np.ndarray | None = None, penalty: str = "chi2",
             support: Any = None) -> Optimum | str:
    """One solve and its certificate: a certified ``Optimum``, or why not."""
    limit = options.get(TIME_LIMIT_OPTION[solver])
    label = solver + "".join(f" {k}={v}" for k, v in options.items()
                             if k not in ("max_iters", TIME_LIMIT_OPTION[solver]))
    if solver not in cp.installed_solvers():
        return f"{label}: not installed"
    problem, w, excess = _formulate(X, y, model, caps, radius, mu, nu, spectrum, penalty,
                                    support)
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
                               None if dual is None else np.asarray(dual), mu=mu, nu=nu,
                               spectrum=spectrum, penalty=penalty, support=support)
    except (ValueError, FloatingPointError) as err:
        return f"{label}: certification failed: {err}"
    w_star = project_ball(np.asarray(w.value, dtype=np.float64), radius)
    note = f"{label}: {problem.status}"
    polished, polish_time = False, 0.0
    if smooth_and_strongly_convex(mu, nu):
        began = time.perf_counter()
        try:
            sharp = polish(Problem(X, y, model, _constraint(caps, spectrum, support), mu, nu,
                                   radius, penalty), w_star)
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


def solve_smooth(problem: Problem, rtol: float = 1e-5, atol: float = 1e-8,
                 notes: list[str] | tuple[str, ...] = (), *,
                 max_iter: int = 10_000) -> Optimum:
    """OPT of a smooth, strongly convex ``F`` (``nu > 0``, ``mu > 0``) without a
    conic solver: scipy's L-BFGS-B on ``Problem.value_and_grad`` from ``w = 0``
    (unconstrained: ``F`` is ``C^1`` and has a minimiser; ``polish`` handles the
    ball) until its line search stalls, then ``polish``, the interval also
    bounded below by ``certify``'s dual bound at the inner maximiser. ``notes``:
    why the conic path was not taken, kept in ``attempts``. Raises
    ``OptimumUnavailable`` when the interval is wider than ``rtol |upper| + atol``."""
    if not smooth_and_strongly_convex(float(problem.mu), float(problem.nu)):
        raise ValueError(f"solve_smooth needs mu > 0 and nu > 0; got mu={problem.mu!r}, "
                         f"nu={problem.nu!r}")
    from scipy.optimize import minimize  # imported on use, as in project_capped

    def value_grad(w: np.ndarray) -> tuple[float, np.ndarray]:
        value, grad, _ = problem.value_and_grad(w)
        return value, grad

    start = time.perf_counter()
    with np.errstate(over="ignore", invalid="ignore"):
        found = minimize(value_grad, np.zeros(problem.n_params), jac=True, method="L-BFGS-B",
                         options={"maxiter": max_iter, "maxfun": 2 * max_iter, "ftol": 0.0,
                                  "gtol": 0.0, "maxcor": 20})
    lbfgs_time = time.perf_counter() - start
    label = f"{LBFGS}: {found.nit} iterations in {lbfgs_time:.2f} s"
    began = time.perf_counter()
    try:
        sharp = polish(problem, np.asarray(found.x, dtype=np.float64))
        _, lower = _certify_problem(problem, sharp.w, None,
                                    getattr(problem.constraint, "euclidean_project", None))
    except (ValueError, FloatingPointError) as err:
        raise OptimumUnavailable("; ".join([*notes, f"{label}; polishing or certification "
                                            f"failed ({type(err).__name__}: {err})"])) from err
    polish_time = time.perf_counter() - began
    value, lower = sharp.upper, min(max(lower, sharp.lower), sharp.upper)
    if not value - lower <= rtol * abs(value) + atol:
        raise OptimumUnavailable("; ".join([*notes, f"{label}; the certified interval "
                                            f"[{lower:.9g}, {value:.9g}] after polishing is "
                                            f"wider than rtol={rtol:g} x |upper| + atol={atol:g}"]))
    note = f"{label}; polished by Newton in {polish_time:.2f} s: interval {value - lower:.2g}"
    return Optimum(value, lower, LBFGS, "polished", lbfgs_time + polish_time,
                   [float(v) for v in sharp.w], [*notes, note], True, polish_time)


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


def certify(X: np.ndarray, y: np.ndarray, model: Any, caps: np.ndarray | None, radius: float,
            w: np.ndarray, dual: np.ndarray | None, *, mu: float = 0.0,
            nu: float = 0.0, spectrum: np.ndarray | None = None, penalty: str = "chi2",
            support: Any = None) -> tuple[float, float]:
    """``(upper, lower)`` with ``lower <= OPT <= upper`` (see the module docstring).

    ``upper`` is the objective at ``w`` projected onto the ball; ``lower`` is
    the certified minimum of ``<L(.), p>`` for ``p`` = ``dual`` projected onto K
    (the oracle's argmax at ``w`` if there is no dual), started at ``w``. With
    ``mu`` or ``nu`` nonzero, or a set without caps (``caps=None``: ``spectrum``
    or ``support``): ``upper = F(w)`` (``harness.problem.Problem.value``, the
    penalty ``penalty``) and ``lower`` a certified lower bound on the dual
    function ``D(q)`` at that ``q`` (the inner maximiser at ``w`` if there is no
    dual, or no Euclidean projection onto K to move it there).
    """
    penalty = _penalty_of(penalty, nu)
    caps, spectrum = _set_arrays(caps, spectrum, support)
    if caps is None:
        _check_regularisation(radius, mu, nu)
        K = _constraint(caps, spectrum, support)
        problem = Problem(np.asarray(X, dtype=np.float64), y, model, K, mu, nu, radius,
                          penalty)
        return _certify_problem(problem, w, dual, getattr(K, "euclidean_project", None))
    if mu != 0.0 or nu != 0.0:
        return _certify_regularised(X, y, model, caps, radius, w, dual, mu, nu, penalty)
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


def set_form(constraint: Any) -> tuple[np.ndarray | None, np.ndarray | None]:
    """``(caps, spectrum)`` of a constraint set, at most one of them not None:
    its ``row_caps()`` if it has caps, else its ``spectrum()`` if it is a
    permutahedron, else ``(None, None)`` (then ``support_form`` may apply)."""
    caps = constraint.row_caps()
    if caps is not None:
        return np.asarray(caps, dtype=np.float64), None
    spectrum = getattr(constraint, "spectrum", None)
    if spectrum is None:
        return None, None
    return None, np.asarray(spectrum(), dtype=np.float64)


def support_form(constraint: Any) -> Any:
    """``constraint`` if it has neither caps nor a spectrum (``set_form``) but a
    ``support_function(cp, v)``, else None."""
    if any(a is not None for a in set_form(constraint)):
        return None
    return constraint if callable(getattr(constraint, "support_function", None)) else None


def _set_arrays(caps: np.ndarray | None, spectrum: np.ndarray | None,
                support: Any = None) -> tuple[np.ndarray | None, np.ndarray | None]:
    """The one given of ``caps`` and ``spectrum`` as contiguous float64 (the other
    None; both None for a ``support`` set); a spectrum checked: non-negative,
    ascending, summing to 1."""
    given = sum(x is not None for x in (caps, spectrum, support))
    if given != 1:
        raise ValueError("give the set's caps, its spectrum (caps=None) or a set with a "
                         "support function (support=...), exactly one")
    if support is not None:
        if not callable(getattr(support, "support_function", None)):
            raise ValueError(f"the set {type(support).__name__} has no support_function(cp, v)")
        return None, None
    if spectrum is None:
        return np.ascontiguousarray(caps, dtype=np.float64), None
    sigma = np.ascontiguousarray(spectrum, dtype=np.float64)
    if not (sigma.ndim == 1 and sigma.size > 0 and np.all(np.isfinite(sigma))
            and sigma[0] >= 0.0 and np.all(np.diff(sigma) >= 0.0)
            and abs(math.fsum(sigma.tolist()) - 1.0) <= 1e-12):
        raise ValueError("The spectrum must be non-negative, sorted ascending and sum to 1. "
                         f"Got {sigma!r} instead.")
    return None, sigma


def _constraint(caps: np.ndarray | None, spectrum: np.ndarray | None, support: Any = None) -> Any:
    if support is not None:
        return support
    return SpectralSet(spectrum) if spectrum is not None else CappedSet(caps)


class CappedSet:
    """``K = {0 <= q_i <= c_i, sum q = 1}`` from its caps alone: the methods
    ``harness.problem.Problem`` asks of a constraint set."""

    def __init__(self, caps: np.ndarray) -> None:
        self.caps = np.ascontiguousarray(caps, dtype=np.float64)

    def lmo(self, losses: np.ndarray) -> tuple[float, np.ndarray]:
        return capped_value(losses, self.caps)

    def euclidean_project(self, v: np.ndarray) -> np.ndarray:
        return capped_simplex_euclidean(v, self.caps)

    def project(self, weights: np.ndarray, gamma: float = 0.0, *,
                log_domain: bool = False) -> np.ndarray:
        """The KL projection of the positive weights onto K (``gamma = 0`` only):
        ``q_i = min(c_i, lam w_i)`` (``plugins.lib.capped.alpha_kl_projection``);
        the point ``c`` itself when the caps sum to 1."""
        if gamma != 0.0:
            raise ValueError(f"CappedSet projects with gamma = 0 only. Got {gamma!r} instead.")
        if math.fsum(self.caps.tolist()) <= 1.0 + 1e-12:
            return self.caps.copy()
        log_w = np.asarray(weights, dtype=np.float64)
        if not log_domain:
            with np.errstate(divide="ignore"):
                log_w = np.log(log_w)
        return alpha_kl_projection(log_w, self.caps)[0]


class SpectralSet:
    """The permutahedron ``P(sigma)`` from its spectrum alone (ascending): the two
    methods ``harness.problem.Problem`` asks of a constraint set."""

    def __init__(self, spectrum: np.ndarray) -> None:
        self.sigma = np.ascontiguousarray(spectrum, dtype=np.float64)

    def lmo(self, losses: np.ndarray) -> tuple[float, np.ndarray]:
        losses = np.ascontiguousarray(losses, dtype=np.float64)
        q = permutahedron_lmo(losses, self.sigma)
        return float(losses @ q), q

    def euclidean_project(self, v: np.ndarray) -> np.ndarray:
        return permutahedron_projection(np.ascontiguousarray(v, dtype=np.float64), self.sigma)

    def project(self, weights: np.ndarray, gamma: float = 0.0, *,
                log_domain: bool = False) -> np.ndarray:
        """The KL projection of the positive weights onto ``P(sigma)`` (``gamma =
        0`` only; ``plugins.lib.permutahedron.permutahedron_kl_projection``)."""
        if gamma != 0.0:
            raise ValueError(f"SpectralSet projects with gamma = 0 only. Got {gamma!r} "
                             "instead.")
        log_w = np.asarray(weights, dtype=np.float64)
        if not log_domain:
            with np.errstate(divide="ignore"):
                log_w = np.log(log_w)
        q, _, feasible = permutahedron_kl_projection(np.ascontiguousarray(log_w), self.sigma)
        if not feasible:
            raise ValueError("The KL projection onto P(sigma) needs more rows with positive "
                             "weight.")
        return q


def _certify_regularised(X: np.ndarray, y: np.ndarray, model: Any, caps: np.ndarray,
                         radius: float, w: np.ndarray, dual: np.ndarray | None,
                         mu: float, nu: float, penalty: str = "chi2") -> tuple[float, float]:
    _check_regularisation(radius, mu, nu)
    problem = Problem(X, y, model, CappedSet(caps), mu, nu, radius, penalty)
    return _certify_problem(problem, w, dual, lambda v: project_capped(v, caps))


def _certify_problem(problem: Problem, w: np.ndarray, dual: np.ndarray | None,
                     project: Any) -> tuple[float, float]:
    """``certify`` through ``harness.problem``: ``F(w)`` and the dual bound at
    ``project(dual)`` (the inner maximiser at ``w`` without a finite dual or
    without ``project``)."""
    w = problem.project(np.asarray(w, dtype=np.float64))
    losses = problem.losses(w)
    upper = problem.value(w, losses)
    if dual is None or project is None or not np.all(np.isfinite(dual)):
        q = problem.inner(losses)[1]
    else:
        q = project(np.asarray(dual, dtype=np.float64))
    lower, _ = dual_lower_bound(problem, q, w, abs_tol=1e-12, rel_tol=1e-9, max_iter=5000)
    if not (math.isfinite(upper) and math.isfinite(lower)):
        raise FloatingPointError("non-finite objective or bound")
    if lower > upper + 1e-9 * max(1.0, abs(upper)):
        raise FloatingPointError(f"lower bound {lower!r} above the objective {upper!r}")
    return upper, min(lower, upper)
