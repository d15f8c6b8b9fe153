"""The solvers' counters against an independent count of what they evaluate.

``data_points``: row evaluations, a row evaluated at one point in one step
counting once; ``grad_evals``: per-row gradients formed; ``passes``:
data points over n (``docs/tracking.md``, Counters).

* ``prospect``, ``lsvrg``, ``sgd``: their kernels evaluate the model only
  through the model's row roles (``m_row_loss``, ``m_row_grad`` of their
  kernel templates, ``plugins.solvers.row_solver``). Each case runs its
  template as plain Python with those names bound to wrappers that see every
  call (``counting_kernels``) and checks the counters after setup and each
  ``advance`` against the calls seen; the compiled run of each case must
  then give the same counters and iterate (so the count holds for the
  compiled path, which nothing can wrap).
* ``full_batch`` (each method): a subclass of the built-in linear_mse model
  counts the rows of its loss and gradient calls.
* Counts the definition fixes on small instances, computed by hand: LSVRG's
  and Prospect's set-up on the k-set with nu = 0 forms exactly k gradients.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from counting_kernels import CASES, Tally, counting_problem, run_case

from plugins.models.glm import LinearMSE
from plugins.solvers.full_batch import FullBatch
from plugins.solvers.lsvrg import LSVRG
from plugins.solvers.prospect import Prospect


@pytest.fixture(scope="module")
def python_counts():
    """Per case, the counters and the wrappers' counts after setup and each
    target, the solver's kernels run as plain Python through ``counting_kernels``."""
    return {tuple(case): run_case(case, Tally()) for case in CASES}


def _case_id(case) -> str:
    name, model, nu, radius, k, batch = case
    return f"{name}-{model}-nu{nu:g}-r{radius:g}-k{k}-b{batch}"


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_row_solver_counters_equal_the_row_kernels_calls(case, python_counts):
    # n = 40, seed 7, targets 1, 57, 300, 1000 data points: after setup and each
    # target, data_points = the row evaluations seen and grad_evals = the
    # gradients formed (the wrappers also refuse a row evaluated twice at one
    # point in one step and a gradient without its row's evaluation); the
    # compiled run gives the same counters and the same iterate to 1e-12
    got = python_counts[tuple(case)]
    for data_points, grad_evals, evaluations, gradients in got["counts"]:
        assert (data_points, grad_evals) == (evaluations, gradients)
    compiled = run_case(case)
    assert [c[:2] for c in got["counts"]] == compiled["counts"]
    w, w_python = np.array(compiled["w"]), np.array(got["w"])
    assert np.max(np.abs(w - w_python)) <= 1e-12 * max(1.0, float(np.max(np.abs(w))))


def test_the_cases_tell_the_counters_apart(python_counts):
    # each counter differs from a naive one somewhere in the cases: gradients
    # fewer than data points where rows have zero weight (nu = 0), so a
    # counter copied from the other fails the test above
    final = {(c[0], c[2]): python_counts[tuple(c)]["counts"][-1] for c in CASES}
    for name in ("prospect", "lsvrg", "sgd"):
        data_points, grad_evals = final[(name, 0.0)][:2]
        assert grad_evals < data_points, name


@pytest.mark.parametrize("cls", [Prospect, LSVRG])
def test_setup_on_the_k_set_with_nu_0_forms_k_gradients(cls):
    # yacht rows 0..39, k = 5, nu = 0, radius 1: the first best response is
    # the LMO, k rows of weight 1/k; setup evaluates all n losses and forms
    # exactly those k gradients (the example: n = 308, k = 20 formed 20)
    problem = counting_problem("linear_mse", 0.0, 1.0, 5)
    solver = cls()
    solver.setup(problem, 1000)
    assert (solver.data_points, solver.grad_evals) == (40, 5)
    assert solver.passes == 1.0


def test_sgd_counts_a_row_drawn_twice_in_a_step_once():
    # the batch-3 case (seed 7; the kernel draws Generator.integers(0, 40) one
    # row at a time, reproduced here): the data points after each target are
    # the distinct rows of each step's three draws, summed over the steps taken
    # (some steps draw a row twice: they cost 2)
    case = CASES[7]
    assert case[0] == "sgd" and case[-1] == 3
    got = run_case(case)["counts"]
    draws = np.random.default_rng(7).integers(0, 40, size=3 * 1000).reshape(-1, 3)
    per_step = np.array([len(set(step)) for step in draws])
    assert np.any(per_step < 3)
    spent = np.cumsum(per_step)
    for until, (data_points, _) in zip((1, 57, 300, 1000), got[1:], strict=True):
        steps = int(np.searchsorted(spent, until)) + 1  # the first step reaching until
        assert data_points == spent[steps - 1]


def test_lsvrg_steps_cost_two_points_or_none():
    # seed 3, nu = 0, k = 5 (35 of 40 rows have q~ = 0): before the first anchor
    # after setup, the data points are n plus 2 per step whose row has q~_i != 0,
    # the first step after the anchor excepted (w = w~ there); the gradients
    # are k plus as many
    problem = counting_problem("linear_mse", 0.0, 1.0, 5)
    solver = LSVRG()
    solver.setup(problem, 10_000)
    q = solver.anchor_q_.copy()
    rows = np.random.default_rng(3).integers(0, 40, size=40)
    rng = np.random.default_rng(3)
    checked = 0
    while True:
        solver.advance(problem, rng, solver.data_points + 1)
        steps = int(solver.counts_[3])
        if int(solver.counts_[2]) != steps:  # an anchor came: the epoch is over
            break
        costly = int(np.count_nonzero(q[rows[1:steps]]))
        assert (solver.data_points, solver.grad_evals) == (40 + 2 * costly, 5 + 2 * costly)
        checked += 1
    assert checked >= 2


