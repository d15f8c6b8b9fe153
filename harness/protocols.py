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


class Draw(NamedTuple):
    """A point of ``K`` drawn by ``ConstraintSet.sample``: the action
    ``multiplicities / k`` on ``rows``.

    ``rows``: distinct row indices (int64). ``multiplicities``: int64, each at
    least 1, summing to k (all ones on the k-set and the simplex; a multiset on
    the alpha-set)."""

    rows: np.ndarray
    multiplicities: np.ndarray


@runtime_checkable
class ConstraintSet(Protocol):
    """A convex set ``K`` inside the probability simplex over ``n`` rows.

    Whatever a p-player needs to know of ``K`` (whether a theorem's bound
    applies, the range of a regulariser, how draws are made) it reads from
    these members, never from the set's name or class."""

    name: ClassVar[str]
    params: ClassVar[Mapping[str, Param]]
    # Optional: ``state_version: ClassVar[int]`` (0 when absent), raised whenever what
    # the component pickles for ``resume`` changes meaning; a saved state of another
    # version is not resumed (``harness.state``).
    n: int
    k: int
    #: the law of ``sample``'s joint draw: "depround" (Algorithm 5),
    #: "systematic" (Madow; the simplex's categorical inverse-CDF draw is
    #: systematic sampling with k = 1), "multiset" (the alpha-set's), or a
    #: third party's own word. Every law has ``E[multiplicity_i] = k p_i``.
    #: "none": the set has no sampler (``sample`` raises ``harness.ConfigError``)
    #: and the players that draw from it refuse it.
    sampler: str

    def row_caps(self) -> np.ndarray | None:
        """The caps ``c`` of ``K = {p : 0 <= p_i <= c_i, sum p = 1}`` (k-set and
        simplex: every ``c_i = 1/k``; alpha-set: ``alpha``), or None if ``K`` is
        not of that form."""
        ...

    # Optional: ``spectrum(m: int | None = None) -> np.ndarray | None``: sets of the
    # form ``P(sigma)`` (the convex hull of the permutations of a spectrum sigma,
    # non-negative, non-decreasing, summing to 1) return their spectrum over m rows
    # (default n), sorted ascending, so that ``max_{p in K} <l, p> = sum_i sigma_i
    # l_(i)``; None (or absent) otherwise. The k-set is P(sigma) with k entries 1/k.

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

    def sample(self, p: np.ndarray, rng: np.random.Generator) -> Draw:
        """Draw a point of ``K`` whose mean is ``p`` under the law ``sampler``:
        distinct ``rows`` with ``multiplicities`` m, ``sum m = k`` and
        ``E[m_i] = k p_i``; the action is ``m / k`` on ``rows``. On the k-set
        and the simplex every ``m_i = 1`` (``P[i in rows] = k p_i``)."""
        ...

    def contains(self, p: np.ndarray, atol: float = 1e-9) -> bool:
        """Whether ``p`` lies in ``K`` up to ``atol``."""
        ...

    # Optional: ``bind(dataset) -> dict[str, float] | None``, called by
    # ``harness.prepare`` right after the set is built, for sets that read the
    # data set (the alpha-set's caps from a column); the returned values are
    # recorded as ``constraint.<key>`` parameters. Optional: ``label() -> str``, a
    # short name of K (the spectral set's "extremile r=2"), recorded as the tag
    # ``constraint_label`` and used by the run summary and the report's problem
    # names in place of ``k=<k>``. Optional capability: ``EuclideanProjection`` below.


@runtime_checkable
class EuclideanProjection(Protocol):
    """A constraint set that also offers the Euclidean projection onto ``K``
    (gradient-ascent p-players such as S-AFL need it). A player checks
    ``isinstance(K, EuclideanProjection)`` and raises ``harness.ConfigError``
    naming itself, the set and the missing method if it does not hold."""

    def euclidean_project(self, v: np.ndarray) -> np.ndarray:
        """``argmin_{p in K} ||p - v||_2``."""
        ...


