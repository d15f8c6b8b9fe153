"""The crossover study: who wins at a fixed budget in passes as n grows.

    python tools/crossover.py --out crossover                  # the whole study (hours)
    python tools/crossover.py --out crossover --report-only    # the report of what ran
    python tools/crossover.py --out tiny --n 1000,10000 --budgets 0.1,1 \\
        --algorithms exp_ix_m,sgd                              # a tiny grid (a minute or two)

The grid is the preset ``experiment=crossover``'s (``conf/experiment/crossover.yaml``:
n, budgets in passes, k = 20 and k = n/100 on synthetic regression data with d = 20)
unless ``--n``, ``--budgets``, ``--levels`` say otherwise; the algorithms are
``ALGORITHMS`` (``--algorithms`` picks some). Three phases, each timed:

1. **Tuning** at the smallest n: the tuning protocol (``hydra/sweeper=tune``,
   docs/tuning.md) per algorithm, over the budgets and k forms, with Hydra's joblib
   launcher (``--jobs`` workers) when it is installed. Its selections
   (``tuning.json`` in the sweep's folder) are the tuned steps at every n.
2. **Grid**: per algorithm, budget and k form, one ``minimax-bench --multirun``
   over n at the theory step and one at the selected multipliers (none when the
   selection is the theory step), ``--jobs`` of them at a time (the tuned
   multipliers differ per budget and k form, so the grid is no Cartesian
   product that one Hydra sweep could hold; several sweeps side by side keep
   every core busy while one plays n = 1e7).
3. **Report** (``report/`` in ``--out``; ``crossover_report``): final certified
   suboptimality against n, tables and figures, and who wins where.

Before phase 1, every (algorithm, budget, k form) is prepared at the smallest n,
and every game accepted there at each other n too (nothing recorded; a few seconds
at n = 1e7): a combination the harness refuses (Prospect and LSVRG spend a pass
before their first step, so 0.1 passes is below their budget; a p-player option
that does not exist) is left out of every phase with its refusal, and an n where a
game's p-player refuses the horizon (OL-EXP.4M's theory gamma needs T >= n log(n/k)
/ k: refused at 10 passes, k = 20 from n of about 4.4e5 on) is left out of that
sweep; the report says so. ``study.json`` keeps the check for ``--report-only``.

Resumable: every sweep runs with ``resume=true`` in a folder of ``--out`` named
after it, so a relaunch with the same arguments reuses the tracked FINISHED runs
(the tracker's ``request_key``) and a finished sweep (its ``done.json``) is not
launched again. Runs are tracked in the MLflow experiments ``--experiment``
(the grid) and ``<experiment>_tune`` (the tuning), in ``--tracking-uri``
(default: ``sqlite:///mlflow.db`` in the working folder).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import statistics
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

PRESET = "crossover"


@dataclass(frozen=True)
class Algorithm:
    """One of the study's algorithms: the overrides that choose it, its family (the
    summary compares bandit p-players with the rest, the paper's claim) and the
    params its runs must have logged (e.g. the tree state that ``state=auto`` picked)."""

    overrides: tuple[str, ...]
    family: str
    logged: tuple[tuple[str, str], ...] = ()

    def matches(self, params: Mapping[str, str]) -> bool:
        """Whether a run's params say it is this algorithm (``x=y`` of a group is
        the param ``x.name``)."""
        wanted = [tuple(o.split("=", 1)) for o in self.overrides] + list(self.logged)
        return all(params.get(k if "." in k else f"{k}.name") == v for k, v in wanted)


ALGORITHMS: dict[str, Algorithm] = {
    "exp_ix_m": Algorithm(("solver=game", "p_player=exp_ix_m"), "bandit",
                          (("p_player.state", "tree"),)),
    "exp4mp": Algorithm(("solver=game", "p_player=exp4mp", "p_player.confidence=sampled",
                         "p_player.state=tree"), "bandit"),
    "ru_sgd": Algorithm(("solver=game", "p_player=ru_sgd"), "stochastic"),
    "sgd": Algorithm(("solver=sgd",), "stochastic"),
    "prospect": Algorithm(("solver=prospect",), "variance-reduced"),
    "lsvrg": Algorithm(("solver=lsvrg",), "variance-reduced"),
    "full_batch": Algorithm(("solver=full_batch",), "full-batch"),
}
#: the k forms: the value of ``constraint.level`` and how the report names it
FORMS = {"null": "k=20", "0.01": "k=n/100"}
#: k where ``constraint.level`` is null (the preset's ``constraint.k``)
K_FIXED = 20
#: a run's final values that the report reads
FINAL = ("objective", "wall_time_s", "passes", "checkpoint_time_total_s", "compile_time_s")
#: metrics that are certified lower bounds on OPT at some iterate (games, solvers)
LOWER_METRICS = ("inner_min_lower", "dual_lower")
DONE_FILE = "done.json"


# -- the grid -----------------------------------------------------------------------------

@dataclass
class Grid:
    n: list[int]
    budgets: list[float]
    levels: list[str]
    algorithms: list[str]
    seeds: list[int] = field(default_factory=lambda: [0])

    @property
    def n0(self) -> int:
        return min(self.n)


def preset_axes() -> dict[str, list[str]]:
    """The swept values of the preset (``hydra.sweeper.params``) and its fixed k, as
    strings."""
    from omegaconf import OmegaConf

    from harness.config import config_dir

    preset = OmegaConf.load(Path(config_dir()) / "experiment" / f"{PRESET}.yaml")
    params = preset.hydra.sweeper.params
    axes = {key: [v.strip() for v in str(value).split(",")] for key, value in params.items()}
    return {**axes, "constraint.k": [str(preset.constraint.k)]}


def level_text(value: Any) -> str:
    if value is None or str(value).lower() in ("null", "none"):
        return "null"
    return f"{float(value):g}"


def form_name(level: str) -> str:
    return FORMS.get(level, f"k=n*{level}")


def number(value: float) -> str:
    """``0.1``, ``1``, ``10`` as a budget reads (and as Hydra reads it back)."""
    return f"{value:g}"


def passes_text(budget: float) -> str:
    return "1 pass" if budget == 1 else f"{number(budget)} passes"


def slug(*parts: Any) -> str:
    return "-".join(str(p).replace("/", "").replace("=", "") for p in parts)


# -- commands -----------------------------------------------------------------------------

@dataclass
class Sweep:
    """One ``minimax-bench --multirun`` of the study: its label, overrides and folder."""

    label: str
    algorithm: str
    overrides: list[str]
    folder: Path
    runs: int
    #: the order to launch in (larger first)
    weight: float = 0.0

    def key(self) -> str:
        return hashlib.sha256("\n".join(self.overrides).encode()).hexdigest()[:12]

    def done(self) -> bool:
        path = self.folder / DONE_FILE
        return path.is_file() and json.loads(path.read_text()).get("key") == self.key()


def common(args: argparse.Namespace, experiment: str, folder: Path) -> list[str]:
    out = [f"experiment={PRESET}", "hydra.sweeper.params=null", "resume=true",
           f"tracking.experiment={experiment}", f"hydra.sweep.dir={folder}"]
    if args.tracking_uri:
        out.append(f"tracking.uri={args.tracking_uri}")
    return out


def tuning_sweeps(args: argparse.Namespace, grid: Grid,
                  feasible: Mapping[str, list[tuple[float, str]]]) -> list[Sweep]:
    """One tuning sweep per algorithm over its feasible budgets and k forms at the
    smallest n (per budget where those are not a product)."""
    sweeps = []
    for name in grid.algorithms:
        combos = feasible.get(name, [])
        budgets = sorted({b for b, _ in combos})
        levels = sorted({lv for _, lv in combos})
        groups = ([(budgets, levels)] if len(combos) == len(budgets) * len(levels) else
                  [([b], [lv for bb, lv in combos if bb == b]) for b in budgets])
        for bs, lvs in groups:
            if not bs or not lvs:
                continue
            folder = args.out / "sweeps" / slug("tune", name, *map(number, bs))
            launcher = (["hydra/launcher=joblib", f"hydra.launcher.n_jobs={args.jobs}"]
                        if args.joblib else [])
            overrides = (["--multirun", "hydra/sweeper=tune", *ALGORITHMS[name].overrides,
                          f"dataset.n={grid.n0}",
                          "budget_passes=" + ",".join(map(number, bs)),
                          "constraint.level=" + ",".join(lvs)]
                         + common(args, f"{args.experiment}_tune", folder) + launcher)
            sweeps.append(Sweep(f"tune {name} budgets {','.join(map(number, bs))}", name,
                                overrides, folder, runs=0))
    return sweeps


def grid_sweeps(args: argparse.Namespace, grid: Grid,
                feasible: Mapping[str, list[tuple[float, str]]],
                selections: Mapping[tuple[str, float, str], Mapping[str, Any]],
                refused: Mapping[str, str] | None = None) -> list[Sweep]:
    """Per algorithm, budget and k form: one sweep over n at the theory step, and one
    at the selected multipliers unless they are the theory step; the n that
    ``refused`` names (``algorithm budget level n=N``) are left out."""
    sweeps = []
    seeds = ",".join(map(str, grid.seeds))
    for name in grid.algorithms:
        for budget, level in feasible.get(name, []):
            kept = [n for n in sorted(grid.n, reverse=True)
                    if refused_key(name, budget, level, n) not in (refused or {})]
            if not kept:
                continue
            ns = ",".join(map(str, kept))
            chosen = selections.get((name, budget, level), {}).get("selected", {})
            steps = [("theory", [])]
            if any(m != 1.0 for m in chosen.values()):
                steps.append(("tuned", [f"{k}={m!r}" for k, m in sorted(chosen.items())]))
            for step, scales in steps:
                folder = args.out / "sweeps" / slug("grid", name, step, number(budget),
                                                    form_name(level).replace("/", "_"))
                overrides = (["--multirun", *ALGORITHMS[name].overrides, *scales, f"dataset.n={ns}",
                              f"budget_passes={number(budget)}", f"constraint.level={level}",
                              f"seed={seeds}"] + common(args, args.experiment, folder))
                sweeps.append(Sweep(f"{name} {step} {passes_text(budget)} {form_name(level)}",
                                    name, overrides, folder, runs=len(kept) * len(grid.seeds),
                                    weight=budget * max(kept)))
    return sorted(sweeps, key=lambda s: -s.weight)


# -- running ------------------------------------------------------------------------------

_PRINT = threading.Lock()


def say(text: str) -> None:
    with _PRINT:
        print(text, flush=True)


def run_sweep(sweep: Sweep, dry: bool = False) -> tuple[int, float]:
    """Run one sweep (``python -m harness`` with its overrides), its output to
    ``log.txt`` in its folder; print each job's start. Returns (exit code, seconds)."""
    if sweep.done():
        say(f"  {sweep.label}: done before, skipped")
        return 0, 0.0
    command = [sys.executable, "-m", "harness", *sweep.overrides]
    if dry:
        say("  " + " ".join(command))
        return 0, 0.0
    sweep.folder.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    say(f"  {sweep.label}: started ({sweep.runs or 'tuning'} runs; log {sweep.folder / 'log.txt'})")
    jobs = 0
    with open(sweep.folder / "log.txt", "a") as log:
        log.write(f"\n$ {' '.join(command)}\n")
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, bufsize=1)
        assert proc.stdout is not None
        for line in proc.stdout:
            log.write(line)
            if "] \t#" in line or line.lstrip().startswith("#"):
                jobs += 1
                if sweep.runs:  # a grid sweep's jobs one by one, a tuning sweep's by the 50
                    what = line.split(" : ", 1)[-1].strip().split(" experiment=")[0]
                    say(f"    {sweep.label}: job {jobs}/{sweep.runs} at "
                        f"{time.perf_counter() - start:.0f} s: {what}")
                elif jobs % 50 == 0:
                    say(f"    {sweep.label}: {jobs} jobs at {time.perf_counter() - start:.0f} s")
            elif "error" in line.lower() and "minimax-bench" in line:
                say(f"    {sweep.label}: {line.strip()}")
        code = proc.wait()
    seconds = time.perf_counter() - start
    if code == 0:
        (sweep.folder / DONE_FILE).write_text(json.dumps(
            {"key": sweep.key(), "overrides": sweep.overrides, "seconds": round(seconds, 1)}))
    say(f"  {sweep.label}: {'finished' if code == 0 else f'FAILED (exit {code})'} in "
        f"{seconds:.0f} s" + ("" if code == 0 else f"; see {sweep.folder / 'log.txt'}"))
    return code, seconds


