"""Wall time per step of the ``drago`` solver against n and the block size.

The problem is the authors' regression problem on synthetic data: standard
normal features (d = 20 columns), ``y = x.w + noise``, linear_mse without bias
(loss_scale 2: the squared error over 2), mu = 1, nu = 1/n (their shift cost
nu n = 1), no ball, on the superquantile at level 0.25 (``constraint=spectral
level=0.25``: row caps ``1/(0.75 n)``, the dual step's warm-started
threshold) and the chi-square ball of radius 1 (``chi2_ball``: the set's
own projection, called from Python). For each n, set and block size (1, 16
and n/d) the solver is set up (a pass over the data) and warmed up (3
passes or 200 steps, whichever ends first: the first steps, where the
iterate moves far, cost the dual step more passes), then timed over
``advance`` calls of about ``--seconds`` each (the harness's calls between
checkpoints); a row of the table is the median over ``--repeat`` calls of
the seconds per step, and the same per data point. ``dual`` is the median
time of the dual step alone over the steps that follow (the compiled step
on the set's form, or the set's projection), ``fallbacks`` the steps whose
threshold took the sorted walk. Kernels are compiled (or loaded from numba's cache) on a small
problem first, so compile time is not in the figures.

    python tools/bench_drago.py                      # n = 1e4 and 1e6
    python tools/bench_drago.py --sizes 1e4 --repeat 5
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import harness  # noqa: E402
from harness.problem import Problem  # noqa: E402
from plugins.sets.chi2_ball import Chi2Ball  # noqa: E402
from plugins.solvers.drago import Drago, drago_dual_step  # noqa: E402
from plugins.solvers.row_solver import row_data  # noqa: E402

BLOCKS = (1, 16, "n/d")
#: the warm-up before the timed calls: this many passes or steps, whichever ends first
WARM_PASSES, WARM_STEPS = 3, 200


def problem(n: int, d: int, set_name: str, seed: int = 0) -> Problem:
    """The module docstring's problem over ``n`` rows on ``set_name``."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    y = X @ rng.standard_normal(d) + rng.standard_normal(n)
    model = harness.build("model", "linear_mse", bias=False, loss_scale=2.0)
    model.setup(SimpleNamespace(X=X, y=y, n_classes=0), 1.0)
    if set_name == "superquantile":
        K = harness.build("constraint_set", "spectral", n=n, risk="superquantile", level=0.25)
    else:
        K = Chi2Ball(n, radius=1.0)
    return Problem(X, y, model, K, mu=1.0, nu=1.0 / n, radius=math.inf)


def dual_seconds(solver: Drago, prob: Problem, rng: np.random.Generator,
                 steps: int) -> float:
    """Median seconds of the dual step over ``steps`` real steps, taken as the
    step's halves (``drago_primal``, the dual step, ``drago_tables``): the
    compiled step on the set's form, or the set's own projection."""
    kernels, ms = solver._kernels(prob)
    X, y = row_data(prob)
    st, consts = solver.state_, solver.consts_
    times = []
    for _ in range(steps):
        kernels.drago_primal(ms, X, y, st, consts, rng.integers(0, consts.M),
                             rng.integers(0, consts.M))
        began = time.perf_counter()
        if solver.form_ is not None:
            drago_dual_step(st, consts, solver.form_)
        else:
            st.q[:] = prob.constraint.euclidean_project(st.v)
        times.append(time.perf_counter() - began)
        kernels.drago_tables(ms, X, y, st, consts)
    return statistics.median(times)


def measure(prob: Problem, block, seconds: float, repeat: int) -> dict[str, float]:
    """Seconds per step and per data point (medians over ``repeat`` timed
    ``advance`` calls after a warm-up of ``WARM_PASSES`` passes or
    ``WARM_STEPS`` steps, whichever ends first), the dual step alone, and the
    run's shape."""
    solver = Drago(block_size=block)
    solver.setup(prob, 0)
    rng = np.random.default_rng(0)
    began, warm = time.perf_counter(), solver.data_points
    while (solver.data_points < (1 + WARM_PASSES) * prob.n
           and int(solver.counts_[2]) < WARM_STEPS):
        solver.advance(prob, rng, solver.data_points + 1)
    per_step, per_point = [], []
    # the first timed call: about ``seconds`` at the warm-up's pace
    pace = (time.perf_counter() - began) / max(solver.data_points - warm, 1)
    budget = max(1, int(seconds / max(pace, 1e-12)))
    for _ in range(repeat):
        steps, points = int(solver.counts_[2]), solver.data_points
        began = time.perf_counter()
        solver.advance(prob, rng, points + budget)
        spent = time.perf_counter() - began
        done = int(solver.counts_[2]) - steps
        per_step.append(spent / done)
        per_point.append(spent / (solver.data_points - points))
        budget = max(1, int(budget * seconds / max(spent, 1e-9)))  # the next call: ~seconds
    dual = dual_seconds(solver, prob, rng, max(3, min(100, int(seconds / per_step[-1]))))
    return {"b": int(solver.consts_.b), "M": int(solver.consts_.M),
            "step": statistics.median(per_step), "point": statistics.median(per_point),
            "dual": dual, "fallbacks": int(solver.counts_[4])}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1e4,1e6", help="comma-separated n")
    parser.add_argument("--d", type=int, default=20, help="feature columns")
    parser.add_argument("--repeat", type=int, default=3, help="timed calls per row")
    parser.add_argument("--seconds", type=float, default=1.0, help="seconds per timed call")
    args = parser.parse_args(argv)
    sizes = [int(float(s)) for s in args.sizes.split(",")]
    sets = ["superquantile", "chi2_ball"]
    began = time.perf_counter()
    for set_name in sets:  # compile (or load) every kernel on a small problem
        for block in BLOCKS:
            measure(problem(200, args.d, set_name), block, 0.01, 1)
    print(f"compiled or loaded in {time.perf_counter() - began:.1f} s; d = {args.d}, "
          f"median of {args.repeat} calls of about {args.seconds:g} s")
    print(f"{'n':>9} {'set':>14} {'block':>6} {'b':>7} {'M':>8} {'us/step':>10} "
          f"{'ns/point':>9} {'dual us':>9} {'fallbacks':>9}")
    for n in sizes:
        for set_name in sets:
            prob = problem(n, args.d, set_name)
            for block in BLOCKS:
                row = measure(prob, block, args.seconds, args.repeat)
                print(f"{n:>9.0e} {set_name:>14} {block!s:>6} {row['b']:>7} {row['M']:>8} "
                      f"{row['step'] * 1e6:>10.1f} {row['point'] * 1e9:>9.0f} "
                      f"{row['dual'] * 1e6:>9.1f} {row['fallbacks']:>9}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
