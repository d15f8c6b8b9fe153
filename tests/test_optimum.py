"""The exact optimum OPT (plugins/metrics/optimum.py) and its reference plugin
(plugins/metrics/reference.py): OPT against a second solver and a brute force, its
certificate, the cache, the suboptimality metrics, and every way OPT can be
unavailable.
"""

from __future__ import annotations

import json
import math
from types import SimpleNamespace
from typing import ClassVar

import numpy as np
import pytest
from scipy import optimize

import harness
from harness import Param
from harness.gap import project_ball
from plugins.lib.capped import capped_simplex_euclidean
from plugins.metrics import optimum, reference

from conftest import game_cfg

pytest.importorskip("cvxpy")


class Recorder:
    """Keeps every checkpoint's metrics."""

    def __init__(self) -> None:
        self.points: dict[int, dict[str, float]] = {}

    @harness.hookimpl
    def on_checkpoint(self, context, step, metrics):
        self.points[int(step)] = dict(metrics)


def _cfg(tmp_path, p_player="ru_sgd", dataset="breast_cancer", k=20, budget=20_000,
         registry=None, **reference_conf):
    cfg = game_cfg(f"constraint.k={k}", f"p_player={p_player}", f"dataset={dataset}",
                   f"budget={budget}", "checkpoints=8", "reference.exact=auto",
                   f"reference.cache_dir={tmp_path / 'cache'}", registry=registry)
    cfg["reference"].update(reference_conf)
    return cfg


def _play(cfg):
    recorder = Recorder()
    prep = harness.prepare(cfg, harness.Registry(harness.make_plugin_manager([recorder])))
    harness.play(prep)
    return prep.context.params, recorder.points


def _tiny(model_name: str, n: int, d: int, radius: float, seed: int):
    rng = np.random.default_rng(seed)
    X = rng.random((n, d))
    if model_name == "linear_mse":
        ds = SimpleNamespace(X=X, y=rng.random(n), n_classes=0)
    else:
        ds = SimpleNamespace(X=X, y=rng.integers(0, 3, size=n), n_classes=3)
    model = harness.build("model", model_name)
    model.setup(ds, radius)
    return ds, model


# ---------------------------------------------------------------------------
# numerics
# ---------------------------------------------------------------------------


def test_capped_value_is_the_kset_oracle_and_the_ru_minimum():
    # seed 0; tolerance 1e-12: three exact formulas of the same number
    rng = np.random.default_rng(0)
    for n, k in ((50, 1), (50, 7), (50, 50), (569, 20)):
        losses = rng.random(n)
        value, p = optimum.capped_value(losses, np.full(n, 1.0 / k))
        assert value == pytest.approx(float(np.sort(losses)[-k:].mean()), abs=1e-12)
        assert harness.build("constraint_set", "kset", n=n, k=k).contains(p, atol=1e-12)
        # Rockafellar-Uryasev: min_tau tau + (1/k) sum (l - tau)_+ is attained at a loss
        ru = min(t + np.maximum(losses - t, 0.0).sum() / k for t in losses)
        assert value == pytest.approx(ru, abs=1e-12)


def test_project_capped_matches_the_kset_projection_and_lands_in_the_set():
    # seed 1; tolerance 1e-12 against the k-set's exact breakpoint projection
    rng = np.random.default_rng(1)
    for _ in range(20):
        n, k = int(rng.integers(5, 60)), int(rng.integers(1, 5))
        v = rng.normal(size=n) / k
        p = optimum.project_capped(v, np.full(n, 1.0 / k))
        np.testing.assert_allclose(p, capped_simplex_euclidean(v, 1.0 / k), atol=1e-12)
        assert abs(p.sum() - 1.0) <= 1e-14 and p.min() >= 0.0 and p.max() <= 1.0 / k


