"""Drago (Mehta, Diakonikolas and Harchaoui, "Primal-Dual Coupled Variance
Reduction for Faster Distributionally Robust Optimization", NeurIPS 2024,
Algorithm 1): a stochastic primal-dual method for ``F`` (``harness.problem``)
with ``mu > 0`` and ``nu > 0``, linearly convergent, that keeps per-row tables
of losses, gradients and dual weights over blocks of ``b`` contiguous rows.

Each step updates the primal iterate from a variance-reduced gradient (block
``I``, drawn uniformly), evaluates a cyclic block ``K`` and a drawn block ``J``
at the new iterate, and takes a proximal step on the dual over all n rows (the
chi-square or KL penalty's Bregman divergence to the last dual iterate). Its
kernels are the template ``plugins.solvers.drago_kernels``, run on any model
through the model's row roles (``plugins.solvers.row_solver``); the dual step
is compiled too when the set has row caps or a spectrum
(``plugins.solvers.set_form``), else it is the set's own projection called from
Python. Derivations, the counters and the memory: docs/algorithms.md, "Drago".
"""

from __future__ import annotations

import math
from typing import Any, ClassVar, NamedTuple

import numpy as np
from numba import njit

import harness
from harness import ConfigError, Param
from harness.protocols import EuclideanProjection
from plugins.lib.capped import kl_projection_row_caps, sorted_breakpoint_threshold
from plugins.lib.permutahedron import permutahedron_kl_projection, permutahedron_projection
from plugins.lib.steps import scale_param, scaled_step
from plugins.solvers.row_solver import RowSolver, row_data
from plugins.solvers.set_form import ROW_CAPS, SetForm, set_form

#: ``counts_[3]`` after the set-up: every row's gradient is at the current iterate
ALL_FRESH = -2
#: Newton passes of the warm-started threshold before the sorted, exact one
NEWTON_PASSES = 64
#: the smallest positive normal float: ``log q`` of a weight that underflowed
TINY = np.finfo(np.float64).tiny


class BlockSize:
    """The type of the ``block_size`` parameter (a ``Param`` has one type):
    an int >= 1, or the word "n/d" (``n // d``, at least 1). Its name is
    what the parameter listing prints."""


BlockSize.__name__ = "an int >= 1 or 'n/d'"


class DragoState(NamedTuple):
    """Drago's state (arrays, updated in place by the kernels, read by name).

    ``w``: the iterate; ``blocks``: each block's last iterate (M x p) and
    ``w_sum`` their sum; ``q``: the dual iterate, ``log_q`` its log (KL; else
    empty); ``q_hat``/``q_old``, ``l_hat``/``l_old``, ``G``/``G_old``: the
    tables of dual weights, losses and gradients and their previous values;
    ``g_sum = sum_i q_hat_i G_i``; ``v``: the dual step's input (chi-square:
    the point to project; KL: the log-weights); ``Z``: block K's row scratch;
    ``k_losses``/``j_losses``: blocks K's and J's losses at the new iterate;
    ``z``, ``g``, ``delta``: scratch; ``tau``: the last threshold of the
    capped chi-square step (nan before the first); ``log_caps``: the log row
    caps (KL on row caps; else empty); ``counts``: data points, gradients
    formed, steps, the block whose gradients are at ``w`` (``ALL_FRESH`` after
    the set-up, -1 none) and the sorted fallbacks of the threshold."""

    w: np.ndarray
    blocks: np.ndarray
    w_sum: np.ndarray
    g_sum: np.ndarray
    q: np.ndarray
    log_q: np.ndarray
    q_hat: np.ndarray
    q_old: np.ndarray
    l_hat: np.ndarray
    l_old: np.ndarray
    G: np.ndarray
    G_old: np.ndarray
    v: np.ndarray
    Z: np.ndarray
    k_losses: np.ndarray
    j_losses: np.ndarray
    z: np.ndarray
    g: np.ndarray
    delta: np.ndarray
    tau: np.ndarray
    log_caps: np.ndarray
    counts: np.ndarray


