"""What the built-in row solvers (``prospect``, ``lsvrg``, ``sgd``) share: their
kernels, specialised per model; their inputs (the set's form,
``plugins.solvers.set_form``: row caps or a spectrum, or for ``lsvrg`` and
``sgd`` any set through ``Problem.inner``); the default constant step and the
counters.

**Kernels.** A row solver's numba kernels are a template
(``plugins/solvers/<solver>_kernels.py``) calling the model's row roles through
the free names ``m_row_loss``, ``m_row_grad`` and ``m_row_scratch``;
``row_kernels`` specialises it (``harness.kernels``) to the model's compiled row
kernels or, for a model without them, to ``protocol_row_loss`` and the rest over
``value_and_grad`` on one row, run as plain Python: the same steps, slower.

**The default step** (``default_step``): ``1 / (n sigma_max L + mu)`` when ``F``
is smooth (``nu > 0`` or no ball); with ``nu = 0`` in a ball, at most the
subgradient method's constant step for the budget, ``B / (n sigma_max G
sqrt(T))`` (Nesterov 2004, Theorem 3.2.2); ``sigma_max`` the largest weight a
point of K gives a row (the largest cap, or of the spectrum; else the set's
``max_weight()``, else 1: ``set_form.largest_weight``). ``lr_scale``
multiplies it (``plugins.lib.steps``); ``lr_default`` is logged unscaled;
``lr_smooth_`` keeps the smooth step.

**Counters** (``docs/tracking.md``, Counters): ``counts_[0]`` data points
(rows evaluated at a point, once per step), ``counts_[1]`` per-row gradients
formed; the kernels write them, ``_sync`` copies them to ``data_points`` and
``grad_evals``.

Derivation: docs/algorithms.md, "Any model under every solver" and "The row
solvers' default step".
"""

from __future__ import annotations

import importlib
import math
from types import ModuleType
from typing import Any, ClassVar

import numpy as np

from harness import ConfigError, Param
from harness.engine import replaced_methods
from harness.kernels import INTERPRETED, specialise
from plugins.lib.steps import scale_param, scaled_step
from plugins.solvers.set_form import ROW_CAPS, SetForm, largest_weight, penalty_of, set_form

#: the ``lr`` parameter of every row solver
LR_PARAM = Param(float, low=0.0, low_open=True, nullable=True,
                 doc="constant step; None: 1 / (n sigma_max L + mu), L the rows' smoothness, "
                     "sigma_max the largest cap or spectrum entry (else the set's "
                     "max_weight(), else 1) "
                     "(nu = 0 in a ball: at most B / (n sigma_max G sqrt(steps)))")
#: the ``lr_scale`` parameter of every row solver (``plugins.lib.steps``)
LR_SCALE_PARAM = scale_param("lr")
#: the constant c of the default step ``1 / (c n sigma_max L + mu)``
STEP_CONSTANT = 1.0
#: the model's row roles the kernel templates call (as ``m_<role>``)
ROW_ROLES = ("row_loss", "row_grad", "row_scratch")


def default_step(n: int, largest: float, smoothness: float, mu: float) -> float:
    """``1 / (c n sigma_max L + mu)`` with ``sigma_max = largest`` (the largest
    weight the best response can put on a row, ``set_form.sigma_max``) and ``c =
    STEP_CONSTANT``."""
    return 1.0 / (STEP_CONSTANT * n * largest * smoothness + mu)


def row_data(problem: Any) -> tuple[np.ndarray, np.ndarray]:
    """``X`` and ``y`` as contiguous float64 arrays (class codes as floats)."""
    return (np.ascontiguousarray(problem.X, dtype=np.float64),
            np.ascontiguousarray(problem.y, dtype=np.float64))


# ---------------------------------------------------------------------------
# the kernels, per model
# ---------------------------------------------------------------------------