def test_lsvrg_with_every_weight_positive_pays_two_points_a_step():
    # k = n (every q~_i = 1/n > 0): after s < n steps, n + 2 (s - 1) data points
    # and as many gradients (the first step after the anchor costs nothing)
    problem = counting_problem("linear_mse", 0.0, 1.0, 40)
    solver = LSVRG()
    solver.setup(problem, 10_000)
    assert (solver.data_points, solver.grad_evals) == (40, 40)
    solver.advance(problem, np.random.default_rng(0), 40 + 21)
    steps = int(solver.counts_[3])
    assert steps == 12 and (solver.data_points, solver.grad_evals) == (62, 62)


class CountingLinearMSE(LinearMSE):
    """linear_mse counting the rows of its loss and gradient calls; a gradient
    must be taken at the point where losses were last evaluated."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.loss_rows = self.grad_rows = 0
        self.last: bytes | None = None
        self.paused = False

    def raw_losses(self, w, X, y):
        if not self.paused:
            self.loss_rows += len(y)
            self.last = np.asarray(w).tobytes()
        return super().raw_losses(w, X, y)

    def value_and_grad(self, w, X, y, weights):
        if not self.paused:
            assert np.asarray(w).tobytes() == self.last, "a gradient at another point"
            self.grad_rows += len(y)
        return super().value_and_grad(w, X, y, weights)


def _counted(problem):
    model = CountingLinearMSE(bias=False, loss_scale=2.0)
    model.setup(type("Rows", (), {"X": problem.X, "y": problem.y})(), problem.radius)
    problem.model = model
    return model


@pytest.mark.parametrize("method, nu, radius", [
    ("lbfgs", 0.05, math.inf), ("agd", 0.05, 0.5), ("agd", 0.0, 0.5)])
def test_full_batch_counters_equal_the_models_calls(method, nu, radius):
    # yacht rows 0..39, k = 5, nu = 0.05 or 0 (q sparse: fewer gradients than data points),
    # targets 1, 57, 300, 1000: data_points = the rows whose losses the model
    # evaluated, grad_evals = the rows of its gradient calls (the q measured
    # for the harness at the end of an agd call is not the solver's work and
    # is not counted)
    problem = counting_problem("linear_mse", nu, radius, 5)
    model = _counted(problem)
    solver = FullBatch(method=method)
    solver.setup(problem, 1000)
    measure = solver._measure_q

    def unmeasured(p):
        model.paused = True
        try:
            measure(p)
        finally:
            model.paused = False

    solver._measure_q = unmeasured
    rng = np.random.default_rng(0)
    for until in (1, 57, 300, 1000):
        solver.advance(problem, rng, until)
        assert (solver.data_points, solver.grad_evals) == (model.loss_rows, model.grad_rows)
    assert solver.grad_evals < solver.data_points and solver.data_points % 40 == 0


# ---------------------------------------------------------------------------
# the game (Algorithm 1)
# ---------------------------------------------------------------------------


class RowByRowMSE(LinearMSE):
    """linear_mse whose gradient forms each row's gradient in Python, counting
    those it forms: only the rows whose weight is not 0 (no compiled form)."""

    name = "row_by_row_mse"

    def compiled(self):
        return None

    def grad(self, w, X, y, weights):
        g = np.zeros_like(w)
        for j in np.flatnonzero(weights):
            self.formed = getattr(self, "formed", 0) + 1  # (a probe's copy counts its own)
            g += weights[j] * LinearMSE.grad(self, w, X[j:j + 1], y[j:j + 1], np.ones(1))
        return g


def _game(p_player: str, model: str, engine: str, plugins=()):
    """The final metrics and the model of a game on boston (k = 10, 3,000 data points)."""
    import harness

    cfg = {"budget": 3000, "seed": 4, "checkpoints": 3, "tracking": {"enabled": False},
           "state_dir": None, "reference": {"exact": "false"}, "engine": engine,
           "constraint": {"name": "kset", "k": 10}, "p_player": {"name": p_player},
           "w_player": {"name": "ogd"}, "model": {"name": model},
           "dataset": {"name": "boston"}}
    prep = harness.prepare(cfg, harness.Registry(harness.make_plugin_manager(list(plugins))))
    return harness.play(prep), prep.parts.model


@pytest.mark.parametrize("p_player", ["safl", "ru_sgd", "exp4mp"])
def test_the_games_gradient_count_is_the_gradients_a_model_forms(p_player):
    # boston, k = 10, 3,000 data points, seed 4: a model that forms only the rows
    # of nonzero weight counts exactly the game's grad_evals; S-AFL's lambda
    # sample (weight 0) and ru_sgd's rows below tau form none, so there
    # grad_evals < data_points; the compiled path counts as the Python loop
    import harness

    class Plugin:
        @harness.hookimpl
        def register_models(self, register):
            register(RowByRowMSE)

    counted, model = _game(p_player, "row_by_row_mse", "python", [Plugin()])
    assert counted["grad_evals"] == model.formed > 0
    python, _ = _game(p_player, "linear_mse", "python")
    compiled, _ = _game(p_player, "linear_mse", "auto")
    assert python["grad_evals"] == compiled["grad_evals"] == counted["grad_evals"]
    assert python["data_points"] == compiled["data_points"] == 3000
    if p_player == "exp4mp":  # every drawn row has weight m_i / k > 0
        assert python["grad_evals"] == python["data_points"]
    else:
        assert python["grad_evals"] < python["data_points"]