def run_all(sweeps: Sequence[Sweep], jobs: int, dry: bool = False) -> list[Sweep]:
    """Run ``sweeps``, ``jobs`` at a time; the failed ones."""
    failed = []
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = {pool.submit(run_sweep, s, dry): s for s in sweeps}
        for i, future in enumerate(as_completed(futures), 1):
            code, _ = future.result()
            if code:
                failed.append(futures[future])
            say(f"  [{i}/{len(sweeps)} sweeps]")
    return failed


def is_game(name: str) -> bool:
    """Whether the algorithm is a game (``solver=game``): its p-player's theory step
    depends on the horizon, so it may refuse some n of a budget in passes."""
    return "solver=game" in ALGORITHMS[name].overrides


def refused_key(name: str, budget: float, level: str, n: int | None = None) -> str:
    """The key of a refusal: ``algorithm budget level``, or ``... n=N`` at one n."""
    key = f"{name} {number(budget)} {level}"
    return key if n is None else f"{key} n={n}"


def refusal(refused: Mapping[str, str], name: str, budget: float, level: str,
            n: int | None = None) -> str | None:
    """Why ``name`` does not run at this budget and k form (and n, if given); None: it runs."""
    return (refused.get(name) or refused.get(refused_key(name, budget, level))
            or (refused.get(refused_key(name, budget, level, n)) if n is not None else None))


