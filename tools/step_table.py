"""Default step against tuned step of the whole-algorithm solvers.

For each problem and solver, runs the tuning protocol's grid (``harness.tune``,
``docs/tuning.md``): the multipliers 3^-4 .. 3^4 of the solver's first
``<x>_scale`` (``solver.lr_scale``; for ``sgd`` it also scales ``tau_lr``,
which follows the step), each on the tuning seeds 100, 101, 102, scored by the
median final objective (lower is better; a failed run scores +inf; ties go to
the multiplier closest to 1). Prints, per solver and problem, the selected
multiplier (the tuned step over the default step), whether it lies within a
factor ``--factor`` (default 9) of the default, and the median final objective
at the default step and at the tuned one. The objective is ``F(w)`` at the
solver's final iterate (not a suboptimality: no exact optimum is solved).
Where a solver reaches the optimum to machine precision at many multipliers
the selection among them is rounding noise: the column "within rtol of the
best" lists the multipliers whose score is within ``--tie-rtol`` (default
1e-10) of the best, relative.

Problems:

* ``prospect``: the preset ``experiment=prospect`` (k = n/2, nu = 1,
  mu = 1/n, no ball, standardised, linear_mse without bias) on yacht, energy,
  concrete, kin8nm and power, at the preset's budget (640,000 data points)
  unless ``--budget-prospect`` says otherwise;
* ``paper``: the paper's problem on Boston (``dataset=boston
  constraint.k=20``: nu = mu = 0, the ball of the w-player's radius), at
  ``experiment=tune``'s budget (1e6 data points) unless ``--budget-paper``.

Run ``python tools/step_table.py`` (``--problems``, ``--solvers``,
``--datasets``, ``--seeds``, ``--jobs``; ``--passes-prospect 20`` runs the
prospect problem for 20 passes over each set instead, where the
variance-reduced solvers have not yet reached the optimum to rounding);
``--json FILE`` also writes every score.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SOLVERS = ("prospect", "lsvrg", "full_batch", "sgd")
PROSPECT_SETS = ("yacht", "energy", "concrete", "kin8nm", "power")
GRID_EXPONENTS = range(-4, 5)


def overrides(problem: str, dataset: str, solver: str, scale: float, seed: int,
              budget: int | None) -> list[str]:
    if problem == "prospect":
        out = ["experiment=prospect", f"dataset={dataset}"]
    else:
        out = [f"dataset={dataset}", "constraint.k=20"]
    out += [f"solver={solver}", f"solver.lr_scale={scale!r}", f"seed={seed}", "checkpoints=2"]
    if budget is not None:
        out.append(f"budget={int(budget)}")
    return out


def final_objective(args: tuple) -> float | None:
    """The final objective of one run (None if it failed)."""
    import harness

    try:
        cfg = harness.compose(overrides(*args), quiet=True)
        return float(harness.run(cfg)["objective"])
    except Exception as err:  # a diverging step fails: it scores +inf
        print(f"  failed: {args}: {type(err).__name__}: {str(err)[:200]}", file=sys.stderr)
        return None


def score(values: list[float | None]) -> float:
    if any(v is None or not math.isfinite(v) for v in values):
        return math.inf
    return float(statistics.median(values))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--problems", default="prospect,paper")
    parser.add_argument("--solvers", default=",".join(SOLVERS))
    parser.add_argument("--datasets", default=",".join(PROSPECT_SETS),
                        help="the sets of the prospect problem (paper: boston)")
    parser.add_argument("--seeds", default="100,101,102", help="tuning seeds")
    parser.add_argument("--budget-prospect", type=int, default=None,
                        help="data points per run (default: the preset's 640,000)")
    parser.add_argument("--passes-prospect", type=float, default=None,
                        help="instead: this many passes over each set (budget = passes * n)")
    parser.add_argument("--budget-paper", type=int, default=1_000_000)
    parser.add_argument("--factor", type=float, default=9.0)
    parser.add_argument("--tie-rtol", type=float, default=1e-10)
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--json", default=None, help="write every score here")
    opts = parser.parse_args()
    seeds = [int(s) for s in opts.seeds.split(",")]
    grid = [3.0 ** e if e else 1.0 for e in GRID_EXPONENTS]
    cases = []
    for problem in opts.problems.split(","):
        sets = opts.datasets.split(",") if problem == "prospect" else ["boston"]
        budget = opts.budget_prospect if problem == "prospect" else opts.budget_paper
        for dataset in sets:
            if problem == "prospect" and opts.passes_prospect is not None:
                import harness

                n = harness.build("dataset", dataset).X.shape[0]
                budget = round(opts.passes_prospect * n)
            for solver in opts.solvers.split(","):
                cases.append((problem, dataset, solver, budget))
    jobs = [(p, d, s, m, seed, b) for p, d, s, b in cases for m in grid for seed in seeds]
    started = time.perf_counter()
    if opts.jobs > 1:
        with ProcessPoolExecutor(opts.jobs) as pool:
            values = list(pool.map(final_objective, jobs, chunksize=1))
    else:
        values = [final_objective(job) for job in jobs]
    results = dict(zip(jobs, values, strict=True))
    rows, record = [], []
    for p, d, s, b in cases:
        d_label = d if b is None else f"{d} ({b:,} points)"
        scores = {m: score([results[(p, d, s, m, seed, b)] for seed in seeds]) for m in grid}
        best = min(scores, key=lambda m: (scores[m], abs(math.log(m)), m))
        e = round(math.log(best, 3))
        edge = best in (grid[0], grid[-1])
        ok = max(best, 1 / best) <= opts.factor * (1 + 1e-12)
        near = [round(math.log(m, 3)) for m in grid
                if scores[m] <= scores[best] + opts.tie_rtol * abs(scores[best])]
        band = f"3^{near[0]}..3^{near[-1]}" if len(near) > 1 else f"3^{near[0]}"
        rows.append((s, f"{p}/{d_label}", f"3^{e}" + (" (edge)" if edge else ""), best,
                     "yes" if ok else "NO", band, scores[1.0], scores[best]))
        record.append({"problem": p, "dataset": d, "solver": s, "budget": b,
                       "scores": {repr(m): scores[m] for m in grid}, "selected": best})
    print(f"grid 3^-4..3^4 of solver.lr_scale; median final objective over seeds {seeds}; "
          f"{len(jobs)} runs in {time.perf_counter() - started:.0f} s")
    print("| solver | problem | tuned multiplier | tuned / default | within "
          f"{opts.factor:g}x | within rtol of the best | objective at default | "
          "objective tuned |")
    print("|---|---|---|---|---|---|---|---|")
    for s, prob, mult, ratio, ok, band, at_default, tuned in rows:
        print(f"| {s} | {prob} | {mult} | {ratio:.3g} | {ok} | {band} | {at_default:.10g} | "
              f"{tuned:.10g} |")
    if opts.json:
        Path(opts.json).write_text(json.dumps(record, indent=1))


if __name__ == "__main__":
    main()
