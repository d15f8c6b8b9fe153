"""``minimax-bench-report``: figures and tables of a sweep (or any runs) a tracker recorded.

    minimax-bench-report --experiment paper_cancer --out report/
    minimax-bench-report --tracking-uri http://127.0.0.1:5000 --experiment sweep \
        --filter "tags.dataset = 'boston'"

Reads the finished runs of the experiment through the tracker's ``read_runs``
hook (``harness.runs.RunRecord``; the built-in MLflow tracker reads any
tracking URI, ``--tracking-uri`` or ``--source``), the game's and the
whole-algorithm solvers' alike: by default those of the most recent sweep (the
runs of the most recently started sweep, where the experiment has sweeps),
``--sweep ID`` another sweep, ``--all`` every run; ``--filter`` (in the
tracker's search syntax) applies on top. Runs are grouped by configuration (every param but
the seed and ``NOT_CONFIGURATION``; one run per configuration and seed, the
latest), each labelled by its algorithm and the params that tell it apart from
the other configurations of that algorithm (``exp4mp budget=200000``), and
split by problem (data set, preparation, k, mu/nu). It writes

* one PNG per metric: data points processed on a log x-axis (``--x``:
  per-row gradient evaluations, passes over the data or wall seconds), one line per
  configuration (median over seeds) with the min-max band over seeds; the
  objective's figure draws the exact optimum (param ``opt``, where the runs
  computed it) as a dashed horizontal line, ``suboptimality.png``,
  ``relative_suboptimality.png`` and ``normalised_suboptimality.png`` plot
  the certified ``objective - OPT`` (``plugins.metrics.reference``) and its ratios,
  down to OPT's resolution (its certified interval's width, a dash-dotted
  line; a value below it is drawn at it and a triangle marks where a
  configuration reached it); the first three draw the trivial solution ``w = 0`` (params
  ``trivial_objective``, ``trivial_relative_suboptimality``) as a dotted line;
* ``summary.png``: the paper's figure layout, the task metric (accuracy or
  MSE of the k largest losses) on the left, the dual gap on the right;
* ``final_values.md``: median, min and max over seeds of the final values;
* where the runs know OPT, ``problems.md``: one row per configuration and one
  column per problem (data set and k), the median over seeds of the final
  relative suboptimality, with a last row for ``w = 0``; and per data set
  ``problem_<dataset>.png``: the relative suboptimality, one panel per k
  (a cross-problem sweep such as ``experiment=problems``);
* ``time_to_accuracy.md``: per problem and configuration, the data points and
  wall seconds to reach relative suboptimality 10 %, 1 %, 0.1 % (normalised
  suboptimality 1e-2, 1e-4, 1e-6) from a start above the target, median over
  seeds ("met at start" where ``w_0`` is within it already);
* ``passes_to_accuracy.md``, where the runs log the normalised suboptimality:
  one row per configuration, one column per problem, the passes over the data
  to normalised suboptimality 1e-6 (the field's table for linearly convergent
  solvers), median over seeds; ``--x passes`` draws the field's figures
  (``problem_<dataset>_normalised_suboptimality.png``: passes on a linear axis,
  the log of the normalised suboptimality, one panel per problem);
* ``performance_profile.png`` (Dolan and More 2002), where the report has at
  least two problems: per configuration, the fraction of problems it solves
  (``--target-metric`` <= ``--target``) within a factor tau of the best cost;

* for a tuning sweep (``hydra/sweeper=tune``, ``harness.tune``), ``tuning.md``:
  per problem, each algorithm's selected step multipliers (``(edge)`` at an
  end of the grid) and its median final relative suboptimality at the theory
  step and tuned, with both rankings, then every grid point's score; runs on
  the tuning seeds (tag ``tuning=tune``) are left out of every report;

and hands them to the tracker (the hook ``save_report``; MLflow: artifacts of
the sweep's parent run, ``report/``, when the report covers one sweep, else of
a summary run in the same experiment). It prints the tables as well, fitted to
the terminal (``terminal_text``; the final values as their medians). Last, it
prints where the tracker shows the reported runs side by side (the hook
``view_lines``; MLflow: the URL of a chart of the dual gap against data points).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import textwrap
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

import numpy as np
import pluggy

from harness import tune
from harness.runs import RunRecord

CURVE_METRICS = ("dual_gap", "objective", "suboptimality", "relative_suboptimality",
                 "normalised_suboptimality", "accuracy", "topk_mse", "max_loss", "theory_bound")
TABLE_METRICS = ("dual_gap", "objective", "suboptimality", "relative_suboptimality",
                 "normalised_suboptimality", "accuracy", "topk_mse", "max_loss",
                 "data_points", "grad_evals", "passes", "rounds", "wall_time_s")
#: what the x-axis can count (``--x``): metrics logged at every checkpoint
X_AXES = {"data_points": "data points processed", "grad_evals": "per-row gradient evaluations",
          "passes": "passes over the data", "wall_time_s": "wall seconds"}
LINEAR_X = {"grad_evals", "passes"}
LABELS = {
    "dual_gap": "certified dual gap",
    "objective": "objective (avg top-k loss, scaled)",
    "accuracy": "training accuracy",
    "topk_mse": "MSE of the k largest losses",
    "max_loss": "largest loss",
    "theory_bound": "theoretical gap bound",
    "suboptimality": "suboptimality (objective - OPT)",
    "relative_suboptimality": "relative suboptimality",
    "normalised_suboptimality": "normalised suboptimality (F - F*) / (F(w_0) - F*)",
}
LOG_Y = {"dual_gap", "theory_bound", "topk_mse", "suboptimality", "relative_suboptimality",
         "normalised_suboptimality"}
#: a trivial solution within this relative distance of OPT marks a nearly degenerate problem
NEARLY_SOLVED = 0.05


@dataclass
class Curves:
    """Metric histories of one algorithm: ``seed -> metric -> (steps, values)``."""

    runs: dict[str, dict[str, tuple[np.ndarray, np.ndarray]]] = field(default_factory=dict)
    #: the exact optimum of each run's problem (param ``opt``), where it was computed
    opt: dict[str, float] = field(default_factory=dict)
    #: the objective of ``w = 0`` (param ``trivial_objective``), where OPT was known
    trivial: dict[str, float] = field(default_factory=dict)
    #: per run, how far each suboptimality metric is resolved: OPT's certified
    #: interval width (params ``opt``, ``opt_lower``) in that metric's units
    resolution: dict[str, dict[str, float]] = field(default_factory=dict)
    #: per run, the lower end of OPT's certified interval (param ``opt_lower``)
    lower: dict[str, float] = field(default_factory=dict)
    #: per run, each suboptimality metric at the run's own start ``w_0`` (param
    #: ``start_objective``)
    start: dict[str, dict[str, float]] = field(default_factory=dict)
    #: each run's problem, e.g. ``"yacht minmax k=20"`` (data set, its preparation, k)
    problem: dict[str, str] = field(default_factory=dict)
    #: each run's data set and k, to order problems
    where: dict[str, tuple[str, int]] = field(default_factory=dict)


#: params that vary between runs for no configuration reason: the seed (the
#: replicate, not the configuration), and what the OPT solve found and how
#: (its value, bound, solver, status and message, cached or not, and its
#: settings: they measure the run, they do not change it); ``*`` is a wildcard.
#: Run ids, start and wall times and the version are tags and metrics, never params.
NOT_CONFIGURATION = ("seed", "opt", "opt_*", "trivial_*", "start_objective", "reference.*")


@dataclass
class Scope:
    """Which runs a report covers: one sweep (its parent run) or every finished run."""

    sweep_id: str | None = None
    sweep_name: str | None = None
    #: finished game runs of the experiment left out (other sweeps, single runs)
    left_out: int = 0
    #: a tuning sweep's record (``tuning.json`` of its parent run, ``harness.tune``)
    tuning: dict[str, Any] | None = None
    #: a tuning sweep's runs on the tuning seeds, left out of figures and tables
    tuning_runs: int = 0

    def describe(self, n_runs: int) -> str:
        tuning = (f"; of tuning sweeps, the evaluation runs (theory and tuned steps): "
                  f"{self.tuning_runs} runs on the tuning seeds left out"
                  if self.tuning is not None or self.tuning_runs else "")
        if self.sweep_id is None:
            return f"reporting all {n_runs} finished runs of the experiment{tuning}"
        other = (f"; {self.left_out} other finished runs of the experiment are left out "
                 "(--all reports every run, --sweep RUN_ID another sweep)"
                 if self.left_out else "")
        return (f"reporting sweep {self.sweep_name!r} (parent run {self.sweep_id}): "
                f"{n_runs} finished runs{other}{tuning}")


def configuration(params: Mapping[str, str]) -> dict[str, str]:
    """The params that make a run's configuration: all but ``NOT_CONFIGURATION``."""
    return {k: v for k, v in params.items()
            if not any(fnmatchcase(k, pattern) for pattern in NOT_CONFIGURATION)}