#: the version of ``study.json``'s check (2: games prepared at every n of the grid)
CHECK_VERSION = 2


def check_feasible(grid: Grid, progress: Any = None,
                   ) -> tuple[dict[str, list[tuple[float, str]]], dict[str, str]]:
    """Prepare each (algorithm, budget, k form) at the smallest n, recording nothing:
    the combinations the harness accepts, and why the others are left out (keyed
    ``algorithm``, or ``algorithm budget level``). A game accepted there is prepared
    at every other n of the grid too: its p-player may refuse a horizon that depends
    on n (OL-EXP.4M's theory gamma needs T >= n log(n/k) / k, so it is refused at
    10 passes with k = 20 from n of about 4.4e5 on); such a refusal is keyed
    ``algorithm budget level n=N`` and only that n is left out. A whole-algorithm
    solver's refusals are about the budget in passes, the same at every n."""
    import gc

    import harness
    from harness import ConfigError, SetupError

    say_ = progress or (lambda text: print(text, flush=True))
    feasible: dict[str, list[tuple[float, str]]] = defaultdict(list)
    refused: dict[str, str] = {}

    def prepare(name: str, budget: float, level: str, n: int) -> str | None:
        """The harness's refusal of one combination at one n (None: accepted); raises
        ``ConfigError`` if the overrides do not compose."""
        cfg = harness.compose([f"experiment={PRESET}", *ALGORITHMS[name].overrides,
                               f"dataset.n={n}", f"budget_passes={number(budget)}",
                               f"constraint.level={level}"], quiet=True)
        try:
            prepared = harness.prepare(cfg)
        except (ConfigError, SetupError) as err:
            return str(err)
        del prepared
        gc.collect()  # close the memory-mapped data before the next n
        return None

    for name in grid.algorithms:
        for budget in grid.budgets:
            for level in grid.levels:
                try:  # an option that does not exist (yet): the algorithm is left out
                    reason = prepare(name, budget, level, grid.n0)
                except ConfigError as err:
                    refused[name] = str(err)
                    break
                if reason is not None:  # a budget the algorithm refuses: left out
                    refused[refused_key(name, budget, level)] = reason
                    continue
                feasible[name].append((budget, level))
            if name in refused:
                break
    others = sorted((n for n in set(grid.n) if n != grid.n0), reverse=True)
    games = [(name, budget, level) for name in grid.algorithms if is_game(name)
             for budget, level in feasible.get(name, [])]
    if others and games:
        say_(f"crossover: preparing the accepted game combinations ({len(games)}) at "
             f"n = {', '.join(map(str, others))} (each opens the data and sets up the players)")
    for n in others:
        for name, budget, level in games:
            start = time.perf_counter()
            try:
                reason = prepare(name, budget, level, n)
            except ConfigError as err:
                reason = str(err)
            seconds = time.perf_counter() - start
            if reason is not None:
                refused[refused_key(name, budget, level, n)] = reason
            say_(f"  {name} {passes_text(budget)} {form_name(level)} n = {n}: "
                 f"{'refused' if reason else 'accepted'} ({seconds:.1f} s)")
    return dict(feasible), refused


def read_selections(sweeps: Iterable[Sweep]) -> dict[tuple[str, float, str], dict[str, Any]]:
    """``(algorithm, budget, level) -> {"selected": {key: m}, "edge": {key: bool}}``
    from the tuning sweeps' ``tuning.json``."""
    from harness.tune import TUNING_FILE

    found: dict[tuple[str, float, str], dict[str, Any]] = {}
    for sweep in sweeps:
        path = sweep.folder / TUNING_FILE
        if not path.is_file():
            continue
        name = sweep.algorithm
        for config in json.loads(path.read_text())["configurations"]:
            given = dict(o.split("=", 1) for o in config["overrides"])
            key = (name, float(given["budget_passes"]), level_text(given["constraint.level"]))
            found[key] = {"selected": config["selected"], "edge": config["edge"]}
    return found


# -- the report ---------------------------------------------------------------------------

@dataclass
class Cell:
    """The final values of one algorithm at one step on one problem and budget
    (medians over seeds)."""

    algorithm: str
    step: str
    n: int
    budget: float
    level: str
    objective: float
    wall: float
    passes: float
    seeds: int
    cost: float = 0.0  # seconds of the runs: algorithm, checkpoints, compiling (summed)


@dataclass
class Bound:
    """What is known of OPT on one problem (n, k form): a certified lower end
    (None: none), where it comes from, and the best objective seen (an upper end)."""

    lower: float | None = None
    source: str = ""
    upper: float | None = None
    exact: bool = False

    @property
    def width(self) -> float | None:
        return None if self.lower is None or self.upper is None else self.upper - self.lower


def spec_of(params: Mapping[str, str]) -> str | None:
    """The study's algorithm a run's params say it is (None: another)."""
    return next((name for name, a in ALGORITHMS.items() if a.matches(params)), None)