def _brute_force_opt(model, X, y, k: int, radius: float, seed: int) -> float:
    """OPT by scipy SLSQP on the epigraph form min tau + (1/k) sum u over
    (w, tau, u) with u_i >= L_i(w) - tau, u >= 0, ||w||^2 <= B^2 (model's numpy
    losses and gradients, several starts); returns the exact top-k average at
    the best w found, projected onto the ball (an upper bound on OPT)."""
    n, m = X.shape[0], model.n_params
    eye = np.eye(n)

    def losses_and_jac(w):
        jac = np.array([model.grad(w, X, y, eye[i]) for i in range(n)])
        return model.raw_losses(w, X, y) / model.scale_, jac

    def split(z):
        return z[:m], z[m], z[m + 1:]

    def excess(z):
        w, tau, u = split(z)
        return u - losses_and_jac(w)[0] + tau

    def excess_jac(z):
        w, _, _ = split(z)
        return np.hstack((-losses_and_jac(w)[1], np.ones((n, 1)), np.eye(n)))

    cons = [{"type": "ineq", "fun": excess, "jac": excess_jac},
            {"type": "ineq", "fun": lambda z: z[m + 1:],
             "jac": lambda z: np.eye(n, m + 1 + n, m + 1)},
            {"type": "ineq", "fun": lambda z: radius**2 - z[:m] @ z[:m],
             "jac": lambda z: np.concatenate((-2 * z[:m], np.zeros(1 + n)))}]
    grad = np.concatenate((np.zeros(m), [1.0], np.full(n, 1.0 / k)))
    rng = np.random.default_rng(seed)
    best = math.inf
    for start in range(4):
        w0 = np.zeros(m) if start == 0 else project_ball(rng.normal(size=m), 0.5 * radius)
        l0 = losses_and_jac(w0)[0]
        z0 = np.concatenate((w0, [0.0], l0))
        res = optimize.minimize(lambda z: z @ grad, z0, jac=lambda z: grad, method="SLSQP",
                                constraints=cons, options={"ftol": 1e-14, "maxiter": 2000})
        w = project_ball(res.x[:m], radius)
        best = min(best, float(np.sort(model.raw_losses(w, X, y) / model.scale_)[-k:].mean()))
    return best


@pytest.mark.parametrize(("model_name", "radius"), [("linear_mse", 1.0), ("logistic_cel", 2.0)])
def test_opt_matches_a_brute_force_on_a_tiny_instance(model_name, radius):
    # data seed 4, SLSQP start seed 5; n = 14, d = 2, k = 3. Tolerance 1e-6
    # (measured differences: below 1e-8), far below any suboptimality reported.
    ds, model = _tiny(model_name, 14, 2, radius, seed=4)
    caps = np.full(14, 1.0 / 3)
    found = optimum.solve(ds.X, ds.y, model, caps, radius, ("CLARABEL",))
    brute = _brute_force_opt(model, ds.X, ds.y, 3, radius, seed=5)
    assert found.lower <= found.value <= found.lower + 1e-5 * found.value
    assert brute >= found.lower - 1e-12  # brute is feasible: never below a lower bound of OPT
    assert abs(found.value - brute) <= 1e-6, (found.value, brute)


@pytest.mark.parametrize("dataset", ["breast_cancer", "boston"])
def test_opt_matches_a_second_solver(dataset):
    # Clarabel against SCS (eps 1e-7) on the paper's problems, k = 20, B = 1,
    # within SECOND_SOLVER_RTOL (relative)
    ds = harness.build("dataset", dataset)
    model = harness.build("model", ds.default_model)
    model.setup(ds, 1.0)
    caps = np.full(ds.X.shape[0], 1.0 / 20)
    clarabel = optimum.solve(ds.X, ds.y, model, caps, 1.0, ("CLARABEL",))
    scs = optimum.solve(ds.X, ds.y, model, caps, 1.0, ("SCS",))
    assert clarabel.solver == "CLARABEL" and scs.solver == "SCS"
    assert abs(clarabel.value - scs.value) <= SECOND_SOLVER_RTOL * clarabel.value
    # each certificate brackets the other solver's value
    assert clarabel.lower <= scs.value and scs.lower <= clarabel.value


#: measured |Clarabel - SCS| / OPT: 7.0e-7 (breast cancer), 4.7e-6 (Boston)
SECOND_SOLVER_RTOL = 2e-5


