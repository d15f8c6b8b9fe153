"""``minimax-bench-report``: figures and a table of final values from MLflow runs.

    minimax-bench-report --experiment paper_cancer --out report/
    minimax-bench-report --tracking-uri http://127.0.0.1:5000 --experiment sweep \
        --filter "tags.dataset = 'boston'"

Reads every finished run of the experiment (any MLflow tracking URI; the
game's and the whole-algorithm solvers' alike), groups them by algorithm (tag
``algorithm``: the p-player, or the solver), and writes

* one PNG per metric: data points processed on a log x-axis (``--x``:
  per-row gradient evaluations, passes over the data or wall seconds), one line per
  algorithm (median over seeds) with the min-max band over seeds; the
  objective's figure draws the exact optimum (param ``opt``, where the runs
  computed it) as a dashed horizontal line, ``suboptimality.png`` and
  ``relative_suboptimality.png`` plot ``objective - OPT`` and its ratio to
  OPT; these three draw the trivial solution ``w = 0`` (params
  ``trivial_objective``, ``trivial_relative_suboptimality``) as a dotted line;
* ``summary.png``: the paper's figure layout, the task metric (accuracy or
  MSE of the k largest losses) on the left, the dual gap on the right;
* ``final_values.md``: median, min and max over seeds of the final values;
* where the runs know OPT, ``problems.md``: one row per algorithm and one
  column per problem (data set and k), the median over seeds of the final
  relative suboptimality, with a last row for ``w = 0``; and per data set
  ``problem_<dataset>.png``: the relative suboptimality, one panel per k
  (a cross-problem sweep such as ``experiment=problems``);

and logs them as artifacts of a summary run (tag ``minimax_bench_report``)
in the same experiment.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

REPORT_TAG = "minimax_bench_report"
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
    #: each run's problem, e.g. ``"yacht minmax k=20"`` (data set, its preparation, k)
    problem: dict[str, str] = field(default_factory=dict)
    #: each run's data set and k, to order problems
    where: dict[str, tuple[str, int]] = field(default_factory=dict)


def load(uri: str | None, experiment: str, filter_string: str = "") -> dict[str, Curves]:
    """Finished game runs of ``experiment`` grouped by their ``algorithm`` tag."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        raise SystemExit(f"minimax-bench-report: error: no experiment named {experiment!r} "
                         f"in {client.tracking_uri}.")
    runs = client.search_runs([exp.experiment_id], filter_string=filter_string,
                              max_results=5000)
    grouped: dict[str, Curves] = defaultdict(Curves)
    for run in runs:
        tags = run.data.tags
        if REPORT_TAG in tags or "algorithm" not in tags or run.info.status != "FINISHED":
            continue
        histories = {}
        for key in run.data.metrics:
            history = sorted(client.get_metric_history(run.info.run_id, key),
                             key=lambda m: m.step)
            histories[key] = (np.array([m.step for m in history], dtype=float),
                              np.array([m.value for m in history], dtype=float))
        label = f"{tags['algorithm']} s{tags.get('seed', '?')} {run.info.run_id[:8]}"
        grouped[tags["algorithm"]].runs[label] = histories
        params = run.data.params
        curves = grouped[tags["algorithm"]]
        if "opt" in params:
            curves.opt[label] = float(params["opt"])
        if "trivial_objective" in params:
            curves.trivial[label] = float(params["trivial_objective"])
        dataset = tags.get("dataset", params.get("dataset.name", "?"))
        k = params.get("constraint.k")
        # the data set's preparation is part of the problem (yacht minmax and yacht
        # standard are two problems with two optima)
        prepared = " ".join(params[f"dataset.{key}"] for key in ("scale", "target")
                            if f"dataset.{key}" in params)
        name = f"{dataset} {prepared}" if prepared else dataset
        name = name if k is None else f"{name} k={k}"
        # the regularised problem F (mu, nu; no ball) is another problem than the paper's
        mu, nu = float(params.get("problem.mu", 0)), float(params.get("problem.nu", 0))
        if mu or nu:
            name += f" mu={mu:.3g} nu={nu:.3g}"
        if params.get("problem.radius") == "inf":
            name += " no-ball"
        curves.problem[label] = name
        curves.where[label] = (dataset, int(k) if k is not None else 0)
    if not grouped:
        raise SystemExit(f"minimax-bench-report: error: no finished runs in experiment "
                         f"{experiment!r}" + (f" matching {filter_string!r}" if filter_string
                                              else "") + ".")
    return dict(grouped)


