"""A deterministic full-batch baseline for the problem ``F`` (``harness.problem``):
every gradient evaluation reads all n rows (n data points) and forms the
gradients of the rows with a nonzero inner weight ``q_i``. It reads the model
through its protocol only (``value_and_grad``, ``row_smoothness``, the
optional ``row_grad_bound``), so any model runs under it.

* ``agd`` (the default with a ball or with ``nu = 0``): Nesterov's accelerated
  projected gradient (FISTA, Beck and Teboulle 2009) with gradient restart
  (O'Donoghue and Candes 2015) at the constant step ``lr = 1/L_F`` (times
  ``lr_scale``), ``L_F <= L_row + G^2/nu + mu`` from the rows' smoothness
  ``L_row`` (``model.row_smoothness(X)``) and their gradient bound ``G`` over
  the ball of radius ``3B`` that FISTA's extrapolated points stay in
  (``model.row_grad_bound(X, y, 3B)``); a model without either needs ``lr``.
  The bound holds for both penalties (``penalties``: chi2 and kl): each
  ``D(q || 1/n)`` is 1-strongly convex in the l1 norm on the simplex, so the
  inner maximiser moves by at most ``||dL||_inf / nu`` in l1.
  With ``nu = 0``, AGD on F smoothed by the chi-square term at ``nu_s = 2 G
  B / (T sqrt(n c_max))`` (Nesterov 2005), ``T = budget // n``, ``c_max`` the
  largest weight a point of K gives a row (largest cap or spectrum entry). ``q``, the
  dual iterate, is the inner maximiser of the true problem at ``w``,
  measured when ``q`` is read (once per iterate, outside the run's clock),
  never used by the iterations.
* ``lbfgs`` (the default without a ball and with ``nu > 0``): L-BFGS (Nocedal
  and Wright 2006, Algorithms 7.4 and 7.5) with Armijo backtracking, on the
  differentiable ``F`` (``nu > 0``, no ball; refused otherwise), resumable
  in the middle of a line search.

The derivation of ``L_F`` and ``nu_s``, the step against a tuned one, and
L-BFGS's resumption: ``docs/algorithms.md``, Solvers, "The full-batch
method". ``setup`` logs ``lr`` (agd: the constant step; lbfgs: the first
step along ``-grad``, nan when it is ``lr_scale/||grad||``), ``lipschitz``
(agd: ``L_F``, or ``1/lr`` without a bound; lbfgs: inf), ``smoothing``
(``nu_s``; 0 when ``nu > 0`` or with lbfgs), ``method`` and ``memory``.

Counting (``docs/tracking.md``, Counters): every evaluation reads n data
points and forms the gradients of the rows with ``q_i != 0``, so ``advance``
overshoots ``until`` by less than n data points; with ``agd``
``data_points == n * iterations_`` exactly. The ``q`` read by the harness is a
measurement and is not counted.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np

import harness
from harness import ConfigError, Param, stream
from harness.protocols import EuclideanProjection
from plugins.lib.steps import check_scale, scale_param, scaled_step
from plugins.solvers.set_form import largest_weight

#: Armijo's sufficient-decrease constant and the most halvings of one line search
ARMIJO_C1 = 1e-4
MAX_HALVINGS = 40


def gradient_bound(problem: Any, radius: float) -> float | None:
    """A bound on the scaled per-row gradient norms over ``||w|| <= radius``: the
    model's ``row_grad_bound(X, y, radius)``, or None for a model without it
    (its ``grad_bound`` holds on its own ball only, not on FISTA's ``3B``)."""
    bound_at = getattr(problem.model, "row_grad_bound", None)
    return None if bound_at is None else float(bound_at(problem.X, problem.y, radius))


def row_smoothness(problem: Any) -> float | None:
    """The rows' smoothness ``L_row``: the model's ``row_smoothness(X)`` (None
    when it declares none)."""
    smoothness = getattr(problem.model, "row_smoothness", None)
    value = None if smoothness is None else smoothness(problem.X)
    return None if value is None else float(value)


class FullBatch:
    """Constant-step FISTA with gradient restart (on ``F``, or on its chi-square
    smoothing when ``nu = 0``), or L-BFGS without a ball; full passes only."""

    name: ClassVar[str] = "full_batch"
    #: the penalties ``problem.penalty`` it solves with nu > 0: both go through
    #: ``Problem.value_and_grad``, and ``L_F`` holds for both (module docstring)
    penalties: ClassVar[tuple[str, ...]] = ("chi2", "kl")
    #: linear convergence on a smooth, strongly convex problem: the contract
    #: suite's model check asks this accuracy of it (``harness.protocols.Solver``)
    contract_accuracy: ClassVar[float] = 1e-8
    #: the dual iterate (the ``q`` property) and, with agd, the problem whose q at
    #: ``w`` is still to be measured
    q_: np.ndarray | None = None
    q_pending_: Any = None
    params: ClassVar[dict[str, Param]] = {
        "method": Param(str, default="auto", choices=("auto", "lbfgs", "agd"),
                        doc="auto: lbfgs without a ball and with nu > 0, else agd"),
        "memory": Param(int, default=10, low=1, doc="L-BFGS curvature pairs kept"),
        "lr": Param(float, low=0.0, low_open=True, nullable=True,
                    doc="agd: the constant step (None: 1/L_F, L_F <= L_row + G^2/nu + mu); "
                        "lbfgs: the first step along -grad (None: 1/||grad||)"),
        "lr_scale": scale_param("lr"),
        "smoothing": Param(float, low=0.0, low_open=True, nullable=True,
                           doc="agd with nu = 0: the chi-square smoothing nu_s (None: "
                               "2 G B / (T sqrt(n c_max)), T = budget // n)"),
    }

    def __init__(self, method: str = "auto", memory: int = 10, lr: float | None = None,
                 smoothing: float | None = None, lr_scale: float = 1.0) -> None:
        self.method = method
        self.memory = memory
        self.lr = lr
        self.lr_scale = lr_scale
        self.smoothing = smoothing

    # -- life cycle -------------------------------------------------------------

    def setup(self, problem: Any, budget: int) -> dict[str, Any]:
        check_scale(self.name, "lr", self.lr, self.lr_scale)
        unbounded = math.isinf(problem.radius)
        method = self.method
        if method == "auto":
            method = "lbfgs" if unbounded and problem.nu > 0 else "agd"
        if method == "lbfgs" and problem.nu == 0:
            raise ConfigError(
                "The 'method' parameter of full_batch is 'lbfgs' but nu = 0: F is then a "
                "maximum over K of smooth functions, not differentiable where the top rows "
                "change, and L-BFGS has no guarantee on it. Use method=agd or nu > 0.")
        if method == "lbfgs" and not unbounded:
            raise ConfigError(
                f"The 'method' parameter of full_batch is 'lbfgs' but the radius is "
                f"{problem.radius!r}: this L-BFGS is unconstrained. Use method=agd (projected) "
                "or an infinite radius with mu > 0.")
        if self.smoothing is not None and (method != "agd" or problem.nu > 0):
            raise ConfigError(
                f"The 'smoothing' parameter of full_batch is {self.smoothing!r}, but it is the "
                f"smoothing of agd when nu = 0 (here method={method}, nu={problem.nu!r}): "
                "leave it unset.")
        dim = problem.n_params
        self.method_ = method
        self.w = np.zeros(dim)
        self.q_ = None
        self.q_pending_ = None
        self.data_points = 0
        self.grad_evals = 0
        self.iterations_ = 0
        if method == "lbfgs":
            self.f_: float | None = None  # F(w)
            self.g_ = np.zeros(dim)
            self.S_ = np.zeros((self.memory, dim))
            self.Y_ = np.zeros((self.memory, dim))
            self.pairs_ = 0  # pairs stored; the newest at (pairs_ - 1) % memory
            self.step_ = math.nan  # last accepted step length
            self.search_: tuple[np.ndarray, float, float, int] | None = None  # d, t, slope, tries
            return {"method": method, "memory": self.memory,
                    "lr": float(self.lr) if self.lr is not None else math.nan,
                    "lipschitz": math.inf, "smoothing": 0.0}
        return self._setup_agd(problem, budget)

    def _setup_agd(self, problem: Any, budget: int) -> dict[str, Any]:
        n, radius, nu = problem.n, float(problem.radius), float(problem.nu)
        finite = math.isfinite(radius)
        name = getattr(problem.model, "name", type(problem.model).__name__)
        if not finite and self.lr is None:
            raise ConfigError(
                "The solver 'full_batch' with method=agd has no constant step without a ball: "
                "the per-row gradients (and so F's smoothness) are unbounded over the whole "
                "space. Give solver.lr, a ball (problem.radius), or method=lbfgs (nu > 0).")
        # G where gradients are taken (FISTA's y stays within 3B: docs/algorithms.md)
        G = gradient_bound(problem, 3.0 * radius) if finite else math.inf
        smoothness = row_smoothness(problem)
        if (G is None or smoothness is None) and self.lr is None:
            missing = [what for what, value in (("row_smoothness", smoothness),
                                                ("row_grad_bound", G)) if value is None]
            raise ConfigError(
                f"The solver 'full_batch' (method=agd) derives its step from the rows' "
                f"smoothness (model.row_smoothness(X)) and their gradient bound over the ball "
                f"of radius 3B (model.row_grad_bound(X, y, radius)); model '{name}' gives no "
                f"{' and no '.join(missing)}: give solver.lr.")
        if G is None:
            G = math.nan
        if nu == 0.0 and not isinstance(problem.constraint, EuclideanProjection):
            raise ConfigError(
                f"The solver 'full_batch' (method=agd) smooths F when nu = 0 with the Euclidean "
                f"projection onto K; the constraint set "
                f"'{getattr(problem.constraint, 'name', '?')}' has no euclidean_project.")
        if nu > 0.0:
            nu_s, nu_eff = 0.0, nu
        else:
            if self.smoothing is not None:
                nu_s = float(self.smoothing)
            elif math.isfinite(G) and finite:
                c_max = largest_weight(problem.constraint)
                T = max(1, int(budget) // n)
                nu_s = 2.0 * G * radius / (T * math.sqrt(n * c_max))
            else:
                raise ConfigError(
                    "The solver 'full_batch' (method=agd) smooths F when nu = 0 with nu_s = "
                    "2 G B / (T sqrt(n c_max)), which needs a ball and a gradient bound: give "
                    "solver.smoothing.")
            if not nu_s > 0.0 or not math.isfinite(nu_s):
                raise ConfigError(f"The solver 'full_batch' derived the smoothing {nu_s!r} "
                                  "(a zero gradient bound?): give solver.smoothing.")
            nu_eff = nu_s
        if smoothness is not None and math.isfinite(G):
            lipschitz = smoothness + G * G / nu_eff + problem.mu
        else:  # lr given: no bound to report but the one the step assumes
            lipschitz = 1.0 / float(self.lr)
        self.lr_ = scaled_step(self.name, "lr", self.lr, self.lr_scale, 1.0 / lipschitz)
        self.lipschitz_ = lipschitz
        self.smoothing_ = nu_s
        self.y_ = self.w.copy()  # the extrapolated point
        self.t_ = 1.0
        self.restarts_ = 0
        return {"method": "agd", "memory": self.memory, "lr": self.lr_,
                "lipschitz": lipschitz, "smoothing": nu_s}

    def advance(self, problem: Any, rng: np.random.Generator, until: int) -> None:
        """Evaluations (n data points each) until ``data_points >= until``: whole
        agd iterations; L-BFGS line searches may stop between trials and resume
        in the next call."""
        if self.method_ == "lbfgs":
            while self.data_points < until:
                self._lbfgs_eval(problem)
            return
        start = self.iterations_
        while self.data_points < until:
            self._agd_step(problem)
            self.iterations_ += 1
        if self.iterations_ != start or self.q_ is None:
            self.q_pending_ = problem  # measured when q is read

    @property
    def q(self) -> np.ndarray | None:
        """The dual iterate at ``w`` (module docstring; None before the first
        evaluation). agd measures it here, on the first read after ``w`` moved:
        the harness reads it at its checkpoints, outside the run's clock
        (``wall_time_s``), where the end of every ``advance`` call would be
        inside it."""
        if self.q_pending_ is not None:
            problem, self.q_pending_ = self.q_pending_, None
            self._measure_q(problem)
        return self.q_

    @q.setter
    def q(self, value: np.ndarray | None) -> None:
        self.q_ = value

    def _measure_q(self, problem: Any) -> None:
        """``q`` at ``w`` for the harness's dual gap: a measurement, not counted
        (module docstring)."""
        _, self.q = problem.inner(problem.losses(self.w))

    def __getstate__(self) -> dict[str, Any]:
        """The state to pickle: a pending ``q`` is measured first, so that the
        problem is not pickled with the solver."""
        pending = self.__dict__.get("q_pending_")
        if pending is not None:
            self.q_pending_ = None
            self._measure_q(pending)
        return self.__dict__.copy()

    # -- evaluations ------------------------------------------------------------

    def _value_grad(self, problem: Any, w: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
        """``F(w)``, its gradient and ``q``: every row's loss (n data points),
        the gradients of the rows with ``q_i != 0``."""
        value, grad, q = problem.value_and_grad(w)
        self.data_points += problem.n
        self.grad_evals += int(np.count_nonzero(q))
        return value, grad, q

    def _smoothed_grad(self, problem: Any, w: np.ndarray) -> np.ndarray:
        """``grad F_s(w)`` (``grad F(w)`` when ``nu > 0``): every row's loss (n
        data points), the gradients of the rows with ``q_i != 0``."""
        n = problem.n
        losses = problem.losses(w)
        if problem.nu > 0.0:
            _, q = problem.inner(losses)
        else:
            q = problem.constraint.euclidean_project(1.0 / n + losses / (self.smoothing_ * n))
        rows = np.flatnonzero(q)
        _, grad = stream.weighted_value_grad(problem.model, problem.X, problem.y, rows,
                                             q[rows])(w)
        self.data_points += n
        self.grad_evals += int(rows.size)
        return grad + problem.mu * w

    # -- L-BFGS -------------------------------------------------------------------

    def _lbfgs_eval(self, problem: Any) -> None:
        """One evaluation of L-BFGS: the first one at ``w``, or the next trial of
        the current line search (a new one starting when none is under way)."""
        if self.f_ is None:
            self.f_, self.g_, self.q = self._value_grad(problem, self.w)
            self.iterations_ += 1
            return
        if self.search_ is None:
            d = self._direction()
            slope = float(self.g_ @ d)
            if not slope < 0.0:  # lost descent (rounding): restart from steepest descent
                self.pairs_ = 0
                d = self._direction()
                slope = float(self.g_ @ d)
                if not slope < 0.0:  # a zero gradient: nothing to do but re-evaluate
                    self.f_, self.g_, self.q = self._value_grad(problem, self.w)
                    self.iterations_ += 1
                    return
            self.search_ = (d, 1.0, slope, 0)
        d, t, slope, tries = self.search_
        w_new = self.w + t * d
        f_new, g_new, q_new = self._value_grad(problem, w_new)
        tries += 1
        if not f_new <= self.f_ + ARMIJO_C1 * t * slope:
            if tries < MAX_HALVINGS:
                self.search_ = (d, 0.5 * t, slope, tries)
            else:  # no decrease at machine precision: drop the memory, keep w
                self.search_ = None
                self.pairs_ = 0
                self.iterations_ += 1
            return
        self.search_ = None
        s, y = w_new - self.w, g_new - self.g_
        sy = float(s @ y)
        if sy > 1e-12 * math.sqrt(float(s @ s) * float(y @ y)):  # curvature condition
            slot = self.pairs_ % self.memory
            self.S_[slot], self.Y_[slot] = s, y
            self.pairs_ += 1
        self.w, self.f_, self.g_, self.q, self.step_ = w_new, f_new, g_new, q_new, t
        self.iterations_ += 1

    def _direction(self) -> np.ndarray:
        """``-H g`` by the two-loop recursion (Nocedal and Wright, Algorithm 7.4)
        with ``H_0 = (s.y / y.y) I``; without pairs, ``-g`` scaled by ``lr`` or
        ``lr_scale / ||g||`` (a first step of length ``lr_scale``)."""
        g = self.g_
        kept = min(self.pairs_, self.memory)
        if kept == 0:
            scale = self.lr if self.lr is not None else (
                self.lr_scale / max(math.sqrt(float(g @ g)), 1e-300))
            return -scale * g
        order = [(self.pairs_ - 1 - i) % self.memory for i in range(kept)]  # newest first
        r = g.copy()
        alphas = []
        for j in order:
            rho = 1.0 / float(self.S_[j] @ self.Y_[j])
            a = rho * float(self.S_[j] @ r)
            r -= a * self.Y_[j]
            alphas.append((j, rho, a))
        newest = order[0]
        r *= float(self.S_[newest] @ self.Y_[newest]) / float(self.Y_[newest] @ self.Y_[newest])
        for j, rho, a in reversed(alphas):
            b = rho * float(self.Y_[j] @ r)
            r += (a - b) * self.S_[j]
        return -r

    # -- accelerated projected gradient -------------------------------------------

    def _agd_step(self, problem: Any) -> None:
        """One FISTA iteration: the gradient at ``y``, a projected step of
        ``lr``, then the restart test and the extrapolation."""
        g = self._smoothed_grad(problem, self.y_)
        x_new = problem.project(self.y_ - self.lr_ * g)
        if float(g @ (x_new - self.w)) > 0.0:  # the gradient restart
            self.t_ = 1.0
            self.restarts_ += 1
        t_new = 0.5 * (1.0 + math.sqrt(1.0 + 4.0 * self.t_ * self.t_))
        self.y_ = x_new + ((self.t_ - 1.0) / t_new) * (x_new - self.w)
        self.w, self.t_ = x_new, t_new


@harness.hookimpl
def register_solvers(register):
    register(FullBatch)
