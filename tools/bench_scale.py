"""Per-round cost against n, and a run on a data set larger than memory.

    python tools/bench_scale.py --data-dir /tmp/mmb_scale            # table + 1e7 x 100 run
    python tools/bench_scale.py --data-dir /tmp/mmb_scale --skip-run # table only
    python tools/bench_scale.py --sizes 1e3,1e4,1e5 --max-n 1e5 --d 10 --data-dir /tmp/s

Part 1 writes (once) the synthetic data set ``synthetic`` with n = max-n rows
and d features into ``--data-dir`` (8 GB for 1e7 x 100; it is reused while
the folder exists), then, for each n, times on the first n rows of that file:

* the p-player alone (``propose`` + ``observe``): dense EXP4.MP (Algorithm 2
  with DepRound, ``plugins/p_players/exp4mp.py``) and exp_ix_m's tree state
  (``plugins/p_players/kset_tree.py``, systematic sampling);
* a whole round as ``harness.game.Game.play`` runs it (propose, read the rows,
  losses, observe, gradient, OGD step, a_bar update) for both, and for plain
  mini-batch SGD on the same rows (the rows exp_ix_m drew, replayed: no
  sampling cost at all).

Losses fed to the p-players alone are fixed per row (``level ** 3``, seed 0),
so some rows are hard and the projection caps them. Each figure is the best
of three repetitions of about ``--seconds`` each, all sizes in one process, so
the ratios are side by side. Part 2 (a subprocess, so its memory is its own)
plays exp_ix_m (tree) against OGD on the whole file for ``--budget`` data
points, samples the resident memory every 0.1 s (anonymous memory, the
process's own, apart from file pages mapped from the page cache) and prints
each checkpoint's dual gap and cost.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time

import numpy as np

import harness
from harness import stream
from harness.config import QUIET
from plugins.data.files import SyntheticDataset
from plugins.p_players.exp4mp import Exp4MP
from plugins.p_players.exp_ix_m import ExpIXM
from plugins.sets.kset import KSet


class _Head:
    """The first n rows of a data set, as the model's ``setup`` sees one."""

    def __init__(self, X, y, n_classes):
        self.X, self.y, self.n_classes = X, y, n_classes


def _best(fn, seconds: float, calibrate: int) -> float:
    """Best per-call time of ``fn(rounds)`` over three repetitions of ~``seconds``."""
    t = time.perf_counter()
    fn(calibrate)
    per = max((time.perf_counter() - t) / calibrate, 1e-7)
    rounds = max(3, int(seconds / per))
    best = np.inf
    for _ in range(3):
        t = time.perf_counter()
        fn(rounds)
        best = min(best, (time.perf_counter() - t) / rounds)
    return best


def _players(n: int, k: int, horizon: int):
    dense = Exp4MP()
    dense.setup(KSet(n, k), horizon)  # DepRound, the paper's Algorithm 2
    tree = ExpIXM(state="tree")
    tree.setup(KSet(n, k, sampler="systematic"), horizon)
    return dense, tree


