"""The exact optimum as a reference line: a plugin of the event hooks.

Config (top-level ``reference`` in ``conf/config.yaml``; a config without the
key computes nothing):

    reference:
      exact: auto      # auto | true | false
      method: auto     # auto | direct | working_set
      solver: auto     # auto (Clarabel, then SCS) | CLARABEL | SCS
      max_size: 1000000
      rtol: 1.0e-5     # accept OPT if its certified interval is within
      atol: 1.0e-8     #   rtol * |OPT| + atol
      time_limit: 120  # seconds per solver attempt
      cache_dir: null  # null: $XDG_CACHE_HOME/minimax-bench, else ~/.cache/minimax-bench
      working_set_rounds: 20        # the working set's limits: rounds,
      working_set_rows: 1000000     #   rows of S,
      working_set_seconds: 3600     #   seconds before a new round,
      working_set_start: null       # and a .npy file of w to start from (null: w = 0)

``auto`` computes OPT (``plugins.metrics.optimum``: a capped set or a permutahedron
``P(sigma)``, its ``row_caps()`` or its ``spectrum()``, or a set with a
``support_function(cp, v)``) when cvxpy is installed (a smooth, strongly convex
problem over a set without caps does without) and ``n * d <= max_size``;
``true`` whatever the size. Beyond ``max_size`` (``method: auto``), or always
(``working_set``), OPT over a capped set of the paper's problem is enclosed by a
working set of rows (``plugins.metrics.working_set``), its interval reported as
it stands when a limit stops it first (``opt_status`` ``bounded``). The working
set needs ``nu = 0`` (``choose_method``): the penalty, chi2 or kl, then plays no
part; a problem with ``nu > 0`` is solved directly or not at all. OPT is cached
on disk per (data, model, loss scale, K, B, and mu, nu and a kl penalty where
they are set). The run's params gain OPT's certified interval
(``opt_lower <= OPT <= opt``, ``opt_width``), ``opt_solver``, ``opt_status`` and
``opt_message``, and ``trivial_objective`` of ``w = 0`` with
``trivial_relative_suboptimality`` (a warning below ``NEARLY_SOLVED``); each
checkpoint gains ``suboptimality = objective(w) - opt_lower`` (a certified upper
bound on ``objective(w) - OPT``), ``relative_suboptimality`` and
``normalised_suboptimality`` (against ``start_objective = F(w_0)``).
In full: docs/tracking.md, "The exact optimum OPT".
"""

from __future__ import annotations

import math
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

import harness
from harness import ConfigError, Param
from harness.context import RunView
from harness.dual import enclose_value
from harness.params import validate
from harness.state import cache_root
from plugins.metrics import optimum, working_set

#: a trivial solution within this relative distance of OPT makes a problem nearly degenerate
NEARLY_SOLVED = 0.05
#: OPT's interval on a smooth, strongly convex problem is at most this times |OPT| (+ 1e-15)
#: over a capped set (``machine_width``)
MACHINE_WIDTH = 1e-13
METHODS = ("auto", "direct", "working_set")