class DragoConstants(NamedTuple):
    """Drago's constants: ``n``, the block size ``b``, the blocks ``M =
    ceil(n/b)``, the step ``eta``, the coupling ``C = 1/(16 eta (1+eta)
    (n-1)^2)``, ``mu``, ``nu``, the radius and whether the penalty is KL."""

    n: np.int64
    b: np.int64
    M: np.int64
    eta: float
    C: float
    mu: float
    nu: float
    radius: float
    kl: bool
    steady: bool


@njit(cache=True, error_model="numpy")
def capped_threshold(v, caps, tau0):  # pragma: no cover - compiled
    """``tau`` with ``sum_i clip(v_i - tau, 0, c_i) = 1`` (``c = caps``, ``sum c >
    1``), the threshold of the Euclidean projection onto the capped simplex,
    by Newton's method on that piecewise linear, non-increasing function from
    ``tau0`` (nan: the simplex's ``(sum v - 1)/n``) inside a shrinking bracket.
    Each O(n) pass also finds the breakpoints on either side of ``tau``: a
    Newton point on the linear piece it started on is the root, exactly. A
    Newton point outside the bracket is replaced by the secant of the bracket's
    ends; after ``NEWTON_PASSES`` passes the sorted walk
    (``plugins.lib.capped.sorted_breakpoint_threshold``) gives it. Returns
    ``tau`` and the passes made (``NEWTON_PASSES + 1``: the sorted walk)."""
    n = v.size
    mass = 0.0
    for i in range(n):
        mass += caps[i]
    if mass <= 1.0 + 1e-12:  # K is the single point caps: every row at its cap
        return -np.inf, 0
    tau = tau0
    if not np.isfinite(tau):
        total = 0.0
        for i in range(n):
            total += v[i]
        tau = (total - 1.0) / n
    lo, f_lo = -np.inf, np.nan
    hi, f_hi = np.inf, np.nan
    for passes in range(1, NEWTON_PASSES + 1):
        f = 0.0
        right = 0  # rows free just right of tau
        left = 0  # rows free just left of tau
        nxt = np.inf  # the nearest breakpoint above tau
        prv = -np.inf  # the nearest breakpoint below tau
        for i in range(n):
            top = v[i]
            low = top - caps[i]
            if tau <= low:
                f += caps[i]
            elif tau < top:
                f += top - tau
            if low <= tau < top:
                right += 1
            if low < tau <= top:
                left += 1
            if low > tau:
                nxt = min(nxt, low)
            elif top > tau:
                nxt = min(nxt, top)
            if top < tau:
                prv = max(prv, top)
            elif low < tau:
                prv = max(prv, low)
        if f == 1.0:
            return tau, passes
        if f > 1.0:  # the root is above tau: f falls with slope -right up to nxt
            if right > 0:
                step = tau + (f - 1.0) / right
                if step <= nxt:
                    return step, passes
                lo, f_lo = nxt, f - right * (nxt - tau)
            else:
                step = nxt
                lo, f_lo = nxt, f
        else:  # below: f rises with slope left down to prv
            if left > 0:
                step = tau - (1.0 - f) / left
                if step >= prv:
                    return step, passes
                hi, f_hi = prv, f + left * (tau - prv)
            else:
                step = prv
                hi, f_hi = prv, f
        if not lo < step < hi:  # past the bracket: its secant
            if np.isfinite(lo) and np.isfinite(hi) and f_lo != f_hi:
                step = lo + (f_lo - 1.0) * (hi - lo) / (f_lo - f_hi)
            if not lo <= step <= hi:
                step = 0.5 * (lo + hi) if np.isfinite(lo + hi) else (lo if f > 1.0 else hi)
        tau = step
    return sorted_breakpoint_threshold(np.sort(v), np.sort(v - caps)), NEWTON_PASSES + 1


