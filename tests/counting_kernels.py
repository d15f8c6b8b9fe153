"""An independent count of the row evaluations of the row solvers (``prospect``,
``lsvrg``, ``sgd``), for ``test_counters``.

The solvers' kernels evaluate the model only through three row kernels of
``plugins.solvers.spectral``: ``row_loss`` (one row's loss at a point: a data
point), ``row_grad`` (that row's gradient at the same point, from what its
evaluation left in the scratch ``z``: a gradient formed) and
``row_loss_grad`` (both). Compiled, the solvers' kernels call them directly;
with numba's JIT disabled (``NUMBA_DISABLE_JIT=1``, set before numba is
imported) every kernel is its Python source and looks those names up in its
module at each call, so wrappers put there see every call. ``Tally`` counts
them and checks what a count assumes: no row is evaluated twice at one point
in one step (the step read from the solver's own step counter), and every
gradient is formed from the evaluation of its own row that came last, once.

Run as a script under ``NUMBA_DISABLE_JIT=1``, it runs each case of ``CASES``
(``setup`` and then ``advance`` to each target) and prints, as JSON, per
case: after setup and each target the solver's ``data_points`` and
``grad_evals`` and the tally's counts, and the final iterate.
"""

from __future__ import annotations

import json
import math
import sys

import numpy as np

import harness
from harness.problem import Problem

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


def instrument(tally: Tally) -> None:
    """Wrap the row kernels where the solvers' kernels look them up."""
    import plugins.solvers.lsvrg
    import plugins.solvers.prospect
    import plugins.solvers.sgd
    from plugins.solvers import spectral

    loss, grad, both = spectral.row_loss, spectral.row_grad, spectral.row_loss_grad

    def row_loss(spec, X, y, i, w, z):
        tally.loss(i, w, z)
        return loss(spec, X, y, i, w, z)

    def row_grad(spec, X, y, i, z, g):
        tally.grad(i, z)
        return grad(spec, X, y, i, z, g)

    def row_loss_grad(spec, X, y, i, w, g, z):
        tally.loss(i, w, z)
        tally.grad(i, z)
        return both(spec, X, y, i, w, g, z)

    for module in (plugins.solvers.prospect, plugins.solvers.lsvrg, plugins.solvers.sgd):
        for name, wrapper in (("row_loss", row_loss), ("row_grad", row_grad),
                              ("row_loss_grad", row_loss_grad)):
            if hasattr(module, name):
                setattr(module, name, wrapper)


def run_case(case, tally: Tally | None = None) -> dict:
    """Setup and advance to each target; the counters (and the tally's) after each."""
    name, model, nu, radius, k, batch = case
    problem = counting_problem(model, nu, radius, k)
    solver = make_solver(name, batch)
    if tally is not None:
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


def main() -> None:
    import numba

    if not numba.config.DISABLE_JIT:
        sys.exit("run with NUMBA_DISABLE_JIT=1: the compiled kernels bypass the wrappers")
    out = []
    for case in CASES:
        tally = Tally()
        instrument(tally)
        out.append(run_case(case, tally))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
