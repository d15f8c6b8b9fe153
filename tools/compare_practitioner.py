"""The online-bandit algorithms beside what a practitioner would run, against
the exact optimum.

    python tools/compare_practitioner.py                       # both data sets, 5 seeds, 1e7
    python tools/compare_practitioner.py --datasets boston --seeds 2 --budget 1e6
    python tools/compare_practitioner.py --load results.json   # print a saved comparison

Solves OPT once per data set (``plugins.metrics.optimum``, cached), then runs one game
per (data set, algorithm, seed) with tracking off, in parallel processes, and
prints per data set and algorithm, as median [min, max] over seeds:

* the final suboptimality ``objective(w_bar) - OPT``, its relative value, and
  its ratio to the suboptimality of the first iterate ``w_1 = 0`` (below 1:
  the run ends better than where it started);
* the data points, and the wall time, after which the relative
  suboptimality stays at or below the threshold (1%) at every later
  checkpoint ("reached"), with the number of seeds that reached it. The
  resolution is that of the checkpoints (``--checkpoints`` log-spaced, plus
  each decade). Wall time counts the rounds only: the game's ``wall_time_s``
  leaves out the checkpoints' own evaluation (certified gap, metrics, logged
  as ``checkpoint_time_s`` and ``checkpoint_time_total_s``) and compiling
  the kernels (``compile_time_s``) ("round time"; "run time" is the whole
  run's). On a shared machine both are only as steady as its load.

Raw checkpoint metrics are saved with ``--save`` for later analysis.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")  # one core per game: timings compare

import argparse  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from concurrent.futures import ProcessPoolExecutor, as_completed  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

import harness  # noqa: E402
from harness.config import QUIET  # noqa: E402

ALGORITHMS = ("exp4mp", "ftrl", "safl", "ru_sgd", "soft_cvar", "uniform")
LABELS = {"exp4mp": "OL-EXP.4M", "ftrl": "OL-FTRL", "safl": "S-AFL",
          "ru_sgd": "ru_sgd (truncated CVaR)", "soft_cvar": "soft_cvar", "uniform": "uniform"}


class Recorder:
    """Keeps every checkpoint's metrics, with the time spent in the rounds
    (``round_time_s``: the game's ``wall_time_s``, which leaves the checkpoints
    and compilation out)."""

    def __init__(self) -> None:
        self.points: dict[int, dict[str, float]] = {}

    @harness.hookimpl
    def on_checkpoint(self, context, step, metrics):
        self.points[int(step)] = {**metrics, "round_time_s": metrics["wall_time_s"]}


def config(dataset: str, algorithm: str, seed: int, budget: int, k: int, checkpoints: int,
           cache_dir: str) -> dict:
    return harness.compose([*QUIET, f"constraint.k={k}", f"p_player={algorithm}",
                            f"dataset={dataset}", f"budget={budget}", f"seed={seed}",
                            f"checkpoints={checkpoints}", "reference.exact=true",
                            f"reference.cache_dir={cache_dir}"])


def one_run(dataset: str, algorithm: str, seed: int, budget: int, k: int, checkpoints: int,
            cache_dir: str) -> dict:
    recorder = Recorder()
    registry = harness.Registry(harness.make_plugin_manager([recorder]))
    prep = harness.prepare(config(dataset, algorithm, seed, budget, k, checkpoints, cache_dir),
                           registry)
    start = time.perf_counter()
    harness.play(prep)
    params = prep.context.params
    return {"dataset": dataset, "algorithm": algorithm, "seed": seed,
            "opt": params.get("opt"), "opt_status": params.get("opt_status"),
            "opt_message": params.get("opt_message"), "horizon_T": params["horizon_T"],
            "total_s": time.perf_counter() - start,
            "points": {str(s): m for s, m in sorted(recorder.points.items())}}


def reached(points: dict[str, dict[str, float]], threshold: float) -> tuple[float, float]:
    """Data points and round time from which the relative suboptimality stays
    at or below ``threshold`` at every later checkpoint (inf if never)."""
    steps = sorted(points, key=int)
    values = np.array([points[s]["relative_suboptimality"] for s in steps])
    above = np.flatnonzero(values > threshold)
    first = 0 if above.size == 0 else int(above[-1]) + 1
    if first >= len(steps):
        return np.inf, np.inf
    point = points[steps[first]]
    return float(point["data_points"]), float(point["round_time_s"])


def _band(values: list[float], fmt: str) -> str:
    v = np.array(values, dtype=float)
    if np.isinf(np.median(v)):
        return "not reached"
    cell = lambda x: "never" if np.isinf(x) else format(x, fmt)  # noqa: E731
    return f"{cell(np.median(v))} [{cell(v.min())}, {cell(v.max())}]"


def table(results: list[dict], dataset: str, threshold: float) -> str:
    runs = [r for r in results if r["dataset"] == dataset]
    opt = runs[0]["opt"]
    if opt is None:
        return f"### {dataset}: OPT unavailable ({runs[0]['opt_message']})"
    first = next(iter(runs[0]["points"].values()))
    lines = [f"### {dataset}: OPT = {opt:.7g} (scaled average top-k loss); "
             f"relative suboptimality of w_1 = 0: {first['relative_suboptimality']:.2%}", "",
             "| algorithm | seeds | final suboptimality | final relative | final / w_1's | "
             f"dual gap (final) | data points to stay <= {threshold:.0%} | seeds reached | "
             f"round time to stay <= {threshold:.0%} (s) | round time (s) | run time (s) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    algorithms = [a for a in ALGORITHMS if any(r["algorithm"] == a for r in runs)]
    algorithms += sorted({r["algorithm"] for r in runs} - set(algorithms))
    for algorithm in algorithms:
        mine = [r for r in runs if r["algorithm"] == algorithm]
        finals = [r["points"][max(r["points"], key=int)] for r in mine]
        starts = [r["points"][min(r["points"], key=int)] for r in mine]
        ratios = [f["suboptimality"] / s0["suboptimality"]
                  for f, s0 in zip(finals, starts, strict=True)]
        hits = [reached(r["points"], threshold) for r in mine]
        n_hit = sum(np.isfinite(h[0]) for h in hits)
        lines.append(
            f"| {LABELS.get(algorithm, algorithm)} | {len(mine)} "
            f"| {_band([f['suboptimality'] for f in finals], '.3g')} "
            f"| {_band([f['relative_suboptimality'] for f in finals], '.2%')} "
            f"| {_band(ratios, '.3g')} "
            f"| {_band([f['dual_gap'] for f in finals], '.3g')} "
            f"| {_band([h[0] for h in hits], '.3g')} | {n_hit}/{len(mine)} "
            f"| {_band([h[1] for h in hits], '.3g')} "
            f"| {_band([f['round_time_s'] for f in finals], '.0f')} "
            f"| {_band([r['total_s'] for r in mine], '.0f')} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", nargs="+", default=["breast_cancer", "boston"])
    parser.add_argument("--algorithms", nargs="+", default=list(ALGORITHMS))
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--budget", type=float, default=1e7)
    parser.add_argument("--k", type=int, default=20)
    parser.add_argument("--checkpoints", type=int, default=40)
    parser.add_argument("--threshold", type=float, default=0.01)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--cache-dir", default=None, help="OPT cache (default: the user's)")
    parser.add_argument("--save", default=None, help="write the raw results to this JSON file")
    parser.add_argument("--load", default=None, help="print a saved comparison, run nothing")
    args = parser.parse_args()
    if args.load:
        results = json.loads(Path(args.load).read_text())
    else:
        budget = int(args.budget)
        from plugins.metrics.reference import default_cache_dir

        cache_dir = args.cache_dir or str(default_cache_dir())
        for dataset in args.datasets:  # solve OPT once, before the jobs read the cache
            cfg = config(dataset, "uniform", 0, args.k, args.k, 1, cache_dir)
            prep = harness.prepare(cfg)
            harness.play(prep)
            print(f"{dataset}: OPT {prep.context.params.get('opt_status')} "
                  f"{prep.context.params.get('opt_message')}", file=sys.stderr)
        jobs = [(d, a, s, budget, args.k, args.checkpoints, cache_dir)
                for a in args.algorithms for d in args.datasets for s in range(args.seeds)]
        results = []
        start = time.perf_counter()
        with ProcessPoolExecutor(args.workers) as pool:
            futures = [pool.submit(one_run, *job) for job in jobs]
            for done, future in enumerate(as_completed(futures), 1):
                r = future.result()
                results.append(r)
                print(f"[{done}/{len(jobs)} {time.perf_counter() - start:.0f} s] {r['dataset']} "
                      f"{r['algorithm']} seed {r['seed']}: {r['total_s']:.0f} s", file=sys.stderr)
        if args.save:
            Path(args.save).write_text(json.dumps(results))
    results.sort(key=lambda r: (r["dataset"], r["algorithm"], r["seed"]))
    for dataset in dict.fromkeys(r["dataset"] for r in results):
        print(table(results, dataset, args.threshold) + "\n")


if __name__ == "__main__":
    main()