def scales_of(params: Mapping[str, str]) -> dict[str, float]:
    """The step multipliers of a run: ``p_player.eta_scale`` etc."""
    return {k: float(v) for k, v in params.items()
            if k.split(".", 1)[0] in ("p_player", "w_player", "solver") and k.endswith("_scale")}


#: the params that make the study's problem besides n and k (``study_problem``), as
#: the runs log them: the resolved ball radius (``problem.radius``: the w-player's
#: when the preset leaves it null), the loss's scale, the model's bias, the split of
#: the rows. k is checked in ``collect`` (the logged ``constraint.k`` is the
#: resolved k: 20, or floor(level n)); n is part of the cell's key.
PROBLEM_KEYS = ("dataset.name", "dataset.d", "dataset.task", "dataset.hard", "dataset.seed",
                "dataset.split", "model.name", "model.bias", "model.loss_scale",
                "problem.mu", "problem.nu", "problem.radius")
#: ``model.loss_scale`` when the preset leaves it null: the model's proved bound
#: (logged as ``model.loss_bound``), which depends on the data, so on n
AUTO_SCALE = "auto"


def study_problem() -> dict[str, str]:
    """The preset's values of ``PROBLEM_KEYS`` as the runs log them (text): the
    params of the preset prepared at n = 1000 (nothing recorded; a second), with
    ``model.loss_scale`` ``AUTO_SCALE`` where the preset leaves it null."""
    from omegaconf import OmegaConf

    import harness

    cfg = harness.compose([f"experiment={PRESET}", "dataset.n=1000"], quiet=True)
    params = harness.prepare(cfg).context.params
    out = {key: str(params[key]) for key in PROBLEM_KEYS if params.get(key) is not None}
    if OmegaConf.select(cfg, "model.loss_scale") is None:
        out["model.loss_scale"] = AUTO_SCALE
    return out


def same(logged: str, wanted: str) -> bool:
    """Whether a logged param has the wanted value (text, or equal as numbers)."""
    if logged == wanted:
        return True
    try:
        return math.isclose(float(logged), float(wanted), rel_tol=1e-9, abs_tol=0.0)
    except ValueError:
        return logged.lower() == wanted.lower()


def other_problem(params: Mapping[str, str], problem: Mapping[str, str]) -> bool:
    """Whether a run's params name another problem than ``problem``'s values; a key
    the run does not log is not held against it."""
    for key, wanted in problem.items():
        if key not in params:
            continue
        if key == "model.loss_scale" and wanted == AUTO_SCALE:
            if "model.loss_bound" in params and not same(params[key],
                                                         params["model.loss_bound"]):
                return True
        elif not same(params[key], wanted):
            return True
    return False


def k_of(n: int, level: str) -> int:
    """The k of the study at n and k form (``constraint.level``: null is K_FIXED, else
    the k-set's ``max(1, floor(level n))``)."""
    return K_FIXED if level == "null" else max(1, math.floor(float(level) * n + 1e-9))


def collect(runs: Iterable[Any], grid: Grid,
            selections: Mapping[tuple[str, float, str], Mapping[str, Any]],
            problem: Mapping[str, str] | None = None,
            ) -> tuple[list[Cell], dict[tuple[int, str], Bound], int]:
    """Cells (median over seeds of each run's final values) and the bound on OPT of
    each problem, from the runs' records (``harness.runs.RunRecord``); the number of
    runs left out (another problem than ``problem``'s params, not of the study's
    grid, or at multipliers other than the theory step and the selection). The
    bound of a problem takes every run on it, whatever its algorithm or budget."""
    from harness.report import best_value, final_value

    groups: dict[tuple[str, str, int, float, str], list[dict[str, float]]] = defaultdict(list)
    bounds: dict[tuple[int, str], Bound] = defaultdict(Bound)
    left_out = 0
    for run in runs:
        p = run.params
        if other_problem(p, problem or {}):
            left_out += 1
            continue
        name = spec_of(p)
        try:
            n, budget = int(p["dataset.n"]), float(p["budget_passes"])
        except (KeyError, ValueError):
            left_out += 1
            continue
        level = level_text(p.get("constraint.level"))
        if n not in grid.n or level not in grid.levels:
            left_out += 1
            continue
        if "constraint.k" in p and not same(p["constraint.k"], str(k_of(n, level))):
            left_out += 1  # another k (e.g. constraint.k=50): another problem
            continue
        bound = bounds[(n, level)]
        lowers = [(float(p["opt_lower"]), f"OPT ({p.get('opt_solver', 'exact')})")
                  ] if "opt_lower" in p else []
        lowers += [(v, f"dual bound of {name or run.tags.get('algorithm', '?')}")
                   for m in LOWER_METRICS if (v := best_value(run, m)) is not None]
        for value, source in lowers:
            if bound.lower is None or value > bound.lower:
                bound.lower, bound.source = value, source
        bound.exact = bound.exact or "opt_lower" in p
        uppers = [float(p["opt"])] if "opt" in p else []
        uppers += [v for v in [best_value(run, "objective", min)] if v is not None]
        for value in uppers:
            bound.upper = value if bound.upper is None else min(bound.upper, value)
        if name is None or name not in grid.algorithms or budget not in grid.budgets:
            left_out += 1
            continue
        scales = scales_of(p)
        if all(m == 1.0 for m in scales.values()):
            step = "theory"
        else:
            chosen = selections.get((name, budget, level), {}).get("selected")
            if chosen is None or any(not math.isclose(scales.get(k, 1.0), m, rel_tol=1e-9)
                                     for k, m in chosen.items()):
                left_out += 1
                continue
            step = "tuned"
        final = {m: final_value(run, m) for m in FINAL}
        if final["objective"] is None:
            left_out += 1
            continue
        groups[(name, step, n, budget, level)].append(
            {k: (v if v is not None else math.nan) for k, v in final.items()})
    cells = []
    for (name, step, n, budget, level), values in groups.items():
        def median(metric: str, values: list[dict[str, float]] = values) -> float:
            return float(statistics.median(v[metric] for v in values))
        cost = sum(sum(v[m] for m in FINAL[1:] if m != "passes" and math.isfinite(v[m]))
                   for v in values)
        cells.append(Cell(name, step, n, budget, level, median("objective"),
                          median("wall_time_s"), median("passes"), len(values), cost))
    return cells, dict(bounds), left_out


