"""Hydra's entry for the tuning protocol: ``hydra/sweeper=tune`` (the protocol
and its helpers are ``harness.tune``; Hydra takes sweepers from this package
only)."""

from __future__ import annotations

import itertools
import json
import math
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from hydra.plugins.sweeper import Sweeper
from omegaconf import DictConfig, OmegaConf

from harness.params import ConfigError
from harness.registry import default_registry
from harness.tune import (
    ALGORITHM_KEYS,
    ROLE_TAG,
    RULES,
    TUNING_FILE,
    default_grid,
    first_scale,
    job_metrics,
    plain,
    refuse,
    score,
    select,
    summary_table,
)
from hydra_plugins.minimax_bench.sweeper import validate_shapes


class TuneSweeper(Sweeper):
    """Hydra sweeper of the tuning protocol (see the module docstring).

    ``params``: swept overrides, as Hydra's basic sweeper's; ``algorithms``:
    names of p-players (played against the config's w-player) or
    whole-algorithm solvers, each a configuration of its own; ``grid`` the
    multipliers (null: ``grid_base ** grid_low .. grid_base ** grid_high``);
    ``tuning_seeds``, ``eval_seeds``; ``metric`` and ``rule`` the selection
    rule; ``tune``: algorithm name -> the parameters it tunes, in order
    (``p_player.eta_scale``, ``w_player.lr_scale``, ``solver.lr_scale``, ...);
    ``max_batch_size``: jobs handed to the launcher at once (null: a phase at
    once).
    """

    def __init__(self, params: Mapping[str, str] | None = None,
                 algorithms: Sequence[str] | None = None, grid: Sequence[float] | None = None,
                 grid_base: float = 3.0, grid_low: int = -4, grid_high: int = 4,
                 tuning_seeds: Sequence[int] = (100, 101, 102),
                 eval_seeds: Sequence[int] = (0, 1, 2), metric: str = "objective",
                 rule: str = "median", tune: Mapping[str, Sequence[str]] | None = None,
                 max_batch_size: int | None = None) -> None:
        try:
            self._init(params, algorithms, grid, grid_base, grid_low, grid_high, tuning_seeds,
                       eval_seeds, metric, rule, tune, max_batch_size)
        except ConfigError as err:
            refuse(err)

    def _init(self, params: Any, algorithms: Any, grid: Any, grid_base: float, grid_low: int,
              grid_high: int, tuning_seeds: Any, eval_seeds: Any, metric: str, rule: str,
              tune: Any, max_batch_size: int | None) -> None:
        self.params = dict(plain(params) or {})
        self.algorithms = [str(a) for a in plain(algorithms) or []]
        twice = sorted({a for a in self.algorithms if self.algorithms.count(a) > 1})
        if twice:
            raise ConfigError(f"hydra.sweeper.algorithms names {twice} more than once. Got "
                              f"{self.algorithms}.")
        grid = plain(grid)
        if grid is None:
            if not grid_base > 1.0 or int(grid_low) > int(grid_high):
                raise ConfigError("hydra.sweeper.grid_base must be > 1 and grid_low <= "
                                  f"grid_high. Got grid_base={grid_base!r}, grid_low="
                                  f"{grid_low!r}, grid_high={grid_high!r}.")
            grid = default_grid(grid_base, grid_low, grid_high)
        if (not grid or any(isinstance(m, bool) or not isinstance(m, int | float)
                            or not math.isfinite(m) or m <= 0 for m in grid)):
            raise ConfigError("hydra.sweeper.grid must be a non-empty list of multipliers > 0. "
                              f"Got {grid!r}.")
        self.grid = sorted({float(m) for m in grid})
        self.tuning_seeds = self._seeds("tuning_seeds", tuning_seeds)
        self.eval_seeds = self._seeds("eval_seeds", eval_seeds)
        shared = sorted(set(self.tuning_seeds) & set(self.eval_seeds))
        if shared:
            raise ConfigError("hydra.sweeper.eval_seeds must be fresh: disjoint from "
                              f"tuning_seeds. Got both with {shared}.")
        if rule not in RULES:
            raise ConfigError(f"hydra.sweeper.rule must be one of {sorted(RULES)}. "
                              f"Got {rule!r}.")
        self.metric, self.rule = str(metric), rule
        self.tune = {str(k): [str(p) for p in v] for k, v in (plain(tune) or {}).items()}
        if max_batch_size is not None and (isinstance(max_batch_size, bool)
                                           or not isinstance(max_batch_size, int)
                                           or max_batch_size < 1):
            raise ConfigError("hydra.sweeper.max_batch_size must be an int >= 1 or null. "
                              f"Got {max_batch_size!r}.")
        self.max_batch_size = None if max_batch_size is None else int(max_batch_size)
        self.config: DictConfig | None = None
        self.hydra_context: Any = None
        self.launcher: Any = None
        self.results: dict[tuple[str, ...], dict[str, float]] = {}
        self.job_index = 0

    @staticmethod
    def _seeds(name: str, seeds: Any) -> list[int]:
        seeds = plain(seeds)
        if (not isinstance(seeds, list | tuple) or not seeds
                or any(isinstance(s, bool) or not isinstance(s, int) or s < 0 for s in seeds)
                or len(set(seeds)) != len(seeds)):
            raise ConfigError(f"hydra.sweeper.{name} must be a non-empty list of distinct "
                              f"ints >= 0. Got {seeds!r}.")
        return [int(s) for s in seeds]

    def setup(self, *, hydra_context: Any, task_function: Any, config: DictConfig) -> None:
        """The launcher runs ``harness.cli.tuning_task`` (the run's final metrics)
        whatever the app's task function."""
        from hydra.core.plugins import Plugins

        from harness.cli import tuning_task

        self.hydra_context, self.config = hydra_context, config
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=tuning_task, config=config)

    # -- the configurations ---------------------------------------------------------------

    def configurations(self, arguments: Sequence[str]) -> list[dict[str, Any]]:
        """One entry per configuration: its overrides, algorithm and tuned keys."""
        from hydra.core.override_parser.overrides_parser import OverridesParser

        lines = [f"{k}={v}" for k, v in self.params.items()] + list(arguments)
        parser = OverridesParser.create(config_loader=self.hydra_context.config_loader)
        swept: OrderedDict[str, list[str]] = OrderedDict()
        for override in parser.parse_overrides(lines):
            key = override.get_key_element()
            if key.lstrip("+~") == "seed":
                raise ConfigError(f"The tuning sweep sets the seeds itself: remove "
                                  f"{override.input_line!r} and set hydra.sweeper.tuning_seeds "
                                  "and hydra.sweeper.eval_seeds.")
            if override.is_sweep_override():
                if not override.is_discrete_sweep():
                    raise ConfigError(f"The tuning sweep takes lists of values only; got "
                                      f"{override.input_line!r}.")
                swept[key] = [f"{key}={v}" for v in override.sweep_string_iterator()]
            else:
                swept[key] = [f"{key}={override.get_value_element_as_str()}"]
        registry = default_registry()
        algorithms = [self._algorithm_overrides(registry, a) for a in self.algorithms] or [[]]
        found = []
        for base in itertools.product(*swept.values()):
            for extra in algorithms:
                clash = {o.split("=", 1)[0] for o in extra} & set(swept)
                if clash:
                    given = [o for key in sorted(clash) for o in swept[key]]
                    raise ConfigError(f"hydra.sweeper.algorithms sets {sorted(clash)}; remove "
                                      f"them from the swept overrides (got {given}).")
                overrides = list(base) + extra
                config = self._describe(registry, overrides)
                varying = [o for o in base if len(swept[o.split("=", 1)[0]]) > 1]
                config["label"] = " ".join([config["algorithm"]] + varying)
                # what the algorithms are compared on: the varying overrides that do not
                # choose the algorithm
                config["problem"] = " ".join(
                    o for o in varying if o.split("=", 1)[0].lstrip("+~") not in ALGORITHM_KEYS)
                found.append(config)
        unknown = sorted(set(self.tune) - {c["algorithm"] for c in found})
        if unknown:
            raise ConfigError(f"hydra.sweeper.tune names {unknown}, which the sweep does not "
                              f"run; its algorithms are {sorted({c['algorithm'] for c in found})}.")
        return found

    @staticmethod
    def _algorithm_overrides(registry: Any, name: str) -> list[str]:
        solvers = [s for s in registry.names("solver")
                   if getattr(registry.get("solver", s).cls, "composed", None) is None]
        if name in solvers:
            return [f"solver={name}"]
        if name in registry.names("p_player"):
            return ["solver=game", f"p_player={name}"]
        raise ConfigError(f"hydra.sweeper.algorithms: unknown algorithm {name!r}. Allowed: "
                          f"p-players {registry.names('p_player')} and solvers {solvers}.")

    def _describe(self, registry: Any, overrides: list[str]) -> dict[str, Any]:
        cfg = self.hydra_context.config_loader.load_sweep_config(
            master_config=self.config, sweep_overrides=list(overrides))
        solver = str(OmegaConf.select(cfg, "solver.name", default="game"))
        composed = getattr(registry.get("solver", solver).cls, "composed", None) is not None
        groups = ("p_player", "w_player") if composed else ("solver",)
        names = {g: str(OmegaConf.select(cfg, f"{g}.name")) for g in groups}
        algorithm = names["p_player"] if composed else solver
        if algorithm in self.tune:
            keys = self.tune[algorithm]
        else:
            keys = [f"{g}.{p}" for g in groups
                    for p in first_scale(registry.get(g, names[g]).cls)]
        for key in keys:
            group, _, param = key.partition(".")
            table = (getattr(registry.get(group, names[group]).cls, "params", {})
                     if group in names else {})
            if (param not in table or table[param].type is not float
                    or not param.endswith("_scale")):
                scales = [f"{g}.{q}" for g in names for q in
                          getattr(registry.get(g, names[g]).cls, "params", {})
                          if q.endswith("_scale")]
                raise ConfigError(f"hydra.sweeper.tune: {algorithm} cannot tune {key!r}: not a "
                                  f"step-size multiplier (<x>_scale) of its components. "
                                  f"Allowed: {scales}.")
            if OmegaConf.select(cfg, key) not in (None, 1.0, 1):
                raise ConfigError(f"The tuning sweep sets {key} itself; remove {key}="
                                  f"{OmegaConf.select(cfg, key)!r} from the config.")
        return {"algorithm": algorithm, "overrides": overrides, "keys": keys}

    # -- the launches -----------------------------------------------------------------

    def launch(self, jobs: Sequence[Sequence[str]]) -> None:
        """Run the jobs not run yet in this sweep; their final metrics go to ``results``."""
        todo = list(OrderedDict.fromkeys(tuple(j) for j in jobs if tuple(j) not in self.results))
        size = self.max_batch_size or max(len(todo), 1)
        for start in range(0, len(todo), size):
            batch = [list(j) for j in todo[start:start + size]]
            validate_shapes(self, batch)  # one job of each shape
            returns = self.launcher.launch(batch, initial_job_idx=self.job_index)
            self.job_index += len(batch)
            for job, ret in zip(batch, returns, strict=True):
                self.results[tuple(job)] = job_metrics(ret)

    def _check_metric(self, jobs: Sequence[tuple[str, ...]]) -> None:
        """Refuse a ``metric`` that no finished run logs (a misspelt name would
        otherwise score every grid point +inf and select the multiplier 1)."""
        finished = [self.results[j] for j in jobs if "failed" not in self.results[j]]
        if finished and not any(self.metric in m for m in finished):
            logged = sorted(set().union(*finished))
            raise ConfigError(f"hydra.sweeper.metric must be a metric the runs log: one of "
                              f"{logged}. Got {self.metric!r}.")

    def _job(self, config: dict[str, Any], values: Mapping[str, float], seed: int,
             role: str) -> tuple[str, ...]:
        return tuple(config["overrides"] + [f"{k}={values[k]!r}" for k in config["keys"]]
                     + [f"seed={seed}", f"tracking.{ROLE_TAG}={role}"])

    def sweep(self, arguments: list[str]) -> list[dict[str, Any]]:
        try:
            return self._sweep(arguments)
        except ConfigError as err:
            refuse(err)

    def _sweep(self, arguments: list[str]) -> list[dict[str, Any]]:
        assert self.config is not None and self.launcher is not None
        sweep_dir = Path(self.config.hydra.sweep.dir)
        sweep_dir.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(self.config, sweep_dir / "multirun.yaml")
        start = time.perf_counter()
        configs = self.configurations(arguments)
        if len({tuple(c["overrides"]) for c in configs}) != len(configs):
            raise ConfigError("The tuning sweep has the same configuration twice: "
                              f"{[c['label'] for c in configs]}.")
        for config in configs:
            config["selected"] = {k: 1.0 for k in config["keys"]}
            config["scores"], config["edge"] = {}, {}
        rounds = max((len(c["keys"]) for c in configs), default=0)
        for r in range(rounds):
            active = [c for c in configs if len(c["keys"]) > r]
            jobs = {}
            for c in active:
                key = c["keys"][r]
                for m in self.grid:
                    values = {**c["selected"], key: m}
                    jobs[(id(c), m)] = [self._job(c, values, s, "tune")
                                        for s in self.tuning_seeds]
            self.launch([j for group in jobs.values() for j in group])
            self._check_metric([j for group in jobs.values() for j in group])
            for c in active:
                key = c["keys"][r]
                scores = {m: score([self.results[j].get(self.metric)
                                    for j in jobs[(id(c), m)]], self.rule) for m in self.grid}
                best = select(scores)
                c["selected"][key] = best
                c["scores"][key] = {repr(m): s for m, s in scores.items()}
                c["edge"][key] = len(self.grid) > 1 and best in (self.grid[0], self.grid[-1])
        evaluation = []
        for c in configs:
            theory = {k: 1.0 for k in c["keys"]}
            same = c["selected"] == theory
            for role, values in ((("both", theory),) if same else
                                 (("theory", theory), ("tuned", c["selected"]))):
                c.setdefault("eval_jobs", {})[role] = [self._job(c, values, s, role)
                                                       for s in self.eval_seeds]
                evaluation += c["eval_jobs"][role]
        self.launch(evaluation)
        record = self.record(configs, time.perf_counter() - start)
        (sweep_dir / TUNING_FILE).write_text(json.dumps(record, indent=2))
        print(summary_table(record))
        return record["configurations"]

    def record(self, configs: Sequence[dict[str, Any]], seconds: float) -> dict[str, Any]:
        """What ``tuning.json`` holds."""
        out = []
        for c in configs:
            evals = {}
            for role, jobs in c["eval_jobs"].items():
                evals[role] = [self.results[j] for j in jobs]
            out.append({
                "algorithm": c["algorithm"], "label": c["label"], "problem": c["problem"],
                "overrides": c["overrides"],
                "keys": c["keys"],
                "selected": c["selected"], "edge": c["edge"], "scores": c["scores"],
                "evaluation": {role: {"seeds": self.eval_seeds, "metrics": m}
                               for role, m in evals.items()},
            })
        return {
            "rule": f"{self.rule} over tuning seeds {self.tuning_seeds} of the final "
                    f"{self.metric} (lower is better; a failed run scores +inf; ties go to "
                    "the multiplier closest to 1)",
            "metric": self.metric, "statistic": self.rule, "grid": self.grid,
            "search": "coordinate: each parameter over the whole grid in turn",
            "tuning_seeds": self.tuning_seeds, "eval_seeds": self.eval_seeds,
            "jobs": len(self.results), "seconds": round(seconds, 1),
            "configurations": out,
        }