@njit(cache=True, error_model="numpy")
def drago_dual_step(st, consts, form):  # pragma: no cover - compiled
    """The dual iterate ``st.q`` from the dual step's input ``st.v`` on the set's
    ``form`` (a ``SetForm``): chi-square, the Euclidean projection of ``v``
    (row caps: ``capped_threshold`` from the last threshold; a spectrum: pool
    adjacent violators); KL, the KL projection of the weights ``exp(v)``
    (``kl_projection_row_caps``, ``permutahedron_kl_projection``) and ``log q``.
    Returns 0, or 1 when no KL projection exists."""
    n = st.q.size
    if form.kind == ROW_CAPS:
        caps = form.caps
        if consts.kl:
            q, _, feasible = kl_projection_row_caps(st.v, caps, st.log_caps)
            if not feasible:
                return 1
            st.q[:] = q
        else:
            tau, passes = capped_threshold(st.v, caps, st.tau[0])
            if passes > NEWTON_PASSES:
                st.counts[4] += 1
            if np.isfinite(tau):
                st.tau[0] = tau
            for i in range(n):
                st.q[i] = min(max(st.v[i] - tau, 0.0), caps[i])
    elif consts.kl:
        q, _, feasible = permutahedron_kl_projection(st.v, form.sigma)
        if not feasible:
            return 1
        st.q[:] = q
    else:
        st.q[:] = permutahedron_projection(st.v, form.sigma)
    if consts.kl:
        for i in range(n):
            st.log_q[i] = np.log(max(st.q[i], TINY))
    return 0


def default_step(n: int, b: int) -> float:
    """The default eta for ``n`` rows in blocks of ``b``: ``b / (8n)`` (``Drago``)."""
    return b / (8.0 * n)


