"""The game loop (paper, Algorithm 1) and the metrics computed at checkpoints."""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from harness import engine as engines
from harness import stream
from harness.params import ConfigError
from harness.protocols import ConstraintSet, Dataset, Model, PPlayer, WPlayer

#: errors of a p-player's arithmetic (a NaN reaching a sampler, an overflow)
#: that the game reports as a ``GuardError`` naming the player and the round
NUMERIC_ERRORS = (ValueError, ArithmeticError)

#: metrics that measure time, not the game: they differ between runs of one seed
TIMING_METRICS = ("wall_time_s", "checkpoint_time_s", "checkpoint_time_total_s",
                  "compile_time_s")


#: about how long one compiled call lasts: the delay before a signal is honoured
CALL_SECONDS = 0.05


class GuardError(RuntimeError):
    """A plugin produced a value outside the contract (p outside K, non-finite numbers)."""


def checkpoint_rounds(horizon: int, count: int, rows_per_round: int = 1) -> np.ndarray:
    """About ``count`` rounds log-spaced in data points, plus every round at
    which a power of ten of data points is reached, always ending at ``horizon``."""
    spaced = np.geomspace(1, horizon, max(count, 1))
    budget = horizon * rows_per_round
    decades = [10**j / rows_per_round for j in range(int(np.log10(budget)) + 1)
               if 10**j >= rows_per_round]
    rounds = np.unique(np.round(np.concatenate((spaced, decades, [horizon]))).astype(np.int64))
    return rounds[(rounds >= 1) & (rounds <= horizon)]


@dataclass
class Components:
    dataset: Dataset
    model: Model
    constraint: ConstraintSet
    p_player: PPlayer | None
    w_player: WPlayer | None
    names: Mapping[str, str] = field(default_factory=dict)
    #: the problem F (``harness.problem``) and, for a run of a whole-algorithm
    #: solver, the solver (None: the game of the p- and w-player)
    problem: Any = None
    solver: Any = None


@dataclass
class GameState:
    """Counters and accumulators of a game in progress."""

    rounds: int = 0
    data_points: int = 0
    #: per-row gradients formed: rows of the w-player's batch with nonzero weight
    grad_evals: int = 0
    a_sum: np.ndarray | None = None
    inner_w: np.ndarray | None = None
    inner_lipschitz: float = 1.0
    #: seconds of the algorithm's own work (its rounds or steps, a solver's setup),
    #: without compilation and checkpoints
    wall_time: float = 0.0
    #: seconds spent computing checkpoint metrics, summed over the checkpoints
    checkpoint_time: float = 0.0
    #: seconds spent compiling (or loading compiled) kernels before the clock
    #: started, summed over the processes a resumed run took
    compile_time: float = 0.0
    #: the iterate the run started from (``w_0``), recorded when it starts
    start_w: np.ndarray | None = None
    last_metrics: dict[str, float] = field(default_factory=dict)


