"""The uniform p-player: ``p_t = 1/n`` every round and uniform mini-batches,
so that the w-player runs plain mini-batch SGD on the average loss (ERM). The
game's SGD baseline: it never adapts."""

from __future__ import annotations

from typing import ClassVar, NamedTuple

import numpy as np
from numba import njit

import harness
from harness import Compiled, Param, Proposal
from plugins.lib.capped import checked_batch, player_form
from plugins.p_players.draws import choice


class UniformState(NamedTuple):
    """The uniform player's state (its kernels' and its Python methods')."""

    #: the batch weights ``1/b``, every row ``0..n-1``, and ``p = 1/n``
    weights: np.ndarray
    all_rows: np.ndarray
    p: np.ndarray
    #: rows n and batch size b
    n: np.int64
    b: np.int64
    #: ``draws.choice``'s scratch: the identity permutation (its tail shuffle,
    #: large draws only; else empty) and the swaps it records
    perm: np.ndarray
    swaps: np.ndarray
    #: the action is the batch weights on the drawn rows (``action="sampled"``)
    sampled: bool


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
    state_version: ClassVar[int] = 1
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
        return checked_batch(self.name, b, "n", constraint.n)

    def setup(self, constraint, horizon: int) -> dict[str, float]:
        n = constraint.n
        self.n_ = n
        self.b_ = self.rows_per_round(constraint)
        self.p_ = np.full(n, 1.0 / n)
        self.all_rows_ = np.arange(n)
        self.weights_ = np.full(self.b_, 1.0 / self.b_)
        b = self.b_
        tail = n > 10000 and b > n // 50  # numpy's choice shuffles 0..n-1 (draws.choice)
        perm = np.arange(n) if tail else np.empty(0, dtype=np.int64)
        self.state_ = UniformState(self.weights_, self.all_rows_, self.p_, np.int64(n),
                                   np.int64(b), perm, np.empty(b, dtype=np.int64),
                                   self.action == "sampled")
        return {"batch_size": self.b_, "action": self.action}

    @property
    def p(self) -> np.ndarray:
        return self.p_

    def propose(self, rng: np.random.Generator) -> Proposal:
        """``uniform_propose``, the kernel the compiled path runs too."""
        rows, weights = uniform_propose(self.state_, None, rng)
        if self.action == "sampled":
            return Proposal(rows, weights)
        return Proposal(rows, weights, self.all_rows_, self.p_)

    def observe(self, losses: np.ndarray) -> None:
        return None

    def compiled(self, constraint: Compiled | None) -> Compiled | None:
        """The compiled form (``harness.engine``), on any set (the player reads
        none): ``uniform_propose``/``uniform_observe`` on ``UniformState``."""
        return player_form(self, Uniform, constraint, "plugins.p_players.uniform:uniform",
                           capped=False)

    def regret_bound(self, rounds: int) -> float | None:
        return None


@njit(cache=True, error_model="numpy")
def uniform_propose(ps, ks, rng):  # pragma: no cover - compiled
    """``Uniform.propose``: b rows drawn without replacement (``rng.choice``,
    ``plugins.p_players.draws.choice``), batch weights ``1/b`` (Algorithm 1, Line 3, with a sampler
    that ignores ``p_t``)."""
    return choice(rng, ps.n, ps.b, ps.perm, ps.swaps), ps.weights


@njit(cache=True, error_model="numpy")
def uniform_observe(ps, ks, rows, weights, losses):  # pragma: no cover - compiled
    """``Uniform.observe`` (nothing to learn): the batch weights, and the action
    as ``Uniform.propose`` gives it: ``p = 1/n`` on every row, or the batch
    weights on the drawn rows (``action="sampled"``)."""
    if ps.sampled:
        return weights, rows, weights
    return weights, ps.all_rows, ps.p


@harness.hookimpl
def register_p_players(register):
    register(Uniform)