class Drago(RowSolver):
    """Algorithm 1 of Mehta, Diakonikolas and Harchaoui (NeurIPS 2024) on ``F``
    (``harness.problem``), ``mu > 0`` and ``nu > 0``, with the chi-square or the
    KL penalty.

    Rows in ``M = ceil(n/b)`` contiguous blocks of ``block_size`` rows (the
    last may be shorter); at step t the block ``K = (t-1) mod M`` in turn and
    blocks ``I`` and ``J`` drawn uniformly and independently from the run's
    generator. The primal step minimises an isotropic quadratic (the
    variance-reduced gradient of block I, the penalty ``(mu/2)||w||^2``, the
    proximity ``beta_t`` to the last iterate and the coupling ``C`` to the
    blocks' last iterates), so with a ball its minimiser over the ball is the
    projection of the free one. The dual step is the proximal step of the
    penalty's Bregman divergence, weight ``beta_t = (1 - (1+eta)^(1-t)) /
    (eta (1+eta))``: the Euclidean projection onto K (chi-square) or the KL
    projection (KL). Every dual step is taken (the authors' ``interval = 1``).
    ``schedule=steady`` holds ``beta_t`` at its limit ``1/(eta (1+eta))`` from
    the first step (the paper's weights with a weight ``1/eta`` on the initial
    point): the paper's first steps, of about ``1/(mu t)``, overshoot where
    the smoothness of F is large against ``mu``.

    Step ``eta = lr``, default ``lr_scale * b / (8n)`` (``default_step``): the
    weights ``(1+eta)^t`` must not outgrow a cycle through the M = n/b blocks
    (each table entry is M steps old when refreshed), so eta is of the order of
    b/n. On a grid 3e-4 ... 0.3 (yacht and power, blocks of 1, 16 and n/d rows,
    100 passes) the best eta was about b/(2n) on the superquantile and b/(22n)
    to b/(7n) on the chi-square ball, diverging above about b/(2n) there; b/(8n)
    converges on both (docs/algorithms.md, "Drago"). The authors' code's default
    is 0.01 for every b (``lr=0.01``), which their study tunes. ``block_size``:
    an int, or "n/d" (``n // d``, d the columns of X, at least 1; the authors'
    default).

    Counters per step (docs/tracking.md, Counters): block K at the new iterate
    (b data points; gradients of the rows whose new dual weight is nonzero);
    block I at the last iterate where its dual weight is nonzero (a data point
    and a gradient each), nothing when its table gradients are at that iterate
    (I was the last step's K, or the first step); block J at the new iterate
    unless J = K (b data points). Memory: two gradient tables of n x p (the
    model's full row gradients; the row roles promise no smaller form), the M x p
    block iterates and O(n) vectors.
    """

    name: ClassVar[str] = "drago"
    #: the penalties of ``F`` it solves (``harness.problem``)
    penalties: ClassVar[tuple[str, ...]] = ("chi2", "kl")
    #: linear convergence on a smooth, strongly convex-strongly concave problem
    #: (``harness.protocols.Solver``)
    contract_accuracy: ClassVar[float] = 1e-8
    template: ClassVar[str] = "plugins.solvers.drago_kernels"
    params: ClassVar[dict[str, Param]] = {
        "lr": Param(float, low=0.0, low_open=True, nullable=True,
                    doc="the step eta; None: b / (8n) (the authors' code: 0.01, tuned)"),
        "lr_scale": scale_param("lr"),
        "block_size": Param(BlockSize, default="n/d",
                            doc="rows per block b; 'n/d': n // d (d the columns of X), at "
                                "least 1"),
        "schedule": Param(str, default="paper", choices=("paper", "steady"),
                          doc="beta_t: paper, (1 - (1+eta)^(1-t)) / (eta (1+eta)); steady, its "
                              "limit 1 / (eta (1+eta)) from t = 1"),
    }

    def __init__(self, lr: float | None = None, lr_scale: float = 1.0,
                 block_size: Any = "n/d", schedule: str = "paper") -> None:
        super().__init__(lr, lr_scale)
        self.schedule = schedule
        if block_size != "n/d" and (isinstance(block_size, bool) or not isinstance(
                block_size, int | np.integer) or block_size < 1):
            raise ConfigError(f"The 'block_size' parameter of drago must be an int >= 1 or "
                              f"'n/d'. Got {block_size!r} instead.")
        self.block_size = block_size if block_size == "n/d" else int(block_size)

    @classmethod
    def contract_params(cls, n: int) -> dict[str, Any]:
        """The contract suite's parameters (``harness.contract``): the steady
        schedule, blocks of one row. On the suite's problems (mu = 0.1, rows
        of smoothness up to 5.9: L/mu = 59) the paper's first steps, of about
        ``1/(mu t)`` (``beta_t`` about ``t - 1``), grow the iterate past 1e50
        before they shrink below ``2/L``; the steady schedule with blocks of
        one row at twice the default step (eta = b/(4n)) reaches the suite's 1e-8
        in its 200 passes on every built-in model (at b/(8n) the logistic model
        ends at 1.1e-8; docs/algorithms.md, "Drago")."""
        return {"schedule": "steady", "block_size": 1, "lr_scale": 2.0}

    # -- set-up ------------------------------------------------------------------

    def _check(self, problem: Any) -> tuple[str, SetForm | None]:
        """The penalty and the set's form (None: no row caps or spectrum), or a
        ``ConfigError`` naming what the problem lacks."""
        mu, nu = float(problem.mu), float(problem.nu)
        if not (mu > 0.0 and nu > 0.0):
            raise ConfigError(
                f"The solver 'drago' needs problem.mu > 0 and problem.nu > 0 (its theory is "
                f"strongly convex-strongly concave, and its dual step divides by nu). Got "
                f"mu={mu!r} and nu={nu!r}.")
        penalty = getattr(problem, "penalty", "chi2")
        if penalty not in self.penalties:
            raise ConfigError(f"The solver 'drago' takes problem.penalty in "
                              f"{list(self.penalties)}. Got {penalty!r} instead.")
        constraint = problem.constraint
        try:
            form = set_form(self.name, constraint)
        except ConfigError:
            form = None
        if form is None:
            set_name = getattr(constraint, "name", type(constraint).__name__)
            if penalty == "chi2" and not isinstance(constraint, EuclideanProjection):
                raise ConfigError(
                    f"The solver 'drago' with the chi2 penalty takes its dual step by the "
                    f"Euclidean projection onto K; the constraint set '{set_name}' has no "
                    "euclidean_project (nor row caps or a spectrum).")
            if penalty == "kl" and not callable(getattr(constraint, "project", None)):
                raise ConfigError(
                    f"The solver 'drago' with the kl penalty takes its dual step by the KL "
                    f"projection onto K; the constraint set '{set_name}' has no project "
                    "(nor row caps or a spectrum).")
        return penalty, form

    def _block(self, n: int, d: int) -> int:
        """The rows per block: ``block_size``, or ``n // d`` (at least 1)."""
        if self.block_size == "n/d":
            return max(1, n // max(1, d))
        if self.block_size > n:
            raise ConfigError(f"The 'block_size' parameter of drago must be an int in [1, "
                              f"n={n}] or 'n/d'. Got {self.block_size!r} instead.")
        return int(self.block_size)

    def setup(self, problem: Any, budget: int) -> dict[str, Any]:
        penalty, form = self._check(problem)
        self.form_ = form
        self.penalty_ = penalty
        X, y = row_data(problem)
        n, p = X.shape[0], problem.n_params
        b = self._block(n, X.shape[1] if X.ndim == 2 else 1)
        blocks = -(-n // b)
        self.lr_default_ = default_step(n, b)
        eta = scaled_step(self.name, "lr", self.lr, self.lr_scale, self.lr_default_)
        self.lr_ = eta
        coupling = 1.0 / (16.0 * eta * (1.0 + eta) * (n - 1) ** 2) if n > 1 else 0.0
        kl = penalty == "kl"
        self.n_ = n
        self.consts_ = DragoConstants(np.int64(n), np.int64(b), np.int64(blocks), float(eta),
                                      float(coupling), float(problem.mu), float(problem.nu),
                                      float(problem.radius), bool(kl),
                                      bool(self.schedule == "steady"))
        kernels, ms = self._kernels(problem)
        scratch = int(kernels.m_row_scratch(ms))
        caps = form.caps if form is not None and form.kind == ROW_CAPS else None
        st = DragoState(
            w=np.zeros(p), blocks=np.zeros((blocks, p)), w_sum=np.zeros(p), g_sum=np.zeros(p),
            q=np.full(n, 1.0 / n), log_q=np.full(n if kl else 0, -math.log(n)),
            q_hat=np.full(n, 1.0 / n), q_old=np.full(n, 1.0 / n),
            l_hat=np.empty(n), l_old=np.empty(n), G=np.empty((n, p)), G_old=np.empty((n, p)),
            v=np.empty(n), Z=np.empty((b, scratch)), k_losses=np.empty(b),
            j_losses=np.empty(b), z=np.empty(scratch), g=np.empty(p), delta=np.empty(p),
            tau=np.full(1, np.nan),
            log_caps=np.log(caps) if kl and caps is not None else np.empty(0),
            counts=np.zeros(5, dtype=np.int64))
        kernels.drago_setup(ms, X, y, st)
        self.state_ = st
        self.w = st.w
        self.counts_ = st.counts
        self._sync()
        return {"lr": eta, "lr_default": self.lr_default_, "block_rows": b, "blocks": blocks,
                "coupling": coupling, "penalty": penalty}

    # -- steps -------------------------------------------------------------------

    def _steps(self, kernels, ms, X, y, problem: Any, rng, until: int) -> None:
        """Steps until ``until`` data points: all compiled when the set has a
        form (``drago_steps``), else the kernels' halves around the set's own
        projection, with the same draws."""
        st, consts = self.state_, self.consts_
        if self.form_ is not None:
            status = kernels.drago_steps(ms, X, y, st, consts, self.form_, rng, until)
            if status != 0:
                raise ValueError("drago's KL dual step found no projection onto K (every "
                                 "weight the set needs underflowed to zero)")
            return
        constraint, blocks = problem.constraint, int(consts.M)
        while st.counts[0] < until:
            first, second = rng.integers(0, blocks), rng.integers(0, blocks)
            kernels.drago_primal(ms, X, y, st, consts, first, second)
            if consts.kl:
                st.q[:] = constraint.project(st.v, 0.0, log_domain=True)
                np.log(np.maximum(st.q, TINY), out=st.log_q)
            else:
                st.q[:] = constraint.euclidean_project(st.v)
            kernels.drago_tables(ms, X, y, st, consts)

    @property
    def q(self) -> np.ndarray:
        """The dual iterate ``q_t`` (a point of K)."""
        return self.state_.q.copy()


@harness.hookimpl
def register_solvers(register):
    register(Drago)
