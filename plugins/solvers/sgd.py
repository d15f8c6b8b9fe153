"""SGD on the Rockafellar-Uryasev form of ``F``: the SGD baseline of the DRO
literature's comparisons (Curi, Levy, Jegelka and Krause, "Adaptive Sampling
for Stochastic Risk-Averse Learning", NeurIPS 2020, "Trunc-CVaR"; Mehta,
Roulet, Pillutla and Harchaoui, ICLR 2024, the "SGD" of their figures),
generalised to the chi-square shift cost ``nu > 0`` and the penalty ``mu``.

**The form.** For ``K = {0 <= q_i <= c_i, sum q = 1}`` (``c = row_caps()``),
dualising the constraint ``sum q = 1`` with a multiplier ``tau`` (a concave
maximisation over a box with one linear equality: no duality gap),

    max_{q in K} <l, q> - (nu n/2) ||q - 1/n||^2 = min_tau tau + sum_i phi_i(l_i - tau),
    phi_i(z) = max_{0 <= q <= c_i} q z - (nu n/2) (q - 1/n)^2,

each ``phi_i`` convex and nondecreasing with (Danskin) ``phi_i'(z) = clip(1/n +
z/(nu n), 0, c_i)``, the maximising q; for ``nu = 0``, ``phi_i(z) = c_i max(z,
0)`` with subgradient ``c_i 1[z > 0]`` (Rockafellar and Uryasev 2000, Theorem
1, for the k-set ``c_i = 1/k``). Hence ``F(w) = min_tau G(w, tau)`` with

    G(w, tau) = (1/n) sum_i [tau + n phi_i(L_i(w) - tau)] + (mu/2) ||w||^2,

an average of n jointly convex terms (convex nondecreasing ``phi_i`` of a
convex loss minus ``tau``), so plain SGD on ``(w, tau)`` is unbiased.

**The schedule** (``SGD``'s docstring): on the paper's nonsmooth problem in
a ball, the step and average of SGD's theory, ``D / (G sqrt(t))`` with the
uniform average (Zinkevich 2003, Theorem 1; Bubeck 2015, Theorem 6.1), the
constants taken from the problem (its ball, the rows' gradient bound, the
caps). Elsewhere a heuristic shape motivated by Bubeck (2015), Theorem 6.3:
for about one pass the row solvers' default constant step ``1 / (n max_i
c_i L + mu)`` (``plugins.solvers.row_solver.default_step``, Prospect's and
LSVRG's default step, not a smoothness constant of ``G``), then a ``1 /
sqrt(t)`` decay, with the uniform average. ``2 / (mu (t + a))`` with the
weighted average for a known strong convexity (Bubeck 2015, Theorem 6.2) on
request.

Its kernels are the template ``plugins.solvers.sgd_kernels``, run on any
model through the model's row roles (``plugins.solvers.row_solver``)."""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np
from numba import njit

import harness
from harness import Param
from plugins.lib.steps import check_scale, scale_param
from plugins.solvers.row_solver import LR_SCALE_PARAM, RowSolver

#: schedule codes of the kernel
CONSTANT, INVERSE, SQRT = 0, 1, 2
SCHEDULES = {"constant": CONSTANT, "inverse": INVERSE, "sqrt": SQRT}


