"""SGD on the Rockafellar-Uryasev form of ``F``: the SGD baseline of the DRO
literature's comparisons (Curi, Levy, Jegelka and Krause, "Adaptive Sampling
for Stochastic Risk-Averse Learning", NeurIPS 2020, "Trunc-CVaR"; Mehta,
Roulet, Pillutla and Harchaoui, ICLR 2024, the "SGD" of their figures),
generalised to the shift cost ``nu D(q || 1/n) > 0`` (chi-square or KL) and the
penalty ``mu``.

Dualising ``sum q = 1`` (Rockafellar and Uryasev 2000, Theorem 1, at ``nu = 0``)
gives ``F(w) = min_tau G(w, tau)`` with

    G(w, tau) = (1/n) sum_i [tau + n phi_i(L_i(w) - tau)] + (mu/2) ||w||^2,
    phi_i(z) = max_{0 <= q <= c_i} q z - nu d(q),

``d(q) = (n/2) (q - 1/n)^2`` (chi2) or ``q log(n q)`` (kl): both divergences are
sums over the rows. An average of n jointly convex terms, so plain SGD on ``(w,
tau)`` is unbiased. That is the form on a set with row caps. A set without
them takes the field's mini-batch estimator instead (ronakdm/prospect and
ronakdm/drago, ``StochasticSubgradientMethod`` with ``get_batch_subgrad``): b
distinct rows, weights ``q_b`` the inner maximiser of their losses over the set
on b rows, step on ``sum_j q_j grad l_j + mu w``. On a spectral set
``P(sigma)`` the set on b rows is ``P(sigma_b)`` and the kernel computes ``q_b``
(the spectrum on the sorted losses; the projection of ``1/b + l_b/(nu n)``
(chi2) or the KL projection of ``exp(l_b / nu)`` (kl)); on any other set that
offers ``subset(b)`` (the same set over b rows), ``Problem.inner`` over
``subset(b)`` with the authors' smoothing coefficient unchanged: ``nu n / b``
for chi2 (their shift cost ``nu n`` on ``(1/2)||q - 1/b||^2``), ``nu`` for kl.
Biased (the risk of a mini-batch is not an unbiased estimate of the risk), so
it reaches a neighbourhood of the optimum only. Its kernels are the template
``plugins.solvers.sgd_kernels``, run on any model through the model's row roles
(``plugins.solvers.row_solver``).
Derivation: docs/algorithms.md, "SGD: the form, the schedules and their theorems"
and "SGD on a spectral set".
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, ClassVar

import numpy as np
from numba import njit

import harness
from harness import Param
from plugins.lib.steps import check_scale, scale_param
from plugins.solvers.row_solver import LR_SCALE_PARAM, RowSolver, default_step
from plugins.solvers.set_form import ROW_CAPS, SetForm, largest_weight, set_form, spectrum_form

#: schedule codes of the kernel
CONSTANT, INVERSE, SQRT = 0, 1, 2
SCHEDULES = {"constant": CONSTANT, "inverse": INVERSE, "sqrt": SQRT}
#: the default batch on a set without row caps (ronakdm/prospect's ``batch_size``)
SPECTRAL_BATCH = 64
#: how ``sgd`` reads the set (``SGD.mode_``): the Rockafellar-Uryasev form on row
#: caps, the mini-batch estimator on a spectrum (in the kernel) or on ``subset(b)``
#: through ``Problem.inner``
RU, SPECTRAL, SUBSET = "ru", "spectral", "subset"


class SGD(RowSolver):
    """Mini-batch SGD on ``G(w, tau)`` (module docstring) with the step schedule
    and average of its theory where one applies (``nu = 0`` in a ball), a
    heuristic schedule shaped after it elsewhere.

    Per step: b rows drawn uniformly with replacement, ``s_i = n phi_i'(L_i(w) -
    tau)`` (``ru_weight``), ``w <- w - eta_t ((1/b) sum s_i grad L_i(w) + mu w)`` and
    ``tau <- tau - theta_t (1 - (1/b) sum s_i)``, then ``w`` projected onto the ball
    and ``tau`` onto ``[tau_lo, tau_hi]``; ``w_0 = 0``, ``tau_0 = 0``; ``w`` reported is
    the schedule's average of the points played (``average=false``: the last one).
    Schedules, ``eta_t = lr f_t``, ``theta_t = tau_lr f_t``: ``sqrt`` (default),
    ``f_t = sqrt(t0 / (t0 + t - 1))`` and the uniform average, with ``nu = 0`` in a
    ball ``t0 = 1`` and ``D / (G sqrt(t))`` per block (Zinkevich 2003, Theorem 1;
    Bubeck 2015, Theorem 6.1), elsewhere a heuristic from the row solvers' step,
    ``t0 = n / b`` (after Bubeck 2015, Theorem 6.3); ``inverse`` (``mu > 0``),
    ``eta_t = 2 / (mu (t + a))`` and the weighted average (Bubeck 2015, Theorem
    6.2); ``constant``, the row solvers' default step. ``tau_lr`` follows the step
    in use (``tau_lr_default * lr / lr_default``). With ``mu = nu = 0``: the
    algorithm of ``p_player=ru_sgd`` with ``w_player=ogd``. Each distinct drawn row
    counts one data point.

    On a set without row caps (module docstring; a spectrum, or any set with
    ``subset(b)``): b distinct rows per step (default 64), ``w <- w - eta_t
    (sum_j q_j grad L_j(w) + mu w)``, the same schedules and average, no tau
    (``tau_lr`` refused, ``tau`` nan); biased. ``mode_`` says which (``RU``,
    ``SPECTRAL``, ``SUBSET``). Either penalty, on every form. On ``subset(b)``
    the steps are a set of b rows': ``n sigma_max`` becomes ``b sigma_b``,
    ``sigma_b`` the batch set's largest weight (logged ``sigma_batch``).
    Derivation: docs/algorithms.md, "SGD: the form, the schedules and their
    theorems" and "SGD on a spectral set".
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
        "batch": Param(int, low=1, nullable=True,
                       doc="rows per step b: with row caps drawn with replacement (None: 1), "
                           "without them (a spectrum, subset(b)) b distinct rows "
                           "(None: 64, at most n)"),
        "average": Param(bool, default=True,
                         doc="report the schedule's average of the points where the "
                             "gradients are taken (inverse: weights t + a - 1; else "
                             "uniform); false: the last iterate"),
    }

    #: the penalties ``D`` of ``F`` it solves (``harness.problem``)
    penalties: ClassVar[tuple[str, ...]] = ("chi2", "kl")
    #: no dual iterate: the harness reports no dual gap
    q = None
    #: the saved state's version (``harness.state``): 2, ``mode_``, the penalty
    #: and, on ``subset(b)``, the batch's set (1: the batch in use, ``batch_``, and a
    #: spectral set's draw order and batch spectrum)
    state_version: ClassVar[int] = 2

    def __init__(self, lr: float | None = None, tau_lr: float | None = None,
                 batch: int | None = None,
                 average: bool = True, lr_scale: float = 1.0, tau_lr_scale: float = 1.0,
                 schedule: str = "sqrt") -> None:
        self.lr = lr
        self.lr_scale = lr_scale
        self.tau_lr = tau_lr
        self.tau_lr_scale = tau_lr_scale
        self.schedule = schedule
        self.batch = batch
        self.average = average

    def _form(self, problem: Any) -> SetForm | None:
        """The set's row caps or spectrum (``set_form``), or None for a set that
        offers ``subset(b)``; else a ``ConfigError`` naming what is missing."""
        try:
            return set_form(self.name, problem.constraint)
        except harness.ConfigError as err:
            if callable(getattr(problem.constraint, "subset", None)):
                return None
            name = getattr(problem.constraint, "name", type(problem.constraint).__name__)
            raise harness.ConfigError(
                f"The solver 'sgd' needs a constraint set with row caps (the "
                f"Rockafellar-Uryasev form), a spectrum or subset(m) (the mini-batch "
                f"estimator); '{name}' has none of them (row_caps() is None, spectrum() "
                "absent or None, no subset).") from err

    def setup(self, problem: Any, budget: int) -> dict[str, Any]:
        form = self._form(problem)
        self.mode_ = RU if form is not None and form.kind == ROW_CAPS else (
            SPECTRAL if form is not None else SUBSET)
        capped = self.mode_ == RU
        b = self._batch(capped, problem.n)
        self._prepare(problem, budget // b)
        self.batch_ = b
        check_scale(self.name, "tau_lr", self.tau_lr, self.tau_lr_scale)
        if not capped and (self.tau_lr is not None or self.tau_lr_scale != 1.0):
            raise harness.ConfigError(
                "The 'tau_lr' parameter of sgd steps the threshold of the Rockafellar-Uryasev "
                "form, which a set without row caps does not take (the mini-batch "
                "estimator has no threshold): leave tau_lr and tau_lr_scale unset.")
        n, mu, nu = self.n_, float(problem.mu), self.nu_
        radius = float(problem.radius)
        spread = n * self.sigma_max_
        #: the largest weight the mini-batch estimator gives a row (subset(b) only)
        self.sigma_batch_ = math.nan
        if self.mode_ == SUBSET:
            # the estimator's weights are a point of subset(b): its steps are those of
            # a set of b rows, sigma_b that set's largest weight (the full set's n
            # sigma_max, about sqrt(2 n radius) on the chi-square ball, is no bound on
            # a batch whose b weights sum to 1): the smooth step, the subgradient
            # step's cap with nu = 0 in a ball (row_solver) and the sqrt schedule's
            self.batch_set_ = problem.constraint.subset(b)
            self.sigma_batch_ = largest_weight(self.batch_set_)
            spread = b * self.sigma_batch_
            self.lr_smooth_ = self.lr_default_ = default_step(b, self.sigma_batch_,
                                                              self.smoothness_, mu)
            grad_bound = float(problem.model.grad_bound)
            if nu == 0.0 and math.isfinite(radius) and math.isfinite(grad_bound):
                subgradient = radius / (spread * grad_bound * math.sqrt(max(budget // b, 1)))
                self.lr_default_ = (subgradient if math.isnan(self.lr_default_)
                                    else min(self.lr_default_, subgradient))
        #: the KL penalty in the kernels (with nu = 0 the penalty plays no part)
        self.kl_ = nu > 0.0 and self.penalty_ == "kl"
        schedule = self.schedule
        bound = float(getattr(problem.model, "loss_bound", math.inf)) / problem.scale
        grad_bound = float(problem.model.grad_bound)
        self.tau_lo_, self.tau_hi_ = -math.inf, math.inf
        if math.isfinite(radius) and math.isfinite(bound):
            self.tau_lo_, self.tau_hi_ = tau_range(nu, spread, bound, self.kl_)
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
            self.t0_ = max(1.0, n / b)
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
        #: [tau, the average's weight so far] (no row caps: tau is nan)
        self.tau_ = np.zeros(2)
        # counters: data points, gradients formed, steps
        self.counts_ = np.zeros(3, dtype=np.int64)
        if capped:
            # the step that last evaluated each row and its draw there (sgd_steps)
            self.mark_ = np.full(n, -1, dtype=np.int64)
            self.slot_ = np.zeros(n, dtype=np.int64)
            self.batch_grads_ = np.zeros((b, p))
            self.batch_weights_ = np.zeros(b)
        else:
            self.tau_[0] = math.nan
            self.tau_lr_ = math.nan
            # the rows in an order whose first b are the draw
            self.perm_ = np.arange(n, dtype=np.int64)
        if self.mode_ == SPECTRAL:  # the spectrum over b rows
            self.batch_form_ = spectrum_form(problem.constraint.spectrum(b))
        elif self.mode_ == SUBSET:
            #: the authors' smoothing coefficient unchanged (module docstring)
            self.batch_nu_ = nu * n / b if not self.kl_ else nu
        self._sync()
        return {**self._logged(), "tau_lr": self.tau_lr_, "batch": b,
                "sigma_batch": self.sigma_batch_,
                "schedule": schedule, "t0": self.t0_}

    def _batch(self, capped: bool, n: int) -> int:
        """The rows per step: ``batch``, or the set's form's default (class
        docstring); on a set without row caps at most n (distinct rows)."""
        if self.batch is None:
            return 1 if capped else min(SPECTRAL_BATCH, n)
        if not capped and int(self.batch) > n:
            raise harness.ConfigError(
                f"The 'batch' parameter of sgd must be an int in [1, n={n}] on a set without "
                f"row caps (b distinct rows per step). Got {self.batch!r} instead.")
        return int(self.batch)

    def _steps(self, kernels, ms, X, y, problem: Any, rng, until: int) -> None:
        if self.mode_ == SUBSET:
            self._subset_steps(kernels, ms, X, y, problem, rng, until)
        elif self.mode_ == SPECTRAL:
            kernels.sgd_spectral_steps(ms, X, y, self.iterate_, self.average_, self.tau_,
                                       self.batch_form_, self.nu_, self.kl_, float(problem.mu),
                                       self.lr_, float(problem.radius), self.batch_,
                                       SCHEDULES[self.schedule_], self.t0_, rng, until,
                                       self.counts_, self.perm_)
        else:
            kernels.sgd_steps(ms, X, y, self.iterate_, self.average_, self.tau_, self.caps_,
                              self.nu_, self.kl_, float(problem.mu), self.lr_, self.tau_lr_,
                              float(problem.radius), self.batch_, SCHEDULES[self.schedule_],
                              self.t0_, self.tau_lo_, self.tau_hi_, rng, until, self.counts_,
                              self.mark_, self.slot_, self.batch_grads_, self.batch_weights_)

    def _subset_steps(self, kernels, ms, X, y, problem: Any, rng, until: int) -> None:
        """Mini-batch steps over ``subset(b)``: the kernels draw the batch and
        evaluate its losses (``sgd_batch_losses``), ``Problem.inner`` of the
        batch's problem gives ``q_b``, and the kernels step
        (``sgd_batch_step``)."""
        b = self.batch_
        batch = dataclasses.replace(problem, constraint=self.batch_set_, nu=self.batch_nu_)
        rows = np.empty(b, dtype=np.int64)
        losses = np.empty(b)
        Z = np.empty((b, kernels.m_row_scratch(ms)))
        mu, radius, schedule = float(problem.mu), float(problem.radius), SCHEDULES[self.schedule_]
        while self.counts_[0] < until:
            kernels.sgd_batch_losses(ms, X, y, self.iterate_, b, rng, self.perm_, rows, losses,
                                     Z, self.counts_)
            _, q = batch.inner(losses)
            kernels.sgd_batch_step(ms, X, y, self.iterate_, self.average_, self.tau_,
                                   np.ascontiguousarray(q, dtype=np.float64), rows, Z, mu,
                                   self.lr_, radius, schedule, self.t0_, self.counts_)

    @property
    def w(self) -> np.ndarray:
        """The reported iterate: the average if ``average``, else the last (the
        average is ``w_0 = 0`` before the first step)."""
        return self.average_ if self.average else self.iterate_

    @property
    def tau(self) -> float:
        """The current threshold (the multiplier of ``sum q = 1``; nan on a set
        without row caps)."""
        return float(self.tau_[0])


def tau_range(nu: float, spread: float, bound: float, kl: bool) -> tuple[float, float]:
    """``[tau_lo, tau_hi]``, holding a minimising tau of ``G(w, .)`` at every w
    whose losses lie in ``[0, bound]``, ``spread = n max_i c_i``: chi2 ``[-nu
    (spread - 1), bound + nu]``, kl ``[-nu (1 + log spread), bound - nu]``
    (docs/algorithms.md, "SGD: the form, the schedules and their theorems")."""
    if kl:
        return -nu * (1.0 + math.log(spread)), bound - nu
    return -nu * (spread - 1.0), bound + nu


@njit(cache=True, error_model="numpy")
def ru_weight(z, cap, nu, n, kl=False):  # pragma: no cover - compiled
    """``n phi_i'(z)``, ``n`` times the maximising q: with ``nu > 0``, ``n
    clip(1/n + z/(nu n), 0, c_i)`` (chi2) or ``min(n c_i, exp(z/nu - 1))``
    (``kl``); else the subgradient ``n c_i 1[z > 0]``."""
    if nu > 0.0:
        if kl:
            return min(n * cap, np.exp(z / nu - 1.0))
        return n * min(max(1.0 / n + z / (nu * n), 0.0), cap)
    return n * cap if z > 0.0 else 0.0


def ru_phi(z: np.ndarray, caps: np.ndarray, nu: float, n: int, kl: bool = False) -> np.ndarray:
    """``phi_i(z_i)`` (module docstring), the value at the maximising q (the
    reference for ``ru_weight``, which is its derivative)."""
    if nu == 0.0:
        return caps * np.maximum(z, 0.0)
    if kl:
        q = np.minimum(np.exp(z / nu - 1.0) / n, caps)
        return q * z - nu * q * np.log(n * q)
    q = np.clip(1.0 / n + z / (nu * n), 0.0, caps)
    return q * z - 0.5 * nu * n * (q - 1.0 / n) ** 2


@harness.hookimpl
def register_solvers(register):
    register(SGD)