def test_certificate_rejects_a_wrong_point():
    # a far-from-optimal w (zero) with a uniform p: the interval is wide, and
    # solve() refuses an answer whose interval is wider than rtol |upper| + atol
    ds, model = _tiny("linear_mse", 14, 2, 1.0, seed=4)
    caps = np.full(14, 1.0 / 3)
    upper, lower = optimum.certify(ds.X, ds.y, model, caps, 1.0, np.zeros(2 + 1),
                                   np.full(14, 1.0 / 14))
    assert upper - lower > 1e-3
    with pytest.raises(optimum.OptimumUnavailable, match="CLARABEL"):
        optimum.solve(ds.X, ds.y, model, caps, 1.0, ("CLARABEL",), rtol=1e-30, atol=0.0)


def test_opt_near_zero_is_certified_by_the_absolute_tolerance(tmp_path):
    # the reference plugin in a game: Boston's linear model in the ball of
    # radius B = 10, k = 20, default rtol 1e-5 and atol 1e-8. OPT is about
    # 9.4e-5 and the certified interval about 2e-9 wide (measured: 2.1e-9 with
    # Clarabel, 20 times rtol * OPT, which alone refused it): certified now
    cfg = _cfg(tmp_path, dataset="boston", budget=2000)
    cfg["w_player"] = {"name": "ogd", "radius": 10.0}
    params, _ = _play(cfg)
    assert params["opt_status"] == "solved", params["opt_message"]
    assert params["opt"] == pytest.approx(9.3857e-5, abs=1e-8)
    width = params["opt"] - params["opt_lower"]
    assert 1e-5 * params["opt"] < width <= 1e-5 * params["opt"] + 1e-8


def test_a_wide_interval_is_still_refused_with_the_absolute_tolerance():
    # the same problem with atol = 1e-10: every Clarabel attempt is refused and
    # the message states both tolerances
    ds = harness.build("dataset", "boston")
    model = harness.build("model", ds.default_model)
    model.setup(ds, 10.0)
    caps = np.full(ds.X.shape[0], 1.0 / 20)
    with pytest.raises(optimum.OptimumUnavailable, match=r"rtol=1e-05 x \|upper\| \+ atol=1e-10"):
        optimum.solve(ds.X, ds.y, model, caps, 10.0, ("CLARABEL",), atol=1e-10)


def test_a_failed_or_uncertified_attempt_falls_through_to_the_next(monkeypatch):
    # two Clarabel iterations cannot reach the optimum: whatever status cvxpy
    # reports, the attempt is refused and the next one (default settings) used
    ds, model = _tiny("logistic_cel", 14, 2, 2.0, seed=4)
    monkeypatch.setattr(optimum, "ATTEMPTS", (("CLARABEL", {"max_iter": 2}), ("CLARABEL", {})))
    found = optimum.solve(ds.X, ds.y, model, np.full(14, 1.0 / 3), 2.0, ("CLARABEL",))
    assert len(found.attempts) == 2 and found.attempts[0].startswith("CLARABEL max_iter=2: ")
    assert found.attempts[1] == "CLARABEL: optimal"


def test_a_model_without_a_convex_formulation_is_unavailable():
    ds, model = _tiny("linear_mse", 14, 2, 1.0, seed=4)
    model.cvx_raw_losses = lambda w, X, y: -(X @ w[:-1]) ** 2  # concave: not DCP
    with pytest.raises(optimum.OptimumUnavailable, match="no convex"):
        optimum.solve(ds.X, ds.y, model, np.full(14, 1.0 / 3), 1.0)
    model.cvx_raw_losses = None
    with pytest.raises(optimum.OptimumUnavailable, match="has no convex formulation"):
        optimum.solve(ds.X, ds.y, model, np.full(14, 1.0 / 3), 1.0)


