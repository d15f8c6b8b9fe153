"""Long runs of every p-player on adversarial gains: no overflow, no invalid p.

    python tools/stability.py --rounds 1e8            # the reliability target
    python tools/stability.py --rounds 1e6 --players exp4mp exp_ix_m

Each registered p-player (on each of ``--sets`` it supports: the k-set, the
simplex and an alpha-set with caps of three sizes) plays
``--rounds`` rounds against gains that put all the loss on one row and switch
to another row every ``--period`` rounds; its p_t is checked every
``--check-every`` rounds (finite, inside the set) and at the end, and an
overflow or invalid value in any numpy operation stops it. The p-players'
step sizes are their theory defaults for the horizon, times ``--eta-scale``
where the player has an ``eta``: a scale of s makes one round move the
log-weights as far as s rounds at the default step, so a short run with a
large scale reaches the weight ranges of a long one. Progress goes to stderr
every tenth of the run.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

import harness

N, K = 40, 4


def constraint_set(registry: harness.Registry, name: str):
    """The set over N rows: the contract suite's parameters where the set gives
    them (``contract_params``: the alpha-set's caps of three sizes, 1, 2 and k
    units of 1/k), else k = K if the set takes a k (the simplex does not)."""
    cls = registry.get("constraint_set", name).cls
    example = getattr(cls, "contract_params", None)
    if example is not None:
        return registry.build("constraint_set", name, **example(N))
    return registry.build("constraint_set", name, n=N, **({"k": K} if "k" in cls.params else {}))


def run(registry: harness.Registry, player: str, constraint: str, rounds: int, period: int,
        check_every: int, eta_scale: float) -> str:
    K_set = constraint_set(registry, constraint)
    pp = harness.build("p_player", player)
    pp.setup(K_set, rounds)
    if eta_scale != 1.0 and hasattr(pp, "eta_"):
        pp = harness.build("p_player", player, eta=pp.eta_ * eta_scale)
        pp.setup(K_set, rounds)
    start = time.perf_counter()
    with np.errstate(over="raise", invalid="raise"):  # a hidden overflow is a failure too
        failure = _play(pp, K_set, player, constraint, rounds, period, check_every, start)
    if failure:
        return failure
    p = pp.p
    seconds = time.perf_counter() - start
    return (f"{player:>10} on {constraint:<8} {rounds:,} rounds in {seconds:,.0f} s: p in the "
            f"set, min p {p.min():.3g}, max p {p.max():.3g}")


def _play(pp, K_set, player: str, constraint: str, rounds: int, period: int,
          check_every: int, start: float) -> str | None:
    rng = np.random.default_rng(0)
    gains = np.zeros(N)
    tenth = max(rounds // 10, 1)
    for t in range(rounds):
        if t % period == 0:
            gains[:] = 0.0
            gains[(t // period * 7) % N] = 1.0
        prop = pp.propose(rng)
        pp.observe(gains[prop.rows])
        if (t + 1) % check_every == 0 or t + 1 == rounds:
            p = pp.p
            if not (np.all(np.isfinite(p)) and K_set.contains(p, atol=1e-9)):
                return f"{player:>10} on {constraint:<8} FAILED at round {t + 1}: p={p}"
        if (t + 1) % tenth == 0 and t + 1 < rounds:
            print(f"  {player} on {constraint}: {t + 1:,} of {rounds:,} rounds, "
                  f"{time.perf_counter() - start:,.0f} s", file=sys.stderr, flush=True)
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=float, default=1e8)
    parser.add_argument("--period", type=int, default=100_000)
    parser.add_argument("--check-every", type=int, default=10_000)
    parser.add_argument("--eta-scale", type=float, default=1.0)
    parser.add_argument("--players", nargs="*", default=None)
    parser.add_argument("--sets", nargs="*", default=["kset", "simplex", "alphaset"])
    args = parser.parse_args()
    registry = harness.Registry(harness.make_plugin_manager())
    players = args.players or registry.names("p_player")
    for player in players:
        fits = registry.get("p_player", player).cls.constraints
        for constraint in args.sets:
            if fits is None or constraint in fits:
                print(run(registry, player, constraint, int(args.rounds), args.period,
                          args.check_every, args.eta_scale), flush=True)


if __name__ == "__main__":
    main()