@runtime_checkable
class PPlayer(Protocol):
    """The maximising player over ``K``: a bandit or a full-information learner."""

    name: ClassVar[str]
    params: ClassVar[Mapping[str, Param]]
    # Optional: ``state_version: ClassVar[int]`` (0 when absent), raised whenever what
    # the component pickles for ``resume`` changes meaning; a saved state of another
    # version is not resumed (``harness.state``).
    #: constraint-set names this player plays on (None: any that ``supports`` accepts)
    constraints: ClassVar[tuple[str, ...] | None]

    # Optional: a classmethod ``supports(constraint) -> str | None`` that reads
    # what the player needs of a built set through its protocol (``row_caps()``,
    # ``k``, ``sampler``, ``EuclideanProjection``) and returns why it cannot
    # play there (None: it can). The built-in players name no set: any set,
    # a third party's included, that offers what they need is accepted.

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
        """A bound on this player's regret over the first ``rounds`` rounds of
        the run, ``max_{u in K} sum_{t <= rounds} <L_t, u - a_t>``, with the
        parameters (step sizes, exploration) actually in use, in the units of
        the game (losses in [0, 1], actions in K: the units of the dual gap),
        holding deterministically or with a probability the player's docstring
        states; None if no theorem covers the configuration (nothing is then
        logged). The game logs ``(R_p + R_w) / rounds`` as ``theory_bound`` at
        every checkpoint (``harness.game.theory_bound``), so the bound must be
        valid for every ``rounds`` up to the horizon, not only at the end."""
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
    # Optional: ``state_version: ClassVar[int]`` (0 when absent), raised whenever what
    # the component pickles for ``resume`` changes meaning; a saved state of another
    # version is not resumed (``harness.state``).
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
        """A bound on ``sum_{t <= rounds} <L(w_t), a_t> - min_{w in W} sum_{t <=
        rounds} <L(w), a_t>`` with the step size in use (game units), valid for
        every ``rounds`` up to the horizon; None if the player has none."""
        ...


@runtime_checkable
class Solver(Protocol):
    """A whole algorithm for the problem ``F`` (``harness.problem.Problem``), for
    methods that do not decompose into a p-player and a w-player (they keep
    per-row tables: LSVRG, Prospect, a full-batch method).

    The harness owns the loop between checkpoints: it calls ``advance`` with
    growing data-point targets (each call lasting a fraction of a second, so a
    signal is honoured between calls), evaluates the metrics at ``w`` and
    saves the solver, tables included, by pickling it (so a killed run
    resumes with identical numbers: keep every value in attributes, draw
    every random number from the ``rng`` handed in).

    Counters (``docs/tracking.md#counters``): ``data_points`` counts row
    evaluations, once per row per point per step; ``grad_evals`` the per-row
    gradients formed, none for a row of weight 0, so ``grad_evals <=
    data_points`` (the contract suite checks it at every checkpoint).
    """

    name: ClassVar[str]
    params: ClassVar[Mapping[str, Param]]
    # Optional: ``state_version: ClassVar[int]`` (0 when absent), raised whenever what
    # the component pickles for ``resume`` changes meaning; a saved state of another
    # version is not resumed (``harness.state``).
    #: the iterate whose metrics are reported (the last one, or an average)
    w: np.ndarray
    #: rows whose loss or gradient was evaluated so far (every evaluation at
    #: a different point counts once per row per step)
    data_points: int
    #: per-row gradient evaluations so far
    grad_evals: int

    def setup(self, problem: Any, budget: int) -> dict[str, Any]:
        """Build state for ``problem`` and a budget of ``budget`` data points;
        return the values to record (resolved step sizes and the like).
        Raise ``harness.ConfigError`` naming why if the solver cannot run it."""
        ...

    def advance(self, problem: Any, rng: np.random.Generator, until: int) -> None:
        """Run steps until ``data_points >= until`` (a step may overshoot)."""
        ...

    # Optional: ``contract_accuracy: ClassVar[float]`` (2e-2 when absent), the
    # normalised suboptimality the solver reaches on the contract suite's smooth,
    # strongly convex problem in 200 passes (``harness.contract``): tight (1e-8)
    # for a method whose theory converges linearly there, so a model's wrong
    # gradient shows; the default suits a sublinear method (SGD).
    # Optional: ``q``, a point of K (the solver's dual iterate); when present
    # the checkpoints also report a certified ``dual_gap`` ``F(w) - D(q)``.
    # Optional: ``penalties: ClassVar[tuple[str, ...]]`` (``("chi2",)`` when absent),
    # the divergences ``problem.penalty`` (``harness.problem.PENALTIES``) the solver
    # solves with ``nu > 0``; the harness refuses a problem with ``nu > 0`` and
    # another penalty before the solver is set up (``harness.solve.check_penalty``).