def problem_of(params: Mapping[str, str], tags: Mapping[str, str]) -> tuple[str, tuple[str, int]]:
    """A run's problem, e.g. ``"yacht minmax k=20"``, and (data set, k) to order problems."""
    dataset = tags.get("dataset", params.get("dataset.name", "?"))
    k = params.get("constraint.k")
    # the data set's preparation is part of the problem (yacht minmax and yacht
    # standard are two problems with two optima)
    prepared = " ".join(params[f"dataset.{key}"] for key in ("scale", "target")
                        if f"dataset.{key}" in params)
    # a split of the rows is another data set (split=all, every row, is said by nothing)
    if params.get("dataset.split", "all") != "all":
        prepared = f"{prepared} {params['dataset.split']}".strip()
    name = f"{dataset} {prepared}" if prepared else dataset
    label = tags.get("constraint_label")  # the set's own name of K, e.g. "extremile r=2"
    if label:
        name = f"{name} {label}"
    elif k is not None:
        name = f"{name} k={k}"
    # the regularised problem F (mu, nu; no ball) is another problem than the paper's
    mu, nu = float(params.get("problem.mu", 0)), float(params.get("problem.nu", 0))
    if mu or nu:
        name += f" mu={mu:.3g} nu={nu:.3g}"
    if nu and params.get("problem.penalty", "chi2") != "chi2":  # another f-divergence
        name += f" {params['problem.penalty']}"
    if params.get("problem.radius") == "inf":
        name += " no-ball"
    return name, (dataset, int(k) if k is not None else 0)


def config_labels(configs: Sequence[tuple[str, str, Mapping[str, str]]],
                  preferred: frozenset[str] = frozenset()) -> list[str]:
    """A short label per ``(algorithm, problem, configuration)``: the algorithm,
    then ``key=value`` for the fewest params that tell apart the configurations
    of that algorithm on one problem (e.g. ``exp4mp budget=200000``).

    Params are picked greedily, the one that separates most pairs first; among
    equals, a param the sweep overrode (``preferred``), then the one with the
    fewest distinct values over the algorithm's configurations (the same label
    on every problem: ``block_size=16`` rather than the block count it gives on
    each data set), then a top-level one, then the shortest name: ``budget``
    rather than the step sizes derived from it.
    """
    chosen: dict[str, list[str]] = {}
    for algorithm in {a for a, _, _ in configs}:
        mine = [(problem, c) for a, problem, c in configs if a == algorithm]
        pairs = [(a, b) for i, (pa, a) in enumerate(mine) for pb, b in mine[i + 1:]
                 if pa == pb and a != b]
        keys: list[str] = []
        while pairs:
            differ = {k for a, b in pairs for k in a.keys() | b.keys() if a.get(k) != b.get(k)}
            best = min(differ, key=lambda k: (-sum(a.get(k) != b.get(k) for a, b in pairs),
                                              k not in preferred,
                                              len({c.get(k) for _, c in mine}),
                                              k.count("."), len(k), k))
            keys.append(best)
            pairs = [(a, b) for a, b in pairs if a.get(best) == b.get(best)]
        chosen[algorithm] = keys
    return [" ".join([a] + [f"{k}={c.get(k, '-')}" for k in chosen[a]]) for a, _, c in configs]


def _overridden(overrides: Sequence[str]) -> frozenset[str]:
    """The config keys a sweep's ``overrides`` set (``p_player=x`` sets ``p_player.name``)."""
    keys = {item.split("=", 1)[0].lstrip("+~") for item in overrides if "=" in item}
    return frozenset(keys | {f"{k}.name" for k in keys})


def _scope(records: Sequence[RunRecord], sweep: str) -> Scope:
    """``sweep``: ``"latest"`` (the most recently started sweep, if any), ``"all"``,
    or a sweep's id."""
    if sweep == "all":
        return Scope()
    by_id = {r.id: r for r in records}
    # the sweeps with a finished run (a sweep stopped before its first run is no report)
    parents = {r.sweep for r in records if r.sweep is not None and _is_game_run(r)}
    if sweep != "latest":
        if sweep not in by_id:
            raise SystemExit(f"minimax-bench-report: error: no run {sweep!r} in the experiment "
                             "(--sweep takes the id of a sweep's record: its parent run).")
        parents = {sweep}
    known = [by_id[p] for p in parents if p in by_id]
    if not known:
        return Scope()
    parent = max(known, key=lambda r: r.start_time)
    return Scope(parent.id, parent.name)


def _is_game_run(record: RunRecord) -> bool:
    return not record.is_sweep and "algorithm" in record.tags and record.status == "FINISHED"


