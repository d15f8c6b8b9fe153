"""Curves over seeds at each decade of data points processed.

    python tools/seed_curves.py                          # both data sets, 5 seeds, 1e7, k=20
    python tools/seed_curves.py --datasets boston --seeds 3 --budget 1e6

Runs one game per (data set, seed) with tracking off, in parallel processes,
and prints, for each decade of data points, the median / min / max over seeds
of the certified dual gap and of the task metric (training accuracy or MSE of
the k largest losses), then whether every seed's gap at the budget is below
its gap one decade earlier.
"""

from __future__ import annotations

import argparse
import math
from concurrent.futures import ProcessPoolExecutor

import numpy as np

import harness
from harness.config import QUIET


class Recorder:
    """An event-hook plugin keeping every checkpoint's metrics."""

    def __init__(self) -> None:
        self.points: dict[int, dict[str, float]] = {}

    @harness.hookimpl
    def on_checkpoint(self, context, step, metrics):
        self.points[int(step)] = dict(metrics)


def one_run(dataset: str, seed: int, budget: int, k: int) -> tuple[str, int, dict, dict]:
    cfg = harness.compose([*QUIET, f"constraint.k={k}", f"dataset={dataset}",
                           f"budget={budget}", f"seed={seed}", "checkpoints=30"])
    recorder = Recorder()
    registry = harness.Registry(harness.make_plugin_manager([recorder]))
    prep = harness.prepare(cfg, registry)
    harness.play(prep)
    return dataset, seed, recorder.points, prep.context.params


def table(dataset: str, runs: dict[int, dict[int, dict[str, float]]], budget: int) -> None:
    task_key = "accuracy" if "accuracy" in next(iter(next(iter(runs.values())).values())) \
        else "topk_mse"
    print(f"\n{dataset}: {len(runs)} seeds; median [min, max] over seeds")
    print(f"{'data points':>12}  {'dual_gap':>32}  {task_key:>32}  {'theory_bound':>12}")
    decades = [10**j for j in range(1, int(math.log10(budget)) + 1)]
    for step in decades:
        rows = [points[step] for points in runs.values() if step in points]
        if not rows:
            continue
        cells = []
        for key in ("dual_gap", task_key):
            v = np.array([r[key] for r in rows])
            cells.append(f"{np.median(v):.4g} [{v.min():.4g}, {v.max():.4g}]")
        print(f"{step:>12,}  {cells[0]:>32}  {cells[1]:>32}  {rows[0]['theory_bound']:>12.4g}")
    last = budget
    prev = 10 ** (int(math.log10(budget)) - 1)
    verdicts = {seed: points[last]["dual_gap"] < points[prev]["dual_gap"]
                for seed, points in runs.items() if last in points and prev in points}
    print(f"gap at {last:,} below gap at {prev:,} for every seed: {all(verdicts.values())} "
          f"{verdicts}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", nargs="+", default=["breast_cancer", "boston"])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--budget", type=float, default=1e7)
    parser.add_argument("--k", type=int, default=20)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    budget = int(args.budget)
    jobs = [(d, s, budget, args.k) for d in args.datasets for s in range(args.seeds)]
    results: dict[str, dict[int, dict]] = {d: {} for d in args.datasets}
    params: dict[str, dict] = {}
    with ProcessPoolExecutor(args.workers) as pool:
        for dataset, seed, points, p in pool.map(one_run, *zip(*jobs, strict=True)):
            results[dataset][seed] = points
            params[dataset] = p
    for dataset in args.datasets:
        p = params[dataset]
        print(f"\n{dataset}: n={p['n']} k={p['constraint.k']} T={p['horizon_T']} "
              f"eta_p={p['p_player.eta']:.4g} gamma={p['p_player.gamma']:.4g} "
              f"c={p['p_player.c']:.4g} eta_w={p['w_player.lr']:.4g} "
              f"loss_scale={p['model.loss_scale']:.4g}")
        table(dataset, results[dataset], budget)


if __name__ == "__main__":
    main()
