"""Plain mini-batch SGD on the average loss (ERM): the p-player that never adapts."""

from __future__ import annotations

from typing import ClassVar

import numpy as np

import harness
from harness import Param, Proposal


class Uniform:
    """Uniform mini-batches without replacement; ``p_t = a_t = 1/n``.

    Shows what the minimax objective changes: w_bar approaches the ERM
    solution, whose average top-k loss is usually far from the minimax value.
    ``batch_size`` defaults to the constraint set's k so data points per
    round match the bandits'. No regret bound (it is not a no-regret player).
    """

    name: ClassVar[str] = "uniform"
    constraints: ClassVar[tuple[str, ...] | None] = None
    params: ClassVar[dict[str, Param]] = {
        "batch_size": Param(int, low=1, nullable=True,
                            doc="rows per round; None: the constraint set's k"),
    }

    def __init__(self, batch_size=None) -> None:
        self.batch_size = batch_size

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
        return {"batch_size": self.b_}

    @property
    def p(self) -> np.ndarray:
        return self.p_

    def propose(self, rng: np.random.Generator) -> Proposal:
        rows = rng.choice(self.n_, size=self.b_, replace=False)
        return Proposal(rows, self.weights_, self.all_rows_, self.p_)

    def observe(self, losses: np.ndarray) -> None:
        return None

    def regret_bound(self, rounds: int) -> float | None:
        return None


@harness.hookimpl
def register_p_players(register):
    register(Uniform)
