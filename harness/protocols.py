"""What the core expects of each kind of component.

Component classes are plain classes: ``__init__`` takes the declared
parameters only (validated against the class's ``params`` table before it is
called); state that depends on the data or the horizon is built in ``setup``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, NamedTuple, Protocol, runtime_checkable

import numpy as np

from harness.params import Param


class Proposal(NamedTuple):
    """What a p-player asks for in one round.

    ``rows``: distinct row indices whose losses the game evaluates (and counts
    as data points processed). ``weights``: the w-player's batch weights over
    ``rows`` (its gradient is ``sum_i weights_i * grad loss_i``).
    ``action_rows``/``action_values``: the sparse action ``a_t`` that enters
    ``a_bar`` (None means ``a_t`` = ``weights`` on ``rows``).
    """

    rows: np.ndarray
    weights: np.ndarray
    action_rows: np.ndarray | None = None
    action_values: np.ndarray | None = None


@runtime_checkable
class ConstraintSet(Protocol):
    """A convex set ``K`` inside the probability simplex over ``n`` rows."""

    name: ClassVar[str]
    params: ClassVar[Mapping[str, Param]]
    n: int
    k: int

    def lmo(self, losses: np.ndarray) -> tuple[float, np.ndarray]:
        """``max_{p in K} <losses, p>`` and an argmax."""
        ...

    def project(
        self,
        weights: np.ndarray,
        gamma: float = 0.0,
        *,
        log_domain: bool = False,
        return_capped: bool = False,
    ) -> Any:
        """KL projection of positive ``weights`` (or log-weights) onto ``K``
        such that mixing with the uniform distribution at rate ``gamma`` lands
        in ``K``. With ``return_capped`` also a boolean mask of capped rows."""
        ...

    def sample(self, p: np.ndarray, rng: np.random.Generator) -> Any:
        """Draw a point of ``K`` whose mean is ``p``: k distinct row indices
        (k-set, ``P[i in rows] = k p_i``), or ``(rows, multiplicities)`` with
        distinct rows and ``E[m_i] = k p_i`` (alpha-set, action ``m / k``)."""
        ...

    def contains(self, p: np.ndarray, atol: float = 1e-9) -> bool:
        """Whether ``p`` lies in ``K`` up to ``atol``."""
        ...

    # Optional: ``bind(dataset) -> dict[str, float] | None``, called by
    # ``harness.prepare`` right after the set is built, for sets that read the
    # data set (the alpha-set's caps from a column); the returned values are
    # recorded as ``constraint.<key>`` parameters.


@runtime_checkable
class PPlayer(Protocol):
    """The maximising player over ``K``: a bandit or a full-information learner."""

    name: ClassVar[str]
    params: ClassVar[Mapping[str, Param]]
    #: constraint-set names this player supports (None: any)
    constraints: ClassVar[tuple[str, ...] | None]

    def rows_per_round(self, constraint: ConstraintSet) -> int:
        """Rows evaluated per round; the horizon is ``T = budget // rows_per_round``."""
        ...

    def setup(self, constraint: ConstraintSet, horizon: int) -> dict[str, float]:
        """Build state for ``horizon`` rounds; return every derived parameter."""
        ...

    def propose(self, rng: np.random.Generator) -> Proposal:
        """Sample this round's rows and the w-player's batch weights."""
        ...

    def observe(self, losses: np.ndarray) -> np.ndarray | None:
        """Receive the losses of the proposed rows (in [0, 1]); may return the
        w-player's batch weights if they depend on the losses (else None)."""
        ...

    @property
    def p(self) -> np.ndarray:
        """The current distribution ``p_t`` in ``K``."""
        ...

    def regret_bound(self, rounds: int) -> float | None:
        """The theorem's high-probability regret bound after ``rounds`` rounds
        (None if the player has none)."""
        ...

    # Optional: ``suggest_w_lr(radius, grad_bound, horizon) -> float`` gives the
    # w-player's step when the algorithm pairs the two (S-AFL).
    # A player whose batch weights depend on the losses (ru_sgd's
    # ``1[L_i > tau] / (alpha b)``) returns them from ``observe``; the game then
    # uses them instead of ``Proposal.weights``, and ``a_t`` must be given by
    # ``Proposal.action_rows``/``action_values``.


