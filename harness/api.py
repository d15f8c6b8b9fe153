"""The Python API: ``build`` a component, ``prepare`` and ``run`` a game from a config."""

from __future__ import annotations

import dataclasses
import math
import pickle
import signal
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import numpy as np

from harness import state, stream
from harness.context import RunContext, attach
from harness.game import Components, Loop, checkpoint_rounds
from harness.params import ConfigError, Param, RunSkipped, check
from harness.problem import Problem, problem_values
from harness.registry import CORE_KEYS, Registry, default_registry, make_plugin_manager
from harness.solve import Algorithm, Setting, as_algorithm

#: top-level values of the game (``budget`` is at least one round's rows)
GAME_PARAMS: dict[str, Param] = {
    "budget": Param(int, default=1_000_000, low=1, doc="data points processed"),
    "budget_passes": Param(float, low=0.0, low_open=True, nullable=True,
                           doc="if set, the budget in passes over the data set: budget = "
                               "ceil(budget_passes n) data points, in place of budget"),
    "seed": Param(int, default=0, low=0, doc="seed of the game's random generator"),
    "checkpoints": Param(int, default=30, low=1,
                         doc="about this many log-spaced checkpoints (plus each decade)"),
}

#: top-level values that steer the run rather than the game
RUN_SWITCHES: dict[str, Param] = {
    "progress": Param(bool, default=True, doc="progress bar (on a terminal only)"),
    "resume": Param(bool, default=False, doc="continue from the last saved checkpoint"),
    "state_dir": Param(str, nullable=True,
                       doc="saved game states and journals of unsent checkpoints"),
    "engine": Param(str, default="auto", choices=("auto", "compiled", "python"),
                    doc="rounds in compiled calls (auto: when every component offers a "
                        "compiled form) or in the Python loop; same numbers either way"),
}


#: least seconds of a run between two saves of its state, each at a checkpoint
#: (the first checkpoint always saves, so a resumed run continues the same
#: tracked run): an interrupted run resumes from its last save and replays
#: from there, to the same numbers. A save costs about a millisecond: at each
#: of its checkpoints, a short run's saves would take a quarter of its time
SAVE_EVERY_S = 1.0


def package_version() -> str:
    try:
        return version("minimax-bench")
    except PackageNotFoundError:  # running from a source tree
        return "0+unknown"


def build(kind: str, name: str, *, registry: Registry | None = None, **params: Any) -> Any:
    """Create a registered component with the same validation as the CLI.

    ``kind`` is one of constraint_set, p_player, w_player, model, dataset.
    """
    return (registry or default_registry()).build(kind, name, **params)


def _to_dict(cfg: Any) -> dict[str, Any]:
    if isinstance(cfg, Mapping) and not hasattr(cfg, "_metadata"):
        return {k: _to_dict(v) if isinstance(v, Mapping) else v for k, v in cfg.items()}
    from omegaconf import OmegaConf

    return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]


def _group(cfg: Mapping[str, Any], key: str) -> tuple[str, dict[str, Any]]:
    group = cfg.get(key)
    if not isinstance(group, Mapping) or not isinstance(group.get("name"), str):
        raise ConfigError(f"The '{key}' config group must be a mapping with a 'name'. "
                          f"Got {group!r} instead.")
    params = {k: v for k, v in group.items() if k != "name"}
    return group["name"], params


def check_dataset(name: str, dataset: Any) -> None:
    """Shapes, dtypes and finiteness of a data set, before any game starts."""
    X, y = dataset.X, dataset.y
    if getattr(X, "ndim", 0) != 2 or X.shape[0] < 1:
        raise ConfigError(f"The data set '{name}' must provide X as an n x d array. "
                          f"Got shape {getattr(X, 'shape', None)} instead.")
    if getattr(y, "shape", None) != (X.shape[0],):
        raise ConfigError(f"The data set '{name}' must provide y of shape ({X.shape[0]},). "
                          f"Got shape {getattr(y, 'shape', None)} instead.")
    step = stream.chunk_rows(X.shape[1])  # X may be a memmap larger than memory
    for label, a in (("X", X), ("y", y)):
        first, count = None, 0
        for start in range(0, X.shape[0], step):
            block = np.asarray(a[start:start + step])
            bad = ~np.isfinite(np.asarray(block, dtype=np.float64))
            count += int(np.count_nonzero(bad))
            if first is None and count:
                where = np.argwhere(bad)[0]
                first = (start + where[0], where[1:], block[tuple(where)])
        if first is not None:
            row, col, value = first
            at = f"row {row}" + (f", column {col[0]}" if len(col) else "")
            raise ConfigError(f"The data set '{name}' must contain only finite numbers. "
                              f"Got {value!r} in {label} at {at} "
                              f"({count} non-finite value(s) in all).")
    if dataset.task not in ("classification", "regression"):
        raise ConfigError(f"The data set '{name}' must declare task 'classification' or "
                          f"'regression'. Got {dataset.task!r} instead.")
    if dataset.task == "classification":
        labels = np.asarray(y)
        classes = getattr(dataset, "n_classes", None)
        bad = (np.flatnonzero((labels < 0) | (labels >= classes)) if isinstance(classes, int)
               and np.issubdtype(labels.dtype, np.integer) else None)
        if bad is None or bad.size:
            got = (f"dtype {labels.dtype}" if bad is None else
                   f"y[{int(bad[0])}] = {labels[bad[0]].item()!r} ({bad.size} labels outside)")
            raise ConfigError(f"The data set '{name}' is a classification task: y must hold "
                              f"integer class codes in [0, n_classes={classes!r}). Got {got} "
                              "instead.")