def fmt(value: float | None, digits: int = 3) -> str:
    if value is None or not math.isfinite(value):
        return "-"
    return f"{value:.{digits}g}"


def n_text(n: int) -> str:
    exponent = math.log10(n)
    return f"1e{round(exponent)}" if n > 0 and abs(exponent - round(exponent)) < 1e-9 else str(n)


def rows_of(cells: Sequence[Cell], grid: Grid,
            selections: Mapping[tuple[str, float, str], Mapping[str, Any]],
            budget: float, level: str) -> list[tuple[str, str, dict[int, Cell]]]:
    """Table rows (algorithm, step, n -> cell) for one budget and k form: the theory
    row, then the tuned row (the theory runs where the selection is the theory
    step: marked ``theory=tuned``)."""
    out = []
    for name in grid.algorithms:
        mine = [c for c in cells if c.algorithm == name and c.budget == budget
                and c.level == level]
        theory = {c.n: c for c in mine if c.step == "theory"}
        tuned = {c.n: c for c in mine if c.step == "tuned"}
        chosen = selections.get((name, budget, level), {}).get("selected")
        if theory or tuned:
            out.append((name, "theory", theory))
        if chosen is not None:
            same = all(m == 1.0 for m in chosen.values())
            out.append((name, "theory=tuned" if same else "tuned", theory if same else tuned))
    return out


def over_budget(cell: Cell) -> bool:
    """Whether the cell's runs spent more passes than its budget (marked †): the
    full-batch baseline's first step is a whole pass, so at 0.1 passes it spends 1."""
    return cell.passes > cell.budget * 1.01


def suboptimality(cell: Cell, bound: Bound | None) -> float | None:
    """``objective - lower end of OPT`` (a certified upper bound on objective - OPT)."""
    if bound is None or bound.lower is None:
        return None
    return max(cell.objective - bound.lower, 0.0)


def table(cells: Sequence[Cell], bounds: Mapping[tuple[int, str], Bound], grid: Grid,
          selections: Mapping[tuple[str, float, str], Mapping[str, Any]],
          refused: Mapping[str, str], budget: float, level: str) -> str:
    """Markdown: rows algorithm x step, columns n; each cell the median final
    certified suboptimality (``objective - opt_lower``); then the bound rows."""
    ns = sorted(grid.n)
    head = "| algorithm | step | " + " | ".join(f"n = {n_text(n)}" for n in ns) + " |"
    lines = [head, "|---|---|" + "---|" * len(ns)]
    notes: list[str] = []
    missing = False
    rows = rows_of(cells, grid, selections, budget, level)
    shown = {r[0] for r in rows}
    # an algorithm refused at some n with no run yet still gets its row
    rows += [(name, "theory", {}) for name in grid.algorithms if name not in shown
             and not refusal(refused, name, budget, level)
             and any(refused_key(name, budget, level, n) in refused for n in ns)]
    for name, step, by_n in rows:
        chosen = selections.get((name, budget, level), {})
        label = step
        if step == "tuned":
            label += " " + ", ".join(
                f"{k.rsplit('.', 1)[-1]}={m:.3g}" + (" (edge)" if chosen["edge"].get(k) else "")
                for k, m in sorted(chosen["selected"].items()) if m != 1.0)
        row = []
        for n in ns:
            cell = by_n.get(n)
            reason = refused.get(refused_key(name, budget, level, n))
            if cell is None and reason:
                row.append("refused ‡")
                note = f"‡ {name} at n = {n_text(n)} refused by the harness: {reason}"
                if note not in notes:
                    notes.append(note)
                continue
            if cell is None:
                row.append("-")
                missing = True
                continue
            bound = bounds.get((n, level))
            value = suboptimality(cell, bound)
            text = fmt(value) if value is not None else f"objective {fmt(cell.objective)}"
            if over_budget(cell):
                text += " †"
            row.append(text)
        lines.append(f"| {name} | {label} | " + " | ".join(row) + " |")
    for name in grid.algorithms:
        reason = refusal(refused, name, budget, level)
        if reason and name in shown:
            continue  # (a refusal of the whole algorithm while some of its runs exist)
        if reason:
            lines.append(f"| {name} | not run | " + " | ".join("-" for _ in ns) + " |")
            notes.append(f"{name} not run: {reason}")
    lower = [bounds.get((n, level), Bound()) for n in ns]
    lines.append("| OPT lower end | | " + " | ".join(fmt(b.lower, 6) for b in lower) + " |")
    lines.append("| interval width | | " + " | ".join(fmt(b.width, 3) for b in lower) + " |")
    lines.append("| lower end from | | " + " | ".join(b.source or "none" for b in lower) + " |")
    if missing:
        notes.append("-: no finished run (not run yet, or failed: see the sweep's log.txt in "
                     "the study's sweeps/ folder).")
    if any(over_budget(c) for c in cells if c.budget == budget and c.level == level):
        notes.append("†: the run spent more passes than the budget (its first step needs a "
                     "whole pass); left out of the ranking in \"Who wins where\".")
    if any(b.lower is None for b in lower):
        notes.append("Where no certified lower end of OPT exists, the cell is the objective, "
                     "not a suboptimality.")
    return "\n".join(lines + [""] + [f"* {t}" for t in notes]) + "\n"


def winners(cells: Sequence[Cell], grid: Grid, budget: float, level: str,
            steps: Sequence[str]) -> dict[int, list[Cell]]:
    """Per n, the cells of ``steps`` ranked by final objective (lowest first). The
    ranking by objective is exact: every cell of a column shares OPT's lower end.
    A cell whose runs spent more passes than the budget (†) is not ranked."""
    out = {}
    for n in sorted(grid.n):
        mine = [c for c in cells if c.n == n and c.budget == budget and c.level == level
                and c.step in steps and math.isfinite(c.objective) and not over_budget(c)]
        if mine:
            out[n] = sorted(mine, key=lambda c: (c.objective, c.algorithm, c.step))
    return out


