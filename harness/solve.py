"""How ``harness.prepare`` and ``harness.play`` drive a solver, whatever its
kind (``Algorithm``), and the run of a whole-algorithm solver
(``harness.protocols.Solver``): the same checkpoints, metrics, hooks, guards
and resume as the game of Algorithm 1.

The harness owns the loop: it hands the solver growing data-point targets
(``Solver.advance``), each call lasting about ``CALL_SECONDS`` (the first
asks for one data point, each next for up to four times as many), so a
signal is honoured between calls; at each checkpoint (log-spaced in data
points, as for the game) it evaluates the problem ``F`` at the solver's
iterate, and the certified duality gap (``harness.dual.certified_gap``) when
the solver has a dual iterate ``q`` or the problem is smooth and strongly
convex (``nu > 0``, ``mu > 0``: the closed-form maximiser ``q(w)`` serves).
A whole-algorithm solver solves the penalties ``nu D(q || 1/n)`` it declares
(``penalties``, default chi2 only): a problem with ``nu > 0`` and another
``problem.penalty`` is refused before anything is built (``check_penalty``).
"""

from __future__ import annotations

import copy
import math
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from harness import stream
from harness.dual import certified_gap
from harness.game import (
    CALL_SECONDS,
    NUMERIC_ERRORS,
    Components,
    GuardError,
    Loop,
    first_bad,
    probe_failed,
    wrapped,
)
from harness.params import ConfigError, check
from harness.problem import PROBLEM_PARAMS


@dataclass(frozen=True)
class Setting:
    """What a solver reads of the config while ``harness.prepare`` composes it."""

    #: the solver's config name (``solver=<name>``)
    name: str
    #: the whole config, as plain containers
    config: Mapping[str, Any]
    #: the validated ``problem`` block (``harness.problem.problem_values``)
    problem: Mapping[str, Any]
    #: the built constraint set and its config name
    constraint: Any
    constraint_name: str
    registry: Any
    #: ``make(group, **values)`` -> ``(name, component)``: the component the config
    #: group ``group`` names, ``values`` set over the config's, recorded as
    #: ``<group>.<key>`` parameters
    make: Callable[..., tuple[str, Any]]


class Algorithm(ABC):
    """A solver as ``harness.prepare`` and ``harness.play`` drive it: one path
    through both for every kind, the differences in the subclasses.
    ``WholeSolver`` adapts a ``harness.protocols.Solver``; the game of
    Algorithm 1 (``plugins.solvers.game``) is one itself.

    In ``prepare``'s order: ``compose`` builds what it is made of from the
    config and returns the radius of the problem's ball; ``rows_per_round``
    is its budget's granularity (the horizon is ``budget // rows_per_round``
    rounds, on which the checkpoints fall); ``set_up`` readies it for the
    problem, the seconds before the clock apart from its own; ``describe``
    and ``tags`` add to what the run records; ``components`` gathers the
    run's parts; ``admit`` refuses a run that cannot start; ``runner`` is
    the loop ``play`` runs on those parts (a resumed run's saved ones)."""

    #: the loop ``harness.play`` runs (``harness.game.Game``, ``SolverRun``)
    runner: ClassVar[type[Loop]]
    #: the run's ``algorithm`` tag (set by ``compose``)
    label: str = ""

    @abstractmethod
    def compose(self, setting: Setting) -> float:
        """Build what the algorithm is made of from ``setting``, refusing (a
        ``ConfigError`` naming why) a problem it cannot solve; the radius of
        the problem's ball (``math.inf``: no ball)."""

    @abstractmethod
    def rows_per_round(self, constraint: Any) -> int:
        """Data points one round processes: the budget's granularity."""

    @abstractmethod
    def set_up(self, problem: Any, budget: int, horizon: int,
               seed: int) -> tuple[dict[str, Any], float, float]:
        """Ready the algorithm for ``problem``: ``(values, compile_s, setup_s)``,
        the values to record (keys prefixed by their group), the seconds its
        kernels took to compile or load before the clock, and the seconds of
        its own setup (on the clock)."""

    @abstractmethod
    def components(self, dataset: Any, model: Any, constraint: Any,
                   names: Mapping[str, str], problem: Any) -> Components:
        """The run's components (``harness.game.Components``)."""

    def names(self) -> dict[str, str]:
        """Config names of its own components, beside the data set's, the
        constraint's, the model's and the solver's."""
        return {}

    def describe(self, horizon: int, rows_per_round: int) -> dict[str, Any]:
        """Values of its schedule to record beside ``n`` and ``d`` (a solver's
        budget is in data points: it has no rounds to record)."""
        return {}

    def tags(self) -> dict[str, str]:
        """Tags to record beside the run's own."""
        return {}

    def admit(self, parts: Components, engine: str) -> None:
        """Refuse (``ConfigError``) a run that cannot start with ``engine``
        (``auto``, ``compiled`` or ``python``); any engine suits by default."""
        return