class Loop:
    """What a run's loop holds, whatever it plays (``Game``, ``harness.solve.SolverRun``):
    its components, horizon, generator, checkpoints and callbacks, the signals
    received and its counters (``state``)."""

    def __init__(
        self,
        parts: Components,
        horizon: int,
        rng: np.random.Generator,
        checkpoints: np.ndarray,
        on_checkpoint: Callable[[int, dict[str, float]], None] = lambda step, m: None,
        progress: Callable[[int], None] | None = None,
        extra_metrics: Callable[[np.ndarray, np.ndarray], Mapping[str, float]] | None = None,
        engine: str = "auto",
    ) -> None:
        self.parts = parts
        self.horizon = horizon
        self.rng = rng
        self.checkpoints = checkpoints
        self.on_checkpoint = on_checkpoint
        self.progress = progress
        self.extra_metrics = extra_metrics
        #: "auto" (compiled if every component offers a compiled form), "compiled", "python"
        self.engine = engine
        #: the path the last ``play`` took ("compiled", "python" or "solver") and, for
        #: "python" under "auto", why
        self.path: str | None = None
        self.python_reason: str | None = None
        #: signals received (see ``harness.api``); the loop stops at the next round
        self.stop_requests: list[int] = []
        #: set when the first round starts (and while the run ends): from then on
        #: a first signal waits for the end of a round
        self.started = False
        #: compile the kernels on copies of the components before the clock starts
        self.probe = True
        #: why the last checkpoint logged no ``theory_bound`` (None: it did)
        self.theory_absent: str | None = None
        self.state = GameState()


    def _timed(self, metrics: dict[str, float], start: float) -> dict[str, float]:
        """A checkpoint's metrics with the seconds spent computing them
        (``checkpoint_time_s``, and their sum over the run so far), kept as the
        last checkpoint's."""
        state = self.state
        spent = time.perf_counter() - start
        state.checkpoint_time += spent
        metrics["checkpoint_time_s"] = spent
        metrics["checkpoint_time_total_s"] = state.checkpoint_time
        metrics["compile_time_s"] = state.compile_time
        state.last_metrics = metrics
        return metrics

    def _checkpoint(self, step: int, t0: float) -> float:
        """Evaluate a checkpoint and hand it to ``on_checkpoint`` (the trackers,
        the saved state); returns the clock's origin ``t0`` moved on by the time
        that took, so ``wall_time_s`` times the algorithm alone."""
        began = time.perf_counter()
        self.state.wall_time = began - t0
        self.on_checkpoint(step, self.evaluate())
        return t0 + (time.perf_counter() - began)

    def _twins(self) -> tuple[Components, np.random.Generator] | None:
        """Copies of the run's components and generator that share the data set:
        a probe plays on them before the clock starts, and the run itself is
        left as it was. None when a component has methods replaced on the
        instance (a test's or a profiler's wrapper is a closure over the run's
        own component: the probe's round would count in the run)."""
        parts = self.parts
        if any(wrapped(getattr(parts, kind)) for kind in ("constraint", "model", "p_player",
                                                          "w_player", "solver")):
            return None
        keep = (parts.dataset, parts.dataset.X, parts.dataset.y)
        return copy.deepcopy(parts, {id(a): a for a in keep}), copy.deepcopy(self.rng)