def check_unit_features(name: str, dataset: Any, model_name: str, model: Any) -> None:
    """Refuse features outside [0, 1] when the model's loss bound assumes them
    (a class attribute ``needs_unit_features = True``), in one streamed pass.

    The built-in models need no such check: their bounds read the largest row
    norm of the data itself (``plugins.models.glm``)."""
    if not getattr(model, "needs_unit_features", False):
        return
    where = stream.first_outside_unit(dataset.X)
    if where is not None:
        raise ConfigError(
            f"The model '{model_name}' bounds its losses for features in [0, 1]; the data "
            f"set '{name}' has {where}. Scale the features to [0, 1] (e.g. dataset=file "
            "with dataset.scale=minmax) or choose another model.")


@dataclass
class Prepared:
    """A validated game, ready to play; nothing has been recorded yet.

    ``solver`` is the run's solver as ``prepare`` and ``play`` drive it
    (``harness.solve.Algorithm``: the game of Algorithm 1, or a
    whole-algorithm solver in its adapter); ``game`` the loop ``play`` runs
    (the solver's ``runner``), None before; ``resumed_from`` the round a
    resumed run continued from. Plugins see the run through
    ``context.parts``, which reads through to ``parts`` and ``game``.
    """

    parts: Components
    horizon: int
    budget: int
    seed: int
    checkpoints: np.ndarray
    context: RunContext
    registry: Registry
    #: the solver as ``prepare`` and ``play`` drive it (``harness.solve.Algorithm``)
    solver: Algorithm
    game: Loop | None = None
    resumed_from: int | None = None
    #: where ``play`` saves the game's state at checkpoints (None: nowhere), and
    #: the round of the last state it saved there (None: none yet)
    state_file: Path | None = None
    saved_round: int | None = None
    #: seconds ``prepare`` spent before the clock (the players' setup, where their
    #: kernels load; a solver's probe on a copy), and a solver's own setup (its
    #: first pass: the start of its clock)
    compile_time: float = 0.0
    setup_time: float = 0.0

    def __post_init__(self) -> None:
        attach(self.context, self)


