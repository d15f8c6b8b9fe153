"""The tuning protocol: a Hydra sweeper (``hydra/sweeper=tune``) that tunes each
algorithm's step sizes on tuning seeds, then reruns the theory step and the
selected one on fresh evaluation seeds.

For every configuration of the sweep (the product of the swept overrides and
``algorithms``), the tuned parameters are step-size multipliers ``<x>_scale``
(``plugins.lib.steps``: 1 is the theory or default step). By default a game
(``solver=game``) tunes its p-player's first multiplier, then the w-player's
(``w_player.lr_scale`` for OGD); a whole-algorithm solver tunes its first one
(``solver.lr_scale``); ``tune`` names others per algorithm. Several parameters
are tuned one after the other (coordinate search): each over the whole grid,
the ones before it at their selected values and the ones after it at 1.

1. **Tuning.** Each grid point runs on every ``tuning_seeds`` seed; its score
   is ``rule`` (default the median) over those seeds of the final ``metric``
   (default ``objective``; lower is better; a run that fails, e.g. diverges,
   scores +inf). The best score is selected; ties go to the multiplier
   closest to 1. A selection at the smallest or largest multiplier of the
   grid is marked ``edge``: the best step may lie outside the grid.
2. **Evaluation.** The theory step (every multiplier 1) and the selected one
   run on every ``eval_seeds`` seed (disjoint from the tuning seeds); when the
   selection is the theory step they are the same runs.

Runs are tagged ``tuning`` = ``tune``, ``theory``, ``tuned`` or ``both``
(``tracking.tuning``); the sweep writes ``tuning.json`` (the grid, rule,
scores, selections and evaluation metrics) into its folder; with tracking on,
the tracker's ``on_sweep_end`` hook (MLflow's: the sweep's parent run, tags
``minimax_bench_tuning``, ``tuning_rule``, ``tuning_grid``) keeps it, where
``minimax-bench-report`` reads it for its theory-vs-tuned table. With ``resume=true`` a relaunched
tuning sweep reuses every FINISHED run and plays only the others.

A grid rather than Hydra's Optuna sweeper: the protocol asks for every point
of a fixed log grid (so that an edge selection is visible and the scores of
all points are reported), one parameter at a time, with a declared median
rule over seeds; a sampler adds nothing to a 9-point grid and makes the
selection depend on its own seed.
"""

from __future__ import annotations

import math
import statistics
import sys
from collections.abc import Mapping, Sequence
from itertools import pairwise
from typing import Any, NoReturn

from omegaconf import DictConfig, ListConfig, OmegaConf

#: the file a tuning sweep writes into its folder and onto its parent run
TUNING_FILE = "tuning.json"
#: the parent run tag of a tuning sweep
TUNING_TAG = "minimax_bench_tuning"
#: the run tag (``tracking.tuning``) of each run of a tuning sweep
ROLE_TAG = "tuning"
#: the overrides that choose the algorithm (not part of the problem it is ranked on)
ALGORITHM_KEYS = ("solver", "p_player", "w_player")
RULES = {"median": statistics.median, "mean": statistics.fmean, "max": max}


def refuse(err: Exception) -> NoReturn:
    """A bad tuning config: one line on stderr and exit 2, as the CLI's errors."""
    print(f"minimax-bench: error: {err}", file=sys.stderr)
    raise SystemExit(2)


def default_grid(base: float, low: int, high: int) -> list[float]:
    """``base ** low, ..., base ** high`` (the multiplier 1 is exactly 1.0)."""
    return [float(base) ** e if e else 1.0 for e in range(int(low), int(high) + 1)]


def select(scores: Mapping[float, float]) -> float:
    """The multiplier of the lowest score; among equal scores the one closest to
    1 in ratio (then the smaller)."""
    return min(scores, key=lambda m: (scores[m], abs(math.log(m)), m))


def score(values: Sequence[float | None], rule: str) -> float:
    """``rule`` over the seeds' final metric values; +inf if any seed failed."""
    if not values or any(v is None or not math.isfinite(v) for v in values):
        return math.inf
    return float(RULES[rule]([float(v) for v in values]))


def plain(value: Any) -> Any:
    if isinstance(value, DictConfig | ListConfig):
        return OmegaConf.to_container(value, resolve=True)
    return value


def first_scale(cls: type) -> list[str]:
    """The first ``<x>_scale`` parameter of a component's table (none: nothing to tune)."""
    return [name for name in getattr(cls, "params", {}) if name.endswith("_scale")][:1]


def job_metrics(ret: Any) -> dict[str, float]:
    """A job's final metrics; ``{"failed": 1.0}`` for a job that raised."""
    from hydra.core.utils import JobStatus

    if ret.status != JobStatus.COMPLETED:
        return {"failed": 1.0}
    value = ret.return_value
    return dict(value) if isinstance(value, Mapping) else {"failed": 1.0}


