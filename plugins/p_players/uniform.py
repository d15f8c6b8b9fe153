"""Plain mini-batch SGD on the average loss (ERM): the p-player that never adapts."""

from __future__ import annotations

from typing import ClassVar

import numpy as np
from numba import njit

import harness
from harness import Compiled, Param, Proposal
from harness.engine import replaces
from plugins.p_players.draws import choice


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
        tail = n > 10000 and b > n // 50  # numpy's choice shuffles 0..n-1 (draws.choice)
        perm = np.arange(n) if tail else np.empty(0, dtype=np.int64)
        state = (self.weights_, self.all_rows_, self.p_, np.int64(n), np.int64(b),
                 perm, np.empty(b, dtype=np.int64), self.action == "sampled")
        return Compiled("plugins.p_players.uniform:uniform", state)

    def regret_bound(self, rounds: int) -> float | None:
        return None


@njit(cache=True, error_model="numpy")
def uniform_propose(ps, ks, rng):  # pragma: no cover - compiled
    """``Uniform.propose``: b rows drawn without replacement (``rng.choice``,
    ``plugins.p_players.draws.choice``), batch weights ``1/b`` (Algorithm 1, Line 3, with a sampler
    that ignores ``p_t``)."""
    weights, _, _, n, b, perm, swaps, _ = ps
    return choice(rng, n, b, perm, swaps), weights


@njit(cache=True, error_model="numpy")
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