def test_time_limit_stops_every_attempt_and_says_so():
    # 1 ms per attempt cannot solve breast cancer (k = 20): each attempt is
    # stopped and refused, and the message names the limit
    ds = harness.build("dataset", "breast_cancer")
    model = harness.build("model", "logistic_cel")
    model.setup(ds, 1.0)
    with pytest.raises(optimum.OptimumUnavailable, match=r"time limit, 0.001 s") as err:
        optimum.solve(ds.X, ds.y, model, np.full(569, 1 / 20), 1.0, time_limit=1e-3)
    assert str(err.value).count("CLARABEL") == 3 and "SCS" in str(err.value)


# ---------------------------------------------------------------------------
# the reference plugin in a game
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("p_player", ["ru_sgd", "exp4mp"])
def test_suboptimality_is_bracketed_in_a_seed_fixed_run(tmp_path, p_player):
    # seed 0, breast cancer, k = 20, 2e5 data points, 8 checkpoints. At every
    # checkpoint the suboptimality is objective(w_bar) - opt_lower (never
    # negative), so objective - opt <= suboptimality <= dual_gap + (opt -
    # opt_lower): objective(w_bar) >= OPT >= opt_lower, and the certified gap
    # bounds objective(w_bar) - OPT from above for any a_bar in K. Tolerance
    # 1e-12 for rounding.
    params, points = _play(_cfg(tmp_path, p_player, budget=200_000))
    assert params["opt_status"] == "solved"
    tolerance = params["opt"] - params["opt_lower"]
    assert 0.0 <= tolerance <= 1e-5 * params["opt"]
    assert len(points) >= 5
    for step, m in points.items():
        assert m["suboptimality"] >= max(m["objective"] - params["opt"], 0.0), step
        assert m["suboptimality"] <= m["dual_gap"] + tolerance + 1e-12, step
        assert m["suboptimality"] == pytest.approx(
            max(m["objective"] - params["opt_lower"], 0.0), abs=1e-15)
        assert m["relative_suboptimality"] == pytest.approx(m["suboptimality"] / params["opt"],
                                                            rel=1e-12)


class PairedLabels:
    """20 points in [0, 1]^2 (seed 6), each present twice, once per class.

    For any w the two copies of a point have losses summing to at least
    2 log 2 (equality iff both logits agree), so at least half the rows lose
    log 2 or more: for k <= 20, OPT = log(2) / s exactly, attained at w = 0,
    which is the w-player's first iterate."""

    name: ClassVar[str] = "paired_labels"
    params: ClassVar[dict[str, Param]] = {}
    task = "classification"
    n_classes = 2
    default_model = "logistic_cel"
    provenance: ClassVar[dict[str, str]] = {"source": "synthetic, tests/test_optimum.py"}

    def __init__(self) -> None:
        X = np.random.default_rng(6).random((20, 2))
        self.X = np.vstack((X, X))
        self.y = np.repeat([0, 1], 20)


class PairedLabelsPlugin:
    @harness.hookimpl
    def register_datasets(self, register):
        register(PairedLabels)


@pytest.mark.parametrize("p_player", ["ru_sgd", "exp4mp", "ftrl"])
def test_suboptimality_is_never_negative_beyond_the_certificate_at_a_known_optimum(
        tmp_path, p_player):
    # seed 0, k = 4, 2e4 data points. OPT = log(2) / s is known exactly; the
    # first checkpoint's w_bar is w_1 = 0, an optimum, so the suboptimality
    # there is 0 up to the solver's certified width (measured: 4e-9), and an
    # OPT whose lower end were placed even 1e-8 too high would make it (before
    # the plugin's floor at 0) negative; it never exceeds dual_gap + the width.
    recorder = Recorder()
    registry = harness.Registry(harness.make_plugin_manager([PairedLabelsPlugin(), recorder]))
    cfg = _cfg(tmp_path, p_player, dataset="paired_labels", k=4, budget=20_000,
               registry=registry)
    prep = harness.prepare(cfg, registry)
    harness.play(prep)
    params = prep.context.params
    exact = math.log(2.0) / prep.parts.model.scale_
    tolerance = params["opt"] - params["opt_lower"]
    assert params["opt_lower"] <= exact <= params["opt"] <= exact + 1e-7 * exact
    first = recorder.points[min(recorder.points)]
    assert abs(first["suboptimality"]) <= tolerance + 1e-15
    assert exact - params["opt_lower"] <= tolerance
    for step, m in recorder.points.items():
        assert m["suboptimality"] >= 0.0, step
        assert m["suboptimality"] <= m["dual_gap"] + tolerance + 1e-12, step