def _latest_per_seed(runs: Sequence[RunRecord]) -> list[RunRecord]:
    """One run per configuration and seed: the latest (said on stderr)."""
    latest: dict[tuple, RunRecord] = {}
    for run in sorted(runs, key=lambda r: r.start_time):
        key = (run.tags["algorithm"], tuple(sorted(configuration(run.params).items())),
               run.params.get("seed", run.tags.get("seed")))
        if key in latest:
            print(f"minimax-bench-report: runs {latest[key].id} and {run.id} have the same "
                  f"configuration and seed {key[2]}: keeping the later one, {run.id}.",
                  file=sys.stderr)
        latest[key] = run
    return list(latest.values())


def read_runs(source: str | None, experiment: str, query: str = "",
              pm: pluggy.PluginManager | None = None) -> list[RunRecord]:
    """The records of ``experiment``'s runs matching ``query``, from the first
    tracker that reads ``source`` (the hook ``read_runs``)."""
    if pm is None:
        from harness.registry import default_registry

        pm = default_registry().pm
    try:
        found = pm.hook.read_runs(source=source, experiment=experiment, query=query)
    except LookupError as err:
        raise SystemExit(f"minimax-bench-report: error: {err.args[0] if err.args else err}.") \
            from None
    if found is None:
        raise SystemExit("minimax-bench-report: error: no tracking plugin reads runs"
                         + (f" from {source!r}" if source else "") + ".")
    return list(found)


def finished_runs(source: str | None, experiment: str, filter_string: str = "",
                  sweep: str = "latest", pm: pluggy.PluginManager | None = None,
                  ) -> tuple[list[RunRecord], Scope, RunRecord | None]:
    """The runs a report covers, ungrouped: the finished game runs of
    ``experiment`` in scope (``sweep``: see ``_scope``) matching
    ``filter_string``, without a tuning sweep's runs on its tuning seeds, one per
    configuration and seed (the latest); with the scope and the sweep's own
    record (None without one). For a caller that groups runs by their params
    itself (``tools/crossover.py``); ``load_report`` groups them by label."""
    everything = read_runs(source, experiment, "", pm)
    scope = _scope(everything, sweep)
    matching = read_runs(source, experiment, filter_string, pm) if filter_string else everything
    runs = [r for r in matching if _is_game_run(r)]
    parent = None
    if scope.sweep_id is not None:
        inside = [r for r in runs if r.sweep == scope.sweep_id]
        scope.left_out = sum(_is_game_run(r) and r.sweep != scope.sweep_id for r in everything)
        runs = inside
        parent = next(r for r in everything if r.id == scope.sweep_id)
        scope.tuning = _tuning_record(parent)
    # a tuning sweep's runs on its tuning seeds pick steps; its evaluation runs are the result
    scope.tuning_runs = sum(r.tags.get(tune.ROLE_TAG) == "tune" for r in runs)
    runs = [r for r in runs if r.tags.get(tune.ROLE_TAG) != "tune"]
    runs = _latest_per_seed(runs)
    if not runs:
        where = f" of sweep {scope.sweep_name!r} ({scope.sweep_id})" if scope.sweep_id else ""
        raise SystemExit(f"minimax-bench-report: error: no finished runs in experiment "
                         f"{experiment!r}{where}" + (f" matching {filter_string!r}"
                                                    if filter_string else "") + ".")
    return runs, scope, parent


def final_value(run: RunRecord, metric: str) -> float | None:
    """The last logged value of ``metric`` in ``run`` (None if it never logged it)."""
    history = run.metrics.get(metric)
    if history is None or not len(history[1]):
        return None
    return float(history[1][-1])


def best_value(run: RunRecord, metric: str, pick: Any = max) -> float | None:
    """``pick`` (``max`` or ``min``) of ``metric`` over every checkpoint of ``run``
    (None if it never logged it): e.g. the best certified lower bound on OPT a
    run produced, whichever iterate gave it."""
    history = run.metrics.get(metric)
    if history is None or not len(history[1]):
        return None
    return float(pick(history[1]))


def load_report(source: str | None, experiment: str, filter_string: str = "",
                sweep: str = "latest", pm: pluggy.PluginManager | None = None,
                ) -> tuple[dict[str, Curves], Scope]:
    """Finished game runs of ``experiment`` in scope (``finished_runs``),
    grouped by configuration label (``config_labels``), and the scope; the
    runs come from the tracker's ``read_runs`` (``pm``: the plugin manager,
    default the registry's)."""
    runs, scope, parent = finished_runs(source, experiment, filter_string, sweep, pm)
    preferred: frozenset[str] = frozenset()
    if parent is not None:
        preferred = _overridden(parent.overrides)
    problems = [problem_of(r.params, r.tags) for r in runs]
    preferred |= {STEP_KEY}  # a tuning sweep's lines: the theory step and the tuned one
    labels = config_labels([(r.tags["algorithm"], problem, _labelled(r))
                            for r, (problem, _) in zip(runs, problems, strict=True)], preferred)
    labels = [label if f" {STEP_KEY}=" in label or tune.ROLE_TAG not in r.tags else
              f"{label} {STEP_KEY}={STEP_NAMES.get(r.tags[tune.ROLE_TAG], '?')}"
              for label, r in zip(labels, runs, strict=True)]
    grouped: dict[str, Curves] = defaultdict(Curves)
    for run, label, (problem, where) in zip(runs, labels, problems, strict=True):
        params, curves = run.params, grouped[label]
        name = f"{label} s{params.get('seed', '?')} {run.id[:8]}"
        curves.runs[name] = dict(run.metrics)
        if "opt" in params:
            curves.opt[name] = float(params["opt"])
        if "trivial_objective" in params:
            curves.trivial[name] = float(params["trivial_objective"])
        if "opt" in params and "opt_lower" in params:
            opt, lower = float(params["opt"]), float(params["opt_lower"])
            start = float(params["start_objective"]) if "start_objective" in params else None
            curves.lower[name] = lower
            curves.resolution[name] = in_units(opt - lower, opt, lower, start)
            if start is not None:
                curves.start[name] = in_units(start - lower, opt, lower, start)
        curves.problem[name], curves.where[name] = problem, where
    return dict(grouped), scope


#: the suboptimality metrics, certified upper bounds ``F(w) - opt_lower`` and its ratios
SUBOPTIMALITY = ("suboptimality", "relative_suboptimality", "normalised_suboptimality")


def in_units(value: float, opt: float, lower: float, start: float | None) -> dict[str, float]:
    """A distance ``value`` above ``opt_lower`` in each suboptimality metric's units
    (``plugins.metrics.reference``): itself, over ``opt``, over ``start - opt_lower``."""
    out = {"suboptimality": value}
    if opt > 0:
        out["relative_suboptimality"] = value / opt
    if start is not None and start > lower:
        out["normalised_suboptimality"] = value / (start - lower)
    return out