class ProtocolRows:
    """The ``ms`` of a model without compiled row roles: its rows through the
    Python protocol (``value_and_grad`` on a one-row slice, never clipped).
    ``X`` and ``y`` are the problem's own (class codes as the model reads
    them); the last row evaluated keeps its gradient for ``protocol_row_grad``."""

    def __init__(self, model: Any, X: Any, y: Any) -> None:
        self.model, self.X, self.y = model, X, y
        self.one = np.ones(1)
        self.row, self.at, self.grad = -1, np.empty(0), np.empty(0)

    def evaluate(self, i: int, w: np.ndarray) -> float:
        i = int(i)
        value, grad = self.model.value_and_grad(w, self.X[i:i + 1], self.y[i:i + 1], self.one)
        self.row, self.at, self.grad = i, np.array(w, copy=True), np.asarray(grad)
        return float(value)


def protocol_row_loss(ms: ProtocolRows, X, y, i, w, z) -> float:
    """The row role ``row_loss`` over the Python protocol (``ProtocolRows``)."""
    return ms.evaluate(i, w)


def protocol_row_grad(ms: ProtocolRows, X, y, i, w, z, g) -> None:
    """The row role ``row_grad``: row i's gradient at ``w``, the one its last
    evaluation formed (evaluated again when another row or point came since)."""
    if ms.row != int(i) or not np.array_equal(ms.at, w):
        ms.evaluate(i, w)
    g[:] = ms.grad


def protocol_row_scratch(ms: ProtocolRows) -> int:
    """The row role ``row_scratch``: no scratch is read (one float)."""
    return 1


def compiled_rows(model: Any) -> tuple[str, Any] | None:
    """The model's compiled row kernels as ``(module, prefix)`` and their state
    ``ms``, or None: no compiled form, methods replaced on the instance (a
    wrapper the kernels would bypass), or a kernel module without the row
    roles."""
    make = getattr(model, "compiled", None)
    if make is None or replaced_methods(model):
        return None
    form = make()
    if form is None:
        return None
    module, _, prefix = form.kernels.partition(":")
    try:
        kernels = importlib.import_module(module)
    except ImportError:
        return None
    if not all(hasattr(kernels, f"{prefix}_{role}") for role in ROW_ROLES):
        return None
    return (module, prefix), form.state


def row_kernels(template: str, model: Any, problem: Any) -> tuple[ModuleType, Any]:
    """``template`` (a ``plugins.solvers.*_kernels`` module) specialised to the
    model's row roles, and the ``ms`` its kernels take (module docstring):
    compiled where the model has compiled row kernels, else plain Python over
    ``ProtocolRows``."""
    found = compiled_rows(model)
    if found is not None:
        (module, prefix), ms = found
        refs = {f"m_{role}": f"{module}:{prefix}_{role}" for role in ROW_ROLES}
        return specialise(template, refs), ms
    refs = {f"m_{role}": f"{__name__}:protocol_{role}" for role in ROW_ROLES}
    return specialise(template, refs, njit=INTERPRETED), ProtocolRows(model, problem.X,
                                                                      problem.y)