def median_of(runs: Sequence[Mapping[str, float]], metric: str) -> float | None:
    """The median of ``metric`` over runs that have it finite; None if any lacks it."""
    value = score([r.get(metric) for r in runs], "median")
    return None if math.isinf(value) else value


def multiplier_text(m: float, grid: Sequence[float] = ()) -> str:
    """``3^2`` for a power of the grid's base, else the number."""
    if m == 1.0:
        return "1"
    base = grid[-1] / grid[-2] if len(grid) > 1 else 0.0
    geometric = all(math.isclose(b / a, base, rel_tol=1e-9) for a, b in pairwise(grid))
    if base > 1.0 and geometric:
        e = math.log(m) / math.log(base)
        if abs(e - round(e)) < 1e-9:
            return f"{base:g}^{round(e)}"
    return f"{m:.3g}"


def _medians(config: Mapping[str, Any], metric: str) -> tuple[float | None, float | None]:
    """Median final ``metric`` over the evaluation seeds: theory step, tuned."""
    ev = config["evaluation"]
    both = ev.get("both", {})
    return (median_of(ev.get("theory", both).get("metrics", []), metric),
            median_of(ev.get("tuned", both).get("metrics", []), metric))


def ranking(configs: Sequence[Mapping[str, Any]], which: int, metric: str) -> list[str]:
    """Algorithms from best to worst by their median final ``metric`` (``which``:
    0 theory step, 1 tuned); failed ones last."""
    values = {c["algorithm"]: _medians(c, metric)[which] for c in configs}
    return sorted(values, key=lambda a: (values[a] is None, values[a] or 0.0, a))


def summary_table(record: Mapping[str, Any], metric: str | None = None) -> str:
    """Markdown: per problem (the swept overrides other than the algorithm), one
    row per algorithm with its selection (``(edge)``: at an end of the grid) and
    the median final ``metric`` over the evaluation seeds at the theory step and
    at the tuned one, with each ranking; then the tuning scores of every grid
    point. ``metric``: relative suboptimality where the runs know OPT, else the
    objective."""
    configs = record["configurations"]
    if metric is None:
        known = all(_medians(c, "relative_suboptimality") != (None, None) for c in configs)
        metric = "relative_suboptimality" if known else "objective"
    grid = record["grid"]
    lines = [f"Selection rule: the lowest {record['rule']}. Search: {record['search']}. "
             f"Grid: {', '.join(multiplier_text(m, grid) for m in grid)}. Cells: median "
             f"over the evaluation seeds {record['eval_seeds']} of the final {metric}; "
             "rank 1 is the best; (edge): the selection is an end of the grid, the best "
             "step may lie beyond it.", ""]
    problems: dict[str, list[Mapping[str, Any]]] = {}
    for c in configs:
        problems.setdefault(c.get("problem", ""), []).append(c)
    for problem, group in problems.items():
        if problem:
            lines += [f"### {problem}", ""]
        theory_rank = ranking(group, 0, metric)
        tuned_rank = ranking(group, 1, metric)
        lines += ["| algorithm | selected multipliers | theory step | rank | tuned | rank "
                  "| tuned / theory |", "|---|---|---|---|---|---|---|"]
        for c in group:
            chosen = ", ".join(f"{k}={multiplier_text(c['selected'][k], grid)}"
                               + (" (edge)" if c["edge"].get(k) else "") for k in c["keys"])
            theory, tuned = _medians(c, metric)
            ratio = f"{tuned / theory:.3g}" if theory and tuned is not None else "-"
            lines.append(f"| {c['algorithm']} | {chosen or 'nothing to tune'} | "
                         f"{_num(theory)} | {theory_rank.index(c['algorithm']) + 1} | "
                         f"{_num(tuned)} | {tuned_rank.index(c['algorithm']) + 1} | {ratio} |")
        if len(group) > 1:
            same = theory_rank == tuned_rank
            lines += ["", f"Ranking at the theory step: {' < '.join(theory_rank)}; tuned: "
                      f"{' < '.join(tuned_rank)}: tuning "
                      + ("does not change the ranking." if same else "changes the ranking.")]
        lines.append("")
    lines += [f"Tuning scores ({record['statistic']} over the tuning seeds "
              f"{record['tuning_seeds']} of the final {record['metric']}; the selected "
              "multiplier in bold):", "",
              "| configuration | parameter | " + " | ".join(multiplier_text(m, grid)
                                                        for m in grid) + " |",
              "|---|---|" + "---|" * len(grid)]
    for c in configs:
        for key in c["keys"]:
            cells = []
            for m in grid:
                value = c["scores"].get(key, {}).get(repr(m))
                text = "-" if value is None else _num(value if math.isfinite(value) else None, 4)
                cells.append(f"**{text}**" if m == c["selected"][key] else text)
            lines.append(f"| {c['label']} | {key} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _num(value: float | None, digits: int = 3) -> str:
    return "failed" if value is None else f"{value:.{digits}g}"