def prepare(cfg: Any, registry: Registry | None = None) -> Prepared:
    """Build and validate every component of ``cfg``; raise ``ConfigError`` on bad input
    (and ``RunSkipped`` if a plugin's ``before_prepare`` finds the run need not be played).

    The solver (``harness.solve.Algorithm``; a ``harness.protocols.Solver`` in
    its adapter) composes itself from the config, sets up and says what to record."""
    registry = registry or default_registry()
    conf = _to_dict(cfg)
    allowed = CORE_KEYS | set(registry.blocks)
    unknown = sorted(set(conf) - allowed)
    if unknown:
        raise ConfigError(f"Unknown top-level config key(s) {unknown}. Allowed keys: "
                          f"{sorted(allowed)} (blocks of plugins: {sorted(registry.blocks)}).")
    for key, spec in RUN_SWITCHES.items():
        check("the game", key, spec, conf.get(key, spec.default))
    registry.pm.hook.before_prepare(config=conf)  # may raise RunSkipped: nothing built yet
    resolved: dict[str, Any] = {}

    def make(kind: str, key: str, name: str, params: dict[str, Any], **given: Any) -> Any:
        component, values = registry.build_with_values(kind, name, **given, **params)
        resolved.update({f"{key}.{k}": v for k, v in values.items() if k not in given})
        resolved[f"{key}.name"] = name
        return component

    def make_group(group: str, **values: Any) -> tuple[str, Any]:
        name, params = _group(conf, group)
        return name, make(group, group, name, {**params, **values})

    ds_name, ds_params = _group(conf, "dataset")
    dataset = make("dataset", "dataset", ds_name, ds_params)
    check_dataset(ds_name, dataset)
    n = int(dataset.X.shape[0])

    c_name, c_params = _group(conf, "constraint")
    if "n" in c_params:
        raise ConfigError(f"The 'n' parameter of {c_name} is set by the data set "
                          f"(n={n}); remove it from the config.")
    constraint = make("constraint_set", "constraint", c_name, c_params, n=n)
    # optional: a set whose caps read the data set's columns (alphaset) binds to it here
    bind = getattr(constraint, "bind", None)
    bound = bind(dataset) if bind is not None else None

    spec = problem_values(conf.get("problem"), n)
    s_name, s_params = _group(conf, "solver") if conf.get("solver") is not None else ("game", {})
    solver = as_algorithm(make("solver", "solver", s_name, s_params))
    radius = solver.compose(Setting(s_name, conf, spec, constraint, c_name, registry,
                                    make_group))

    m_name, m_params = _group(conf, "model")
    if m_name == "auto":
        m_name = dataset.default_model
    model = make("model", "model", m_name, m_params)
    task = getattr(model, "task", None)
    if task is not None and task != dataset.task:
        raise ConfigError(f"The model '{m_name}' is for {task}; the data set '{ds_name}' is "
                          f"{dataset.task}. Choose a {dataset.task} model or model=auto.")
    check_unit_features(ds_name, dataset, m_name, model)
    names = {"dataset": ds_name, "constraint": c_name, "model": m_name, "solver": s_name,
             **solver.names()}

    per_round = solver.rows_per_round(constraint)
    passes = check("the game", "budget_passes", GAME_PARAMS["budget_passes"],
                   conf.get("budget_passes"))
    budget = check("the game", "budget",
                   dataclasses.replace(GAME_PARAMS["budget"], low=per_round),
                   conf.get("budget", GAME_PARAMS["budget"].default) if passes is None
                   else max(per_round, math.ceil(passes * n)))
    seed = check("the game", "seed", GAME_PARAMS["seed"],
                 conf.get("seed", GAME_PARAMS["seed"].default))
    n_cp = check("the game", "checkpoints", GAME_PARAMS["checkpoints"],
                 conf.get("checkpoints", GAME_PARAMS["checkpoints"].default))
    horizon = budget // per_round

    derived: dict[str, Any] = {f"constraint.{k}": v for k, v in (bound or {}).items()}
    derived.update({f"model.{k}": v for k, v in model.setup(dataset, radius).items()})
    if not math.isfinite(float(model.scale_)):
        raise ConfigError(f"The model '{m_name}' has no finite loss bound without a ball "
                          "(problem.ball=false): set model.loss_scale (1: the raw loss; 2 with "
                          "linear_mse: the squared error over 2, as the DRO papers).")
    problem = Problem(dataset.X, dataset.y, model, constraint, spec["mu"], spec["nu"], radius,
                      spec["penalty"])
    values, compile_s, setup_s = solver.set_up(problem, budget, horizon, seed)
    derived.update(values)
    derived.update({f"problem.{k}": v for k, v in problem.describe().items()})

    # resolved config values, then every theory-derived value in place of its None
    params: dict[str, Any] = {"budget": budget, "seed": seed, "checkpoints": n_cp}
    if passes is not None:
        params["budget_passes"] = passes
    params.update(resolved)
    params.update({"n": n, "d": int(dataset.X.shape[1])})
    params.update(solver.describe(horizon, per_round))
    params.update(derived)
    tags = {"algorithm": solver.label, "solver": s_name, "dataset": ds_name,
            "constraint": c_name, "model": m_name, "seed": str(seed),
            "minimax_bench_version": package_version(), **solver.tags()}
    label = getattr(constraint, "label", None)
    if callable(label):  # the set's own short name of K (the report's problem names)
        tags["constraint_label"] = str(label())
    context = RunContext(config=conf, params=params, tags=tags)
    parts = solver.components(dataset, model, constraint, names, problem)
    solver.admit(parts, conf.get("engine", RUN_SWITCHES["engine"].default))
    prepared = Prepared(parts, horizon, budget, seed,
                        checkpoint_rounds(horizon, n_cp, per_round), context, registry, solver)
    prepared.compile_time, prepared.setup_time = compile_s, setup_s
    return prepared