def resolution_of(curves: Curves, metric: str) -> float | None:
    """The median over the runs of how far ``metric`` is resolved (None: unknown)."""
    values = [r[metric] for r in curves.resolution.values() if metric in r]
    return float(np.median(values)) if values else None


#: the pseudo-param that labels a tuning sweep's lines (``exp4mp step=tuned``)
STEP_KEY = "step"
STEP_NAMES = {"theory": "theory", "tuned": "tuned", "both": "theory=tuned"}


def _labelled(run: RunRecord) -> dict[str, str]:
    """The run's configuration, with its role in a tuning sweep as ``step``."""
    found = configuration(run.params)
    role = run.tags.get(tune.ROLE_TAG)
    if role in STEP_NAMES:
        found[STEP_KEY] = STEP_NAMES[role]
    return found


def _tuning_record(sweep: RunRecord) -> dict[str, Any] | None:
    """A tuning sweep's record (its ``tuning.json``); None for another sweep,
    or a tuning sweep that has not written it yet."""
    if sweep.tags.get(tune.TUNING_TAG) != "1":
        return None
    text = sweep.read_file(tune.TUNING_FILE)
    return None if text is None else json.loads(text)


def load(source: str | None, experiment: str, filter_string: str = "",
         sweep: str = "latest", pm: pluggy.PluginManager | None = None) -> dict[str, Curves]:
    """Finished game runs of ``experiment`` grouped by configuration (``load_report``)."""
    return load_report(source, experiment, filter_string, sweep, pm)[0]