def test_opt_is_cached_by_problem(tmp_path):
    params, _ = _play(_cfg(tmp_path, budget=2000))
    assert params["opt_status"] == "solved" and params["opt_solver"] == "CLARABEL"
    again, _ = _play(_cfg(tmp_path, budget=2000, p_player="uniform"))
    assert again["opt_status"] == "cached" and again["opt"] == params["opt"]
    records = sorted((tmp_path / "cache").glob("opt-*.json"))
    assert len(records) == 1
    record = json.loads(records[0].read_text())
    assert record["about"]["k"] == 20 and record["optimum"]["value"] == params["opt"]

    other_k, _ = _play(_cfg(tmp_path, budget=2000, k=10))  # another K: another key
    assert other_k["opt_status"] == "solved" and other_k["opt"] > params["opt"]
    assert len(list((tmp_path / "cache").glob("opt-*.json"))) == 2

    records[0].write_text("{not json")  # a damaged record is solved again, not trusted
    repaired, _ = _play(_cfg(tmp_path, budget=2000))
    assert repaired["opt_status"] == "solved"
    assert repaired["opt"] == pytest.approx(params["opt"], rel=1e-9)


def test_too_big_for_auto_is_skipped_and_says_why(tmp_path):
    # method=direct: auto takes the working set beyond max_size on a capped set
    # (tests/test_optimum_working_set.py)
    params, points = _play(_cfg(tmp_path, budget=2000, max_size=1000, method="direct"))
    assert params["opt_status"] == "skipped" and "opt" not in params
    assert "max_size" in params["opt_message"] and "17,070" in params["opt_message"]
    assert not any("suboptimality" in m for m in points.values())


def test_solver_failure_logs_no_suboptimality(tmp_path, monkeypatch):
    def fail(*args, **kwargs):
        raise optimum.OptimumUnavailable("no solver gave a certified optimum (CLARABEL: boom)")

    monkeypatch.setattr(optimum, "solve", fail)
    with pytest.warns(RuntimeWarning, match="exact optimum unavailable"):
        params, points = _play(_cfg(tmp_path, budget=2000))
    assert params["opt_status"] == "failed" and "boom" in params["opt_message"]
    assert "opt" not in params
    assert not any("suboptimality" in m for m in points.values())
    assert not list((tmp_path / "cache").glob("opt-*.json"))  # failures are not cached


def test_without_cvxpy_auto_skips_and_true_is_an_error(tmp_path, monkeypatch):
    monkeypatch.setattr(reference, "_cvxpy_installed", lambda: False)
    params, _ = _play(_cfg(tmp_path, budget=2000))
    assert params["opt_status"] == "skipped" and "cvxpy is not installed" in params["opt_message"]
    with pytest.raises(harness.ConfigError, match=r"reference.exact=true needs cvxpy"):
        _play(_cfg(tmp_path, budget=2000, exact=True))


def test_reference_config_is_validated(tmp_path):
    with pytest.raises(harness.ConfigError, match="The 'solver' parameter of reference must be "
                                                  "one of"):
        _play(_cfg(tmp_path, budget=2000, solver="gurobi"))
    with pytest.raises(harness.ConfigError, match=r"Unknown parameter\(s\) \['exakt'\]"):
        _play(_cfg(tmp_path, budget=2000, exakt="auto"))
    params, points = _play(_cfg(tmp_path, budget=2000, exact=False))
    assert "opt_status" not in params and params["reference.exact"] == "false"
    assert not any("suboptimality" in m for m in points.values())


def test_config_without_reference_computes_nothing(tmp_path):
    cfg = _cfg(tmp_path, budget=2000)
    del cfg["reference"]
    params, points = _play(cfg)
    assert not any(key.startswith(("opt", "reference.")) for key in params)
    assert not (tmp_path / "cache").exists()