class SGD(RowSolver):
    """Mini-batch SGD on ``G(w, tau)`` (module docstring) with the step schedule
    and average of its theory where one applies (``nu = 0`` in a ball), a
    heuristic schedule shaped after it elsewhere.

    Per step t = 1, 2, ...: b rows drawn uniformly *with* replacement
    (``Generator.integers(0, n)``, b independent draws); for each, ``z_i =
    L_i(w) - tau`` and the weight ``s_i = n phi_i'(z_i)`` (``ru_weight``); then

        w   <- w   - eta_t   ((1/b) sum s_i grad L_i(w) + mu w),
        tau <- tau - theta_t (1 - (1/b) sum s_i),

    both at the same ``(w, tau)``; ``w`` is projected onto the ball when the
    radius is finite and ``tau`` onto ``[tau_lo, tau_hi] = [-nu (n max_i c_i
    - 1), U + nu]`` when the model's loss bound ``U`` over the ball is finite
    (the minimising tau has ``sum_i clip(1/n + (L_i - tau) / (nu n), 0, c_i)
    = 1``, so it lies there; for ``nu = 0`` it is a quantile of the losses,
    in ``[0, U]``). ``w_0 = 0``, ``tau_0 = 0``. A row with ``s_i = 0`` adds
    nothing, so its gradient is not formed (its loss is evaluated: it decides
    ``s_i``). The reported ``w`` is the average of the points at which the
    gradients were taken (``w_0, ..., w_{t-1}``, weighted as the schedule's
    theorem says), or with ``average=false`` the last iterate.

    **Schedules** (``eta_t = lr f_t``, ``theta_t = tau_lr f_t``):

    * ``sqrt`` (the default): ``f_t = sqrt(t0 / (t0 + t - 1))`` and the
      uniform average.

      - ``nu = 0`` in a ball, with the model's loss bound ``U`` and gradient
        bound ``G`` over it finite (the paper's problem: ``G(w, tau)``
        nonsmooth on a bounded domain): ``t0 = 1``, i.e. ``eta_t = D_w /
        (G_w sqrt(t))`` and ``theta_t = D_tau / (G_tau sqrt(t))``: per block the diameter over
        the bound on the stochastic gradient, ``D_w = 2B``, ``G_w = n max_i
        c_i G + mu B`` (``s_i <= n max_i c_i``, ``G`` the rows' gradient
        bound over the ball, ``model.grad_bound``), ``D_tau = tau_hi -
        tau_lo``, ``G_tau = max(1, n max_i c_i - 1) >= |1 - s_i|``.
        Zinkevich (2003, "Online convex programming and generalized
        infinitesimal gradient ascent", Theorem 1), in the coordinates
        scaled by the two steps, bounds the regret of the points played by
        ``(3/2) (D_w G_w + D_tau G_tau) sqrt(T)``; the gradients being
        unbiased, ``E G(w_bar_T, tau_bar_T) - F* <= (3/2) (D_w G_w + D_tau
        G_tau) / sqrt(T)`` for their uniform average (the online-to-batch
        step of the proof of Bubeck 2015, "Convex Optimization: Algorithms
        and Complexity", Theorem 6.1, which has the constant step ``R / (B
        sqrt(T))`` for a known horizon). The bounds are worst cases over the
        ball, so the tuned step is larger (on Boston at k = 20, 9 times).
      - otherwise: ``nu > 0``, or ``nu = 0`` without the constants above,
        i.e. without a finite range ``[tau_lo, tau_hi]`` (no ball, or a
        model whose loss bound ``U`` over the ball is infinite; a model may
        have a finite ``G`` and no such bound, as ``logistic_cel`` without a
        ball) or without a finite ``G``. A heuristic: ``lr = tau_lr = 1 /
        (n max_i c_i L + mu)``, the row solvers' default constant step
        (``plugins.solvers.row_solver.default_step``, Prospect's and LSVRG's
        default), for about the first pass, ``t0 = n / b``, then ``lr
        sqrt(t0 / (t0 + t - 1))``. That step is not ``1 / beta`` for a
        smoothness ``beta`` of ``G(w, tau)``: each term's w-gradient ``s_i grad
        L_i`` carries a weight ``s_i <= n max_i c_i`` on an L-smooth loss,
        so ``n max_i c_i L + mu`` bounds that part of the curvature, but
        the smoothed max adds ``||grad L_i||^2 / nu``, which the squared
        error leaves unbounded (and with ``nu = 0`` ``G(w, tau)`` is not
        differentiable). The shape is motivated by Bubeck (2015), Theorem
        6.3 (f convex and beta-smooth, gradient noise of variance
        ``sigma^2``, a horizon t known in advance: the constant step ``1 /
        (beta + sigma sqrt(t/2) / R)`` and the average give ``E f - f* <= R
        sigma sqrt(2/t) + beta R^2 / t``): a smooth step while the noise
        term is small, then one of order ``R / (sigma sqrt(t))``. The
        theorem's step is constant for its horizon, not a schedule in t,
        and where its two regimes meet, ``2 (beta R / sigma)^2`` steps,
        needs ``R``, ``sigma`` and ``beta``, none known before the run:
        the switch at one pass is a choice. With ``nu = 0`` (e.g. ``mu >
        0`` and no ball) ``G(w, tau)`` is nonsmooth and no theorem covers
        this branch. The steps do not use mu; the motivation is that averaged
        SGD with steps proportional to ``1 / sqrt(t)`` adapts to a strong
        convexity it is not told (Bach and Moulines 2011, "Non-asymptotic
        analysis of stochastic approximation algorithms for machine
        learning": the averaged iterates reach the ``1 / (mu t)`` rate for
        a strongly convex function with Lipschitz gradients), which would
        matter on Prospect's problem, whose modulus ``mu = 1/n`` is far
        below the data's curvature. It is not a guarantee here: ``G(w,
        tau)`` is flat in tau where every row is clipped (``s_i`` at 0 or
        ``n c_i``), and its gradient is not Lipschitz (the curvature above;
        with ``nu = 0`` it has no gradient).

    * ``inverse`` (mu > 0): ``f_t = t0 / (t0 + t - 1)`` with ``t0 = 2 / (mu
      lr_default)``, i.e. ``eta_t = 2 / (mu (t + a))`` with ``a = t0 - 1``,
      and the average with weights ``t + a - 1``; ``lr = tau_lr = 1 / (n
      max_i c_i L + mu)``. For a mu-strongly convex f with ``E||g||^2 <=
      B^2`` the proof of Bubeck (2015), Theorem 6.2 (Lacoste-Julien, Schmidt
      and Bach 2012; there ``a = 1``) goes through with ``t + a`` in place of
      ``t + 1`` and gives ``E f(w_bar_t) - f* <= 2 B^2 / (mu (t + 2a - 1)) +
      mu a (a - 1) ||w_0 - w*||^2 / (2 t (t + 2a - 1))``; ``a`` makes the
      first step the smooth one. Not the default: ``G`` is strongly convex
      in ``w`` only, and with ``mu = 1/n`` (Prospect's problem) the steps
      stay near ``lr`` for about ``2 / lr`` passes, past the whole budget on
      the larger sets (on kin8nm the protocol's tuned multiplier of this
      schedule is 3^-3).
    * ``constant``: ``f_t = 1``, ``lr`` the row solvers' default
      (``plugins.solvers.row_solver``: ``1 / (n max_i c_i L + mu)``, with ``nu =
      0`` in a ball at most ``B / (n max_i c_i G sqrt(T))``), ``tau_lr =
      lr``: the DRO papers' SGD, which they tune; it only reaches a
      neighbourhood of the optimum of size O(lr). ``T = budget // b``, the
      steps of the budget when every draw costs a data point; a step that
      draws a row twice costs fewer than b (counters below), so with b > 1
      a run takes somewhat more than T steps at that step.

    ``lr_scale`` multiplies every step of w's schedule (the default ``lr``;
    the schedule's shape, ``t0``, stays), ``tau_lr_scale`` every step of
    tau's. ``tau_lr``'s default follows the step in use: ``tau_lr =
    tau_lr_default * lr / lr_default`` (so ``lr_scale=s`` is the run with
    ``lr = s * lr_default``). ``lr`` and ``tau_lr`` given set the first
    step of each schedule. On ``experiment=prospect`` and on the paper's
    problem on Boston (k = 20) the tuning protocol's multiplier of the
    default is between 3^-2 and 3^2 (``tools/step_table.py``).

    With ``mu = nu = 0`` this is the algorithm of ``p_player=ru_sgd`` with
    ``w_player=ogd`` (Trunc-CVaR): the same stochastic subgradient ``c_i
    1[L_i > tau]``, but here with rows drawn with replacement and in one
    solver rather than split into the game's two players.

    Counters (``docs/tracking.md``, Counters): no set-up cost; each step
    evaluates the loss of every distinct drawn row at ``w`` (one data point
    each: a row drawn twice in a step is evaluated once and counts once, its
    weight and gradient entering the estimate twice) and forms the gradient
    of each of those with ``s_i != 0``. ``data_points`` can so overshoot a
    target by less than b. No dual iterate (``q`` is None).
    """

    name: ClassVar[str] = "sgd"
    template: ClassVar[str] = "plugins.solvers.sgd_kernels"
    params: ClassVar[dict[str, Param]] = {
        "lr": Param(float, low=0.0, low_open=True, nullable=True,
                    doc="first step of w's schedule; None: the schedule's default "
                        "(class docstring)"),
        "lr_scale": LR_SCALE_PARAM,
        "tau_lr": Param(float, low=0.0, low_open=True, nullable=True,
                        doc="first step of the threshold tau's schedule; None: its default "
                            "times lr / lr_default"),
        "tau_lr_scale": scale_param("tau_lr"),
        "schedule": Param(str, default="sqrt", choices=("sqrt", "inverse", "constant"),
                          doc="sqrt: lr sqrt(t0 / (t0 + t)) (nu = 0 in a ball: lr = D / G, "
                              "t0 = 1; else the row solvers' default step for about a pass, "
                              "t0 = n / batch); "
                              "inverse: 2 / (mu (t + a)) (mu > 0); constant: lr"),
        "batch": Param(int, default=1, low=1, doc="rows per step b, drawn with replacement"),
        "average": Param(bool, default=True,
                         doc="report the schedule's average of the points where the "
                             "gradients are taken (inverse: weights t + a - 1; else "
                             "uniform); false: the last iterate"),
    }

    #: no dual iterate: the harness reports no dual gap
    q = None

    def __init__(self, lr: float | None = None, tau_lr: float | None = None, batch: int = 1,
                 average: bool = True, lr_scale: float = 1.0, tau_lr_scale: float = 1.0,
                 schedule: str = "sqrt") -> None:
        self.lr = lr
        self.lr_scale = lr_scale
        self.tau_lr = tau_lr
        self.tau_lr_scale = tau_lr_scale
        self.schedule = schedule
        self.batch = batch
        self.average = average

    def setup(self, problem: Any, budget: int) -> dict[str, Any]:
        self._prepare(problem, budget // max(int(self.batch), 1))
        check_scale(self.name, "tau_lr", self.tau_lr, self.tau_lr_scale)
        n, mu, nu = self.n_, float(problem.mu), self.nu_
        radius = float(problem.radius)
        spread = n * float(np.max(self.caps_))
        schedule = self.schedule
        bound = float(getattr(problem.model, "loss_bound", math.inf)) / problem.scale
        grad_bound = float(problem.model.grad_bound)
        self.tau_lo_, self.tau_hi_ = -math.inf, math.inf
        if math.isfinite(radius) and math.isfinite(bound):
            self.tau_lo_, self.tau_hi_ = -nu * (spread - 1.0), bound + nu
        bounded = math.isfinite(self.tau_hi_) and math.isfinite(grad_bound)
        self.t0_ = math.inf
        if schedule == "inverse":
            if not mu > 0.0:
                raise harness.ConfigError(
                    "The 'schedule' parameter of sgd is 'inverse' (steps 2 / (mu (t + a))) "
                    "but mu = 0: choose schedule=sqrt or constant, or mu > 0.")
            lr_default = tau_default = self.lr_smooth_
            self.t0_ = 2.0 / (mu * lr_default)
        elif schedule == "sqrt" and nu == 0.0 and bounded:  # nonsmooth, in a ball
            lr_default = 2.0 * radius / (spread * grad_bound + mu * radius)
            tau_default = (self.tau_hi_ - self.tau_lo_) / max(1.0, spread - 1.0)
            self.t0_ = 1.0
        elif schedule == "sqrt":  # smooth (nu > 0) or unbounded: the smooth step first
            lr_default = tau_default = self.lr_smooth_
            self.t0_ = max(1.0, n / max(int(self.batch), 1))
        else:
            lr_default = tau_default = self.lr_default_
        if math.isnan(lr_default):  # the model declares no smoothness (row_solver)
            if self.lr is None:
                raise harness.ConfigError(
                    f"The solver 'sgd' (schedule={schedule}) starts from the rows' smoothness, "
                    f"and model '{getattr(problem.model, 'name', type(problem.model).__name__)}' "
                    "declares none (row_smoothness(X) is None): give solver.lr.")
            lr_default = tau_default = float(self.lr)
            if schedule == "inverse":
                self.t0_ = 2.0 / (mu * lr_default)
        self.schedule_ = schedule
        self.lr_default_ = lr_default
        self.lr_ = float(self.lr) if self.lr is not None else self.lr_scale * lr_default
        self.tau_lr_default_ = tau_default * self.lr_ / lr_default
        self.tau_lr_ = (float(self.tau_lr) if self.tau_lr is not None
                        else self.tau_lr_scale * self.tau_lr_default_)
        p = problem.n_params
        self.iterate_ = np.zeros(p)
        self.average_ = np.zeros(p)
        #: [tau, the average's weight so far]
        self.tau_ = np.zeros(2)
        # counters: data points, gradients formed, steps
        self.counts_ = np.zeros(3, dtype=np.int64)
        b = int(self.batch)
        # the step that last evaluated each row and its draw there (sgd_steps)
        self.mark_ = np.full(n, -1, dtype=np.int64)
        self.slot_ = np.zeros(n, dtype=np.int64)
        self.batch_grads_ = np.zeros((b, p))
        self.batch_weights_ = np.zeros(b)
        self._sync()
        return {**self._logged(), "tau_lr": self.tau_lr_, "batch": int(self.batch),
                "schedule": schedule, "t0": self.t0_}

    def _steps(self, kernels, ms, X, y, problem: Any, rng, until: int) -> None:
        kernels.sgd_steps(ms, X, y, self.iterate_, self.average_, self.tau_, self.caps_,
                          self.nu_, float(problem.mu), self.lr_, self.tau_lr_,
                          float(problem.radius), int(self.batch), SCHEDULES[self.schedule_],
                          self.t0_, self.tau_lo_, self.tau_hi_, rng, until, self.counts_,
                          self.mark_, self.slot_, self.batch_grads_, self.batch_weights_)

    @property
    def w(self) -> np.ndarray:
        """The reported iterate: the average if ``average``, else the last (the
        average is ``w_0 = 0`` before the first step)."""
        return self.average_ if self.average else self.iterate_

    @property
    def tau(self) -> float:
        """The current threshold (the multiplier of ``sum q = 1``)."""
        return float(self.tau_[0])


@njit(cache=True, error_model="numpy")
def ru_weight(z, cap, nu, n):  # pragma: no cover - compiled
    """``n phi_i'(z)``: ``n clip(1/n + z/(nu n), 0, c_i)`` if ``nu > 0``, else the
    subgradient ``n c_i 1[z > 0]``."""
    if nu > 0.0:
        return n * min(max(1.0 / n + z / (nu * n), 0.0), cap)
    return n * cap if z > 0.0 else 0.0


def ru_phi(z: np.ndarray, caps: np.ndarray, nu: float, n: int) -> np.ndarray:
    """``phi_i(z_i)`` (module docstring), the value at the maximising q (the
    reference for ``ru_weight``, which is its derivative)."""
    if nu == 0.0:
        return caps * np.maximum(z, 0.0)
    q = np.clip(1.0 / n + z / (nu * n), 0.0, caps)
    return q * z - 0.5 * nu * n * (q - 1.0 / n) ** 2


@harness.hookimpl
def register_solvers(register):
    register(SGD)