def absent(cells: Sequence[Cell], grid: Grid, refused: Mapping[str, str], budget: float,
           level: str, steps: Sequence[str]) -> dict[int, list[str]]:
    """Per n, the algorithms of the grid that are not refused there but have no
    finished cell of ``steps`` (a ranking without them says nothing about them)."""
    out = {}
    for n in sorted(grid.n):
        have = {c.algorithm for c in cells if c.n == n and c.budget == budget
                and c.level == level and c.step in steps}
        lacking = [name for name in grid.algorithms if name not in have
                   and not refusal(refused, name, budget, level, n)]
        if lacking:
            out[n] = lacking
    return out


def family(name: str) -> str:
    return ALGORITHMS[name].family


def verdict_of(ranked: Mapping[int, list[Cell]], lacking: Mapping[int, list[str]]) -> str:
    """The crossover and the paper's claim from the rankings, using only the n where
    every competitor finished: walking down from the largest n, the bandit p-players
    win at every n until one where another algorithm wins (the crossover) or one
    that lacks a competitor (there the crossover is open)."""
    ns = sorted(set(ranked) | set(lacking))
    complete = [n for n in ns if n not in lacking]
    wins = [n for n in complete if family(ranked[n][0].algorithm) == "bandit"]
    open_ns = [n for n in ns if n in lacking]
    incomplete = ("; no verdict that needs n = " + ", ".join(map(n_text, open_ns))
                  + ", where some algorithm has no finished run") if open_ns else ""
    largest = ns[-1]
    if largest in lacking:
        text = (f"no verdict on the paper's claim: at the largest n ({n_text(largest)}) "
                f"there is no finished run of {', '.join(lacking[largest])}")
        if wins:
            text += (f"; among the n where every algorithm finished, a bandit p-player wins "
                     f"at n = {', '.join(map(n_text, wins))}")
        return text
    tail = []
    for n in reversed(ns):
        if n in lacking or family(ranked[n][0].algorithm) != "bandit":
            break
        tail.append(n)
    stop = next((n for n in reversed(ns) if n not in tail), None)
    if tail and stop is not None and stop in lacking:
        text = (f"a bandit p-player wins at every n >= {n_text(tail[-1])}: the paper's claim "
                f"holds at the largest n; where the crossover lies is open (at n = "
                f"{n_text(stop)} there is no finished run of {', '.join(lacking[stop])})")
    elif tail:  # every n wins, or another algorithm wins at ``stop``: the crossover
        text = (f"a bandit p-player wins at every n >= {n_text(tail[-1])}: the paper's claim "
                "holds here")
    elif wins:
        text = (f"a bandit p-player wins at n = {', '.join(map(n_text, wins))} "
                f"but not at the largest n ({n_text(largest)})")
    elif open_ns:
        text = ("no bandit p-player wins at the largest n nor at any other n where every "
                "algorithm finished: the claim does not hold here")
    else:
        text = "no bandit p-player wins at any n: the claim does not hold here"
    best_bandit = next((c for c in ranked[largest] if family(c.algorithm) == "bandit"), None)
    best_other = next((c for c in ranked[largest] if family(c.algorithm) != "bandit"), None)
    if best_bandit is not None and best_other is not None:
        text += (f" (at n = {n_text(largest)}, the best bandit {best_bandit.algorithm}'s "
                 f"objective is {best_bandit.objective / best_other.objective:.3g} times "
                 f"{best_other.algorithm}'s)")
    return text + ("" if tail and stop in lacking else incomplete)


def summary(cells: Sequence[Cell], bounds: Mapping[tuple[int, str], Bound], grid: Grid,
            refused: Mapping[str, str] | None = None) -> str:
    """Who wins where, computed from the cells: per budget and k form, the best
    algorithm at each n (theory and tuned steps together, then the theory steps
    alone), the n from which a bandit p-player wins at every larger n, and whether
    the paper's claim (bandit p-players win at large n) holds at the largest n.
    Cells over their budget in passes (†) are not ranked (said once); at an n where
    an algorithm that is not refused there has no finished cell, the missing ones
    are named and no verdict rests on that n."""
    refused = refused or {}
    lines = []
    over = sorted({(c.algorithm, c.budget) for c in cells if over_budget(c)
                   and c.budget in grid.budgets and c.level in grid.levels},
                  key=lambda x: (x[1], x[0]))
    if over:
        lines += ["Cells marked † in the tables (the run spent more passes than its budget) "
                  "are left out of every ranking: " + ", ".join(
                      f"{name} at {passes_text(budget)}" for name, budget in over) + ".", ""]
    for budget in grid.budgets:
        for level in grid.levels:
            lines.append(f"**{passes_text(budget)}, {form_name(level)}**")
            for steps, what in ((("theory", "tuned"), "theory or tuned step"),
                                (("theory",), "theory steps only")):
                ranked = winners(cells, grid, budget, level, steps)
                if not ranked:
                    continue
                lacking = absent(cells, grid, refused, budget, level, steps)
                parts = []
                for n in sorted(set(ranked) | set(lacking)):
                    order = ranked.get(n)
                    if not order:
                        parts.append(f"n = {n_text(n)}: no ranking (no finished run of "
                                     f"{', '.join(lacking[n])})")
                        continue
                    best = order[0]
                    sub = suboptimality(best, bounds.get((n, level)))
                    text = f"n = {n_text(n)}: {best.algorithm} ({best.step}"
                    text += f", suboptimality {fmt(sub)})" if sub is not None else ")"
                    second = next((c for c in order if c.algorithm != best.algorithm), None)
                    if second is not None:  # the runner-up: the best of the other algorithms
                        text += f" ahead of {second.algorithm} ({second.step})"
                    if n in lacking:
                        text += f", without {', '.join(lacking[n])} (no finished run)"
                    parts.append(text)
                lines.append(f"* {what}: " + "; ".join(parts) + ".")
                lines.append(f"  * {what}: {verdict_of(ranked, lacking)}.")
            lines.append("")
    return "\n".join(lines)