class SolverRun(Loop):
    """Runs ``parts.solver`` on ``parts.problem`` up to ``budget`` data points.

    A ``harness.game.Loop`` like ``Game``, so ``harness.api.play`` saves,
    resumes and tracks both alike; ``state.rounds`` counts data points here.
    """

    def iterate(self) -> np.ndarray:
        """The solver's iterate ``w`` (after its setup: ``w_0``)."""
        return self.parts.solver.w

    def play(self) -> dict[str, float]:
        """Advance the solver to each checkpoint in turn, evaluating each;
        returns the last checkpoint's metrics."""
        parts, state = self.parts, self.state
        solver, problem = parts.solver, parts.problem
        pending = [int(r) for r in self.checkpoints if r > state.rounds]
        stride = max(1, self.horizon // 200)
        t0 = time.perf_counter() - state.wall_time
        stop = self.stop_requests
        self.path = "solver"
        self.started = True
        most = 1
        while pending:
            if stop:
                raise KeyboardInterrupt(f"signal {stop[0]} at {solver.data_points} data points")
            done = int(solver.data_points)
            now = done
            if done < pending[0]:  # (setup may have spent data points already)
                target = min(pending[0], done + most)
                began = time.perf_counter()
                try:
                    solver.advance(problem, self.rng, target)
                except (ConfigError, KeyboardInterrupt):
                    raise
                except NUMERIC_ERRORS as err:
                    raise GuardError(f"solver '{parts.names.get('solver')}' failed at "
                                     f"{int(solver.data_points):,} data points: "
                                     f"{type(err).__name__}: {err}") from err
                now = int(solver.data_points)
                if now < target:
                    raise GuardError(f"solver '{parts.names.get('solver')}' stopped short: "
                                     f"asked to reach {target:,} data points, it is at "
                                     f"{now:,}.")
                per_point = max((time.perf_counter() - began) / (now - done), 1e-12)
                most = max(1, min(4 * most, int(CALL_SECONDS / per_point)))
            state.data_points = now
            reached = False
            while pending and now >= pending[0]:  # a step may pass several checkpoints
                pending.pop(0)
                reached = True
            if reached:
                state.rounds = now
                t0 = self._checkpoint(now, t0)
            if self.progress is not None and (now // stride) > (done // stride):
                self.progress(min(now, self.horizon))
        state.rounds = max(state.rounds, self.horizon)
        state.wall_time = time.perf_counter() - t0
        return state.last_metrics

    def evaluate(self) -> dict[str, float]:
        """Metrics at the solver's iterate: ``objective`` = F(w), the counters,
        task metrics, the certified ``dual_gap`` (module docstring: a dual
        iterate ``q``, or a smooth strongly convex problem), the plugins'
        metrics, and the seconds they took."""
        start = time.perf_counter()
        parts, state = self.parts, self.state
        solver, problem, model = parts.solver, parts.problem, parts.model
        X, y = problem.X, problem.y
        w = np.asarray(solver.w, dtype=np.float64)
        name = parts.names.get("solver")
        if w.shape != (model.n_params,) or not np.all(np.isfinite(w)):
            raise GuardError(f"solver '{name}' produced a non-finite or misshapen iterate at "
                             f"{state.data_points:,} data points: " + (
                                 first_bad(w) if w.shape == (model.n_params,)
                                 else f"shape {w.shape}, expected ({model.n_params},)"))
        if not math.isinf(problem.radius) and float(w @ w) > problem.radius**2 * (1 + 1e-9):
            raise GuardError(f"solver '{name}' left the ball of radius {problem.radius!r} at "
                             f"{state.data_points:,} data points (||w|| = "
                             f"{math.sqrt(float(w @ w))!r}).")
        raw, task = stream.losses_and_task_metrics(model, w, X, y, parts.constraint.k)
        losses = raw / problem.scale
        if not np.all(np.isfinite(losses)):
            bad = int(np.flatnonzero(~np.isfinite(losses))[0])
            raise GuardError(f"model '{parts.names.get('model')}' gave loss "
                             f"{float(losses[bad])!r} for row {bad} at the iterate of solver "
                             f"'{name}' at {state.data_points:,} data points.")
        objective = problem.value(w, losses)
        n = problem.n
        metrics = {
            "objective": objective,
            "rounds": float(state.data_points),
            "data_points": float(state.data_points),
            "grad_evals": float(solver.grad_evals),
            "passes": state.data_points / n,
            "wall_time_s": state.wall_time,
        }
        q = getattr(solver, "q", None)
        if q is not None:
            q = np.asarray(q, dtype=np.float64)
            if q.shape != (n,) or not parts.constraint.contains(q, atol=1e-8):
                raise GuardError(f"solver '{name}' has its dual iterate q outside the "
                                 f"constraint set '{parts.names.get('constraint')}' at "
                                 f"{state.data_points:,} data points.")
        if q is not None or (problem.mu > 0.0 and problem.nu > 0.0):
            found = certified_gap(problem, w, q, state.inner_w, losses=losses)
            state.inner_w = found.w_inner
            metrics["dual_gap"] = found.gap  # F(w) read through its enclosure: >= 0
            metrics["dual_lower"] = found.lower
        metrics.update(task)
        if self.extra_metrics is not None:
            metrics.update(self.extra_metrics(w, losses))
        bad = {key: value for key, value in metrics.items() if not math.isfinite(value)}
        if bad:
            raise GuardError(f"non-finite metric(s) {bad} at {state.data_points:,} data points, "
                             f"not logged (solver '{name}', model '{parts.names.get('model')}').")
        return self._timed(metrics, start)


class WholeSolver(Algorithm):
    """A whole-algorithm solver (``harness.protocols.Solver``) as ``prepare``
    drives it: its budget in data points (one per round), its setup timed
    after a probe on copies (``set_up``), its run a ``SolverRun``."""

    runner = SolverRun

    def __init__(self, solver: Any) -> None:
        self.solver = solver

    def compose(self, setting: Setting) -> float:
        self.label = setting.name
        check_penalty(setting, self.solver)
        return solver_radius(setting)

    def rows_per_round(self, constraint: Any) -> int:
        return 1

    def set_up(self, problem: Any, budget: int, horizon: int,
               seed: int) -> tuple[dict[str, Any], float, float]:
        values, compile_s, setup_s = set_up(self.solver, problem, budget, seed)
        spent = int(self.solver.data_points)
        if spent > budget:
            raise ConfigError(f"The solver '{self.label}' spends {spent:,} data points before "
                              f"its first step (a pass over the n = {problem.n:,} rows); "
                              f"budget={budget:,} is below that. Give a budget of at least "
                              f"{spent:,}.")
        return {f"solver.{k}": v for k, v in values.items()}, compile_s, setup_s

    def components(self, dataset: Any, model: Any, constraint: Any,
                   names: Mapping[str, str], problem: Any) -> Components:
        return Components(dataset, model, constraint, None, None, names, problem, self.solver)


def as_algorithm(solver: Any) -> Algorithm:
    """The built ``solver`` component as ``prepare`` drives it: itself if it is
    an ``Algorithm`` (the game), else a ``WholeSolver`` around it."""
    return solver if isinstance(solver, Algorithm) else WholeSolver(solver)


def penalties(solver: Any) -> tuple[str, ...]:
    """The penalties ``problem.penalty`` a solver (class or instance) solves with
    ``nu > 0``: its ``penalties`` class attribute, ``("chi2",)`` when absent
    (``harness.protocols.Solver``)."""
    return tuple(getattr(solver, "penalties", ("chi2",)))


def check_penalty(setting: Setting, solver: Any) -> None:
    """Refuse (``ConfigError``) a problem with ``nu > 0`` whose ``problem.penalty``
    the solver does not declare in its ``penalties``, naming the solvers that do."""
    spec, name = setting.problem, setting.name
    penalty, supported = spec["penalty"], penalties(solver)
    if spec["nu"] <= 0.0 or penalty in supported:
        return
    others = [s for s in setting.registry.names("solver")
              if penalty in penalties(setting.registry.get("solver", s).cls)]
    listed = ", ".join(f"solver={s}" for s in others) or "none is installed"
    raise ConfigError(
        f"The solver '{name}' solves problem.penalty in {list(supported)}. Got "
        f"problem.penalty={penalty!r} with nu={spec['nu']!r} > 0: choose a solver that "
        f"declares '{penalty}' ({listed}), or problem.penalty=chi2.")


def solver_radius(setting: Setting) -> float:
    """The ball's radius B of a whole-algorithm solver's problem: ``problem.radius``,
    else the w-player's (``w_player.radius`` of the config, so the game and the
    solvers of one sweep solve the same problem), or infinite (``ball=false``)."""
    spec, name = setting.problem, setting.name
    if not spec["ball"]:
        if spec["radius"] is not None:
            raise ConfigError(f"problem.ball=false (no ball) and problem.radius="
                              f"{spec['radius']!r} contradict each other: set one of them.")
        if spec["mu"] <= 0.0:
            raise ConfigError(f"problem.ball=false (no ball) needs problem.mu > 0 (F is then "
                              f"strongly convex and has a minimiser); got mu={spec['mu']!r} "
                              f"for solver '{name}'.")
        return math.inf
    if spec["radius"] is not None:
        return float(spec["radius"])
    w_conf = setting.config.get("w_player")
    radius = w_conf.get("radius") if isinstance(w_conf, Mapping) else None
    if radius is None:
        raise ConfigError(f"The solver '{name}' needs the ball's radius: set problem.radius "
                          "(or w_player.radius), or problem.ball=false with problem.mu > 0.")
    return float(check("the problem", "radius", PROBLEM_PARAMS["radius"], radius))


def set_up(solver: Any, problem: Any, budget: int, seed: int) -> tuple[dict[str, Any], float,
                                                                        float]:
    """``solver.setup(problem, budget)`` for a run: ``(values, compile_s, setup_s)``.

    First a copy of the solver is set up on a copy of the problem and takes
    one step (``probe``), so that its kernels are compiled, or loaded from
    numba's cache, before anything is timed (``compile_s``); then the solver
    itself is set up, timed as the algorithm's own work (``setup_s``: its
    first pass over the data counts as data points, so it counts as time)."""
    compile_s = probe(solver, problem, budget, seed)
    began = time.perf_counter()
    values = solver.setup(problem, budget)
    return values, compile_s, time.perf_counter() - began


def probe(solver: Any, problem: Any, budget: int, seed: int) -> float:
    """Seconds to set up a copy of ``solver`` on a copy of ``problem`` that
    shares its data and take one step, so that its kernels are compiled before
    the clock starts; 0 if the copy cannot be made or fails (the run itself
    then reports the failure, or compiles in its own time). A ``ConfigError``
    is raised as the run's own setup would raise it."""
    if any(wrapped(c) for c in (solver, problem.model, problem.constraint)):
        return 0.0  # a wrapper on the instance would call the run's own component
    began = time.perf_counter()
    try:
        keep = {id(a): a for a in (problem.X, problem.y)}
        twin, twin_problem = copy.deepcopy((solver, problem), keep)
        twin.setup(twin_problem, budget)
        twin.advance(twin_problem, np.random.default_rng(seed), int(twin.data_points) + 1)
    except ConfigError:
        raise
    except Exception as err:  # noqa: BLE001 - the run reports it in its own time
        probe_failed(err)
    return time.perf_counter() - began

