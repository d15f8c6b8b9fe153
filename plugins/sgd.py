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
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
from numba import njit

import harness
from harness import Param
from plugins.lib.row_solver import LR_SCALE_PARAM, RowSolver
from plugins.lib.spectral import project_ball_inplace, row_data, row_loss_grad
from plugins.lib.steps import scale_param, scaled_step


class SGD(RowSolver):
    """Mini-batch SGD on ``G(w, tau)`` (module docstring) with constant steps.

    Per step: b rows drawn uniformly *with* replacement (``Generator.integers(0,
    n)``, b independent draws); for each, ``z_i = L_i(w) - tau`` and the weight
    ``s_i = n phi_i'(z_i)`` (``ru_weight``); then

        w   <- w   - lr     ((1/b) sum s_i grad L_i(w) + mu w),
        tau <- tau - tau_lr (1 - (1/b) sum s_i),

    both at the same ``(w, tau)``, and ``w`` is projected onto the ball when the
    radius is finite (``tau`` is free: with ``nu > 0`` the minimising multiplier
    need not lie in the range of the losses). ``w_0 = 0``, ``tau_0 = 0``. The
    reported ``w`` is the last iterate, or with ``average`` the running mean of
    the iterates after each step (Polyak averaging).

    With ``mu = nu = 0`` this is the algorithm of ``p_player=ru_sgd`` with
    ``w_player=ogd`` (Trunc-CVaR): the same stochastic subgradient
    ``c_i 1[L_i > tau]``, but here with constant steps, rows drawn with
    replacement, ``tau`` not clipped to ``[0, 1]`` and in one solver rather
    than split into the game's two players.

    Default step ``lr = 1 / (n max_i c_i L + mu)``, the default of Prospect and
    LSVRG (``plugins.lib.spectral.default_step``), so that untuned runs of the
    baseline and of the variance-reduced solvers share a step: each term's
    w-gradient ``s_i grad L_i(w)`` carries a weight ``s_i <= n max_i c_i`` on
    an L-smooth loss (``L`` the rows' smoothness), so ``n max_i c_i L + mu``
    bounds its smoothness apart from the curvature ``||grad L_i||^2 / nu`` of
    the smoothed max, which the squared error leaves unbounded. The default
    does not depend on the batch. With a constant step SGD only reaches a
    neighbourhood of the optimum of size O(lr); lower the step (or average)
    for a tighter one. ``tau_lr`` defaults to ``lr`` (the step in use, scaled
    by ``lr_scale``); ``tau_lr_scale`` multiplies that default.

    Counters: no set-up cost; each step b data points and b gradient
    evaluations. No dual iterate (``q`` is None).
    """

    name: ClassVar[str] = "sgd"
    params: ClassVar[dict[str, Param]] = {
        "lr": Param(float, low=0.0, low_open=True, nullable=True,
                    doc="constant step of w; None: as lr of prospect and lsvrg "
                        "(plugins.lib.row_solver)"),
        "lr_scale": LR_SCALE_PARAM,
        "tau_lr": Param(float, low=0.0, low_open=True, nullable=True,
                        doc="constant step of the threshold tau; None: lr"),
        "tau_lr_scale": scale_param("tau_lr"),
        "batch": Param(int, default=1, low=1, doc="rows per step b, drawn with replacement"),
        "average": Param(bool, default=False,
                         doc="report the running average of the iterates (Polyak)"),
    }

    #: no dual iterate: the harness reports no dual gap
    q = None

    def __init__(self, lr: float | None = None, tau_lr: float | None = None, batch: int = 1,
                 average: bool = False, lr_scale: float = 1.0,
                 tau_lr_scale: float = 1.0) -> None:
        self.lr = lr
        self.lr_scale = lr_scale
        self.tau_lr = tau_lr
        self.tau_lr_scale = tau_lr_scale
        self.batch = batch
        self.average = average

    def setup(self, problem: Any, budget: int) -> dict[str, Any]:
        self._prepare(problem, budget // max(int(self.batch), 1))
        p = problem.n_params
        self.tau_lr_ = scaled_step(self.name, "tau_lr", self.tau_lr, self.tau_lr_scale, self.lr_)
        self.iterate_ = np.zeros(p)
        self.average_ = np.zeros(p)
        #: [tau]
        self.tau_ = np.zeros(1)
        # counters: data points, gradient evaluations, steps
        self.counts_ = np.zeros(3, dtype=np.int64)
        self._sync()
        return {**self._logged(), "tau_lr": self.tau_lr_, "batch": int(self.batch)}

    def advance(self, problem: Any, rng: np.random.Generator, until: int) -> None:
        if until <= self.data_points:
            return
        X, y = row_data(problem)
        sgd_steps(self.spec_, X, y, self.iterate_, self.average_, self.tau_, self.caps_,
                  self.nu_, float(problem.mu), self.lr_, self.tau_lr_, float(problem.radius),
                  int(self.batch), rng, int(until), self.counts_)
        self._sync()

    @property
    def w(self) -> np.ndarray:
        """The reported iterate: the average if ``average``, else the last."""
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


@njit(cache=True, error_model="numpy")
def sgd_row_grad(spec, X, y, i, w, tau, caps, nu, g, z):  # pragma: no cover - compiled
    """Row i's weight ``s_i = n phi_i'(L_i(w) - tau)``, returned, and ``s_i grad
    L_i(w)`` written into ``g``: row i's term ``tau + n phi_i(L_i(w) - tau) +
    (mu/2)||w||^2`` of ``G`` has w-gradient ``g + mu w`` and tau-gradient ``1 -
    s_i`` (one uniform row's unbiased estimate of the gradient of ``G``)."""
    n = X.shape[0]
    loss = row_loss_grad(spec, X, y, i, w, g, z)
    s = ru_weight(loss - tau, caps[i], nu, n)
    for j in range(w.size):
        g[j] *= s
    return s


@njit(cache=True, error_model="numpy")
def sgd_steps(spec, X, y, w, avg, tau, caps, nu, mu, lr, tau_lr, radius, batch, rng, until,
              counts):  # pragma: no cover - compiled
    """Mini-batch steps on ``(w, tau[0])`` until ``counts[0] >= until``; ``avg``
    kept as the mean of the iterates after each step."""
    n = X.shape[0]
    p = w.size
    g = np.empty(p)
    gw = np.empty(p)
    z = np.empty(max(spec[2], 1))
    while counts[0] < until:
        t = tau[0]
        st = 0.0
        for j in range(p):
            gw[j] = 0.0
        for _ in range(batch):
            st += sgd_row_grad(spec, X, y, rng.integers(0, n), w, t, caps, nu, g, z)
            for j in range(p):
                gw[j] += g[j]
        for j in range(p):
            w[j] -= lr * (gw[j] / batch + mu * w[j])
        tau[0] = t - tau_lr * (1.0 - st / batch)
        project_ball_inplace(w, radius)
        counts[0] += batch
        counts[1] += batch
        counts[2] += 1
        k = counts[2]
        for j in range(p):
            avg[j] += (w[j] - avg[j]) / k


@harness.hookimpl
def register_solvers(register):
    register(SGD)