def measure(n: int, X, y, model, k: int, seconds: float) -> dict:
    """The five per-round figures at one n (see the module docstring)."""
    # step sizes do not change a round's cost; a long horizon keeps EXP4.MP's theory
    # gamma below 1 at every n (Theorem 4.1 needs T >= n log(n/k) / k)
    horizon = 10**9
    Xn, yn = X[:n], y[:n]
    level = np.random.default_rng(0).random(n) ** 3
    dense, tree = _players(n, k, horizon)
    rng = np.random.default_rng(1)
    wp = harness.build("w_player", "ogd")
    wp.setup(model.n_params, horizon, model.grad_bound)
    a_sum = np.zeros(n)
    weights = np.full(k, 1.0 / k)
    replay: list[np.ndarray] = []

    def p_only(pp, rounds):
        for _ in range(rounds):
            pp.observe(level[pp.propose(rng).rows])

    def whole(pp, rounds, record=False):
        for _ in range(rounds):
            prop = pp.propose(rng)
            Xb, yb = Xn[prop.rows], yn[prop.rows]
            w = wp.w
            losses = model.losses(w, Xb, yb)
            pp.observe(losses)
            wp.step(model.grad(w, Xb, yb, prop.weights))
            a_sum[prop.rows] += prop.weights
            if record:
                replay.append(prop.rows)

    def sgd(rounds):
        for i in range(rounds):
            rows = replay[i % len(replay)]
            Xb, yb = Xn[rows], yn[rows]
            w = wp.w
            model.losses(w, Xb, yb)
            wp.step(model.grad(w, Xb, yb, weights))
            a_sum[rows] += weights

    whole(tree, 2000, record=True)
    return {"n": n,
            "p_tree": _best(lambda m: p_only(tree, m), seconds, 200),
            "p_dense": _best(lambda m: p_only(dense, m), seconds, 2),
            "round_tree": _best(lambda m: whole(tree, m), seconds, 200),
            "round_dense": _best(lambda m: whole(dense, m), seconds, 2),
            "round_sgd": _best(sgd, seconds, 200)}


def table(X, y, model, args) -> list[dict]:
    rows = []
    for n in [int(float(s)) for s in args.sizes.split(",")]:
        r = measure(n, X, y, model, args.k, args.seconds)
        rows.append(r)
        print(f"  n={n:>10,}: p tree {1e6 * r['p_tree']:8.1f} us, p dense "
              f"{1e6 * r['p_dense']:12.1f} us, round tree {1e6 * r['round_tree']:8.1f} us, "
              f"round dense {1e6 * r['round_dense']:12.1f} us, round sgd "
              f"{1e6 * r['round_sgd']:8.1f} us", flush=True)
    return rows


def print_table(rows: list[dict]) -> None:
    base = rows[0]
    print("\n| n | p-player: dense EXP4.MP | tree exp_ix_m | dense / tree | tree / tree(n0) "
          "| dense / dense(n0) | round: dense | tree | SGD same rows | tree / SGD |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['n']:,} | {1e6 * r['p_dense']:,.0f} us | {1e6 * r['p_tree']:.1f} us "
              f"| {r['p_dense'] / r['p_tree']:,.0f}x | {r['p_tree'] / base['p_tree']:.2f}x "
              f"| {r['p_dense'] / base['p_dense']:,.0f}x | {1e6 * r['round_dense']:,.0f} us "
              f"| {1e6 * r['round_tree']:.1f} us | {1e6 * r['round_sgd']:.1f} us "
              f"| {r['round_tree'] / r['round_sgd']:.2f}x |")


def _memory_sampler(peaks: dict, stop: threading.Event) -> None:
    while not stop.is_set():
        with open("/proc/self/status") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key in ("VmRSS", "RssAnon", "RssFile"):
                    peaks[key] = max(peaks.get(key, 0), int(value.split()[0]))
        stop.wait(0.1)


class CheckpointPrinter:
    """Prints each checkpoint's numbers and the game's time to compute them."""

    def __init__(self) -> None:
        self.costs: list[float] = []
        self.prepared: harness.api.Prepared | None = None

    @harness.hookimpl
    def on_checkpoint(self, context, step, metrics):
        self.costs.append(metrics["checkpoint_time_s"])
        support = np.count_nonzero(self.prepared.game.state.a_sum)  # rows in a_bar
        print(f"  checkpoint at {int(step):>11,} data points: "
              f"dual_gap={metrics['dual_gap']:.4f} objective={metrics['objective']:.4f} "
              f"slack={metrics['inner_solver_slack']:.2g} accuracy={metrics['accuracy']:.4f} "
              f"support={int(support):,} ({self.costs[-1]:.1f} s)", flush=True)