def band(curves: Curves, metric: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The median/min/max over the runs of the algorithm at every step one of them
    logged within the span all of them cover, each run read at its last checkpoint
    at or before the step (runs whose checkpoints fall on different data points,
    e.g. Drago's, whose steps process a varying number of rows, are compared at
    every one of them; runs with the same checkpoints at exactly those)."""
    series = [h[metric] for h in curves.runs.values() if metric in h and h[metric][0].size]
    if not series:
        return (np.empty(0),) * 4
    first = max(float(s[0]) for s, _ in series)
    last = min(float(s[-1]) for s, _ in series)
    steps = np.unique(np.concatenate([s for s, _ in series]))
    steps = steps[(steps >= first) & (steps <= last)]
    values = np.array([v[np.searchsorted(s, steps, side="right") - 1] for s, v in series])
    return steps, np.median(values, axis=0), values.min(axis=0), values.max(axis=0)


def x_values(curves: Curves, steps: np.ndarray, x: str) -> np.ndarray:
    """The x-axis values at ``steps`` (data points): the steps themselves, or the
    median over the runs of the counter ``x`` at those steps, each run's counter
    (nondecreasing in data points) interpolated between its own checkpoints, so
    runs checkpointed at different data points (``band``) give one increasing
    axis; NaN outside a run's checkpoints and where no run logged the counter
    (runs of a version without it)."""
    if x == "data_points":
        return steps
    out = []
    for s, v in (h[x] for h in curves.runs.values() if x in h):
        out.append(np.interp(steps, s, v, left=np.nan, right=np.nan) if s.size
                   else np.full(steps.shape, np.nan))
    if not out:
        return np.full(steps.shape, np.nan)
    return np.nanmedian(np.array(out), axis=0) if len(out) > 1 else out[0]


def _draw(ax, grouped: dict[str, Curves], metric: str, x: str = "data_points") -> bool:
    import matplotlib

    drawn = False
    floors: set[float] = set()
    # beyond ten algorithms the default cycle repeats its colours: twenty distinct ones
    palette = matplotlib.colormaps["tab20"] if len(grouped) > 10 else None
    for index, algorithm in enumerate(sorted(grouped)):
        steps, med, lo, hi = band(grouped[algorithm], metric)
        if steps.size == 0:
            continue
        steps = x_values(grouped[algorithm], steps, x)
        n_seeds = sum(metric in h for h in grouped[algorithm].runs.values())
        floor = resolution_of(grouped[algorithm], metric) if metric in SUBOPTIMALITY else None
        if floor is not None and floor > 0:  # below OPT's resolution: drawn at it
            med, lo, hi = (np.maximum(v, floor) for v in (med, lo, hi))
            floors.add(floor)
        if metric in LOG_Y:  # a value <= 0 has no place on a log axis: leave a gap
            med, lo, hi = (np.where(v > 0, v, np.nan) for v in (med, lo, hi))
        style = {} if palette is None else {"color": palette(index % 20)}
        seeds = f"{n_seeds} seed" + "s" * (n_seeds != 1)
        line, = ax.plot(steps, med, label=f"{algorithm} ({seeds})", **style)
        ax.fill_between(steps, lo, hi, color=line.get_color(), alpha=0.25, linewidth=0)
        if floor is not None and floor > 0:
            at = np.flatnonzero(med <= floor)
            if at.size:  # where the median run reached OPT's resolution
                ax.plot(steps[at[0]], med[at[0]], marker="v", markersize=8, linestyle="none",
                        color=line.get_color())
        drawn = True
    if drawn and floors:
        for value in sorted(floors):
            ax.axhline(value, color="black", linestyle="-.", linewidth=1,
                       label=f"OPT's resolution {value:.2g} (v: reached)")
    if drawn and metric == "objective":
        for value in reference_lines(grouped):
            ax.axhline(value, color="black", linestyle="--", linewidth=1,
                       label=f"OPT = {value:.6g}")
    if drawn and metric in TRIVIAL_METRICS:
        for value in trivial_lines(grouped, metric):
            if metric in LOG_Y and value <= 0:
                continue
            ax.axhline(value, color="grey", linestyle=":", linewidth=1.5,
                       label=f"w = 0: {value:.4g}")
    if drawn:
        # the field draws passes (and gradient counts) on a linear axis, where
        # linear convergence is a straight line on the log y-axis
        ax.set_xscale("linear" if x in LINEAR_X else "log")
        if metric in LOG_Y:
            ax.set_yscale("log")
        ax.set_xlabel(X_AXES[x])
        ax.set_ylabel(LABELS.get(metric, metric))
        ax.grid(True, which="both", alpha=0.3)
        many = len(ax.get_legend_handles_labels()[0]) > 6
        ax.legend(fontsize="x-small" if many else None, ncol=2 if many else 1,
                  framealpha=0.6)
    return drawn


def reference_lines(grouped: dict[str, Curves]) -> list[float]:
    """The distinct exact optima (param ``opt``) of the runs, one per problem."""
    values = sorted({v for c in grouped.values() for v in c.opt.values()})
    distinct: list[float] = []
    for v in values:  # runs of one problem share one cached value; keep one per problem
        if not distinct or not np.isclose(v, distinct[-1], rtol=1e-9, atol=0.0):
            distinct.append(v)
    return distinct


TRIVIAL_METRICS = ("objective", "suboptimality", "relative_suboptimality")


def trivial_values(curves: Curves, label: str) -> dict[str, float]:
    """The trivial solution's objective, suboptimality and relative
    suboptimality for one run (empty if the run did not record them)."""
    if label not in curves.trivial or label not in curves.opt:
        return {}
    value, opt = curves.trivial[label], curves.opt[label]
    # measured as the runs measure themselves: from the lower end of OPT's interval
    gap = value - curves.lower.get(label, opt)
    out = {"objective": value, "suboptimality": gap}
    if opt > 0:
        out["relative_suboptimality"] = gap / opt
    span = curves.start.get(label, {}).get("suboptimality", gap)  # F(w_0) - opt_lower
    if span > 0:  # a run that logged no start began at w = 0
        out["normalised_suboptimality"] = gap / span
    return out


def trivial_lines(grouped: dict[str, Curves], metric: str) -> list[float]:
    """The distinct values of ``metric`` at ``w = 0``, one per problem."""
    values = sorted({trivial_values(c, label)[metric] for c in grouped.values()
                     for label in c.trivial if metric in trivial_values(c, label)})
    distinct: list[float] = []
    for v in values:
        if not distinct or not np.isclose(v, distinct[-1], rtol=1e-9, atol=0.0):
            distinct.append(v)
    return distinct


def split_by_problem(grouped: dict[str, Curves]) -> dict[str, dict[str, Curves]]:
    """``problem -> algorithm -> Curves`` (the runs of each problem), problems in
    the order data set, then k."""
    split: dict[str, dict[str, Curves]] = defaultdict(dict)
    order: dict[str, tuple[str, int]] = {}
    for algorithm, curves in grouped.items():
        for label, history in curves.runs.items():
            problem = curves.problem.get(label, "?")
            order[problem] = curves.where.get(label, (problem, 0))
            part = split[problem].setdefault(algorithm, Curves())
            part.runs[label] = history
            for attr in (f.name for f in fields(Curves) if f.name != "runs"):
                source = getattr(curves, attr)
                if label in source:
                    getattr(part, attr)[label] = source[label]
    return {p: split[p] for p in sorted(split, key=lambda p: (order[p], p))}


def problem_table(grouped: dict[str, Curves], metric: str = "relative_suboptimality") -> str:
    """Markdown: one row per algorithm, one column per problem; each cell the
    median over seeds of ``metric`` at the last checkpoint (and the number of
    seeds if they differ); a last row for the trivial solution ``w = 0``."""
    split = split_by_problem(grouped)
    problems = list(split)
    lines = ["| configuration | " + " | ".join(problems) + " |",
             "|---|" + "---|" * len(problems)]
    for algorithm in sorted(grouped):
        cells = []
        for problem in problems:
            curves = split[problem].get(algorithm)
            last = np.array([] if curves is None else
                            [h[metric][1][-1] for h in curves.runs.values() if metric in h])
            cells.append("" if last.size == 0 else f"{np.median(last):.3g}")
        lines.append(f"| {algorithm} | " + " | ".join(cells) + " |")
    cells = []
    for problem in problems:
        values = [trivial_values(c, label).get(metric) for c in split[problem].values()
                  for label in c.trivial]
        values = [v for v in values if v is not None]
        cell = "" if not values else f"{values[0]:.3g}"
        if values and metric == "relative_suboptimality" and values[0] < NEARLY_SOLVED:
            cell += " (!)"
        cells.append(cell)
    lines.append("| w = 0 (trivial) | " + " | ".join(cells) + " |")
    return "\n".join(lines) + (
        f"\n\nmedian over seeds of {metric} at the last checkpoint; the last row is the "
        "trivial solution w = 0; (!) marks a problem that w = 0 solves to within "
        f"{100 * NEARLY_SOLVED:g} % of OPT (nearly degenerate: it barely separates "
        "algorithms).\n")


def figure_title(parts: Sequence[str], inches: float, points: float = 12.0) -> str:
    """A figure's one title from ``parts`` (``"paper_cancer: certified dual gap"``,
    ``"on yacht minmax k=20"``): on one line if it fits ``inches`` at ``points``
    (about 0.55 em a character), else a line per part, each wrapped to fit."""
    fits = max(20, int(inches * 72 / (0.55 * points)))
    text = " ".join(parts)
    if len(text) <= fits:
        return text
    return "\n".join(line for part in parts for line in textwrap.wrap(part, fits))


def problem_figures(grouped: dict[str, Curves], out: Path, title: str,
                    metric: str = "relative_suboptimality",
                    x: str = "data_points") -> list[Path]:
    """``problem_<dataset>.png`` (relative suboptimality, or the objective where
    OPT is unknown; another ``metric``: ``problem_<dataset>_<metric>.png``):
    ``metric`` against ``x``, one panel per k."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by_dataset: dict[str, list[tuple[str, dict[str, Curves]]]] = defaultdict(list)
    for problem, part in split_by_problem(grouped).items():
        by_dataset[problem.split(" ")[0]].append((problem, part))
    written = []
    for dataset, panels in by_dataset.items():
        fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 4), squeeze=False)
        drawn = [_draw(ax, part, metric, x)
                 for ax, (_, part) in zip(axes[0], panels, strict=True)]
        # one title names what the panels share (the data set, its preparation),
        # each panel of several the rest of its problem (k=20, k=154)
        names = [problem.split(" ") for problem, _ in panels]
        shared = [word for word in names[0] if all(word in other for other in names)]
        if len(panels) > 1:
            for ax, words in zip(axes[0], names, strict=True):
                ax.set_title(" ".join(w for w in words if w not in shared) or " ".join(words),
                             fontsize="medium")
        if any(drawn):
            fig.suptitle(figure_title([f"{title}: {LABELS.get(metric, metric)}",
                                       f"on {' '.join(shared)}"], 6 * len(panels) - 0.5, 11.0),
                         fontsize=11.0)
            fig.tight_layout()
            plain = metric in ("relative_suboptimality", "objective")
            path = out / (f"problem_{dataset}.png" if plain else
                          f"problem_{dataset}_{metric}.png")
            fig.savefig(path, dpi=120)
            written.append(path)
        plt.close(fig)
    return written


