"""The exact optimum OPT, its certified interval and the seconds it takes, on the
five regression sets (yacht, energy, concrete, kin8nm, power) for two problems:

* ``prospect``: the DRO literature's problem of ``experiment=prospect`` (k =
  n/2, nu = 1, mu = 1/n, no ball, linear_mse without bias, loss scale 2,
  standardised data): smooth and strongly convex, so the conic solution is
  polished by Newton's method and certified by strong convexity;
* ``paper``: the paper's problem at k = 20 (mu = nu = 0, the default ball,
  the data set's default model and scaling): nonsmooth, the conic interval.
* ``drago`` and ``drago_ball``: the f-divergence DRO study's two objectives
  (``experiment=drago``, ``experiment=drago_ball``: the superquantile at level
  0.25 and the chi-square ball of radius 1, mu = 1, nu = 1/n, no ball, on the
  training split): smooth and strongly convex, polished and certified likewise.

Each OPT is solved afresh (no cache) with the ``reference`` block's ``rtol``,
``atol`` and ``time_limit`` of the composed config. The interval is checked
against the accuracy claimed for smooth, strongly convex problems, ``width <=
1e-13 |OPT| + 1e-15`` (column ``claim``).

Run ``python tools/opt_table.py`` (about 20 seconds; ``--datasets`` and
``--problems`` for fewer; ``--markdown`` for a Markdown table). ``seconds`` is
the whole ``optimum.solve`` (conic solve, its certificate and the polish),
without loading the data or cvxpy.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import harness  # noqa: E402
from plugins.metrics import optimum  # noqa: E402

DATASETS = ("yacht", "energy", "concrete", "kin8nm", "power")
#: config overrides of each problem (besides the data set)
PROBLEMS = {
    "prospect": ["experiment=prospect", "solver=full_batch"],
    "paper": ["constraint.k=20"],
    "drago": ["experiment=drago", "solver=full_batch"],
    "drago_ball": ["experiment=drago_ball", "solver=full_batch"],
}


def parts(dataset: str, problem: str):
    """The prepared run's problem and its reference settings."""
    from omegaconf import OmegaConf

    cfg = OmegaConf.to_container(harness.compose([*PROBLEMS[problem], f"dataset={dataset}"],
                                                 quiet=True), resolve=True)
    cfg.pop("hydra", None)
    reference = dict(cfg.get("reference") or {})
    return harness.prepare(cfg).parts.problem, reference


def row(dataset: str, problem: str) -> dict[str, object]:
    P, ref = parts(dataset, problem)
    X = np.asarray(P.X[0:P.n], dtype=np.float64)
    start = time.perf_counter()
    caps, spectrum = optimum.set_form(P.constraint)
    opt = optimum.solve(X, P.y, P.model, caps, float(P.radius),
                        rtol=float(ref.get("rtol", 1e-5)), atol=float(ref.get("atol", 1e-8)),
                        time_limit=float(ref.get("time_limit", 120.0)), mu=P.mu, nu=P.nu,
                        spectrum=spectrum, penalty=P.penalty,
                        support=optimum.support_form(P.constraint))
    seconds = time.perf_counter() - start
    width = opt.value - opt.lower
    return {"dataset": dataset, "problem": problem, "n": P.n, "opt": opt.value,
            "width": width, "relative": width / abs(opt.value), "seconds": seconds,
            "polish_s": opt.polish_time_s, "polished": opt.polished,
            "claim": width <= 1e-13 * abs(opt.value) + 1e-15}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS))
    parser.add_argument("--problems", nargs="+", default=list(PROBLEMS), choices=list(PROBLEMS))
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args(argv)
    import cvxpy  # noqa: F401 - loaded before the first clock starts: not OPT's time
    header = ("dataset", "problem", "n", "OPT", "width", "width/|OPT|", "seconds",
              "of which polish", "<= 1e-13|OPT|+1e-15")
    if args.markdown:
        print("| " + " | ".join(header) + " |")
        print("|" + "---|" * len(header))
    else:
        print(f"{header[0]:<9} {header[1]:<9} {header[2]:>6} {header[3]:>22} {header[4]:>9} "
              f"{header[5]:>11} {header[6]:>7} {header[7]:>15}  {header[8]}")
    for problem in args.problems:
        for dataset in args.datasets:
            r = row(dataset, problem)
            polish = f"{r['polish_s']:.2f}" if r["polished"] else "-"
            cells = (r["dataset"], r["problem"], f"{r['n']}", f"{r['opt']:.17g}",
                     f"{r['width']:.2g}", f"{r['relative']:.2g}", f"{r['seconds']:.2f}", polish,
                     "yes" if r["claim"] else "no")
            if args.markdown:
                print("| " + " | ".join(cells) + " |")
            else:
                print(f"{cells[0]:<9} {cells[1]:<9} {cells[2]:>6} {cells[3]:>22} {cells[4]:>9} "
                      f"{cells[5]:>11} {cells[6]:>7} {cells[7]:>15}  {cells[8]}")
            sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
