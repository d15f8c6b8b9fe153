"""What a sweep costs beyond its games, with tracking on and off, for one or
several source trees in one run (before and after a change, on one machine).

    python tools/bench_sweep.py                           # 20 runs of 20,000 data points
    python tools/bench_sweep.py --runs 1000 --modes on    # the 1,000-run sweep
    python tools/bench_sweep.py --tree before=/path/to/old/checkout --tree after=.

Each measurement is a fresh working folder and one ``minimax-bench --multirun
seed=0,...,N-1 budget=B`` with Hydra's default launcher (the jobs one after
the other in one process), timed from the command's start to its end, with
``tracking.enabled=true`` (a local SQLite store; the store is created first by a
one-run command, so that MLflow's table creation, about 20 s once per
store, is not counted) or ``false``. The trees' measurements are
interleaved (on, off, on, off, ...) so that a machine's drift hits each alike.

For a tracked sweep the table also reads the store:

* ``games``: the sum over its runs of ``wall_time_s + checkpoint_time_total_s
  + compile_time_s``: the algorithm's own work, its checkpoints' metrics and
  the kernels it loaded;
* ``start-up``: from the command's start to the first run's start in the store;
* ``/(games+start)``: the sweep's wall time over the two.

``per run`` is ``wall / runs``; ``overhead/run`` is ``(wall - start-up) / runs``
less the run's game: what Hydra, the preparation of each job, the saved
states and the tracker cost per run; ``on/off`` the tracked sweep's wall time
over the untracked one's (same tree, same repetition).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def command(tree: Path, overrides: list[str], cwd: Path) -> float:
    """Run ``minimax-bench`` of ``tree`` in ``cwd``; its wall time in seconds."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("MLFLOW_TRACKING_URI", "MINIMAX_BENCH_STATE_DIR")}
    env["PYTHONPATH"] = str(tree)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "harness", *overrides], cwd=cwd, env=env,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"{' '.join(overrides)} failed in {cwd}:\n{done.stderr[-3000:]}")
    return wall


def store_figures(db: Path, started: float) -> tuple[int, float, float]:
    """Runs, the sum of their games and the start-up, from a sweep's store."""
    sweep = ("select r.run_uuid from runs r join experiments e on r.experiment_id = "
             "e.experiment_id where e.name = 'minimax-bench' and r.run_uuid in "
             "(select run_uuid from params where key = 'budget')")
    keys = ("wall_time_s", "checkpoint_time_total_s", "compile_time_s")
    keys += tuple(f"zz.{key}" for key in keys)  # their MLflow keys (mlflow_names), or older ones
    with sqlite3.connect(db) as con:
        runs = con.execute(f"select run_uuid, start_time from runs where run_uuid in ({sweep})"
                           ).fetchall()
        games = con.execute(
            f"select sum(value) from latest_metrics where key in ({','.join('?' * len(keys))}) "
            f"and run_uuid in ({sweep})", keys).fetchone()[0] or 0.0
    first = min(start for _, start in runs) / 1000.0
    return len(runs), float(games), first - started


def measure(label: str, tree: Path, mode: str, runs: int, budget: int, extra: list[str],
            keep: Path | None) -> dict:
    folder = Path(tempfile.mkdtemp(prefix=f"bench-sweep-{label}-{mode}-"))
    tracking = ["tracking.enabled=true" if mode == "on" else "tracking.enabled=false"]
    common = ["progress=false", f"budget={budget}", *extra]
    if mode == "on":  # the store and its tables, made once (not a cost of the sweep)
        command(tree, ["budget=2000", "progress=false", "tracking.experiment=warm-up"], folder)
    seeds = ",".join(str(s) for s in range(runs))
    started = time.time()
    wall = command(tree, ["--multirun", f"seed={seeds}", *common, *tracking], folder)
    row = {"tree": label, "mode": mode, "runs": runs, "wall": wall}
    if mode == "on":
        found, games, start = store_figures(folder / "mlflow.db", started)
        if found != runs:
            sys.exit(f"{label}: the store holds {found} runs of the sweep, not {runs}")
        row.update(games=games, start=start)
    if keep is None:
        shutil.rmtree(folder, ignore_errors=True)
    return row


def table(rows: list[dict]) -> str:
    """One row per measurement; an untracked sweep is set beside the tracked
    one of the same tree and repetition (``on/off``)."""
    out = ["| tree | tracking | runs | wall s | per run s | start-up s | game/run s | "
           "overhead/run s | /(games+start) | on/off |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        twin = next((o for o in rows if o["tree"] == r["tree"] and o["mode"] != r["mode"]
                     and o["repeat"] == r["repeat"]), None)
        cells = [r["tree"], r["mode"], str(r["runs"]), f"{r['wall']:.1f}",
                 f"{r['wall'] / r['runs']:.3f}"]
        if "games" in r:
            game = r["games"] / r["runs"]
            cells += [f"{r['start']:.2f}", f"{game:.3f}",
                      f"{(r['wall'] - r['start']) / r['runs'] - game:.3f}",
                      f"{r['wall'] / (r['games'] + r['start']):.2f}",
                      "" if twin is None else f"{r['wall'] / twin['wall']:.2f}"]
        else:
            cells += ["", "", "", "", ""]
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--budget", type=float, default=20000)
    parser.add_argument("--modes", default="on,off", help="on, off or on,off")
    parser.add_argument("--repeat", type=int, default=1, help="measurements of each")
    parser.add_argument("--tree", action="append", default=[],
                        help="LABEL=PATH of a source tree (default: this one, 'this')")
    parser.add_argument("--keep", action="store_true", help="keep the working folders")
    parser.add_argument("extra", nargs="*", help="more overrides for every sweep")
    args = parser.parse_args(argv)
    trees = [(t.split("=", 1)[0], Path(t.split("=", 1)[1]).resolve()) for t in args.tree] or [
        ("this", ROOT)]
    rows = []
    for repeat in range(args.repeat):
        for mode in args.modes.split(","):
            for label, tree in trees:
                row = measure(label, tree, mode, args.runs, int(args.budget), args.extra,
                              Path(".") if args.keep else None)
                row["repeat"] = repeat
                print(f"{label} tracking {mode}: {row['wall']:.1f} s", file=sys.stderr)
                rows.append(row)
    print(table(rows))


if __name__ == "__main__":
    main()
