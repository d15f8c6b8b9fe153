"""Speed and convergence of the variance-reduced solvers (``prospect``, ``lsvrg``).

1. Microseconds per step against n (synthetic standard-normal features, d = 8,
   ``y = x.w + noise``, linear_mse without bias, loss_scale 2, k = n/2,
   mu = 1/n, nu = 1): Prospect's step (its O(log n) best-response update
   and threshold included), LSVRG's step, and LSVRG per step with
   its anchors (a full pass every n steps) amortised.
2. Epochs (n steps) to a normalised suboptimality ``(F(w_t) - F*) / (F(w_0) -
   F*)`` of 1e-6 on the DRO literature's five regression sets at the authors'
   constant steps, next to the authors' figures. ``F*`` is computed by scipy's
   L-BFGS-B on F (smooth since nu > 0) to a gradient norm of about 1e-12; the
   curve is the objective averaged over seeds, as the authors average theirs.
3. With ``--risks``: microseconds per Prospect step on the spectral set of each
   risk (the same synthetic problem; the superquantile at level 0.5 runs on the
   row caps, the extremile (r = 2) and the ESRM (rho = 1) on the spectrum's
   ``PoolTree``), from ``w_0 = 0`` at a step of 1e-3 (early steps: a changed
   loss moves far in the order) and near the optimum (the targets replaced by
   the residuals at the risk's minimiser, default step), next to the authors'
   best response per step: a numpy argsort of all n values and one pooling
   pass (``pav_sorted``).

Run ``python tools/bench_solver.py`` (about a minute; ``--sizes`` and
``--seeds`` for more, ``--skip-speed``/``--skip-passes`` for one part);
``python tools/bench_solver.py --skip-speed --skip-passes --risks superquantile
extremile esrm --sizes 10000 1000000 --steps 20000`` for the spectral table
(about three minutes).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np
from scipy import optimize

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import harness  # noqa: E402
from harness.problem import Problem  # noqa: E402
from plugins.lib.permutahedron import RISKS, pav_sorted  # noqa: E402
from plugins.solvers.lsvrg import LSVRG  # noqa: E402
from plugins.solvers.prospect import Prospect  # noqa: E402
from plugins.solvers.row_solver import row_data  # noqa: E402

#: the authors' tuned constant steps and epochs to 1e-6 (Prospect, LSVRG)
AUTHORS = {
    "yacht": ((0.03, 25), (0.03, 26)),
    "energy": ((0.03, 29), (0.03, 28)),
    "concrete": ((0.01, 13), (0.01, 13)),
    "kin8nm": ((1e-4, 9), (1e-4, 5)),
    "power": ((1e-3, 7), (3e-3, 2)),
}


class _Data:
    def __init__(self, X: np.ndarray, y: np.ndarray) -> None:
        self.X, self.y, self.n_classes = X, y, 0


def dro_problem(dataset, risk: str | None = None) -> Problem:
    """The DRO literature's problem on ``dataset`` (module docstring): on the
    k-set with k = n/2, or on the spectral set of ``risk``."""
    n = dataset.X.shape[0]
    model = harness.build("model", "linear_mse", bias=False, loss_scale=2.0)
    model.setup(dataset, math.inf)
    K = (harness.build("constraint_set", "kset", n=n, k=n // 2) if risk is None
         else harness.build("constraint_set", "spectral", n=n, risk=risk))
    return Problem(dataset.X, dataset.y, model, K, mu=1.0 / n, nu=1.0, radius=math.inf)


def synthetic(n: int, d: int = 8, seed: int = 0, risk: str | None = None) -> Problem:
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    y = X @ rng.standard_normal(d) + rng.standard_normal(n)
    return dro_problem(_Data(X, y), risk)


def f_star(problem: Problem) -> float:
    """``min F`` by L-BFGS-B from 0 (tight tolerances)."""
    res = optimize.minimize(lambda w: problem.value_and_grad(w)[:2], np.zeros(problem.n_params),
                            jac=True, method="L-BFGS-B",
                            options={"maxiter": 20000, "ftol": 1e-16, "gtol": 1e-12, "maxcor": 30})
    return float(res.fun)


def time_steps(solver, problem: Problem, steps: int, seed: int = 0) -> float:
    """Seconds for ``steps`` data points of ``advance`` (after a short warm-up)."""
    rng = np.random.default_rng(seed)
    solver.advance(problem, rng, solver.data_points + min(1000, steps))
    start = time.perf_counter()
    solver.advance(problem, rng, solver.data_points + steps)
    return time.perf_counter() - start


def time_anchor(solver: LSVRG, problem: Problem) -> float:
    """Seconds for one LSVRG anchor (a full pass; best of 3), on copies of its state."""
    X, y = row_data(problem)
    kernels, ms = solver._kernels(problem)
    args = (solver.w.copy(), solver.anchor_.copy(), solver.anchor_q_.copy(),
            solver.anchor_grad_.copy(), solver.form_, solver.nu_, solver.counts_.copy())
    best = math.inf
    for _ in range(3):
        start = time.perf_counter()
        kernels.lsvrg_anchor(ms, X, y, *args)
        best = min(best, time.perf_counter() - start)
    return best


def speed_table(sizes: list[int], steps: int) -> None:
    print(f"\nmicroseconds per step (d = 8, k = n/2, mu = 1/n, nu = 1; {steps} steps)")
    print(f"{'n':>9} {'prospect':>10} {'lsvrg step':>11} {'lsvrg+anchor':>13} "
          f"{'anchor ms':>10} {'setup s':>8}")
    for n in sizes:
        problem = synthetic(n)
        start = time.perf_counter()
        p = Prospect(lr=1e-3)
        p.setup(problem, 0)
        setup_s = time.perf_counter() - start
        t_p = time_steps(p, problem, steps) / steps
        lv = LSVRG(lr=1e-3)
        lv.setup(problem, 0)
        anchor_s = time_anchor(lv, problem)
        rng = np.random.default_rng(1)
        total = max(steps, 2 * n)
        before = int(lv.counts_[3])  # steps taken so far
        start = time.perf_counter()
        lv.advance(problem, rng, lv.data_points + total)
        elapsed = time.perf_counter() - start
        taken = int(lv.counts_[3]) - before
        anchors = taken // n  # an anchor every n steps
        t_a = elapsed / taken
        t_l = max(elapsed - anchors * anchor_s, 0.0) / taken
        print(f"{n:>9} {1e6 * t_p:>10.2f} {1e6 * t_l:>11.2f} {1e6 * t_a:>13.2f} "
              f"{1e3 * anchor_s:>10.2f} {setup_s:>8.2f}")


def minimiser(problem: Problem) -> np.ndarray:
    """An approximate ``argmin F`` by L-BFGS-B from 0 (gradient norm 1e-9)."""
    res = optimize.minimize(lambda w: problem.value_and_grad(w)[:2], np.zeros(problem.n_params),
                            jac=True, method="L-BFGS-B", options={"maxiter": 500, "gtol": 1e-9})
    return res.x


def authors_step(v: np.ndarray, sigma: np.ndarray) -> float:
    """Seconds per best response as the authors compute it every step: a
    stable argsort of all n values, one pooling pass, the weights put back in
    row order (best of a few repetitions)."""
    n = v.size
    q_sorted, sums, counts = np.empty(n), np.empty(n), np.empty(n, dtype=np.int64)
    q = np.empty(n)
    pav_sorted(np.sort(v), sigma, q_sorted, sums, counts)  # compiled before timing
    reps = max(3, min(200, 2_000_000 // n))
    best = math.inf
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(reps):
            order = np.argsort(v, kind="stable")
            pav_sorted(v[order], sigma, q_sorted, sums, counts)
            q[order] = q_sorted
        best = min(best, (time.perf_counter() - start) / reps)
    return best


def spectral_table(sizes: list[int], steps: int, risks: list[str]) -> None:
    print(f"\nProspect, microseconds per step on spectral sets (d = 8, mu = 1/n, nu = 1; "
          f"{steps} steps after 1000), against the authors' best response per step")
    print(f"{'n':>9} {'risk':>14} {'best response':>14} {'from w_0':>9} {'near w*':>9} "
          f"{'authors':>10}")
    for n in sizes:
        for risk in risks:
            problem = synthetic(n, risk=risk)
            cold = Prospect(lr=1e-3)
            cold.setup(problem, 0)
            path = "row caps" if problem.constraint.row_caps() is not None else "PoolTree"
            t_cold = time_steps(cold, problem, steps) / steps
            w_star = minimiser(problem)
            near = Problem(problem.X, problem.y - problem.X @ w_star, problem.model,
                           problem.constraint, mu=problem.mu, nu=problem.nu,
                           radius=problem.radius)
            warm = Prospect()
            warm.setup(near, 0)
            t_warm = time_steps(warm, near, steps) / steps
            v = 1.0 / n + problem.losses(w_star) / (problem.nu * n)
            t_authors = authors_step(v, problem.constraint.spectrum())
            print(f"{n:>9} {risk:>14} {path:>14} {1e6 * t_cold:>9.2f} {1e6 * t_warm:>9.2f} "
                  f"{1e6 * t_authors:>10.1f}")


def epochs_to(curve: np.ndarray, tol: float) -> int | None:
    hit = np.flatnonzero(curve <= tol)
    return int(hit[0]) if hit.size else None


def passes_table(seeds: int, max_epochs: int, tol: float) -> None:
    print(f"\nepochs (n steps) to normalised suboptimality {tol:g} at the authors' steps, "
          f"objective averaged over {seeds} seeds; F* by L-BFGS-B")
    print(f"{'data set':>9} {'solver':>9} {'step':>7} {'ours':>5} {'authors':>8} {'ratio':>6} "
          f"{'per seed':>14} {'data passes':>12}")
    for name, steps in AUTHORS.items():
        problem = dro_problem(harness.build("dataset", name, scale="standard"))
        n = problem.n
        fs = f_star(problem)
        f0 = problem.value(np.zeros(problem.n_params))
        for cls, (lr, theirs) in zip((Prospect, LSVRG), steps, strict=True):
            curves, dps = [], []
            for seed in range(seeds):
                solver = cls(lr=lr)
                solver.setup(problem, 0)
                rng = np.random.default_rng(seed)
                values = [problem.value(solver.w)]
                points = [solver.data_points]
                for _ in range(max_epochs):
                    # an epoch is n steps; LSVRG's anchor is computed before the steps
                    extra = n if (cls is LSVRG and _ > 0) else 0
                    solver.advance(problem, rng, solver.data_points + n + extra)
                    values.append(problem.value(solver.w))
                    points.append(solver.data_points)
                curves.append((np.array(values) - fs) / (f0 - fs))
                dps.append(np.array(points) / n)
            mean = np.mean(curves, axis=0)
            ours = epochs_to(mean, tol)
            per_seed = [epochs_to(c, tol) for c in curves]
            ratio = f"{ours / theirs:.2f}" if ours is not None else "-"
            dp = f"{dps[0][ours]:.0f}" if ours is not None else "-"
            print(f"{name:>9} {cls.name:>9} {lr:>7g} {str(ours):>5} {theirs:>8} {ratio:>6} "
                  f"{str(per_seed):>14} {dp:>12}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10**3, 10**4, 10**5, 10**6])
    parser.add_argument("--steps", type=int, default=200_000)
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=64)
    parser.add_argument("--tol", type=float, default=1e-6)
    parser.add_argument("--skip-speed", action="store_true")
    parser.add_argument("--skip-passes", action="store_true")
    parser.add_argument("--risks", nargs="+", choices=RISKS, default=[],
                        help="the spectral table (module docstring, 3.) for these risks")
    args = parser.parse_args(argv)
    if not args.skip_speed:
        speed_table(args.sizes, args.steps)
    if not args.skip_passes:
        passes_table(args.seeds, args.epochs, args.tol)
    if args.risks:
        spectral_table(args.sizes, args.steps, args.risks)


if __name__ == "__main__":
    main()