def figures(cells: Sequence[Cell], bounds: Mapping[tuple[int, str], Bound], grid: Grid,
            out: Path) -> list[Path]:
    """``suboptimality_vs_n.png`` and ``wall_time_vs_n.png``: log-log, one panel per
    budget (columns) and k form (rows), one line per algorithm and step."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = {name: f"C{i}" for i, name in enumerate(ALGORITHMS)}
    written = []
    for what, ylabel in (("suboptimality", "final suboptimality (objective - OPT lower end)"),
                         ("wall_time", "wall seconds of the algorithm")):
        fig, axes = plt.subplots(len(grid.levels), len(grid.budgets), squeeze=False,
                                 figsize=(4.2 * len(grid.budgets), 3.4 * len(grid.levels)),
                                 sharex=True)
        for i, level in enumerate(grid.levels):
            for j, budget in enumerate(grid.budgets):
                ax = axes[i][j]
                drawn: list[float] = []
                for name in grid.algorithms:
                    for step, style in (("theory", "-"), ("tuned", "--")):
                        mine = sorted((c for c in cells if c.algorithm == name and c.step == step
                                       and c.budget == budget and c.level == level),
                                      key=lambda c: c.n)
                        xs, ys = [], []
                        for c in mine:
                            y = (suboptimality(c, bounds.get((c.n, level))) if what ==
                                 "suboptimality" else c.wall)
                            if y is not None and y > 0:
                                xs.append(c.n)
                                ys.append(y)
                        if xs:
                            ax.plot(xs, ys, style, marker="o", ms=3, color=colors[name],
                                    label=f"{name} {step}")
                            drawn += ys
                if drawn:
                    ax.set_ylim(min(drawn) / 3, max(drawn) * 3)
                if what == "suboptimality" and drawn:
                    # how far the values are resolved; far below them it would only squash them
                    widths = [(n, bounds[(n, level)].width) for n in sorted(grid.n)
                              if (n, level) in bounds and bounds[(n, level)].width]
                    shown = [(n, w) for n, w in widths if w >= min(drawn) / 3]
                    if shown:
                        ax.plot(*zip(*shown, strict=True), ":", color="grey",
                                label="OPT interval width")
                    if len(shown) < len(widths):
                        ax.text(0.02, 0.03, "OPT interval width below the axis at n = "
                                + ", ".join(n_text(n) for n, w in widths if (n, w) not in shown),
                                transform=ax.transAxes, fontsize=7, color="grey")
                ax.set_xscale("log")
                ax.set_yscale("log")
                ax.set_title(f"{passes_text(budget)}, {form_name(level)}", fontsize=10)
                if i == len(grid.levels) - 1:
                    ax.set_xlabel("n (rows)")
                if j == 0:
                    ax.set_ylabel(ylabel, fontsize=8)
                ax.grid(True, which="major", alpha=0.3)
        handles = {}
        for ax in axes.flat:
            for h, lab in zip(*ax.get_legend_handles_labels(), strict=True):
                handles.setdefault(lab, h)
        order = [f"{a} {s}" for a in ALGORITHMS for s in ("theory", "tuned")]
        labels = sorted(handles, key=lambda lab: order.index(lab) if lab in order else len(order))
        fig.legend([handles[lab] for lab in labels], labels, loc="lower center",
                   ncol=min(4, len(labels)), fontsize=8, frameon=False)
        fig.tight_layout(rect=(0, 0.04 + 0.025 * math.ceil(len(labels) / 4), 1, 1))
        path = out / f"{what}_vs_n.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written


def crossover_report(source: str | None, experiment: str, grid: Grid, out: Path,
                     selections: Mapping[tuple[str, float, str], Mapping[str, Any]],
                     refused: Mapping[str, str], times: Mapping[str, float] | None = None,
                     pm: Any = None) -> str:
    """Write the report of the study's tracked runs into ``out``; return its text."""
    from harness.report import finished_runs

    runs, _, _ = finished_runs(source, experiment, sweep="all", pm=pm)
    cells, bounds, left_out = collect(runs, grid, selections, study_problem())
    out.mkdir(parents=True, exist_ok=True)
    text = ["# Crossover study: who wins at a fixed budget as n grows", "",
            f"{len(cells)} cells from {sum(c.seeds for c in cells)} runs of experiment "
            f"{experiment!r} ({left_out} other runs left out). Each cell: the median over "
            f"seeds {grid.seeds} of the final certified suboptimality `objective - opt_lower`, "
            "where opt_lower is the best certified lower end of OPT known for that problem: "
            "the exact solver's where it ran, else the largest certified dual bound "
            "(`inner_min_lower` of a game, `dual_lower` of a solver) any run produced at "
            "any checkpoint. The interval width (best objective seen - opt_lower) says "
            "how far the suboptimalities are resolved; the ranking within a column is "
            "exact (the cells share the lower end).", "", "## Who wins where", "",
            summary(cells, bounds, grid, refused), ""]
    for budget in grid.budgets:
        for level in grid.levels:
            text += [f"## {passes_text(budget)}, {form_name(level)}", "",
                     table(cells, bounds, grid, selections, refused, budget, level)]
    text += ["## Wall time", "", "Median wall seconds of the algorithm's own work "
             "(`wall_time_s`: checkpoints and compiling excluded).", ""]
    ns = sorted(grid.n)
    for budget in grid.budgets:
        for level in grid.levels:
            text += [f"{passes_text(budget)}, {form_name(level)}:", "",
                     "| algorithm | step | " + " | ".join(n_text(n) for n in ns) + " |",
                     "|---|---|" + "---|" * len(ns)]
            for name, step, by_n in rows_of(cells, grid, selections, budget, level):
                text.append(f"| {name} | {step} | " + " | ".join(
                    fmt(by_n[n].wall) if n in by_n else "-" for n in ns) + " |")
            text.append("")
    cost = defaultdict(float)
    for c in cells:
        cost[c.n] += c.cost
    text += ["## Cost", "", "Seconds the runs spent (algorithm + checkpoints + compiling), "
             "summed over the grid's runs, per n: " + ", ".join(
                 f"{n_text(n)}: {cost[n]:.0f} s" for n in ns) + "."]
    if times:
        text += ["", "Wall time of this launch's phases: " + ", ".join(
            f"{k}: {v:.0f} s" for k, v in times.items()) + "."]
    body = "\n".join(text) + "\n"
    (out / "crossover.md").write_text(body)
    (out / "cells.json").write_text(json.dumps(
        {"cells": [asdict(c) for c in cells],
         "bounds": [{"n": n, "level": lv, **asdict(b)} for (n, lv), b in bounds.items()]},
        indent=1))
    figures(cells, bounds, grid, out)
    return body


# -- the command --------------------------------------------------------------------------