class Game(Loop):
    """Plays ``horizon`` rounds of Algorithm 1 and evaluates checkpoints.

    Per round: the p-player proposes rows (Line 3), the game evaluates their
    losses with ``w_t`` and counts them as data points processed (Line 4), the
    p-player observes them (Lines 5-6), the w-player steps on the weighted
    gradient (Line 7). ``a_bar`` accumulates the p-player's actions.
    """

    def __init__(self, parts: Components, *args: Any, **kwargs: Any) -> None:
        super().__init__(parts, *args, **kwargs)
        self.state = GameState(a_sum=np.zeros(parts.dataset.X.shape[0]))

    def iterate(self) -> np.ndarray:
        """The w-player's current iterate (before the first round: ``w_0``)."""
        return self.parts.w_player.w

    def play(self) -> dict[str, float]:
        """Play the rounds left up to the horizon, evaluating every checkpoint;
        returns the last checkpoint's metrics."""
        found = None if self.engine == "python" else engines.forms(self.parts)
        if isinstance(found, engines.Forms):
            self.path = "compiled"
            return self._play_compiled(found)
        if self.engine == "compiled":
            raise ConfigError(f"engine=compiled: {found}; use engine=auto (or python) "
                              "to play it on the Python loop.")
        self.path, self.python_reason = "python", found
        return self._play_python()

    def _play_python(self) -> dict[str, float]:
        """The Python loop: one call per component per round (Algorithm 1)."""
        parts, state = self.parts, self.state
        X, y = parts.dataset.X, parts.dataset.y
        propose, observe = parts.p_player.propose, parts.p_player.observe
        losses_of, grad_of = parts.model.losses, parts.model.grad
        wp = parts.w_player
        step = wp.step
        rng, a_sum = self.rng, state.a_sum
        stride = max(1, self.horizon // 200)
        pending = [int(r) for r in self.checkpoints if r > state.rounds]
        next_cp = pending.pop(0) if pending else -1
        if state.rounds < self.horizon and self.probe:
            self._probe_round()
        t0 = time.perf_counter() - state.wall_time
        stop = self.stop_requests
        self.started = True
        for t in range(state.rounds + 1, self.horizon + 1):
            if stop:  # a signal asked to stop: leave between rounds, never mid-kernel
                raise KeyboardInterrupt(f"signal {stop[0]} before round {t}")
            try:
                prop = propose(rng)
            except ConfigError:
                raise
            except NUMERIC_ERRORS as err:
                raise self._failed("propose", t, err) from err
            rows = prop.rows
            Xb, yb = X[rows], y[rows]
            w = wp.w
            losses = losses_of(w, Xb, yb)
            if not (losses.min() >= 0.0 and losses.max() <= 1.0):  # False on NaN too
                self._bad_losses(t, w, rows, losses)
            try:
                weights = observe(losses)
            except ConfigError:
                raise
            except NUMERIC_ERRORS as err:
                raise self._failed("observe", t, err) from err
            if weights is None:
                weights = prop.weights
            if not math.isfinite(weights.sum()):
                raise GuardError(f"p-player '{parts.names.get('p_player')}' gave non-finite "
                                 f"batch weights at round {t}: {weights!r}.")
            step(grad_of(w, Xb, yb, weights))
            state.grad_evals += int(np.count_nonzero(weights))
            if prop.action_rows is None:
                action_rows, action = rows, prop.weights
            else:
                action_rows, action = prop.action_rows, prop.action_values
            if not math.isfinite(action.sum()):
                raise GuardError(f"p-player '{parts.names.get('p_player')}' gave a non-finite "
                                 f"action a_t at round {t}: {action!r}.")
            a_sum[action_rows] += action
            state.data_points += rows.size
            if t == next_cp:
                state.rounds = t
                t0 = self._checkpoint(state.data_points, t0)
                next_cp = pending.pop(0) if pending else -1
            if self.progress is not None and t % stride == 0:
                self.progress(t)
        state.rounds = self.horizon
        state.wall_time = time.perf_counter() - t0
        return state.last_metrics

    def _probe_round(self) -> None:
        """Play the next round on copies of the components (``_twins``), so
        that every kernel it calls is compiled, or loaded from numba's cache,
        before the clock starts; the seconds are added to ``compile_time``."""
        began = time.perf_counter()
        try:
            twins = self._twins()
            if twins is None:
                return
            twin = Game(twins[0], self.state.rounds + 1, twins[1],
                        np.zeros(0, dtype=np.int64), engine="python")
            twin.probe = False
            twin.state = copy.deepcopy(self.state)
            twin._play_python()
        except Exception as err:  # noqa: BLE001 - the run's own round reports it
            probe_failed(err)
        self.state.compile_time += time.perf_counter() - began

    def _play_compiled(self, forms: engines.Forms) -> dict[str, float]:
        """The rounds in compiled calls (``harness.engine``): each call plays up
        to the next checkpoint, or fewer rounds so that it lasts about
        ``CALL_SECONDS`` (the first plays one round, each next up to four times
        as many), after which a pending signal is honoured (a compiled call
        cannot be interrupted). The driver is loaded, or compiled, before the
        first round, while a signal still interrupts at once."""
        parts, state = self.parts, self.state
        play = engines.driver(forms.p_player.kernels, forms.model.kernels,
                              forms.w_player.kernels)
        # rows are read whole: a C-ordered copy of in-memory features (a memory map is
        # C-ordered already, see engines.forms)
        X, y = np.ascontiguousarray(parts.dataset.X), np.ascontiguousarray(parts.dataset.y)
        args = (self.rng, X, y, state.a_sum, forms.p_player.state, forms.constraint.state,
                forms.model.state, forms.w_player.state)
        info = np.array([0, 0, state.data_points, state.grad_evals], dtype=np.int64)
        pending = [int(r) for r in self.checkpoints if r > state.rounds]
        stride = max(1, self.horizon // 200)
        began = time.perf_counter()
        play(1, 0, *args, info)  # no round: load (or compile) first, while a signal interrupts
        state.compile_time += time.perf_counter() - began
        t0 = time.perf_counter() - state.wall_time
        stop = self.stop_requests
        self.started = True
        first, most = state.rounds + 1, 1
        while first <= self.horizon:
            if stop:
                raise KeyboardInterrupt(f"signal {stop[0]} before round {first}")
            while pending and pending[0] < first:
                pending.pop(0)
            last = min(pending[0] if pending else self.horizon, first + most - 1)
            began = time.perf_counter()
            try:
                code, rows, values = play(first, last, *args, info)
            except ConfigError:
                raise
            except NUMERIC_ERRORS as err:
                forms.store()
                kind, call = engines.PHASES.get(int(info[1]), ("p_player", "a round"))
                name = self.parts.names.get(kind)
                raise GuardError(f"{kind.replace('_', '-')} '{name}' failed in {call} at round "
                                 f"{int(info[0])}: {type(err).__name__}: {err}") from err
            finally:
                state.data_points, state.grad_evals = int(info[2]), int(info[3])
            forms.store()
            if code != engines.DONE:
                self._compiled_failure(code, int(info[0]), rows, values)
            # calls grow fourfold up to about CALL_SECONDS each
            per_round = max((time.perf_counter() - began) / (last - first + 1), 1e-9)
            most = max(1, min(4 * most, int(CALL_SECONDS / per_round)))
            if pending and last == pending[0]:
                pending.pop(0)
                state.rounds = last
                t0 = self._checkpoint(state.data_points, t0)
            if self.progress is not None and (last // stride) > ((first - 1) // stride):
                self.progress(last)
            first = last + 1
        state.rounds = self.horizon
        state.wall_time = time.perf_counter() - t0
        return state.last_metrics

    def _compiled_failure(self, code: int, t: int, rows: np.ndarray,
                          values: np.ndarray) -> None:
        """The ``GuardError`` the Python loop raises for the same failure."""
        name = self.parts.names.get("p_player")
        if code == engines.BAD_LOSS:
            self._bad_losses(t, self.parts.w_player.w, rows, values)
        if code == engines.BAD_WEIGHTS:
            raise GuardError(f"p-player '{name}' gave non-finite batch weights at round "
                             f"{t}: {values!r}.")
        raise GuardError(f"p-player '{name}' gave a non-finite action a_t at round {t}: "
                         f"{values!r}.")

    def evaluate(self) -> dict[str, float]:
        """Metrics at the current round: certified dual gap, objective, task metrics,
        the plugins' metrics, and the seconds spent computing them all
        (``checkpoint_time_s``; ``checkpoint_time_total_s`` over every checkpoint
        so far; neither is part of ``wall_time_s``)."""
        start = time.perf_counter()
        parts, state = self.parts, self.state
        X, y = parts.dataset.X, parts.dataset.y
        model, wp, pp = parts.model, parts.w_player, parts.p_player
        t = state.rounds
        w_bar = wp.w_bar
        self._guard(w_bar, pp.p)
        raw, task = stream.losses_and_task_metrics(model, w_bar, X, y, parts.constraint.k)
        losses = raw / model.scale_
        if not np.all(np.isfinite(losses)):
            bad = int(np.flatnonzero(~np.isfinite(losses))[0])
            raise GuardError(f"model '{parts.names.get('model')}' gave scaled loss "
                             f"{float(losses[bad])!r} for row {bad} at w_bar at round {t} "
                             f"(loss scale {model.scale_!r}).")
        objective, _ = parts.constraint.lmo(losses)
        a_bar = state.a_sum / t
        support = np.flatnonzero(a_bar)
        try:
            inner = stream.certified_inner_min(
                model, X, y, support, a_bar[support],
                state.inner_w if state.inner_w is not None else w_bar,
                wp.radius,
                lipschitz=state.inner_lipschitz,
                seed=t,
            )
        except FloatingPointError as err:
            raise GuardError(f"the dual gap at round {t} cannot be computed: {err} (model "
                             f"'{parts.names.get('model')}', w-player "
                             f"'{parts.names.get('w_player')}').") from err
        state.inner_w, state.inner_lipschitz = inner.w, inner.lipschitz
        metrics = {
            "dual_gap": objective - inner.lower,
            "objective": objective,
            "inner_min_lower": inner.lower,
            "inner_solver_slack": inner.upper - inner.lower,
            "rounds": float(t),
            "data_points": float(state.data_points),
            "grad_evals": float(state.grad_evals),
            "passes": state.data_points / X.shape[0],
            "wall_time_s": state.wall_time,
            "clipped_losses": float(model.n_clipped),
        }
        metrics.update(task)
        self.theory_absent = why_no_theory_bound(pp, wp, model, t)
        if self.theory_absent is None:
            metrics["theory_bound"] = theory_bound(pp, wp, t)
        if self.extra_metrics is not None:
            metrics.update(self.extra_metrics(w_bar, losses))
        bad = {key: value for key, value in metrics.items() if not math.isfinite(value)}
        if bad:
            raise GuardError(
                f"non-finite metric(s) {bad} at round {t}, not logged (p-player "
                f"'{parts.names.get('p_player')}', w-player '{parts.names.get('w_player')}', "
                f"model '{parts.names.get('model')}')."
            )
        return self._timed(metrics, start)

    def _failed(self, call: str, t: int, err: BaseException) -> GuardError:
        """A numeric failure inside the p-player, named with the round."""
        return GuardError(f"p-player '{self.parts.names.get('p_player')}' failed in {call} "
                          f"at round {t}: {type(err).__name__}: {err}")

    def _bad_losses(self, t: int, w: np.ndarray, rows: np.ndarray, losses: np.ndarray) -> None:
        names = self.parts.names
        if not np.all(np.isfinite(w)):
            raise GuardError(f"w-player '{names.get('w_player')}' produced a non-finite "
                             f"iterate before round {t}: {first_bad(w)}.")
        bad = int(np.flatnonzero(~((losses >= 0.0) & (losses <= 1.0)))[0])
        raise GuardError(
            f"model '{names.get('model')}' gave loss {float(losses[bad])!r} for row "
            f"{int(rows[bad])} at round {t}; losses handed to the players must be finite "
            "and in [0, 1]."
        )

    def _guard(self, w_bar: np.ndarray, p: np.ndarray) -> None:
        names = self.parts.names
        if not np.all(np.isfinite(w_bar)):
            raise GuardError(f"w-player '{names.get('w_player')}' produced a non-finite "
                             f"average iterate at round {self.state.rounds}: "
                             f"{first_bad(w_bar)}.")
        if not self.parts.constraint.contains(p, atol=1e-8):
            raise GuardError(
                f"p-player '{names.get('p_player')}' has p_t outside the constraint set "
                f"'{names.get('constraint')}' at round {self.state.rounds} "
                f"(sum={float(np.sum(p))!r}, min={float(np.min(p))!r}, max={float(np.max(p))!r})."
            )


def wrapped(component: Any) -> bool:
    """Whether ``component`` has methods replaced on the instance (no probe on its copy)."""
    return component is not None and bool(engines.replaced_methods(component))


def probe_failed(err: BaseException) -> None:
    """Warn that the probe on copies failed: a kernel's first use, with its
    compilation, may then fall inside the run's clock."""
    import warnings

    warnings.warn(f"minimax-bench: the kernels could not be compiled before the clock "
                  f"started (the first round on copies of the components failed: "
                  f"{type(err).__name__}: {err}); a first compilation may count in "
                  "wall_time_s.", RuntimeWarning, stacklevel=3)


def first_bad(w: np.ndarray) -> str:
    i = int(np.flatnonzero(~np.isfinite(w))[0])
    return f"coordinate {i} is {float(w[i])!r}"


def why_no_theory_bound(pp: PPlayer, wp: WPlayer, model: Model, rounds: int) -> str | None:
    """Why the theorem's bound (``theory_bound``) does not hold for this run, or
    None when it does. The theorem needs losses in [0, 1] that are convex in
    ``w``: a model that clips (a ``scale_`` below its optional ``loss_bound``,
    or losses already clipped, ``n_clipped``) hands the players
    ``min(L, 1)``, which is not convex, while the gap is measured on the
    unclipped losses. It needs both players' regret bounds (each player's
    docstring names the assumptions of its own)."""
    bound = float(getattr(model, "loss_bound", math.inf))
    below_bound = math.isfinite(bound) and float(model.scale_) < bound
    if below_bound or int(model.n_clipped):
        below = (f" (loss_scale {float(model.scale_):.4g} below its proven bound "
                 f"{bound:.4g})" if below_bound else "")
        return (f"the model clips losses{below}: the players see min(L, 1), not convex in w, "
                "so the theorem does not apply")
    for role, player in (("p-player", pp), ("w-player", wp)):
        if player.regret_bound(max(rounds, 1)) is None:
            return (f"the {role} '{getattr(player, 'name', type(player).__name__)}' states no "
                    f"regret bound for this run at round {rounds:,} (its docstring says why)")
    if theory_bound(pp, wp, rounds) is None:
        return f"the bound is not finite at round {rounds:,}"
    return None


def theory_bound(pp: PPlayer, wp: WPlayer, rounds: int) -> float | None:
    """The gap bound of the game's theorem (paper, ``thm:general``, Appendix C)
    for the run so far: ``(R_p(t) + R_w(t)) / t`` at ``t = rounds``.

    ``R_p(t)`` and ``R_w(t)`` are the players' ``regret_bound(t)``: bounds on
    the regret of the first t rounds with the step sizes the run actually
    uses, in the units of the game (``<L, a>``, losses in [0, 1], ``a`` in K),
    so the value bounds the certified ``dual_gap`` logged at the same
    checkpoint, with the probability the p-player's docstring states (at
    least ``1 - delta`` for the bandits, 1 for full information); the
    w-player's bound is deterministic. None, and no ``theory_bound`` is logged,
    if either player has no such bound for the run (e.g. S-AFL, whose
    guarantee holds in expectation only; a third-party player returning None).
    """
    rp, rw = pp.regret_bound(rounds), wp.regret_bound(rounds)
    if rp is None or rw is None or rounds <= 0:
        return None
    value = (rp + rw) / rounds
    return value if math.isfinite(value) else None
