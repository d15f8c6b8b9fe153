"""A deterministic full-batch baseline for the problem ``F`` (``harness.problem``):
every evaluation reads all n rows.

* ``lbfgs``: L-BFGS (Nocedal and Wright 2006, Algorithm 7.4 and 7.5, the
  two-loop recursion) with Armijo backtracking, on ``F`` without a ball.
  ``F`` is differentiable when ``nu > 0`` and the losses are (the inner
  maximiser ``q = proj_K(1/n + L/(nu n))`` is unique and Lipschitz in ``L``,
  so Danskin's gradient ``sum_i q_i grad L_i + mu w`` is continuous); with
  ``nu = 0`` ``F`` is a maximum of smooth functions, kinked wherever the top
  rows change, and quasi-Newton steps have no guarantee there: refused.
* ``agd``: Nesterov's accelerated projected gradient (FISTA, Beck and Teboulle
  2009, with their backtracking on the Lipschitz constant and a function-value
  restart, O'Donoghue and Candes 2015) over the ball; ``lr`` fixes the step
  ``1/L`` instead. No global constant is assumed: ``F``'s curvature along a
  step is at most ``||sum_i q_i H_i(w)|| + ||J(w)||^2 / (nu n) + mu`` (``J`` the
  Jacobian of ``L``, ``q`` Lipschitz in ``L`` with constant ``1/(nu n)``), which
  grows with ``||w||`` for the squared loss, so backtracking finds it. With
  ``nu = 0`` ``F`` is not smooth and AGD is a heuristic (the step shrinks at
  the kinks; no rate is claimed).
* ``auto``: ``lbfgs`` when the radius is infinite and ``nu > 0``, else ``agd``.

Counting: an evaluation of ``F`` at a new point costs n data points; of its
gradient too, n gradient evaluations (line-search trials included).
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np

import harness
from harness import ConfigError, Param

#: Armijo's sufficient-decrease constant and the most halvings of one line search
ARMIJO_C1 = 1e-4
MAX_HALVINGS = 40


class FullBatch:
    """L-BFGS or accelerated projected gradient on ``F`` with exact full passes."""

    name: ClassVar[str] = "full_batch"
    params: ClassVar[dict[str, Param]] = {
        "method": Param(str, default="auto", choices=("auto", "lbfgs", "agd"),
                        doc="auto: lbfgs without a ball and with nu > 0, else agd"),
        "memory": Param(int, default=10, low=1, doc="L-BFGS curvature pairs kept"),
        "lr": Param(float, low=0.0, low_open=True, nullable=True,
                    doc="agd: constant step 1/L (None: backtracking); lbfgs: first step"),
    }

    def __init__(self, method: str = "auto", memory: int = 10, lr: float | None = None) -> None:
        self.method = method
        self.memory = memory
        self.lr = lr

    # -- life cycle -------------------------------------------------------------

    def setup(self, problem: Any, budget: int) -> dict[str, Any]:
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
        dim = problem.n_params
        self.method_ = method
        self.w = np.zeros(dim)
        self.q: np.ndarray | None = None
        self.f_: float | None = None  # F(w)
        self.data_points = 0
        self.grad_evals = 0
        self.iterations_ = 0
        if method == "lbfgs":
            self.g_ = np.zeros(dim)
            self.S_ = np.zeros((self.memory, dim))
            self.Y_ = np.zeros((self.memory, dim))
            self.pairs_ = 0  # pairs stored; the newest at (pairs_ - 1) % memory
            self.step_ = math.nan  # last accepted step length
            return {"method": method, "memory": self.memory,
                    "lr": self.lr if self.lr is not None else "1/||grad||, then 1"}
        self.y_ = self.w.copy()  # the extrapolated point
        self.fy_: float | None = None
        self.gy_ = np.zeros(dim)
        self.t_ = 1.0
        self.L_ = 1.0 / self.lr if self.lr is not None else 1.0
        return {"method": method, "lr": self.lr if self.lr is not None else "backtracking",
                "lipschitz_init": self.L_}

    def advance(self, problem: Any, rng: np.random.Generator, until: int) -> None:
        """Whole iterations (line searches included) until ``data_points >= until``."""
        step = self._lbfgs_step if self.method_ == "lbfgs" else self._agd_step
        while self.data_points < until:
            step(problem)
            self.iterations_ += 1

    # -- evaluations ------------------------------------------------------------

    def _value_grad(self, problem: Any, w: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
        n = problem.n
        self.data_points += n
        self.grad_evals += n
        return problem.value_and_grad(w)

    def _value(self, problem: Any, w: np.ndarray) -> tuple[float, np.ndarray]:
        self.data_points += problem.n
        value, q = problem.inner(problem.losses(w))
        return value + problem.regulariser(w), q

    # -- L-BFGS -------------------------------------------------------------------

    def _lbfgs_step(self, problem: Any) -> None:
        if self.f_ is None:
            self.f_, self.g_, self.q = self._value_grad(problem, self.w)
            return
        d = self._direction()
        slope = float(self.g_ @ d)
        if not slope < 0.0:  # lost descent (rounding): restart from steepest descent
            self.pairs_ = 0
            d = self._direction()
            slope = float(self.g_ @ d)
            if not slope < 0.0:  # a zero gradient: nothing to do but re-evaluate
                self.f_, self.g_, self.q = self._value_grad(problem, self.w)
                return
        t = 1.0
        for _ in range(MAX_HALVINGS):
            w_new = self.w + t * d
            f_new, g_new, q_new = self._value_grad(problem, w_new)
            if f_new <= self.f_ + ARMIJO_C1 * t * slope:
                break
            t *= 0.5
        else:  # no decrease at machine precision: drop the memory, keep w
            self.pairs_ = 0
            return
        s, y = w_new - self.w, g_new - self.g_
        sy = float(s @ y)
        if sy > 1e-12 * math.sqrt(float(s @ s) * float(y @ y)):  # curvature condition
            slot = self.pairs_ % self.memory
            self.S_[slot], self.Y_[slot] = s, y
            self.pairs_ += 1
        self.w, self.f_, self.g_, self.q, self.step_ = w_new, f_new, g_new, q_new, t

    def _direction(self) -> np.ndarray:
        """``-H g`` by the two-loop recursion (Nocedal and Wright, Algorithm 7.4)
        with ``H_0 = (s.y / y.y) I``; without pairs, ``-g`` scaled by ``lr`` or
        ``1/||g||`` (a first step of length one)."""
        g = self.g_
        kept = min(self.pairs_, self.memory)
        if kept == 0:
            scale = self.lr if self.lr is not None else 1.0 / max(math.sqrt(float(g @ g)), 1e-300)
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
        if self.f_ is None:
            self.fy_, self.gy_, self.q = self._value_grad(problem, self.y_)
            self.f_ = self.fy_
            return
        if self.fy_ is None:
            self.fy_, self.gy_, _ = self._value_grad(problem, self.y_)
        fixed = self.lr is not None
        while True:  # Beck and Teboulle's backtracking on the quadratic model at y
            x_new = problem.project(self.y_ - self.gy_ / self.L_)
            f_new, q_new = self._value(problem, x_new)
            d = x_new - self.y_
            model = self.fy_ + float(self.gy_ @ d) + 0.5 * self.L_ * float(d @ d)
            if fixed or f_new <= model + 1e-15 * max(1.0, abs(model)):
                break
            self.L_ *= 2.0
            if not math.isfinite(self.L_):
                raise FloatingPointError("full_batch's backtracking passed any finite L")
        if f_new > self.f_:  # restart the momentum when it stops helping
            self.t_ = 1.0
        t_new = 0.5 * (1.0 + math.sqrt(1.0 + 4.0 * self.t_ * self.t_))
        self.y_ = x_new + ((self.t_ - 1.0) / t_new) * (x_new - self.w)
        self.w, self.f_, self.q, self.t_ = x_new, f_new, q_new, t_new
        self.fy_ = None
        if not fixed:
            self.L_ *= 0.9  # let the step grow again


@harness.hookimpl
def register_solvers(register):
    register(FullBatch)
