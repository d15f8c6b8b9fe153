"""An independent count of the row evaluations of the row solvers (``prospect``,
``lsvrg``, ``sgd``), for ``test_counters``.

The solvers' kernels (``plugins/solvers/<solver>_kernels.py``, specialised per
model by ``plugins.solvers.row_solver.row_kernels``, ``harness.kernels``)
evaluate the model only through the names ``m_row_loss`` (one row's loss at
a point: a data point) and ``m_row_grad`` (that row's gradient at the same
point, from what its evaluation left in the scratch ``z``: a gradient
formed). ``instrument`` specialises the solver's template a third way: as
plain Python (``njit`` the identity), with those names bound to the wrappers
``counted_row_loss`` and ``counted_row_grad`` here, which tell a ``Tally``
and call the model's compiled row roles; the solver then runs that module.
``Tally`` counts the calls and checks what a count assumes: no row is
evaluated twice at one point in one step (the step read from the solver's
own step counter), and every gradient is formed from the evaluation of its
own row that came last, once.

``run_case`` runs a case of ``CASES`` (``setup`` and then ``advance`` to each
target) and returns, after setup and each target, the solver's
``data_points`` and ``grad_evals`` (and the tally's counts), and the final
iterate.
"""

from __future__ import annotations

import importlib
import math
from typing import Any, NamedTuple

import numpy as np

import harness
from harness.kernels import INTERPRETED, specialise
from harness.problem import Problem
from plugins.solvers.row_solver import compiled_rows

#: (solver, model, nu, radius, k, batch): n = 40 rows of yacht, mu = 1/n
CASES = [
    ("prospect", "linear_mse", 1.0, math.inf, 20, 1),
    ("prospect", "linear_mse", 0.0, 1.0, 5, 1),
    ("prospect", "logistic_cel", 0.05, math.inf, 10, 1),
    ("lsvrg", "linear_mse", 1.0, math.inf, 20, 1),
    ("lsvrg", "linear_mse", 0.0, 1.0, 5, 1),
    ("lsvrg", "logistic_cel", 0.05, math.inf, 10, 1),
    ("sgd", "linear_mse", 1.0, math.inf, 20, 1),
    ("sgd", "linear_mse", 0.0, 0.3, 5, 3),
    ("sgd", "logistic_cel", 0.05, math.inf, 10, 8),
]
#: the data-point targets of ``advance``
TARGETS = (1, 57, 300, 1000)
#: the generator's seed of every case
SEED = 7
#: which entry of each solver's ``counts_`` counts its steps
STEP_COUNTER = {"prospect": 2, "lsvrg": 3, "sgd": 2}


class _Rows:
    def __init__(self, X, y):
        self.X, self.y, self.n_classes = X, y, int(y.max()) + 1 if y.dtype.kind == "i" else 0


def counting_problem(model: str, nu: float, radius: float, k: int, n: int = 40) -> Problem:
    """Rows 0..n-1 of yacht (standardised), the k-set, mu = 1/n; linear_mse
    without bias and loss_scale 2, or logistic_cel on the target above its
    median (loss_scale 1)."""
    data = harness.build("dataset", "yacht", scale="standard")
    sub = _Rows(np.asarray(data.X[:n], dtype=np.float64), np.asarray(data.y[:n]))
    if model == "linear_mse":
        m = harness.build("model", "linear_mse", bias=False, loss_scale=2.0)
    else:
        sub = _Rows(sub.X, (sub.y > np.median(sub.y)).astype(np.int64))
        m = harness.build("model", "logistic_cel", loss_scale=1.0)
    m.setup(sub, radius)
    K = harness.build("constraint_set", "kset", n=n, k=k)
    return Problem(sub.X, sub.y, m, K, mu=1.0 / n, nu=nu, radius=radius)


def make_solver(name: str, batch: int):
    from plugins.solvers.lsvrg import LSVRG
    from plugins.solvers.prospect import Prospect
    from plugins.solvers.sgd import SGD

    return {"prospect": Prospect, "lsvrg": LSVRG}[name]() if name != "sgd" else SGD(batch=batch)


def _address(z: np.ndarray) -> int:
    return int(z.__array_interface__["data"][0])


