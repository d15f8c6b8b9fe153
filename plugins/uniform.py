"""Plain mini-batch SGD on the average loss (ERM): the p-player that never adapts."""

from __future__ import annotations

from typing import ClassVar

import numpy as np
from numba import njit

import harness
from harness import Compiled, Param, Proposal
from harness.engine import replaces

try:  # numba's ports of numpy's bounded-integer draws (numpy/random/src/distributions)
    from numba.np.random.generator_core import next_uint32
    from numba.np.random.random_methods import (
        bounded_lemire_uint64,
        buffered_bounded_lemire_uint32,
    )

    _LEMIRE = True
except ImportError:  # pragma: no cover - another numba layout: its public integers()
    _LEMIRE = False


class Uniform:
    """Uniform mini-batches without replacement; ``p_t = a_t = 1/n``.

    Shows what the minimax objective changes: w_bar approaches the ERM
    solution, whose average top-k loss is usually far from the minimax value.
    ``batch_size`` defaults to the constraint set's k so data points per
    round match the bandits'. No regret bound (it is not a no-regret player).

    ``action``: the action ``a_t`` entering ``a_bar`` of the dual gap.
    "uniform" (default) is ``p_t = 1/n`` on every row, exact and O(n) per
    round; "sampled" is ``1/b`` on the b drawn rows, whose mean is ``1/n``
    (``a_bar`` is then uniform only in expectation and the certified gap a
    little looser) at O(b) per round: plain SGD's cost at large n.
    """

    name: ClassVar[str] = "uniform"
    constraints: ClassVar[tuple[str, ...] | None] = None
    params: ClassVar[dict[str, Param]] = {
        "batch_size": Param(int, low=1, nullable=True,
                            doc="rows per round; None: the constraint set's k"),
        "action": Param(str, default="uniform", choices=("uniform", "sampled"),
                        doc="a_t in a_bar: 1/n on every row (O(n) per round) or 1/b on "
                            "the drawn rows (O(b), uniform in expectation)"),
    }

    def __init__(self, batch_size=None, action="uniform") -> None:
        self.batch_size = batch_size
        self.action = action

    def rows_per_round(self, constraint) -> int:
        b = self.batch_size if self.batch_size is not None else constraint.k
        if b > constraint.n:
            raise harness.ConfigError(
                f"The 'batch_size' parameter of uniform must be an int in [1, n={constraint.n}]. "
                f"Got {b} instead.")
        return b

    def setup(self, constraint, horizon: int) -> dict[str, float]:
        n = constraint.n
        self.n_ = n
        self.b_ = self.rows_per_round(constraint)
        self.p_ = np.full(n, 1.0 / n)
        self.all_rows_ = np.arange(n)
        self.weights_ = np.full(self.b_, 1.0 / self.b_)
        return {"batch_size": self.b_, "action": self.action}

    @property
    def p(self) -> np.ndarray:
        return self.p_

    def propose(self, rng: np.random.Generator) -> Proposal:
        rows = rng.choice(self.n_, size=self.b_, replace=False)
        if self.action == "sampled":
            return Proposal(rows, self.weights_)
        return Proposal(rows, self.weights_, self.all_rows_, self.p_)

    def observe(self, losses: np.ndarray) -> None:
        return None

    def compiled(self, constraint: Compiled | None) -> Compiled | None:
        """The compiled form (``harness.engine``), on any set (the player reads
        none): ``uniform_propose``/``uniform_observe`` on ``(batch weights, all
        rows, p, n, batch size, permutation scratch, swap scratch, sampled action)``."""
        if constraint is None or replaces(self, Uniform, ("propose", "observe")):
            return None
        n, b = self.n_, self.b_
        tail = n > 10000 and b > n // 50  # numpy's choice shuffles 0..n-1 (_choice)
        perm = np.arange(n) if tail else np.empty(0, dtype=np.int64)
        state = (self.weights_, self.all_rows_, self.p_, np.int64(n), np.int64(b),
                 perm, np.empty(b, dtype=np.int64), self.action == "sampled")
        return Compiled("plugins.uniform:uniform", state)

    def regret_bound(self, rounds: int) -> float | None:
        return None