PARAMS: dict[str, Param] = {
    "exact": Param(str, default="auto", choices=("auto", "true", "false"),
                   doc="compute OPT: auto (if cvxpy is installed and n*d <= max_size)"),
    "solver": Param(str, default="auto", choices=("auto", *optimum.SOLVERS),
                    doc="cvxpy solver; auto: Clarabel, then SCS"),
    "method": Param(str, default="auto", choices=METHODS,
                    doc="direct: one convex solve; working_set: a working set of rows (capped "
                        "sets, mu = nu = 0); auto: direct up to max_size, then the working set"),
    "max_size": Param(int, default=1_000_000, low=1,
                      doc="largest n*d that auto solves directly"),
    "rtol": Param(float, default=1e-5, low=0.0, low_open=True,
                  doc="accept OPT if its certified interval is within rtol |OPT| + atol"),
    "atol": Param(float, default=1e-8, low=0.0,
                  doc="absolute part of the certified interval's tolerance (OPT near 0)"),
    "time_limit": Param(float, default=120.0, low=0.0, low_open=True,
                        doc="seconds per solver attempt"),
    "cache_dir": Param(str, nullable=True, doc="where OPT records are kept"),
    "working_set_rounds": Param(int, default=20, low=1,
                                doc="the working set's largest number of rounds"),
    "working_set_rows": Param(int, default=1_000_000, low=1,
                              doc="the working set's largest number of rows"),
    "working_set_seconds": Param(float, default=3600.0, low=0.0, low_open=True,
                                 doc="no new round of the working set after this many seconds"),
    "working_set_start": Param(str, nullable=True,
                               doc="a .npy file of w (e.g. an algorithm's best iterate) "
                                   "the working set starts from; null: w = 0"),
}


def settings(config: dict[str, Any]) -> dict[str, Any]:
    """The validated ``reference`` block (YAML's true/false read as strings)."""
    block = config.get("reference")
    if block is None:
        block = {}
    if not isinstance(block, dict):
        raise ConfigError(f"The 'reference' config key must be a mapping. Got {block!r} instead.")
    given = dict(block)
    if isinstance(given.get("exact"), bool):
        given["exact"] = "true" if given["exact"] else "false"
    return validate("reference", PARAMS, given)


def default_cache_dir() -> Path:
    return cache_root()


def _cvxpy_installed() -> bool:
    try:
        import cvxpy  # noqa: F401
    except ImportError:
        return False
    return True