class Tally:
    """Counts the row kernels' calls (module docstring)."""

    def __init__(self) -> None:
        self.evaluations = 0
        self.gradients = 0
        self.clock = lambda: -1
        self.seen: set[tuple[int, int, bytes]] = set()
        self.pending: dict[int, int] = {}  # row -> the scratch its last evaluation wrote

    def loss(self, i, w, z) -> None:
        key = (self.clock(), int(i), np.asarray(w).tobytes())
        if key in self.seen:
            raise AssertionError(f"row {int(i)} evaluated twice at one point in step {key[0]}")
        self.seen.add(key)
        self.evaluations += 1
        self.pending[int(i)] = _address(z)

    def grad(self, i, z) -> None:
        if self.pending.pop(int(i), None) != _address(z):
            raise AssertionError(f"a gradient of row {int(i)} formed without its evaluation")
        self.gradients += 1


class Counted(NamedTuple):
    """The ``ms`` of the counting kernels: the tally, the model's compiled row
    roles and their state."""

    tally: Tally
    loss: Any
    grad: Any
    scratch: Any
    inner: Any


def counted_row_loss(ms, X, y, i, w, z):
    ms.tally.loss(i, w, z)
    return ms.loss(ms.inner, X, y, i, w, z)


def counted_row_grad(ms, X, y, i, w, z, g):
    ms.tally.grad(i, z)
    return ms.grad(ms.inner, X, y, i, w, z, g)


def counted_row_scratch(ms):
    return ms.scratch(ms.inner)


def instrument(tally: Tally, solver, problem) -> None:
    """Make ``solver`` run its template as plain Python through the counting
    wrappers, on the model's compiled row roles (module docstring)."""
    (module, prefix), inner = compiled_rows(problem.model)
    kernels = importlib.import_module(module)
    ms = Counted(tally, *(getattr(kernels, f"{prefix}_row_{role}")
                          for role in ("loss", "grad", "scratch")), inner)
    refs = {f"m_row_{role}": f"{__name__}:counted_row_{role}"
            for role in ("loss", "grad", "scratch")}
    solver._row_kernels = (problem.model, specialise(solver.template, refs, njit=INTERPRETED),
                           ms)


def run_case(case, tally: Tally | None = None) -> dict:
    """Setup and advance to each target; the counters (and the tally's) after each."""
    name, model, nu, radius, k, batch = case
    problem = counting_problem(model, nu, radius, k)
    solver = make_solver(name, batch)
    if tally is not None:
        instrument(tally, solver, problem)
        tally.clock = lambda: int(solver.counts_[STEP_COUNTER[name]]) \
            if hasattr(solver, "counts_") else -1
    counts = []

    def record() -> None:
        row = [int(solver.data_points), int(solver.grad_evals)]
        if tally is not None:
            row += [tally.evaluations, tally.gradients]
        counts.append(row)

    solver.setup(problem, TARGETS[-1])
    record()
    rng = np.random.default_rng(SEED)
    for until in TARGETS:
        solver.advance(problem, rng, until)
        record()
    return {"case": list(case), "counts": counts, "w": [float(v) for v in solver.w]}


def assert_counters_match_calls(make, problem, targets=(1, 57, 300, 1000),
                                seed: int = 7) -> None:
    """Two solvers from ``make()`` on ``problem``, one run as plain Python through
    the counting wrappers (``instrument``), one compiled, both advanced to each
    target with ``seed``: after setup and each target the counted run's
    ``data_points`` and ``grad_evals`` equal the row evaluations and gradients
    seen, the compiled run has the same counters, and the iterates agree to
    1e-12."""
    tally = Tally()
    counted, compiled = make(), make()
    instrument(tally, counted, problem)
    tally.clock = lambda: int(counted.counts_[STEP_COUNTER[counted.name]]) \
        if hasattr(counted, "counts_") else -1
    for solver in (counted, compiled):
        solver.setup(problem, targets[-1])
    assert (counted.data_points, counted.grad_evals) == (tally.evaluations, tally.gradients)
    rng_a, rng_b = np.random.default_rng(seed), np.random.default_rng(seed)
    for until in targets:
        counted.advance(problem, rng_a, until)
        compiled.advance(problem, rng_b, until)
        assert (counted.data_points, counted.grad_evals) == (tally.evaluations, tally.gradients)
        assert (compiled.data_points, compiled.grad_evals) == (counted.data_points,
                                                               counted.grad_evals)
    np.testing.assert_allclose(compiled.w, counted.w, rtol=0, atol=1e-12)