def _merge(results: Iterable[Mapping[str, float] | None]) -> dict[str, float]:
    merged: dict[str, float] = {}
    for result in results:
        if result:
            merged.update({k: float(v) for k, v in result.items()})
    return merged


def play(prepared: Prepared, progress: Callable[[int], None] | None = None) -> dict[str, float]:
    """Play a prepared game, firing the event hooks; a failure or interrupt
    ends the tracked run as FAILED or KILLED with its checkpoints kept."""
    hook = prepared.registry.pm.hook
    context = prepared.context
    state_file = prepared.state_file = state.path_for(prepared)
    saved = state.load(state_file, prepared) if context.config.get("resume") else None
    if saved is not None:
        prepared.parts = saved["parts"]
        prepared.resumed_from = saved["state"].rounds
        context.state["resume"] = saved["resume"]

    saving = [True]
    last_save = [-math.inf]  # the first checkpoint saves: a resumed run takes its run over

    def checkpoint(step: int, metrics: dict[str, float]) -> None:
        hook.on_checkpoint(context=context, step=step, metrics=metrics)
        if saving[0] and time.monotonic() - last_save[0] >= SAVE_EVERY_S:
            last_save[0] = time.monotonic()
            try:
                state.save(state_file, prepared, game)
                prepared.saved_round = game.state.rounds
            except (pickle.PicklingError, AttributeError, TypeError) as err:
                saving[0] = False
                warnings.warn(f"The game state cannot be saved ({err}); this run cannot be "
                              "resumed if it is interrupted.", RuntimeWarning, stacklevel=2)

    game = prepared.solver.runner(
        prepared.parts,
        prepared.horizon,
        saved["rng"] if saved else np.random.default_rng(prepared.seed),
        prepared.checkpoints,
        on_checkpoint=checkpoint,
        progress=progress,
        extra_metrics=lambda w_bar, losses: _merge(
            hook.checkpoint_metrics(context=context, w_bar=w_bar, losses=losses)),
        engine=context.config.get("engine", RUN_SWITCHES["engine"].default),
    )
    if saved is not None:
        game.state = saved["state"]
    else:  # a solver's setup is the first of its work; w_0 is where it starts
        game.state.wall_time = prepared.setup_time
        game.state.start_w = np.array(game.iterate(), dtype=np.float64)
    game.state.compile_time += prepared.compile_time
    prepared.game = game  # context.parts reads the run through it from here on
    status = "FAILED"
    with _stop_on_signals(game):
        try:
            hook.on_run_start(context=context)
            metrics = game.play()
            status = "FINISHED"
            state.discard(state_file)
        except RunSkipped:
            status = "SKIPPED"  # nothing has started: no run to end
            raise
        except KeyboardInterrupt:
            status = "KILLED"
            raise
        finally:  # a first signal while the status is sent does not cut it short
            game.started = True
            if status != "SKIPPED":
                hook.on_run_end(context=context, status=status,
                                metrics=game.state.last_metrics)
    return metrics


@contextmanager
def _stop_on_signals(game: Loop) -> Iterator[None]:
    """Ctrl-C and SIGTERM (a scheduler's or ``kill``'s stop) end the game between
    two rounds, as KILLED with its checkpoints kept: an exception raised inside
    a compiled kernel would surface as a SystemError instead. Before the game
    (a plugin's work at run start, say) a signal interrupts at once; after
    it, the first signal does not cut the final status short, and is raised
    again once the run has ended (a stop asked for in the last round is not
    dropped). A second signal interrupts at once. Only the main thread can
    install signal handlers."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def request_stop(signum, frame):
        if game.stop_requests or not game.started:
            raise KeyboardInterrupt(f"signal {signum}")
        game.stop_requests.append(signum)

    previous = {sig: signal.signal(sig, request_stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    except BaseException:
        _restore(previous)
        raise
    _restore(previous)
    if game.stop_requests:  # it came after the last round: honour it now
        signal.raise_signal(game.stop_requests[0])


def _restore(handlers: Mapping[int, Any]) -> None:
    for sig, handler in handlers.items():
        signal.signal(sig, handler)


def run(
    cfg: Any,
    *,
    plugins: Iterable[Any] = (),
    progress: Callable[[int], None] | None = None,
) -> dict[str, float]:
    """Run one game from a composed config (DictConfig or dict); return the final metrics.

    ``plugins`` are extra plugin objects registered for this run only (besides
    the built-ins and installed packages).
    """
    plugins = tuple(plugins)
    registry = Registry(make_plugin_manager(plugins)) if plugins else None
    return play(prepare(cfg, registry), progress)