def disk_run(args) -> None:
    """Part 2, in its own process."""
    peaks: dict[str, int] = {}
    stop = threading.Event()
    sampler = threading.Thread(target=_memory_sampler, args=(peaks, stop), daemon=True)
    sampler.start()
    cfg = harness.compose([
        *QUIET, f"constraint.k={args.k}", "constraint.sampler=systematic", "p_player=exp_ix_m",
        "dataset=synthetic", f"dataset.n={int(args.max_n)}", f"dataset.d={args.d}",
        f"dataset.hard={args.hard}", f"dataset.cache_dir={args.data_dir}",
        f"budget={int(args.budget)}", "seed=0", f"checkpoints={args.checkpoints}"])
    printer = CheckpointPrinter()
    t0 = time.perf_counter()
    prep = harness.prepare(cfg, harness.Registry(harness.make_plugin_manager([printer])))
    t_prepare = time.perf_counter() - t0
    printer.prepared = prep
    t0 = time.perf_counter()
    metrics = harness.play(prep)
    total = time.perf_counter() - t0
    costs = printer.costs
    stop.set()
    sampler.join()
    with open("/proc/self/status") as f:
        hwm = next(int(line.split()[1]) for line in f if line.startswith("VmHWM"))
    rounds = prep.horizon
    print(json.dumps({
        "n": int(args.max_n), "d": args.d, "data_points": int(metrics["data_points"]),
        "rounds": rounds, "prepare_s": round(t_prepare, 1), "play_s": round(total, 1),
        "checkpoints": len(costs), "checkpoint_s": [round(c, 1) for c in costs],
        "per_round_us_without_checkpoints": round(1e6 * (total - sum(costs)) / rounds, 1),
        "peak_rss_anon_mib": round(peaks.get("RssAnon", 0) / 1024),
        "peak_rss_mib": round(peaks.get("VmRSS", 0) / 1024),
        "peak_rss_file_mib": round(peaks.get("RssFile", 0) / 1024),
        "vm_hwm_mib": round(hwm / 1024),
        "final_dual_gap": metrics["dual_gap"], "p_player_state":
            prep.context.params.get("p_player.state")}, indent=1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", required=True, help="where the synthetic file is kept")
    parser.add_argument("--sizes", default="1e3,1e4,1e5,1e6,1e7")
    parser.add_argument("--max-n", type=float, default=1e7)
    parser.add_argument("--d", type=int, default=100)
    parser.add_argument("--hard", type=float, default=0.01)
    parser.add_argument("--k", type=int, default=20)
    parser.add_argument("--budget", type=float, default=1e7, help="data points of the run")
    parser.add_argument("--checkpoints", type=int, default=1,
                        help="log-spaced checkpoints besides each decade of data points")
    parser.add_argument("--seconds", type=float, default=1.0, help="time per measurement")
    parser.add_argument("--skip-table", action="store_true")
    parser.add_argument("--skip-run", action="store_true")
    parser.add_argument("--run", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.run:
        disk_run(args)
        return
    t = time.perf_counter()
    data = SyntheticDataset(n=int(args.max_n), d=args.d, hard=args.hard,
                            cache_dir=args.data_dir)
    print(f"data: {data.provenance['folder']} ({data.X.nbytes / 2**30:.2f} GiB, "
          f"{time.perf_counter() - t:.0f} s to write or open)", flush=True)
    if not args.skip_table:
        model = harness.build("model", "logistic_cel")
        t = time.perf_counter()
        model.setup(_Head(data.X, data.y, 2), radius=1.0)  # one streamed pass (row norms)
        print(f"model setup (one pass over the file): {time.perf_counter() - t:.0f} s; "
              f"chunk {stream.chunk_rows(args.d):,} rows", flush=True)
        print_table(table(data.X, data.y, model, args))
    if not args.skip_run:
        print(f"\nrun: exp_ix_m (tree) vs OGD on {int(args.max_n):,} x {args.d} from disk, "
              f"{int(args.budget):,} data points", flush=True)
        subprocess.run([sys.executable, __file__, "--run", *sys.argv[1:]], check=True)


if __name__ == "__main__":
    main()
