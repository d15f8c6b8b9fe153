"""Benchmark one OL-EXP.4M run and split its per-round cost.

    python tools/bench_round.py                       # breast cancer, 1e7 data points, k=20
    python tools/bench_round.py --dataset boston --budget 1e6
    python tools/bench_round.py --p-player safl --budget 1e6   # part 1 only

Part 1 times a whole game as ``harness.play`` runs it (tracking off; the
checkpoints' dual-gap evaluations included) and reports the checkpoints'
share. Part 2 replays rounds phase by phase on the same kind of state
(timers around each phase, so its total is a little above part 1's per-round
cost) to show where a round's time goes: sampling (DepRound), projection
(Algorithm 4), loss evaluation, p-player update, w-player update. With
``--p-player`` another p-player's whole game is timed (part 1 only).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import harness
from harness.config import QUIET


def config(dataset: str, budget: float, k: int, checkpoints: int,
           p_player: str = "exp4mp") -> dict:
    return harness.compose([*QUIET, f"constraint.k={k}", f"p_player={p_player}",
                            f"dataset={dataset}", f"budget={int(budget)}", "seed=0",
                            f"checkpoints={checkpoints}"])


def whole_run(cfg: dict) -> None:
    prep = harness.prepare(cfg)
    t0 = time.perf_counter()
    metrics = harness.play(prep)
    total = time.perf_counter() - t0
    rounds, count = prep.horizon, len(prep.checkpoints)
    evals = metrics["checkpoint_time_total_s"]  # the game's own clock of its checkpoints
    print(f"whole run: {int(metrics['data_points']):,} data points, {rounds:,} rounds, "
          f"{count} checkpoints: {total:.1f} s")
    print(f"  checkpoints (dual gap etc.): {evals:.2f} s in all, "
          f"{1e3 * evals / count:.1f} ms each")
    print(f"  rounds alone: {1e6 * (total - evals) / rounds:.1f} us per round")
    print(f"  final dual_gap={metrics['dual_gap']:.4g} objective={metrics['objective']:.4g}")


def phase_split(cfg: dict, rounds: int) -> None:
    prep = harness.prepare({**cfg, "budget": rounds * cfg.constraint.k})
    parts = prep.parts
    pp, wp, model, K = parts.p_player, parts.w_player, parts.model, parts.constraint
    X, y = parts.dataset.X, parts.dataset.y
    rng = np.random.default_rng(0)
    names = ("sampling", "projection", "loss evaluation", "p-player update", "w-player update")
    spent = dict.fromkeys(names, 0.0)
    clock = time.perf_counter
    refresh = pp._refresh
    pp._refresh = lambda: None  # timed separately below
    for _ in range(rounds):
        t0 = clock()
        prop = pp.propose(rng)
        t1 = clock()
        Xb, yb = X[prop.rows], y[prop.rows]
        losses = model.losses(wp.w, Xb, yb)
        t2 = clock()
        pp.observe(losses)
        t3 = clock()
        refresh()
        t4 = clock()
        wp.step(model.grad(wp.w, Xb, yb, prop.weights))
        t5 = clock()
        spent["sampling"] += t1 - t0
        spent["loss evaluation"] += t2 - t1
        spent["p-player update"] += t3 - t2
        spent["projection"] += t4 - t3
        spent["w-player update"] += t5 - t4
    total = sum(spent.values())
    print(f"phase split over {rounds:,} rounds (n={K.n}, k={K.k}, "
          f"d={X.shape[1]}): {1e6 * total / rounds:.1f} us per round")
    for name in names:
        print(f"  {name:<16} {1e6 * spent[name] / rounds:7.1f} us  "
              f"{100 * spent[name] / total:5.1f} %")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", default="breast_cancer")
    parser.add_argument("--budget", type=float, default=1e7)
    parser.add_argument("--k", type=int, default=20)
    parser.add_argument("--checkpoints", type=int, default=30)
    parser.add_argument("--split-rounds", type=int, default=20000)
    parser.add_argument("--p-player", default="exp4mp",
                        help="p-player of the whole run; the phase split is OL-EXP.4M's")
    args = parser.parse_args()
    cfg = config(args.dataset, args.budget, args.k, args.checkpoints, args.p_player)
    harness.run({**cfg, "budget": 100 * args.k})  # compile the numba kernels first
    whole_run(cfg)
    if args.p_player == "exp4mp":
        phase_split(cfg, args.split_rounds)


if __name__ == "__main__":
    main()