def compute(parts: RunView, conf: dict[str, Any]) -> tuple[str, str, optimum.Optimum | None]:
    """``(status, message, optimum)`` for the run's problem under ``conf``."""
    X, y, model = parts.dataset.X, parts.dataset.y, parts.model
    n, d = X.shape
    caps, spectrum = optimum.set_form(parts.constraint)
    support = optimum.support_form(parts.constraint)
    if caps is None and spectrum is None and support is None:
        return "skipped", (f"the constraint set '{parts.constraint.name}' is neither of the form "
                           "{0 <= p_i <= c_i, sum p = 1} (row_caps) nor a permutahedron "
                           "(spectrum) nor given by its support function "
                           "(support_function)"), None
    problem = parts.problem
    method = choose_method(conf, n * d, caps is not None, problem.mu, problem.nu)
    if method != "direct" and method != "working_set":
        return "skipped", method, None
    radius = float(problem.radius)
    # the paper's problem (mu = nu = 0) hashes no mu, nu (its records: CACHE_FORMAT's);
    # the chi-square problem no penalty (its records: before kl existed)
    reg: dict[str, Any] = {"mu": problem.mu, "nu": problem.nu} if problem.mu or problem.nu else {}
    if problem.nu > 0.0 and problem.penalty != "chi2":
        reg["penalty"] = problem.penalty
    # a capped set (the superquantile's too) hashes its caps as before spectra existed
    form: dict[str, Any] = ({"spectrum": spectrum} if spectrum is not None
                            else {"support": support} if support is not None else {})
    key = optimum.cache_key(X, y, model, caps, radius, **reg, **form)  # streamed over X
    cache_dir = Path(conf["cache_dir"]).expanduser() if conf["cache_dir"] else default_cache_dir()
    cached = optimum.load_cached(cache_dir, key)
    start = _start_w(conf, model.n_params)
    if cached is not None and cached.working_set and not _within(cached, conf):
        # a working set stopped by a limit: grow it again from its best w
        start = np.asarray(cached.w) if start is None else start
    elif cached is not None:
        return "cached", f"from {cache_dir / f'opt-{key}.json'}{_about_set(cached)}", cached
    if method == "working_set":
        limits = working_set.Limits(
            rounds=conf["working_set_rounds"], rows=conf["working_set_rows"],
            seconds=conf["working_set_seconds"], start=start, time_limit=conf["time_limit"],
            solvers=optimum.SOLVERS if conf["solver"] == "auto" else (conf["solver"],))
        try:
            found = working_set.working_set_optimum(X, y, model, caps, radius, conf["rtol"],
                                                    conf["atol"], limits)
        except optimum.OptimumUnavailable as err:
            warnings.warn(f"minimax-bench: exact optimum unavailable: {err}", RuntimeWarning,
                          stacklevel=2)
            return "failed", str(err), None
        if cached is not None and cached.working_set:
            found = _tighter(found, cached)
    else:
        X = np.asarray(X[0:n], dtype=np.float64)  # memmaps and row-sliced stores alike
        # a smooth, strongly convex F over a set without caps has a path without cvxpy
        smooth_uncapped = (caps is None
                           and optimum.smooth_and_strongly_convex(problem.mu, problem.nu))
        if not smooth_uncapped and not _cvxpy_installed():
            if conf["exact"] == "auto":
                return "skipped", ("cvxpy is not installed (pip install "
                                   "'minimax-bench[exact]')"), None
            raise ConfigError("reference.exact=true needs cvxpy: pip install "
                              "'minimax-bench[exact]'.")
        solvers = optimum.SOLVERS if conf["solver"] == "auto" else (conf["solver"],)
        try:
            found = optimum.solve(X, y, model, caps, radius, solvers, conf["rtol"],
                                  conf["time_limit"], conf["atol"], **reg, **form)
        except optimum.OptimumUnavailable as err:
            warnings.warn(f"minimax-bench: exact optimum unavailable: {err}", RuntimeWarning,
                          stacklevel=2)
            return "failed", str(err), None
    about = {"dataset": parts.names.get("dataset"), "model": model.name,
             "constraint": parts.names.get("constraint"), "k": getattr(parts.constraint, "k", None),
             "radius": radius, **reg, "loss_scale": model.scale_, "n": n, "d": d,
             "created": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    if spectrum is not None:
        about["spectral_levels"] = int(optimum.spectral_levels(spectrum)[0].size)
    if support is not None:
        about["set"] = optimum.set_identity(support)
    path = optimum.store(cache_dir, key, found, about)
    status = "bounded" if found.status == "bounded" else "solved"
    return status, (f"by {found.solver} in {found.solve_time_s:.2f} s, cached in {path}"
                    f"{_about_set(found)}"), found


def choose_method(conf: dict[str, Any], size: int, capped: bool, mu: float, nu: float) -> str:
    """``direct`` or ``working_set`` for a problem of ``size = n * d`` entries, or the
    reason OPT is skipped. The working set needs a capped set and the paper's
    problem (``mu = nu = 0``, where the penalty plays no part): ``K_S`` inside
    ``K`` is what makes it certified."""
    fits = capped and mu == 0.0 and nu == 0.0
    too_big = size > conf["max_size"]
    method = conf["method"]
    if method == "auto":
        method = "working_set" if too_big and fits else "direct"
    if method == "working_set" and not fits:
        return ("reference.method=working_set needs a capped set {0 <= p_i <= c_i, sum p = 1} "
                f"and mu = nu = 0 (got {'a capped' if capped else 'a spectral'} set, "
                f"mu={mu!r}, nu={nu!r})")
    if method == "direct" and conf["exact"] == "auto" and too_big:
        return (f"n*d = {size:,} exceeds reference.max_size = {conf['max_size']:,} (set "
                "reference.exact=true to solve anyway"
                + (", or reference.method=working_set" if fits else "") + ")")
    return method


def _tighter(found: optimum.Optimum, cached: optimum.Optimum) -> optimum.Optimum:
    """A regrown working set's interval intersected with the stored one: both
    ends are certified for the same problem, so the larger lower end and the
    smaller upper end (with its w) hold together; a regrowth that stopped
    sooner never widens what was stored."""
    if cached.lower > found.lower:
        found.lower = cached.lower
    if cached.value < found.value:
        found.value, found.w = cached.value, list(cached.w)
    return found


def _within(found: optimum.Optimum, conf: dict[str, Any]) -> bool:
    return found.value - found.lower <= conf["rtol"] * abs(found.value) + conf["atol"]


def _about_set(found: optimum.Optimum) -> str:
    """The working set's summary (its final ``|S|``, rounds and width), if one was used."""
    return f"; {found.attempts[-1]}" if found.working_set and found.attempts else ""


def _start_w(conf: dict[str, Any], n_params: int) -> np.ndarray | None:
    path = conf["working_set_start"]
    if path is None:
        return None
    try:
        w = np.load(Path(path).expanduser())
    except (OSError, ValueError) as err:
        raise ConfigError(f"The 'working_set_start' parameter of reference must name a .npy "
                          f"file of {n_params} floats. Got {path!r} instead ({err}).") from err
    if w.shape != (n_params,) or not np.all(np.isfinite(w)):
        raise ConfigError(f"The 'working_set_start' parameter of reference must name a .npy "
                          f"file of {n_params} floats. Got shape {w.shape} in {path!r} instead.")
    return np.asarray(w, dtype=np.float64)


def machine_width(opt: float, n: int, capped: bool) -> float:
    """The widest interval polishing should leave on a smooth, strongly convex
    problem: ``MACHINE_WIDTH |OPT| + 1e-15`` over a capped set, whose value is
    enclosed through its Lagrangian dual; over a permutahedron the enclosure
    (``harness.dual.enclose_inner``) allows an n-term sum's rounding at each
    end, so ``4 (n + 4) u |OPT|`` where that is wider (``u = 2^-53``; measured:
    9e-13 |OPT| on kin8nm's and power's training rows, n = 6,553 and 7,654)."""
    rel = MACHINE_WIDTH if capped else max(MACHINE_WIDTH, 4.0 * (n + 4) * 2.0 ** -53)
    return rel * abs(opt) + 1e-15


def trivial(parts: RunView, opt: float) -> dict[str, float]:
    """Objective ``F(0)`` of ``w = 0`` and its relative suboptimality against ``opt``."""
    value = parts.problem.value(np.zeros(parts.model.n_params))
    out = {"trivial_objective": float(value)}
    if opt > 0:
        out["trivial_relative_suboptimality"] = (float(value) - opt) / opt
    return out


@harness.hookimpl
def register_config_blocks(register):
    register(harness.ConfigBlock("reference", PARAMS, off={"exact": "false"},
                                 doc="the exact optimum OPT as a reference line"))


@harness.hookimpl(tryfirst=True)
def on_run_start(context):
    if context.config.get("reference") is None:
        return
    conf = settings(context.config)
    context.params.update({f"reference.{k}": v for k, v in conf.items()})
    if conf["exact"] == "false":
        return
    status, message, found = compute(context.parts, conf)
    context.params.update({"opt_status": status, "opt_message": message})
    context.state["reference"] = {"status": status, "message": message, "optimum": found}
    if found is not None:
        context.params.update({"opt": found.value, "opt_lower": found.lower,
                               "opt_width": found.value - found.lower,
                               "opt_solver": found.solver})
        context.state["reference"]["trivial"] = trivial(context.parts, found.value)
        context.params.update(context.state["reference"]["trivial"])
        problem = context.parts.problem
        width = found.value - found.lower
        capped = context.parts.constraint.row_caps() is not None
        if (optimum.smooth_and_strongly_convex(problem.mu, problem.nu)
                and width > machine_width(found.value, problem.n, capped)):
            note = (f"OPT's interval is {width:.2g} wide on a smooth, strongly convex problem "
                    "(polishing did not reach machine precision): suboptimality is resolved "
                    "to that width only")
            warnings.warn(f"minimax-bench: {note}", RuntimeWarning, stacklevel=2)
            context.params["opt_message"] = f"{message}; {note}"
        start_w = context.parts.start_w
        if start_w is not None:  # read like the checkpoints' objective: its upper end
            start = enclose_value(problem, np.asarray(start_w, dtype=np.float64))[1]
            context.state["reference"]["start"] = start
            context.params["start_objective"] = start


@harness.hookimpl
def checkpoint_metrics(context, w_bar, losses):
    found = (context.state.get("reference") or {}).get("optimum")
    if found is None:
        return None
    # F(w)'s upper end (exactly rounded sums, harness.dual): a certified upper bound
    # on objective - OPT, never negative where the optimum's interval is tight
    objective = enclose_value(context.parts.problem, w_bar, losses)[1]
    if objective < found.lower - 1e-12 * max(1.0, abs(found.lower)):
        record = context.state["reference"]
        if not record.get("warned"):
            record["warned"] = True
            warnings.warn(f"minimax-bench: the objective {objective!r} is below OPT's certified "
                          f"lower end {found.lower!r}: the OPT record ({record['message']}) "
                          "is wrong; delete it to recompute", RuntimeWarning, stacklevel=2)
    gap = max(objective - found.lower, 0.0)
    metrics = {"suboptimality": gap}
    if found.value > 0:
        metrics["relative_suboptimality"] = gap / found.value
    start = context.state["reference"].get("start")
    if start is not None and start > found.lower:
        metrics["normalised_suboptimality"] = gap / (start - found.lower)
    return metrics


@harness.hookimpl
def summary_lines(context, status, metrics):
    """The final suboptimality and OPT (or why it is unavailable), after a finished run."""
    if status != "FINISHED":
        return None
    lines = []
    if "suboptimality" in metrics:
        lines.append(("suboptimality (objective - OPT)",
                      f"at most {metrics['suboptimality']:.6g}"))
    record = context.state.get("reference")
    if record is not None:
        found = record["optimum"]
        text = (f"{found.value:.{certified_digits(found)}g} ({found.solver}, "
                f"{record['status']}), certified to {found.value - found.lower:.2g}"
                if found is not None
                else f"unavailable ({record['status']}): {record['message']}")
        lines.append(("exact optimum OPT", text))
        lines.extend(trivial_lines(record.get("trivial")))
    return lines or None


def certified_digits(found: optimum.Optimum) -> int:
    """The significant digits of OPT that its certified interval pins down (6 to 16)."""
    width, value = found.value - found.lower, abs(found.value)
    if value == 0.0 or width <= 0.0:
        return 16
    return int(min(16, max(6, math.floor(math.log10(value / width)) + 1)))


def trivial_lines(values: dict[str, float] | None) -> list[tuple[str, str]]:
    """Summary rows for the trivial solution, and the warning if it is nearly OPT.

    The relative suboptimality is measured from OPT's upper end: at or below 0,
    ``F(0) - OPT`` is at most the width of OPT's certified interval, so ``w = 0``
    is optimal as far as OPT is known (a percentage would read as noise)."""
    if not values:
        return []
    text = f"{values['trivial_objective']:.6g}"
    rel = values.get("trivial_relative_suboptimality")
    if rel is None:
        return [("trivial solution w = 0", text)]
    if rel <= 0:
        return [("trivial solution w = 0", f"{text} (not above OPT's certified interval)"),
                ("warning", "w = 0 is optimal to within OPT's certified interval: this "
                            "problem is solved before the first round and cannot separate "
                            "algorithms")]
    lines = [("trivial solution w = 0", f"{text} (relative suboptimality {rel:.3g})")]
    if rel < NEARLY_SOLVED:
        lines.append(("warning", f"this problem is nearly solved by w = 0 (within "
                                 f"{100 * rel:.2g} % of OPT, under {100 * NEARLY_SOLVED:g} %): "
                                 "it barely separates algorithms"))
    return lines