def band(curves: Curves, metric: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Steps common to every run of the algorithm, and the median/min/max there."""
    series = [h[metric] for h in curves.runs.values() if metric in h]
    if not series:
        return (np.empty(0),) * 4
    steps = series[0][0]
    for s, _ in series[1:]:
        steps = np.intersect1d(steps, s)
    values = np.array([v[np.searchsorted(s, steps)] for s, v in series])
    return steps, np.median(values, axis=0), values.min(axis=0), values.max(axis=0)


def x_values(curves: Curves, steps: np.ndarray, x: str) -> np.ndarray:
    """The x-axis values at ``steps`` (data points): the steps themselves, or the
    median over the runs of the counter ``x`` logged at those steps (NaN where
    no run logged it: runs of a version without the counter)."""
    if x == "data_points":
        return steps
    out = []
    for s, v in (h[x] for h in curves.runs.values() if x in h):
        at = np.searchsorted(s, steps)
        hit = (at < s.size) & (s[np.minimum(at, s.size - 1)] == steps)
        out.append(np.where(hit, v[np.minimum(at, s.size - 1)], np.nan))
    if not out:
        return np.full(steps.shape, np.nan)
    return np.nanmedian(np.array(out), axis=0) if len(out) > 1 else out[0]


def _draw(ax, grouped: dict[str, Curves], metric: str, x: str = "data_points") -> bool:
    import matplotlib

    drawn = False
    # beyond ten algorithms the default cycle repeats its colours: twenty distinct ones
    palette = matplotlib.colormaps["tab20"] if len(grouped) > 10 else None
    for index, algorithm in enumerate(sorted(grouped)):
        steps, med, lo, hi = band(grouped[algorithm], metric)
        if steps.size == 0:
            continue
        steps = x_values(grouped[algorithm], steps, x)
        n_seeds = sum(metric in h for h in grouped[algorithm].runs.values())
        if metric in LOG_Y:  # a value <= 0 has no place on a log axis: leave a gap
            med, lo, hi = (np.where(v > 0, v, np.nan) for v in (med, lo, hi))
        style = {} if palette is None else {"color": palette(index % 20)}
        line, = ax.plot(steps, med, label=f"{algorithm} ({n_seeds} seeds)", **style)
        ax.fill_between(steps, lo, hi, color=line.get_color(), alpha=0.25, linewidth=0)
        drawn = True
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
    out = {"objective": value, "suboptimality": value - opt}
    if opt > 0:
        out["relative_suboptimality"] = (value - opt) / opt
    if value > opt:  # (F(0) - F*) / (F(0) - F*): w = 0 is where the normalisation starts
        out["normalised_suboptimality"] = 1.0
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
            for attr in ("opt", "trivial", "problem", "where"):
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
    lines = ["| algorithm | " + " | ".join(problems) + " |",
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


def problem_figures(grouped: dict[str, Curves], out: Path, title: str,
                    metric: str = "relative_suboptimality",
                    x: str = "data_points") -> list[Path]:
    """``problem_<dataset>.png``: ``metric`` against ``x``, one panel per k."""
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
        for ax, (problem, _) in zip(axes[0], panels, strict=True):
            ax.set_title(problem)
        if any(drawn):
            fig.suptitle(f"{title}: {LABELS.get(metric, metric)} on {dataset}")
            fig.tight_layout()
            path = out / f"problem_{dataset}.png"
            fig.savefig(path, dpi=120)
            written.append(path)
        plt.close(fig)
    return written


def figures(grouped: dict[str, Curves], out: Path, title: str,
            x: str = "data_points") -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    for metric in CURVE_METRICS:
        fig, ax = plt.subplots(figsize=(6, 4))
        if _draw(ax, grouped, metric, x):
            ax.set_title(f"{title}: {LABELS.get(metric, metric)}")
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
    fig.suptitle(title)
    fig.tight_layout()
    path = out / "summary.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    written.append(path)
    return written


def final_table(grouped: dict[str, Curves]) -> str:
    """Markdown table: median [min, max] over seeds of each metric's last value."""
    present = [m for m in TABLE_METRICS
               if any(m in h for c in grouped.values() for h in c.runs.values())]
    lines = ["| algorithm | seeds | " + " | ".join(present) + " |",
             "|---|---|" + "---|" * len(present)]
    for algorithm in sorted(grouped):
        runs = grouped[algorithm].runs.values()
        cells = []
        for metric in present:
            last = np.array([h[metric][1][-1] for h in runs if metric in h])
            cells.append("" if last.size == 0 else
                         f"{np.median(last):.4g} [{last.min():.4g}, {last.max():.4g}]")
        lines.append(f"| {algorithm} | {len(runs)} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n\nmedian [min, max] over seeds of the value at the last " \
                              "checkpoint.\n"


def log_summary_run(uri: str | None, experiment: str, files: Sequence[Path]) -> str:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name(experiment)
    run = client.create_run(exp.experiment_id, tags={REPORT_TAG: "1"},
                            run_name=f"report-{experiment}")
    for path in files:
        client.log_artifact(run.info.run_id, str(path))
    client.set_terminated(run.info.run_id)
    return run.info.run_id


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="minimax-bench-report",
                                     description=__doc__.split("\n\n")[0].strip("`: "))
    parser.add_argument("--tracking-uri", default=os.environ.get("MLFLOW_TRACKING_URI",
                                                                 "sqlite:///mlflow.db"))
    parser.add_argument("--experiment", default="minimax-bench")
    parser.add_argument("--filter", default="", help="MLflow search filter, e.g. "
                        "\"tags.dataset = 'boston'\"")
    parser.add_argument("--out", default="report", help="output folder")
    parser.add_argument("--title", default=None)
    parser.add_argument("--no-log", action="store_true", help="do not log a summary run")
    parser.add_argument("--x", default="data_points", choices=tuple(X_AXES),
                        help="what the figures' x-axis counts (default: data points)")
    args = parser.parse_args(argv)
    grouped = load(args.tracking_uri, args.experiment, args.filter)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    problems = split_by_problem(grouped)
    title = args.title or args.experiment
    if len(problems) == 1:
        files = figures(grouped, out, title, args.x)
        text = final_table(grouped)
    else:  # curves of different problems are never pooled: per-problem figures below
        files = []
        text = "\n".join(f"## {problem}\n\n{final_table(part)}"
                         for problem, part in problems.items())
    table = out / "final_values.md"
    table.write_text(f"# {title}\n\n" + text)
    files.append(table)
    print(table.read_text())
    if any(c.opt for c in grouped.values()):
        cross = out / "problems.md"
        text = f"# {title}: relative suboptimality by problem\n\n" + problem_table(grouped)
        if any("normalised_suboptimality" in h for c in grouped.values()
               for h in c.runs.values()):
            text += ("\n## normalised suboptimality (F - F*) / (F(w_0) - F*)\n\n"
                     + problem_table(grouped, "normalised_suboptimality"))
        cross.write_text(text)
        files.append(cross)
        files.extend(problem_figures(grouped, out, title, x=args.x))
        print(cross.read_text())
    elif len(problems) > 1:
        files.extend(problem_figures(grouped, out, title, metric="objective", x=args.x))
    print(f"wrote {len(files)} files to {out}/")
    if not args.no_log:
        run_id = log_summary_run(args.tracking_uri, args.experiment, files)
        print(f"logged as artifacts of run {run_id} in experiment {args.experiment!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
