"""Per-round cost of every built-in p-player, compiled and Python paths side by side.

    python tools/bench_round.py                     # table: breast cancer, k=20, 10k rounds each
    python tools/bench_round.py --players exp4mp --rounds 50000
    python tools/bench_round.py --whole 1e7         # plus a whole 1e7-data-point OL-EXP.4M run
    python tools/bench_round.py --split 20000       # plus OL-EXP.4M's Python round by phase

The table plays the same game (same seed, same horizon) on both paths
(``engine=python`` and ``engine=compiled``, ``harness.engine``) and reports
the time of the rounds alone (the game's wall time minus its checkpoints'
time, one checkpoint at the end), per round, and their ratio; the compiled
path is warmed up first (its first call loads or compiles the driver). Each
p-player plays on its default set (the k-set; ``exp_ix`` on the simplex);
rows with ``sampler=systematic`` and ``exp_ix_m``'s tree state are added.
The whole run (``--whole``) times ``harness.play`` on the compiled path with
its checkpoints. The phase split (``--split``) replays OL-EXP.4M's Python
rounds with a timer around each phase: sampling (DepRound), loss
evaluation, p-player update with the projection (Algorithm 4), w-player
update.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import harness
from harness.config import QUIET
from harness.game import Game

#: (label, overrides) of the table's rows beyond each p-player on its default set
EXTRA_ROWS = (
    ("exp4mp systematic", ["p_player=exp4mp", "constraint.sampler=systematic"]),
    ("exp_ix_m tree", ["p_player=exp_ix_m", "constraint.sampler=systematic",
                       "p_player.state=tree"]),
    ("adacvar all_rows", ["p_player=adacvar", "p_player.variant=all_rows"]),
)


def config(dataset: str, budget: float, k: int, checkpoints: int,
           p_player: str = "exp4mp", extra: tuple[str, ...] = ()) -> dict:
    return harness.compose([*QUIET, f"constraint.k={k}", f"p_player={p_player}",
                            f"dataset={dataset}", f"budget={int(budget)}", "seed=0",
                            f"checkpoints={checkpoints}", *extra])


def rounds_time(overrides: list[str], dataset: str, k: int, rounds: int, engine: str) -> float:
    """Seconds per round of ``rounds`` rounds on ``engine`` (checkpoint time excluded)."""
    set_over = ["constraint=simplex"] if "p_player=exp_ix" in overrides else [f"constraint.k={k}"]
    base = [*QUIET, f"dataset={dataset}", *set_over, "seed=0", *overrides]
    probe = harness.prepare(harness.compose([*base, "budget=1000000"]))
    per_round = probe.parts.p_player.rows_per_round(probe.parts.constraint)
    prep = harness.prepare(harness.compose([*base, f"budget={rounds * per_round}"]))
    game = Game(prep.parts, prep.horizon, np.random.default_rng(0),
                np.array([prep.horizon]), engine=engine)
    metrics = game.play()
    return metrics["wall_time_s"] / prep.horizon  # the rounds alone (no compile, checkpoints)


def table(players: list[str], dataset: str, k: int, rounds: int) -> None:
    rows = [(name, [f"p_player={name}"]) for name in players]
    rows += [row for row in EXTRA_ROWS if row[1][0].split("=")[1] in players]
    print(f"per-round time, {dataset}, k={k}, {rounds:,} rounds, seed 0 "
          "(rounds only; checkpoints excluded)")
    print(f"  {'p-player':<20} {'python us':>10} {'compiled us':>12} {'ratio':>7}")
    for label, overrides in rows:
        rounds_time(overrides, dataset, k, min(rounds, 200), "compiled")  # warm up
        fast = rounds_time(overrides, dataset, k, rounds, "compiled")
        slow = rounds_time(overrides, dataset, k, rounds, "python")
        print(f"  {label:<20} {1e6 * slow:10.2f} {1e6 * fast:12.2f} {slow / fast:7.1f}",
              flush=True)


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
    print(f"  compiling kernels: {metrics['compile_time_s']:.2f} s")
    print(f"  rounds alone: {1e6 * metrics['wall_time_s'] / rounds:.1f} us per round")
    print(f"  final dual_gap={metrics['dual_gap']:.4g} objective={metrics['objective']:.4g}")


def phase_split(cfg: dict, rounds: int) -> None:
    prep = harness.prepare({**cfg, "budget": rounds * cfg.constraint.k})
    parts = prep.parts
    pp, wp, model, K = parts.p_player, parts.w_player, parts.model, parts.constraint
    X, y = parts.dataset.X, parts.dataset.y
    rng = np.random.default_rng(0)
    names = ("sampling", "loss evaluation", "p-player update and projection",
             "w-player update")
    spent = dict.fromkeys(names, 0.0)
    clock = time.perf_counter
    for _ in range(rounds):
        t0 = clock()
        prop = pp.propose(rng)
        t1 = clock()
        Xb, yb = X[prop.rows], y[prop.rows]
        losses = model.losses(wp.w, Xb, yb)
        t2 = clock()
        pp.observe(losses)
        t3 = clock()
        wp.step(model.grad(wp.w, Xb, yb, prop.weights))
        t4 = clock()
        spent["sampling"] += t1 - t0
        spent["loss evaluation"] += t2 - t1
        spent["p-player update and projection"] += t3 - t2
        spent["w-player update"] += t4 - t3
    total = sum(spent.values())
    print(f"phase split over {rounds:,} rounds (n={K.n}, k={K.k}, "
          f"d={X.shape[1]}): {1e6 * total / rounds:.1f} us per round")
    for name in names:
        print(f"  {name:<31} {1e6 * spent[name] / rounds:7.1f} us  "
              f"{100 * spent[name] / total:5.1f} %")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", default="breast_cancer")
    parser.add_argument("--k", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=10000,
                        help="rounds per p-player and path in the table")
    parser.add_argument("--players", nargs="*", default=None,
                        help="p-players of the table (default: every built-in)")
    parser.add_argument("--whole", type=float, default=0,
                        help="also time a whole OL-EXP.4M run of this many data points")
    parser.add_argument("--checkpoints", type=int, default=30)
    parser.add_argument("--split", type=int, default=0,
                        help="also split this many Python OL-EXP.4M rounds by phase")
    args = parser.parse_args()
    players = args.players
    if players is None:
        players = sorted(harness.registry.default_registry().entries["p_player"])
    table(players, args.dataset, args.k, args.rounds)
    if args.whole:
        cfg = config(args.dataset, args.whole, args.k, args.checkpoints)
        harness.run({**cfg, "budget": 100 * args.k})  # load the compiled code first
        whole_run(cfg)
    if args.split:
        phase_split(config(args.dataset, 1e6, args.k, args.checkpoints), args.split)


if __name__ == "__main__":
    main()
