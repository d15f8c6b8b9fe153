"""Game time per round against n through the command a user runs, for one or
several source trees in one run, with each process's resident memory.

    python tools/bench_scale_cli.py                                  # exp_ix_m's tree, d = 100
    python tools/bench_scale_cli.py --sizes 1e3,1e6 --d 20 --budget 4e5
    python tools/bench_scale_cli.py --player exp_ix_m= \\
        --player "exp4mp=p_player=exp4mp p_player.confidence=sampled p_player.state=tree"
    python tools/bench_scale_cli.py --tree before=/path/to/old/checkout --tree after=.

Each measurement is one ``minimax-bench experiment=scale dataset.n=N
dataset.d=D budget=B checkpoints=C tracking.enabled=false`` (the preset:
systematic sampling on the k-set, k = 20, synthetic data memory-mapped from
its cache folder; the player's overrides after it), in a fresh working
folder. Its game time is the run's clock (``wall_time_s``: the rounds, as the
compiled engine plays them between the checkpoints, the checkpoints' own
metrics excluded) from the summary line ``data points processed ... in R
rounds, S s``; per round is ``S / R``. The checkpoints still run in between
(they stream the whole data set, so the rounds after one start with cold
caches), as in any run. ``anon`` is the largest anonymous resident memory of
the process (``RssAnon`` in ``/proc/<pid>/status``, sampled every 50 ms: the
process's own memory, apart from the data file's pages in the page cache),
``rss`` its largest resident set with those pages (``VmHWM``).

The data files are written first by a one-round run of each size (not timed).
Trees are interleaved per size and repetition, so that a machine's drift hits
each alike; each figure is the best of ``--repeat`` runs. The table gives
each round's cost in microseconds and its ratio to the smallest n's.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path

#: the console script (it imports the package from PYTHONPATH first)
COMMAND = shutil.which("minimax-bench") or "minimax-bench"
SUMMARY = re.compile(r"data points processed\s+([\d,]+) in ([\d,]+) rounds?, ([\d.eE+-]+) s")


def _kb(status: str, key: str) -> int:
    match = re.search(rf"^{key}:\s+(\d+) kB", status, re.MULTILINE)
    return int(match.group(1)) if match else 0


def run(tree: Path, overrides: list[str], cwd: Path) -> dict[str, float]:
    """One command; its rounds, game seconds and peak memory (MiB)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(tree)
    proc = subprocess.Popen([COMMAND, *overrides, "progress=false"],
                            cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    peak = {"anon": 0, "rss": 0}

    def sample() -> None:
        path = Path(f"/proc/{proc.pid}/status")
        while proc.poll() is None:
            try:
                status = path.read_text()
            except OSError:
                break
            peak["anon"] = max(peak["anon"], _kb(status, "RssAnon"))
            peak["rss"] = max(peak["rss"], _kb(status, "VmHWM"))
            time.sleep(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out, _ = proc.communicate()
    sampler.join()
    match = SUMMARY.search(out)
    if proc.returncode != 0 or match is None:
        raise SystemExit(f"minimax-bench {' '.join(overrides)} failed:\n{out[-3000:]}")
    rounds = int(match.group(2).replace(",", ""))
    seconds = float(match.group(3))
    return {"rounds": rounds, "seconds": seconds, "us": 1e6 * seconds / rounds,
            "anon": peak["anon"] / 1024, "rss": peak["rss"] / 1024}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1e3,1e4,1e5,1e6,1e7")
    parser.add_argument("--d", type=int, default=100)
    parser.add_argument("--budget", default="2e6", help="data points per run")
    parser.add_argument("--checkpoints", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--player", action="append", default=[],
                        help="LABEL=OVERRIDES (space-separated); default exp_ix_m=")
    parser.add_argument("--tree", action="append", default=[], help="LABEL=PATH")
    parser.add_argument("extra", nargs="*", help="more overrides for every run")
    args = parser.parse_args(argv)
    sizes = [int(float(s)) for s in args.sizes.split(",")]
    players = [p.split("=", 1) for p in (args.player or ["exp_ix_m="])]
    players = [(label, ["p_player=exp_ix_m"] if not spec.strip() and label == "exp_ix_m"
                else spec.split()) for label, spec in players]
    trees = [t.split("=", 1) for t in args.tree] or [["this", str(Path(__file__).parents[1])]]
    trees = [(label, Path(path).resolve()) for label, path in trees]
    base = ["experiment=scale", f"dataset.d={args.d}", "tracking.enabled=false",
            "reference.exact=false", *args.extra]
    results: dict[tuple[str, str, int], list[dict[str, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-scale-cli-") as tmp:
        cwd = Path(tmp)
        for n in sizes:  # write the data files (untimed)
            run(trees[0][1], [*base, f"dataset.n={n}", "budget=20", "checkpoints=1"], cwd)
        for n in sizes:
            for rep in range(args.repeat):
                for label, spec in players:
                    for tree_label, tree in trees:
                        r = run(tree, [*base, *spec, f"dataset.n={n}", f"budget={args.budget}",
                                       f"checkpoints={args.checkpoints}"], cwd)
                        results.setdefault((label, tree_label, n), []).append(r)
                        print(f"n={n:>12,} {label:>10} {tree_label:>8} rep {rep}: "
                              f"{r['us']:8.2f} us/round, anon {r['anon']:7.0f} MiB, "
                              f"rss {r['rss']:7.0f} MiB", flush=True)
    print(f"\nGame time per round through the CLI (best of {args.repeat}), d = {args.d}, "
          f"budget {args.budget}, {args.checkpoints} checkpoints; ratio to n = {sizes[0]:,}\n")
    print("| player | tree | " + " | ".join(f"n = {n:.0e}" for n in sizes)
          + " | largest anon MiB |")
    print("|---|---|" + "---|" * len(sizes) + "---|")
    for label, _ in players:
        for tree_label, _ in trees:
            best = [min(r["us"] for r in results[(label, tree_label, n)]) for n in sizes]
            cells = [f"{b:.1f} us ({b / best[0]:.2f}x)" for b in best]
            anon = max(r["anon"] for n in sizes for r in results[(label, tree_label, n)])
            print(f"| {label} | {tree_label} | " + " | ".join(cells) + f" | {anon:.0f} |")


if __name__ == "__main__":
    main()