class RowSolver:
    """Base of the row solvers: ``_prepare`` reads the problem once in ``setup``;
    ``counts_`` (data points, gradients formed, ...) is written by the kernels
    and copied to ``data_points`` and ``grad_evals`` by ``_sync``; ``_kernels``
    the solver's kernels for the problem's model (``row_kernels``, kept until
    the solver is pickled); ``advance`` runs them through the solver's
    ``_steps``."""

    name: str
    #: the solver's kernel template (``plugins.solvers.<name>_kernels``)
    template: ClassVar[str]
    #: the parameters of a solver with one constant step (``sgd`` adds its own)
    params: ClassVar[dict[str, Param]] = {"lr": LR_PARAM, "lr_scale": LR_SCALE_PARAM}

    def __init__(self, lr: float | None = None, lr_scale: float = 1.0) -> None:
        self.lr = lr
        self.lr_scale = lr_scale
    lr_scale: float = 1.0

    def _kernels(self, problem: Any) -> tuple[ModuleType, Any]:
        """The kernels and the model state ``ms`` for ``problem``'s model."""
        cached = self.__dict__.get("_row_kernels")
        replaced = replaced_methods(problem.model)  # a wrapper put on since: Python
        if cached is None or cached[0] is not problem.model or (replaced and not isinstance(
                cached[2], ProtocolRows)):
            cached = (problem.model, *row_kernels(self.template, problem.model, problem))
            self._row_kernels = cached
        return cached[1], cached[2]

    def __getstate__(self) -> dict[str, Any]:
        """The state to pickle: the kernels (a module) are found again."""
        state = self.__dict__.copy()
        state.pop("_row_kernels", None)
        return state

    def _form(self, problem: Any) -> SetForm | None:
        """The form the solver's kernels run on (``_prepare``): the set's row
        caps or spectrum, else a ``ConfigError`` (``set_form``). A solver that
        also runs on the set through ``Problem.inner`` returns None there."""
        return set_form(self.name, problem.constraint)

    def _prepare(self, problem: Any, steps: int) -> tuple[np.ndarray, np.ndarray]:
        """The penalty (``penalty_``), the set's form (``form_``, ``_form``;
        ``caps_`` the row caps, None for a spectrum or no form), ``sigma_max``
        (``set_form.largest_weight``), ``n``, ``nu``, the rows' smoothness (the
        model's ``row_smoothness``) and the constant step (the default, module
        docstring, for ``steps`` steps, times ``lr_scale``, unless ``lr`` is
        given); returns the kernels' ``X`` and ``y``."""
        self.penalty_ = penalty_of(problem)
        self.form_: SetForm | None = self._form(problem)
        self.caps_ = (self.form_.caps if self.form_ is not None and self.form_.kind == ROW_CAPS
                      else None)
        self.sigma_max_ = largest_weight(problem.constraint)
        X, y = row_data(problem)
        self.n_ = X.shape[0]
        self.nu_ = float(problem.nu)
        smoothness = getattr(problem.model, "row_smoothness", None)
        smoothness = smoothness(X) if smoothness is not None else None
        self.smoothness_ = math.nan if smoothness is None else float(smoothness)
        self.lr_smooth_ = default_step(self.n_, self.sigma_max_, self.smoothness_, problem.mu)
        self.lr_default_ = self.lr_smooth_
        radius, grad_bound = float(problem.radius), float(problem.model.grad_bound)
        if self.nu_ == 0.0 and math.isfinite(radius) and math.isfinite(grad_bound):
            spread = self.n_ * self.sigma_max_ * grad_bound
            subgradient = radius / (spread * math.sqrt(max(steps, 1)))
            self.lr_default_ = (subgradient if math.isnan(self.lr_default_)
                                else min(self.lr_default_, subgradient))
        if math.isnan(self.lr_default_) and self.lr is None:
            raise ConfigError(
                f"The solver '{self.name}' derives its default step from the rows' smoothness, "
                f"and model '{getattr(problem.model, 'name', type(problem.model).__name__)}' "
                "declares none (row_smoothness(X) is None): give solver.lr.")
        self.lr_ = scaled_step(self.name, "lr", self.lr, self.lr_scale, self.lr_default_)
        return X, y

    def advance(self, problem: Any, rng: np.random.Generator, until: int) -> None:
        """Steps until ``until`` data points (the solver's ``_steps``, its kernel)."""
        if until <= self.data_points:
            return
        kernels, ms = self._kernels(problem)
        self._steps(kernels, ms, *row_data(problem), problem, rng, int(until))
        self._sync()

    def _logged(self) -> dict[str, Any]:
        return {"lr": self.lr_, "lr_default": self.lr_default_, "smoothness": self.smoothness_,
                "sigma_max": self.sigma_max_}

    def _sync(self) -> None:
        self.data_points = int(self.counts_[0])
        self.grad_evals = int(self.counts_[1])

    @property
    def passes(self) -> float:
        return self.data_points / self.n_