def figures(grouped: dict[str, Curves], out: Path, title: str,
            x: str = "data_points") -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    problem = ", ".join(split_by_problem(grouped))
    written = []
    for metric in CURVE_METRICS:
        fig, ax = plt.subplots(figsize=(6, 4))
        if _draw(ax, grouped, metric, x):
            ax.set_title(figure_title([f"{title}: {LABELS.get(metric, metric)}",
                                       f"on {problem}"], 5.2, 10.0), fontsize=10.0)
            fig.tight_layout()
            path = out / f"{metric}.png"
            fig.savefig(path, dpi=120)
            written.append(path)
        plt.close(fig)
    task = "accuracy" if any("accuracy" in h for c in grouped.values() for h in c.runs.values()) \
        else "topk_mse"
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4))
    _draw(left, grouped, task, x)
    _draw(right, grouped, "dual_gap", x)
    fig.suptitle(figure_title([f"{title}:", problem], 11.5))
    fig.tight_layout()
    path = out / "summary.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    written.append(path)
    return written


def final_table(grouped: dict[str, Curves], spread: bool = True) -> str:
    """Markdown table: median [min, max] over seeds of each metric's last value
    (the median alone without ``spread``: the terminal's version)."""
    present = [m for m in TABLE_METRICS
               if any(m in h for c in grouped.values() for h in c.runs.values())]
    lines = ["| configuration | seeds | " + " | ".join(present) + " |",
             "|---|---|" + "---|" * len(present)]
    for algorithm in sorted(grouped):
        runs = grouped[algorithm].runs.values()
        cells = []
        for metric in present:
            last = np.array([h[metric][1][-1] for h in runs if metric in h])
            cells.append("" if last.size == 0 else f"{np.median(last):.4g}" + (
                f" [{last.min():.4g}, {last.max():.4g}]" if spread else ""))
        lines.append(f"| {algorithm} | {len(runs)} | " + " | ".join(cells) + " |")
    what = ("median [min, max] over seeds" if spread else
            "median over seeds (with the min and max: final_values.md)")
    return "\n".join(lines) + f"\n\n{what} of the value at the last checkpoint.\n"


#: time-to-accuracy targets: relative suboptimality (needs OPT) and normalised suboptimality
REACH_TARGETS = (("relative_suboptimality", (0.1, 0.01, 0.001)),
                 ("normalised_suboptimality", (1e-2, 1e-4, 1e-6)))
#: what a performance profile may take as its target (lower is better)
TARGET_METRICS = ("relative_suboptimality", "normalised_suboptimality", "suboptimality",
                  "dual_gap", "objective", "topk_mse", "max_loss")


def first_reach(history: Mapping[str, tuple[np.ndarray, np.ndarray]], metric: str,
                target: float, counter: str = "data_points",
                start: float | None = None) -> float:
    """``counter`` (data points, or a counter metric such as ``wall_time_s``) at the
    first checkpoint where ``metric <= target`` after one above it, or after a
    start above it (``start``: the metric at the run's ``w_0``, param
    ``start_objective``); 0 when the target was met at the start (a run that
    did not log its start: at its first checkpoint), which is no time to
    accuracy; inf if the run never gets there, NaN if it did not log
    ``metric`` or ``counter``."""
    if metric not in history:
        return float("nan")
    if start is not None and start <= target:
        return 0.0
    steps, values = history[metric]
    hit = np.flatnonzero(values <= target)
    if hit.size == 0:
        return float("inf")
    if hit[0] == 0 and start is None:
        return 0.0
    step = steps[hit[0]]
    if counter == "data_points":
        return float(step)
    if counter not in history:
        return float("nan")
    s, v = history[counter]
    at = int(np.searchsorted(s, step))
    return float(v[at]) if at < s.size and s[at] == step else float("nan")


def median_reach(costs: Sequence[float]) -> float:
    """Median over seeds of the costs to reach a target, a seed that never
    reaches it counting as infinitely late: finite iff more than half reach."""
    return float(np.median(np.asarray(costs, dtype=float))) if len(costs) else float("nan")


def _reach_cell(points: Sequence[float], seconds: Sequence[float],
                unit: str = "{:,.0f}") -> str:
    n, k = len(points), int(np.isfinite(points).sum())
    if n == 0:
        return ""
    if k == 0:
        return "not reached"
    if 2 * k <= n:
        return f"not reached ({k}/{n} seeds)"
    at_start = int(np.count_nonzero(np.asarray(points) == 0.0))
    if at_start == n:
        return "met at start"
    wall = median_reach(seconds)
    cell = unit.format(median_reach(points)) + (f" ({wall:.3g} s)" if np.isfinite(wall) else "")
    notes = ([] if k == n else [f"{k}/{n} seeds"]) + (
        [f"{at_start}/{n} met at start"] if at_start else [])
    return ", ".join([cell, *notes])