@runtime_checkable
class WPlayer(Protocol):
    """The minimising online learner over ``W`` (an l2-ball of radius ``radius``)."""

    name: ClassVar[str]
    params: ClassVar[Mapping[str, Param]]
    radius: float

    def setup(self, dim: int, horizon: int, grad_bound: float,
              lr_hint: float | None = None) -> dict[str, float]:
        """Build state; ``lr_hint`` is the paired p-player's step rule (or None)."""
        ...

    @property
    def w(self) -> np.ndarray:
        """The current iterate ``w_t``."""
        ...

    @property
    def w_bar(self) -> np.ndarray:
        """The average of the iterates played so far."""
        ...

    def step(self, grad: np.ndarray) -> None:
        ...

    def regret_bound(self, rounds: int) -> float | None:
        ...


@runtime_checkable
class Model(Protocol):
    """Per-example losses scaled to [0, 1], their gradients and task metrics."""

    name: ClassVar[str]
    params: ClassVar[Mapping[str, Param]]
    #: set by ``setup``: parameter count, the divisor of raw losses, the
    #: per-example gradient-norm bound of scaled losses, clipped-loss count
    n_params: int
    scale_: float
    grad_bound: float
    n_clipped: int

    def setup(self, dataset: Dataset, radius: float) -> dict[str, float]:
        ...

    def raw_losses(self, w: np.ndarray, X: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Unscaled per-example losses (convex in ``w``)."""
        ...

    def losses(self, w: np.ndarray, X: np.ndarray, y: np.ndarray) -> np.ndarray:
        """``raw_losses / scale_`` in [0, 1] (clipped and counted if the scale is user-set)."""
        ...

    def grad(self, w: np.ndarray, X: np.ndarray, y: np.ndarray, weights: np.ndarray) -> np.ndarray:
        ...

    def value_and_grad(
        self, w: np.ndarray, X: np.ndarray, y: np.ndarray, weights: np.ndarray
    ) -> tuple[float, np.ndarray]:
        """``sum_i weights_i loss_i / loss_scale`` (never clipped: convex) and its gradient."""
        ...

    def task_metrics(self, w: np.ndarray, X: np.ndarray, y: np.ndarray, k: int) -> dict[str, float]:
        ...

    # Optional: ``cvx_raw_losses(w, X, y)``, the raw losses as a cvxpy
    # expression of the flat parameter variable ``w`` (same layout as the numpy
    # ``w``); with it the exact optimum OPT can be computed (plugins.optimum).


@runtime_checkable
class Dataset(Protocol):
    """Features ``X`` (n x d, in [0, 1]), targets ``y``, task kind and provenance.

    ``X`` may be larger than memory: a ``numpy.memmap``, or any object with
    ``shape``, ``ndim`` and ``dtype`` whose ``X[rows]`` (an index array) and
    ``X[a:b]`` return arrays (``plugins.files``). The game reads the rows a
    player asks for and, at checkpoints, row chunks (``harness.stream``)."""

    name: ClassVar[str]
    params: ClassVar[Mapping[str, Param]]
    X: np.ndarray
    y: np.ndarray
    task: str
    n_classes: int
    default_model: str
    provenance: Mapping[str, str]

    # Optional: ``columns: dict[str, np.ndarray]``, named per-row columns that
    # are not features (group labels, prior scores; length n each), read by
    # e.g. the alpha-set's caps; ``group_column: str | None``, the column whose
    # groups get per-group metrics (``group_loss.<group>``, ``worst_group_loss``).