@runtime_checkable
class Model(Protocol):
    """Per-example losses scaled to [0, 1], their gradients and task metrics.

    A solver reaches a model through these members only, never through its
    name, class or other attributes, so a third party's model runs under
    every solver:

    * the dimension ``n_params``, the scale ``scale_`` and the gradient
      bound ``grad_bound`` (set by ``setup``), the smoothness of the rows
      ``row_smoothness(X)``, and optionally ``row_grad_bound`` (below);
    * row i's scaled loss ``raw_losses_i / scale_`` (never clipped) and its
      gradient: ``value_and_grad(w, X[i:i+1], y[i:i+1], np.ones(1))`` for any
      model, or the row roles of its compiled form (below) where it has one.

    Compiled form (optional): ``compiled() -> harness.Compiled | None`` with
    ``kernels = "module:prefix"`` and the state ``ms`` handed to every
    kernel; the module holds numba functions (``@njit(cache=True,
    error_model="numpy")``) by role:

    * batch roles, the game's round (``harness.engine``), on the rows
      ``rows`` of ``X`` (C-ordered float64) and ``y`` (the data set's
      targets): ``prefix_losses(ms, w, X, y, rows)``, the scaled losses
      (clipped as ``losses``), and ``prefix_grad(ms, w, X, y, rows,
      weights)``, the gradient of ``sum_j weights_j losses_j``;
    * row roles, for solvers that step on one row at a time, with ``X``
      C-ordered float64 and ``y`` float64 (class codes as floats):
      ``prefix_row_loss(ms, X, y, i, w, z) -> float``, the scaled, never
      clipped loss of row ``i`` at ``w``, leaving in the scratch ``z`` what
      ``row_grad`` needs; ``prefix_row_grad(ms, X, y, i, w, z, g)``, the
      gradient of that loss at the ``w`` where ``row_loss`` was just
      evaluated for row ``i``, written into ``g`` (``n_params`` floats);
      ``prefix_row_scratch(ms) -> int``, the length of ``z`` (at least 1).
      The solvers' kernels call them by name, so ``inline="always"`` inlines
      them there (the built-ins do: a call handing over the state costs
      about 20 ns, as much as a row of the squared error).
    """

    name: ClassVar[str]
    params: ClassVar[Mapping[str, Param]]
    # Optional: ``state_version: ClassVar[int]`` (0 when absent), raised whenever what
    # the component pickles for ``resume`` changes meaning; a saved state of another
    # version is not resumed (``harness.state``).
    #: set by ``setup``: the parameter count (the dimension of ``w``)
    n_params: int
    #: set by ``setup``: the divisor of raw losses (``losses = raw / scale_``)
    scale_: float
    #: set by ``setup``: a bound on the norm of every scaled per-row gradient
    #: over the ball ``||w|| <= radius`` of ``setup``
    grad_bound: float
    #: losses clipped at 1 so far (a user-set scale below the proven bound)
    n_clipped: int
    # Optional: ``loss_bound: float``, set by ``setup``: a bound on every raw
    # (unscaled) per-row loss over the ball ``||w|| <= radius`` of ``setup``
    # (absent: none known). SGD's theory schedule on the nonsmooth problem
    # (nu = 0) needs it to bound tau; a ``scale_`` below it clips losses.

    def setup(self, dataset: Dataset, radius: float) -> dict[str, float]:
        ...

    def raw_losses(self, w: np.ndarray, X: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Unscaled per-example losses (convex in ``w``)."""
        ...

    def losses(self, w: np.ndarray, X: np.ndarray, y: np.ndarray) -> np.ndarray:
        """``raw_losses / scale_`` in [0, 1] (clipped and counted if the scale is user-set)."""
        ...

    def grad(self, w: np.ndarray, X: np.ndarray, y: np.ndarray, weights: np.ndarray) -> np.ndarray:
        """The gradient of ``sum_i weights_i losses_i`` (a clipped loss has none)."""
        ...

    def value_and_grad(
        self, w: np.ndarray, X: np.ndarray, y: np.ndarray, weights: np.ndarray
    ) -> tuple[float, np.ndarray]:
        """``sum_i weights_i raw_loss_i / scale_`` (never clipped: convex) and its
        gradient; on one row with weight 1, that row's scaled loss and gradient."""
        ...

    def row_smoothness(self, X: np.ndarray) -> float | None:
        """A constant ``L`` such that every scaled row loss ``raw_i / scale_`` (rows
        of ``X``, any targets) is L-smooth in ``w`` on all of the parameter space:
        ``||grad_i(a) - grad_i(b)|| <= L ||a - b||``; None when a loss is not
        smooth or no constant is known (a solver that needs one then asks for
        its step size)."""
        ...

    def task_metrics(self, w: np.ndarray, X: np.ndarray, y: np.ndarray, k: int) -> dict[str, float]:
        ...

    # Optional: ``losses_and_metrics(w, X, y, k) -> (raw_losses, task_metrics)``,
    # both in one pass over ``X``; checkpoints use it where it exists (else
    # ``raw_losses`` and ``task_metrics``: two passes, gigabytes each at n = 1e7).
    # Optional: ``row_grad_bound(X, y, radius) -> float``, a bound on the norm
    # of every scaled row gradient over ``||w|| <= radius`` for the rows of
    # ``X`` and ``y`` (solvers that take gradients outside the ball of
    # ``setup``, such as an accelerated method's extrapolated points, ask for
    # a larger radius); without it a solver has ``grad_bound`` only, valid on
    # the ball of ``setup``.
    # Optional: ``cvx_raw_losses(w, X, y)``, the raw losses as a cvxpy
    # expression of the flat parameter variable ``w`` (same layout as the numpy
    # ``w``); with it the exact optimum OPT can be computed (plugins.metrics.optimum).


@runtime_checkable
class Dataset(Protocol):
    """Features ``X`` (n x d, in [0, 1]), targets ``y``, task kind and provenance.

    What the contract suite checks (``harness.contract``), built as its
    ``contract_params(n)`` give and, unless a parameter has no default, with
    its defaults (as ``dataset=<name>`` builds it), reading all of ``X``:

    * ``X`` holds floats, finite and in [0, 1] (scale each column when the
      data set is built; a model whose loss bound assumes [0, 1] declares
      ``needs_unit_features = True`` and the game refuses other features);
    * ``y`` has one finite target per row; for ``task == "classification"``
      integer class codes in ``[0, n_classes)``, ``n_classes >= 2``;
    * ``default_model`` names a registered model (the one of ``model=auto``);
    * ``provenance`` is a non-empty mapping of strings saying where the data
      comes from (source, licence; generator and seed if synthetic).

    A ``seed`` parameter of a synthetic data set is the identity of the data,
    not the run's ``seed``: the seeds of a sweep replay one problem.

    ``X`` may be larger than memory: a ``numpy.memmap``, or any object with
    ``shape``, ``ndim`` and ``dtype`` whose ``X[rows]`` (an index array) and
    ``X[a:b]`` return arrays (``plugins.data.files``). The game reads the rows a
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
    # Optional: ``held_out()``, the same data set's held-out rows prepared as fitted
    # on the training rows (a run on ``split=train``; the held-out metrics read
    # it), and ``split_counts``, the rows of each split (docs/plugins.md).


def refusal(player: type, constraint: ConstraintSet, set_name: str) -> str | None:
    """Why the p-player class ``player`` cannot play on the built set
    ``constraint`` (registered as ``set_name``): its ``constraints`` names
    leave the set out, or its ``supports`` says why; None if it can."""
    names = getattr(player, "constraints", None)
    if names is not None and set_name not in names:
        return f"works on constraint sets {list(names)} only"
    supports = getattr(player, "supports", None)
    return supports(constraint) if supports is not None else None