def time_to_accuracy_table(grouped: dict[str, Curves]) -> str:
    """Markdown, for the runs of one problem: one row per configuration, one
    column per target of ``REACH_TARGETS`` the runs log."""
    logged = {m for c in grouped.values() for h in c.runs.values() for m in h}
    columns = [(m, t) for m, targets in REACH_TARGETS if m in logged for t in targets]
    if not columns:
        return ""
    names = {"relative_suboptimality": lambda t: f"relative <= {100 * t:g} %",
             "normalised_suboptimality": lambda t: f"normalised <= {t:.0e}"}
    lines = ["| configuration | seeds | " + " | ".join(names[m](t) for m, t in columns) + " |",
             "|---|---|" + "---|" * len(columns)]
    for label in sorted(grouped):
        curves = grouped[label]
        runs = list(curves.runs.values())
        cells = []
        for metric, target in columns:
            mine = [(h, curves.start.get(name, {}).get(metric))
                    for name, h in curves.runs.items() if metric in h]
            cells.append(_reach_cell(
                [first_reach(h, metric, target, start=s) for h, s in mine],
                [first_reach(h, metric, target, "wall_time_s", start=s) for h, s in mine]))
        lines.append(f"| {label} | {len(runs)} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


#: the field's accuracy for linearly convergent solvers: passes to this normalised suboptimality
PASSES_TARGET = 1e-6


def passes_table(grouped: dict[str, Curves], metric: str = "normalised_suboptimality",
                 target: float = PASSES_TARGET) -> str:
    """Markdown: one row per configuration, one column per problem; each cell the
    passes over the data (metric ``passes``) at the first checkpoint where
    ``metric <= target``, median over seeds (``_reach_cell``'s rules: a seed that
    never gets there counts as infinitely late); "" where the configuration
    did not run on that problem. Empty when no run logs ``metric``."""
    split = split_by_problem(grouped)
    if not any(metric in h for part in split.values() for c in part.values()
               for h in c.runs.values()):
        return ""
    problems = list(split)
    lines = ["| configuration | " + " | ".join(problems) + " |",
             "|---|" + "---|" * len(problems)]
    for label in sorted(grouped):
        cells = []
        for problem in problems:
            curves = split[problem].get(label)
            mine = [] if curves is None else [
                (h, curves.start.get(name, {}).get(metric))
                for name, h in curves.runs.items() if metric in h]
            reach = [first_reach(h, metric, target, "passes", start=s) for h, s in mine]
            cells.append(_reach_cell(reach, [], "{:.3g}"))
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + (
        f"\n\npasses over the data to {LABELS.get(metric, metric)} <= {target:g}, median over "
        "seeds, at the first checkpoint at or below it (it lies between that checkpoint and "
        "the one before); \"not reached (k/n seeds)\" where at most half of the seeds get "
        "there within the budget.\n")


TIME_TO_ACCURACY_CAPTION = (
    "Each cell: data points processed (and wall seconds, metric wall_time_s) at the first "
    "checkpoint where the metric is at or below the target, counted from a start above the "
    "target, median over seeds; \"met at start\" where the run's starting point w_0 is "
    "already within the target (no time to speak of). A seed that "
    "never reaches the target counts as infinitely late, so the median is reported only "
    "when more than half of the seeds reach it (followed by k/n seeds when not all do); "
    "otherwise the cell says \"not reached (k/n seeds)\", or \"not reached\" when no seed "
    "does. The first reach is known to the checkpoint grid: it lies between the previous "
    "checkpoint and this one.\n")


def profile_costs(split: dict[str, dict[str, Curves]], metric: str = "relative_suboptimality",
                  target: float = 0.01, x: str = "data_points") -> tuple[list[str], np.ndarray]:
    """The configuration labels and ``costs[problem, label]``: the median over
    seeds of ``x`` at the first reach of ``metric <= target`` (``median_reach``);
    inf where the configuration did not reach it or did not run on the problem."""
    labels = sorted({label for part in split.values() for label in part})
    costs = np.full((len(split), len(labels)), np.inf)

    for i, part in enumerate(split.values()):
        for j, label in enumerate(labels):
            if label in part:
                curves = part[label]
                reach = [first_reach(h, metric, target, x,
                                     start=curves.start.get(name, {}).get(metric))
                         for name, h in curves.runs.items() if metric in h]
                cost = median_reach(reach)
                costs[i, j] = cost if np.isfinite(cost) else np.inf
    # a problem some configuration solved at its start (cost 0) ranks nobody: no
    # ratio to 0 says how much slower the others were; it is left out
    return labels, costs[~np.any(costs == 0.0, axis=1)]


def performance_ratios(costs: np.ndarray) -> np.ndarray:
    """``r[p, s] = cost[p, s] / min_s cost[p, s]`` (Dolan and More 2002), inf where
    ``s`` did not reach the target."""
    best = costs.min(axis=1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = np.where(costs == best, 1.0, costs / best)
    return np.where(np.isfinite(costs), ratios, np.inf)


def performance_profile(ratios: np.ndarray, taus: np.ndarray) -> np.ndarray:
    """``rho[t, s]``: the fraction of problems ``s`` solves within a factor
    ``taus[t]`` of the best configuration on that problem."""
    return (ratios[None, :, :] <= np.asarray(taus, dtype=float)[:, None, None]).mean(axis=1)


def profile_figure(split: dict[str, dict[str, Curves]], out: Path, title: str,
                   metric: str, target: float, x: str) -> Path:
    """``performance_profile.png``: one step curve per configuration label."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels, costs = profile_costs(split, metric, target, x)
    ratios = performance_ratios(costs)
    finite = ratios[np.isfinite(ratios)]
    top = max(2.0, 1.5 * finite.max()) if finite.size else 2.0
    taus = np.unique(np.r_[1.0, finite, top])
    rho = performance_profile(ratios, taus)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    palette = matplotlib.colormaps["tab20"] if len(labels) > 10 else None
    for j, label in enumerate(labels):
        # curves often coincide over a range of tau: dashes keep the one below visible
        style = {"linestyle": ("-", "--", "-.", ":")[j % 4], "linewidth": 1.8}
        if palette is not None:
            style["color"] = palette(j % 20)
        ax.step(taus, rho[:, j], where="post", label=label, **style)
    ax.set_xscale("log")
    ax.xaxis.set_major_locator(matplotlib.ticker.LogLocator(subs=(1.0, 2.0, 5.0)))
    ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_xlim(1.0, top)
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel(f"tau: {X_AXES[x]} / the best configuration's on the problem")
    left_out = len(split) - costs.shape[0]
    ax.set_ylabel(f"fraction of the {costs.shape[0]} problems solved"
                  + (f" ({left_out} met at start, left out)" if left_out else ""))
    ax.set_title(f"{title}: performance profile, {metric} <= {target:g}", fontsize="medium")
    ax.grid(True, which="both", alpha=0.3)
    many = len(labels) > 6
    ax.legend(fontsize="x-small" if many else None, ncol=2 if many else 1, framealpha=0.6,
              loc="lower right")
    fig.tight_layout()
    path = out / "performance_profile.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def save_report(source: str | None, experiment: str, sweep: str | None,
                files: Sequence[Path], pm: pluggy.PluginManager | None = None) -> str | None:
    """Hand the report's ``files`` to the tracker (the hook ``save_report``):
    onto the sweep's record, or a record of their own when ``sweep`` is None.
    Returns where they went (None: no tracker keeps them)."""
    if pm is None:
        from harness.registry import default_registry

        pm = default_registry().pm
    return pm.hook.save_report(source=source, experiment=experiment, sweep=sweep,
                               files=list(files))


def view_lines(source: str | None, experiment: str, sweep: str | None, query: str,
               pm: pluggy.PluginManager | None = None) -> list[str]:
    """Where the tracker shows the reported runs side by side (the hook
    ``view_lines``; none: [])."""
    if pm is None:
        from harness.registry import default_registry

        pm = default_registry().pm
    return list(pm.hook.view_lines(source=source, experiment=experiment, sweep=sweep,
                                   query=query) or [])


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="minimax-bench-report",
                                     description=__doc__.split("\n\n")[0].replace("``", ""))
    parser.add_argument("--source", "--tracking-uri", dest="source", default=None,
                        help="where the tracker reads the runs (MLflow: a tracking URI; "
                             "default: the tracker's own, e.g. $MLFLOW_TRACKING_URI or "
                             "sqlite:///mlflow.db)")
    parser.add_argument("--experiment", default="minimax-bench")
    scope = parser.add_mutually_exclusive_group()
    scope.add_argument("--all", action="store_true",
                       help="every finished run (default: the most recent sweep's runs)")
    scope.add_argument("--sweep", metavar="RUN_ID", default=None,
                       help="the runs of the sweep with this parent run id")
    parser.add_argument("--filter", default="", help="the tracker's search filter (MLflow: "
                        "\"tags.dataset = 'boston'\"), on top of the scope")
    parser.add_argument("--out", default="report", help="output folder")
    parser.add_argument("--title", default=None)
    parser.add_argument("--no-log", action="store_true",
                        help="do not hand the files to the tracker (MLflow: artifacts of "
                             "the sweep's parent run, or of a summary run)")
    parser.add_argument("--x", default="data_points", choices=tuple(X_AXES),
                        help="what the figures' x-axis and the performance profile's cost "
                             "count (default: data points)")
    parser.add_argument("--target", type=float, default=0.01,
                        help="the performance profile's target (default: 0.01)")
    parser.add_argument("--target-metric", default="relative_suboptimality",
                        choices=TARGET_METRICS,
                        help="the metric the target bounds (default: relative_suboptimality)")
    return parser


def _write(path: Path, text: str, files: list[Path], shown: str | None = None) -> None:
    """Write the markdown ``text`` to ``path``; print it (or ``shown``, a shorter
    version) as ``terminal_text``."""
    path.write_text(text)
    files.append(path)
    print(terminal_text(text if shown is None else shown))


def terminal_text(text: str, width: int | None = None) -> str:
    """Markdown ``text`` as a terminal shows it best, ``width`` columns wide (default:
    the terminal's): each table in aligned columns, transposed when it is too
    wide and that makes it narrower, then cut into blocks of columns that fit,
    each block repeating the first column; paragraphs wrapped."""
    width = width or shutil.get_terminal_size().columns
    out: list[str] = []
    table: list[str] = []
    for line in [*text.splitlines(), ""]:
        if line.startswith("|"):
            table.append(line)
            continue
        if table:
            out += _table_lines(table, width)
            table = []
        out += textwrap.wrap(line, width, break_long_words=False, break_on_hyphens=False) or [""]
    return "\n".join(out)


def _table_lines(markdown: Sequence[str], width: int) -> list[str]:
    """A markdown table's rows (header first) as aligned lines (``terminal_text``)."""
    grid = [[cell.strip() for cell in row.strip().strip("|").split("|")]
            for row in markdown if not set(row) <= set("|-: ")]
    columns = max(len(row) for row in grid)
    grid = [row + [""] * (columns - len(row)) for row in grid]

    def span(grid: list[list[str]]) -> list[int]:
        return [max(len(row[j]) for row in grid) for j in range(len(grid[0]))]

    def breadth(grid: list[list[str]]) -> int:  # two spaces between columns
        return sum(span(grid)) + 2 * (len(grid[0]) - 1)

    if breadth(grid) > width:
        flipped = [list(column) for column in zip(*grid, strict=True)]
        if breadth(flipped) < breadth(grid):
            grid = flipped
    widths = span(grid)
    blocks: list[list[int]] = [[]]
    for j in range(1, len(widths)):
        used = widths[0] + sum(2 + widths[i] for i in blocks[-1])
        if blocks[-1] and used + 2 + widths[j] > width:
            blocks.append([])
        blocks[-1].append(j)
    lines: list[str] = []
    for block in blocks:
        if lines:
            lines.append("")
        for i, row in enumerate(grid):
            cells = [row[0].ljust(widths[0]), *(row[j].rjust(widths[j]) for j in block)]
            lines.append("  ".join(cells).rstrip())
            if i == 0:
                lines.append("  ".join("-" * widths[j] for j in [0, *block]))
    return lines


def write_report(grouped: dict[str, Curves], out: Path, title: str,
                 args: argparse.Namespace, scope: Scope | None = None) -> list[Path]:
    """Every figure and table of the report into ``out``; the files written."""
    problems = split_by_problem(grouped)
    files: list[Path] = []
    if scope is not None and scope.tuning is not None:
        _write(out / "tuning.md", f"# {title}: theory step vs tuned\n\n"
               + tune.summary_table(scope.tuning), files)
    if len(problems) == 1:
        files += figures(grouped, out, title, args.x)
        text, shown = final_table(grouped), final_table(grouped, spread=False)
    else:  # curves of different problems are never pooled: per-problem figures below
        text, shown = ("\n".join(f"## {problem}\n\n{final_table(part, spread)}"
                                 for problem, part in problems.items())
                       for spread in (True, False))
    _write(out / "final_values.md", f"# {title}\n\n" + text, files, f"# {title}\n\n" + shown)
    if any(c.opt for c in grouped.values()):
        text = f"# {title}: relative suboptimality by problem\n\n" + problem_table(grouped)
        if any("normalised_suboptimality" in h for c in grouped.values()
               for h in c.runs.values()):
            text += ("\n## normalised suboptimality (F - F*) / (F(w_0) - F*)\n\n"
                     + problem_table(grouped, "normalised_suboptimality"))
        _write(out / "problems.md", text, files)
        files.extend(problem_figures(grouped, out, title, x=args.x))
        if any("normalised_suboptimality" in h for c in grouped.values()
               for h in c.runs.values()):
            files.extend(problem_figures(grouped, out, title,
                                         metric="normalised_suboptimality", x=args.x))
    elif len(problems) > 1:
        files.extend(problem_figures(grouped, out, title, metric="objective", x=args.x))
    passes = passes_table(grouped)
    if passes:
        _write(out / "passes_to_accuracy.md", f"# {title}: passes to accuracy\n\n" + passes,
               files)
    sections = [(p, time_to_accuracy_table(part)) for p, part in problems.items()]
    if any(table for _, table in sections):
        _write(out / "time_to_accuracy.md", f"# {title}: time to accuracy\n\n" + "\n".join(
            f"## {p}\n\n{table}" for p, table in sections if table)
            + "\n" + TIME_TO_ACCURACY_CAPTION, files)
    else:
        print("no time-to-accuracy table: the runs log no relative or normalised "
              "suboptimality (OPT unknown).")
    solved = {p: part for p, part in problems.items()
              if any(args.target_metric in h for c in part.values() for h in c.runs.values())}
    if len(solved) >= 2:
        files.append(profile_figure(solved, out, title, args.target_metric, args.target, args.x))
    else:
        print(f"no performance profile: it compares configurations across problems, and "
              f"{len(solved)} problem(s) of the report log {args.target_metric}.")
    return files


def main(argv: Sequence[str] | None = None, pm: pluggy.PluginManager | None = None) -> int:
    """``minimax-bench-report [options]``; ``pm``: the plugin manager whose
    trackers read the runs and keep the files (default: the registry's)."""
    args = _parser().parse_args(argv)
    sweep = "all" if args.all else (args.sweep or "latest")
    grouped, scope = load_report(args.source, args.experiment, args.filter, sweep, pm)
    print(scope.describe(sum(len(c.runs) for c in grouped.values())))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    files = write_report(grouped, out, args.title or args.experiment, args, scope)
    print(f"wrote {len(files)} files to {out}/")
    if not args.no_log:
        saved = save_report(args.source, args.experiment, scope.sweep_id, files, pm)
        print(saved or "no tracking plugin keeps the report's files")
    for line in view_lines(args.source, args.experiment, scope.sweep_id, args.filter, pm):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