def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="the study's folder")
    parser.add_argument("--n", help="comma-separated n (default: the preset's)")
    parser.add_argument("--budgets", help="comma-separated budgets in passes (the preset's)")
    parser.add_argument("--levels", help="constraint.level values: null (k = 20), 0.01 ...")
    parser.add_argument("--algorithms", default=",".join(ALGORITHMS),
                        help=f"some of {', '.join(ALGORITHMS)}")
    parser.add_argument("--seeds", default="0", help="the grid's seeds (default 0)")
    parser.add_argument("--jobs", type=int, default=2, help="processes at a time (default 2)")
    parser.add_argument("--experiment", default=PRESET, help="MLflow experiment of the grid")
    parser.add_argument("--tracking-uri", help="default: sqlite:///mlflow.db here")
    parser.add_argument("--no-tuning", action="store_true", help="theory steps only")
    parser.add_argument("--report-only", action="store_true")
    parser.add_argument("--dry-run", action="store_true", help="print the commands only")
    args = parser.parse_args(argv)
    args.out = args.out.resolve()
    unknown = set(args.algorithms.split(",")) - set(ALGORITHMS)
    if unknown:
        parser.error(f"--algorithms: unknown {sorted(unknown)}; known: {list(ALGORITHMS)}")
    return args


def make_grid(args: argparse.Namespace) -> Grid:
    axes = preset_axes()
    if axes["constraint.k"] != [str(K_FIXED)]:
        raise SystemExit(f"crossover: the preset's constraint.k is {axes['constraint.k']}; "
                         f"this tool's K_FIXED is {K_FIXED}: make them agree.")
    return Grid(
        n=[int(float(v)) for v in (args.n.split(",") if args.n else axes["dataset.n"])],
        budgets=[float(v) for v in (args.budgets.split(",") if args.budgets
                                     else axes["budget_passes"])],
        levels=[level_text(v) for v in (args.levels.split(",") if args.levels
                                         else axes["constraint.level"])],
        algorithms=args.algorithms.split(","),
        seeds=[int(s) for s in args.seeds.split(",")])


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    args.joblib = joblib_installed()
    grid = make_grid(args)
    args.out.mkdir(parents=True, exist_ok=True)
    study_file = args.out / "study.json"
    times: dict[str, float] = {}
    start = time.perf_counter()
    saved = json.loads(study_file.read_text()) if study_file.is_file() else {}
    if args.report_only and cached_check_valid(saved, grid):
        feasible = {k: [(float(b), lv) for b, lv in v] for k, v in saved["feasible"].items()}
        refused = saved["refused"]
    else:  # a launch, or a cached check of another grid or without the per-n checks
        print(f"crossover: checking {len(grid.algorithms)} algorithms x {len(grid.budgets)} "
              f"budgets x {len(grid.levels)} k forms at n = {grid.n0}, then the games "
              "at every n", flush=True)
        t = time.perf_counter()
        feasible, refused = check_feasible(grid)
        times["check"] = time.perf_counter() - t
        for key, reason in refused.items():
            print(f"crossover: leaving out {key}: {reason}", flush=True)
        study_file.write_text(json.dumps({"version": CHECK_VERSION, "grid": asdict(grid),
                                          "feasible": feasible, "refused": refused}, indent=1))
    tunes = tuning_sweeps(args, grid, feasible) if not args.no_tuning else []
    failed: list[Sweep] = []
    if not args.report_only:
        t = time.perf_counter()
        print(f"crossover: phase 1, tuning at n = {grid.n0}: {len(tunes)} sweeps"
              + (f" (joblib, {args.jobs} jobs)" if args.joblib else ""), flush=True)
        for sweep in tunes:  # each sweep keeps --jobs workers busy itself
            if run_sweep(sweep, args.dry_run)[0]:
                failed.append(sweep)
        times["tuning"] = time.perf_counter() - t
        print(f"crossover: phase 1 took {times['tuning']:.0f} s", flush=True)
    selections = read_selections(tunes)
    if not args.report_only:
        grids = grid_sweeps(args, grid, feasible, selections, refused)
        missing = [s.label for s in tunes if not (s.folder / "tuning.json").is_file()]
        if missing and not args.dry_run:
            print(f"crossover: no selection from {missing}: their algorithms run at the "
                  "theory step only", flush=True)
        t = time.perf_counter()
        print(f"crossover: phase 2, the grid: {len(grids)} sweeps, "
              f"{sum(s.runs for s in grids)} runs, {args.jobs} at a time", flush=True)
        failed += run_all(grids, args.jobs, args.dry_run)
        times["grid"] = time.perf_counter() - t
        print(f"crossover: phase 2 took {times['grid']:.0f} s", flush=True)
    if args.dry_run:
        return 0
    t = time.perf_counter()
    print("crossover: phase 3, the report", flush=True)
    source = args.tracking_uri or "sqlite:///mlflow.db"
    body = crossover_report(source, args.experiment, grid, args.out / "report",
                            selections, refused, times)
    times["report"] = time.perf_counter() - t
    times["study"] = time.perf_counter() - start
    print(body.split("## ", 2)[1] if "## " in body else body)
    print(f"crossover: the report is in {args.out / 'report'}; phases: " + ", ".join(
        f"{k} {v:.0f} s" for k, v in times.items()), flush=True)
    if failed:
        print(f"crossover: {len(failed)} sweeps failed (relaunch the same command to retry): "
              + "; ".join(s.label for s in failed), file=sys.stderr)
        return 1
    return 0


def cached_check_valid(saved: Mapping[str, Any], grid: Grid) -> bool:
    """Whether ``study.json``'s check holds for ``grid``: of this check's version
    (older files lack the games' per-n checks) and of the same n, budgets, k forms
    and algorithms."""
    if saved.get("version") != CHECK_VERSION or "grid" not in saved:
        return False
    old = saved["grid"]
    return (sorted(old.get("n", [])) == sorted(grid.n)
            and sorted(map(float, old.get("budgets", []))) == sorted(grid.budgets)
            and sorted(old.get("levels", [])) == sorted(grid.levels)
            and sorted(old.get("algorithms", [])) == sorted(grid.algorithms))


def joblib_installed() -> bool:
    """Hydra's joblib launcher is importable (``hydra/launcher=joblib``)."""
    import importlib.util

    return importlib.util.find_spec("hydra_plugins.hydra_joblib_launcher") is not None


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    raise SystemExit(main())