if _LEMIRE:
    @njit(cache=True)
    def _bounded(rng, high):  # pragma: no cover - compiled
        """A uniform integer in ``[0, high]`` for ``0 <= high < 2**63``: numpy's
        ``random_bounded_uint64(bitgen, 0, high, 0, 0)`` (Lemire's rejection on
        32 bits below ``2**32 - 1``), the draw of ``Generator.choice``."""
        if high == 0:
            return np.int64(0)
        bitgen = rng.bit_generator
        if high < 0xFFFFFFFF:
            return np.int64(buffered_bounded_lemire_uint32(bitgen, np.uint32(high)))
        if high == 0xFFFFFFFF:
            return np.int64(next_uint32(bitgen))
        return np.int64(bounded_lemire_uint64(bitgen, np.uint64(high)))
else:  # pragma: no cover
    @njit(cache=True)
    def _bounded(rng, high):  # pragma: no cover - compiled
        """A uniform integer in ``[0, high]`` (``Generator.integers``: the same
        draw, through a one-entry array)."""
        if high == 0:
            return np.int64(0)
        return np.int64(rng.integers(0, high, endpoint=True))


@njit(cache=True)
def _choice(rng, n, b, perm, swaps):  # pragma: no cover - compiled
    """``rng.choice(n, size=b, replace=False)`` of numpy's ``Generator``: the same
    integer draws in the same order. For ``n > 10000`` and ``b > n // 50`` a
    tail shuffle of ``0..n-1`` (``perm``, the identity, is shuffled in place and
    restored from the recorded ``swaps``: O(b) instead of numpy's O(n) copy),
    else Floyd's algorithm with numpy's open-addressing hash set, then a shuffle."""
    out = np.empty(b, dtype=np.int64)
    if n > 10000 and b > n // 50:
        first = max(n - b, 1)
        for i in range(n - 1, first - 1, -1):
            j = _bounded(rng, i)
            swaps[n - 1 - i] = j
            perm[i], perm[j] = perm[j], perm[i]
        for c in range(b):
            out[c] = perm[n - b + c]
        for i in range(first, n):
            j = swaps[n - 1 - i]
            perm[i], perm[j] = perm[j], perm[i]
        return out
    mask = np.uint64(1.2 * b)  # numpy's _gen_mask: smallest 2^m - 1 at least 1.2 b
    for shift in (1, 2, 4, 8, 16, 32):
        mask |= mask >> np.uint64(shift)
    m = np.int64(mask)
    seen = np.full(m + 1, -1, dtype=np.int64)
    for j in range(n - b, n):
        val = _bounded(rng, j)
        loc = val & m
        while seen[loc] != -1 and seen[loc] != val:
            loc = (loc + 1) & m
        if seen[loc] == -1:
            seen[loc] = val
            out[j - n + b] = val
        else:
            loc = j & m
            while seen[loc] != -1:
                loc = (loc + 1) & m
            seen[loc] = j
            out[j - n + b] = j
    for i in range(b - 1, 0, -1):
        j = _bounded(rng, i)
        out[i], out[j] = out[j], out[i]
    return out


@njit(cache=True)
def uniform_propose(ps, ks, rng):  # pragma: no cover - compiled
    """``Uniform.propose``: b rows drawn without replacement (``rng.choice``,
    ``_choice``), batch weights ``1/b`` (Algorithm 1, Line 3, with a sampler
    that ignores ``p_t``)."""
    weights, _, _, n, b, perm, swaps, _ = ps
    return _choice(rng, n, b, perm, swaps), weights


@njit(cache=True)
def uniform_observe(ps, ks, rows, weights, losses):  # pragma: no cover - compiled
    """``Uniform.observe`` (nothing to learn): the batch weights, and the action
    as ``Uniform.propose`` gives it: ``p = 1/n`` on every row, or the batch
    weights on the drawn rows (``action="sampled"``)."""
    if ps[7]:
        return weights, rows, weights
    return weights, ps[1], ps[2]


@harness.hookimpl
def register_p_players(register):
    register(Uniform)
