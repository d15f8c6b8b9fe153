"""OPT at large n by a working set of rows (plugins/metrics/working_set.py): its
certified interval contains the direct solve's OPT and meets the tolerance,
its stopping rule refuses a set that misses part of the best response, and
the reference plugin takes it beyond max_size.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

import harness
from plugins.metrics import optimum, reference, working_set

from conftest import game_cfg

pytest.importorskip("cvxpy")

RADIUS = 10.0


def _regression(n: int, d: int, seed: int):
    """Synthetic regression with heavy-tailed noise (t with 3 degrees of freedom)."""
    rng = np.random.default_rng(seed)
    X = rng.random((n, d))
    y = X @ rng.normal(size=d) + rng.standard_t(3, size=n)
    ds = SimpleNamespace(X=X, y=y, n_classes=0)
    model = harness.build("model", "linear_mse")
    model.setup(ds, RADIUS)
    return X, y, model


def _tolerance(found: optimum.Optimum, rtol: float = 1e-5, atol: float = 1e-8) -> float:
    return rtol * abs(found.value) + atol


def _contains(found: optimum.Optimum, direct: optimum.Optimum) -> bool:
    """The two certified intervals overlap (each holds OPT)."""
    return found.lower <= direct.value and direct.lower <= found.value


@pytest.mark.parametrize(("n", "k"), [(3000, 20), (3000, 30)])
def test_working_set_interval_holds_the_direct_opt(n, k):
    # seed 0; tolerance: the reference's (rtol 1e-5, atol 1e-8) on the interval's width;
    # the interval must overlap the direct solve's certified one (both hold OPT).
    # k = 30 is the k = n/100 form
    X, y, model = _regression(n, 5, seed=0)
    caps = np.full(n, 1.0 / k)
    direct = optimum.solve(X, y, model, caps, RADIUS)
    found = working_set.working_set_optimum(X, y, model, caps, RADIUS)
    assert found.status == "optimal" and found.working_set["met_tolerance"]
    assert found.value - found.lower <= _tolerance(found)
    assert _contains(found, direct)
    assert found.working_set["rows"] < n and found.working_set["n"] == n
    assert found.solver.startswith(working_set.NAME)


@pytest.mark.parametrize(("dataset", "model_name", "k"),
                         [("breast_cancer", "logistic_cel", 5), ("boston", "linear_mse", 20)])
def test_a_tiny_initial_set_grows_over_several_rounds(dataset, model_name, k):
    # the data set's own rows; tolerance as above. The first set is the best response
    # at w = 0 alone (margin 1), so the optimum's rows must be found by growing it
    ds = harness.build("dataset", dataset)
    X, y = np.asarray(ds.X, dtype=np.float64), ds.y
    model = harness.build("model", model_name)
    model.setup(ds, RADIUS)
    caps = np.full(X.shape[0], 1.0 / k)
    direct = optimum.solve(X, y, model, caps, RADIUS)
    found = working_set.working_set_optimum(X, y, model, caps, RADIUS,
                                            limits=working_set.Limits(margin=1.0))
    assert found.working_set["rounds"] >= 4
    assert found.value - found.lower <= _tolerance(found)
    assert _contains(found, direct)
    # every round's interval is certified: the upper ends never fall below OPT's lower end
    assert len(found.attempts) == found.working_set["rounds"] + 1


def test_the_stopping_rule_refuses_a_set_that_misses_the_best_response():
    # seed 1. Ten rows with large features and target 0 have loss 0 at w = 0, so the
    # first set (the best response at w = 0, margin 1) leaves them out; at the
    # subproblem's w they are the largest losses. With one round the subproblem's own
    # interval is tight, but the full objective at its w counts the left-out rows: the
    # interval stays wide and the result says so (status bounded); OPT (direct) is in it.
    n, k = 2000, 10
    X, y, model = _regression(n, 4, seed=1)
    X, y = X.copy(), y.copy()
    X[:k], y[:k] = 3.0, 0.0
    model.setup(SimpleNamespace(X=X, y=y, n_classes=0), RADIUS)
    caps = np.full(n, 1.0 / k)
    direct = optimum.solve(X, y, model, caps, RADIUS)
    losses0 = working_set.full_losses(model, np.zeros(model.n_params), X, y)
    missed = np.setdiff1d(np.arange(k), working_set.top_rows(losses0, k))
    assert missed.size > 0  # the best response at w = 0 misses some outliers
    found = working_set.working_set_optimum(X, y, model, caps, RADIUS,
                                            limits=working_set.Limits(margin=1.0, rounds=1))
    assert found.status == "bounded" and not found.working_set["met_tolerance"]
    assert found.value - found.lower > _tolerance(found)
    assert _contains(found, direct)
    assert "wider than" in found.attempts[-1] and "round limit" in found.attempts[-1]
    grown = working_set.working_set_optimum(X, y, model, caps, RADIUS,
                                            limits=working_set.Limits(margin=1.0))
    assert grown.status == "optimal" and _contains(grown, direct)


def test_the_smooth_subproblem_path_is_certified():
    # seed 2; a conic budget of 0 sends every subproblem to the smoothed solve
    # (L-BFGS-B and Newton on mu, nu > 0), whose lower end is certified for mu = nu = 0
    n, k = 1500, 15
    X, y, model = _regression(n, 3, seed=2)
    caps = np.full(n, 1.0 / k)
    direct = optimum.solve(X, y, model, caps, RADIUS)
    found = working_set.working_set_optimum(X, y, model, caps, RADIUS,
                                            limits=working_set.Limits(conic_size=0))
    assert "smoothed" in found.solver
    assert found.value - found.lower <= _tolerance(found)
    assert _contains(found, direct)


def test_best_response_matches_the_full_sort():
    # seed 3; tolerance 1e-12: the same greedy fill on the top rows and on all rows
    rng = np.random.default_rng(3)
    for n, caps in ((1000, np.full(1000, 1.0 / 7)),
                    (500, rng.uniform(0.001, 0.01, size=500))):
        losses = rng.random(n)
        value, rows, p = working_set.best_response(losses, caps)
        full, p_full = optimum.capped_value(losses, caps)
        assert value == pytest.approx(full, abs=1e-12)
        assert np.array_equal(np.sort(rows), np.flatnonzero(p_full))
        assert p.sum() == pytest.approx(1.0, abs=1e-12)


def test_cache_key_streams_to_the_same_digest():
    # seed 4: a key over row chunks equals the key of the array in one piece
    X, y, model = _regression(3000, 4, seed=4)
    caps = np.full(3000, 1.0 / 20)
    whole = optimum.cache_key(X, y, model, caps, RADIUS)
    from harness import stream

    old = stream.CHUNK_BYTES
    try:
        stream.CHUNK_BYTES = 8 * 4 * 128  # 128 rows a chunk
        chunked = optimum.cache_key(X, y, model, caps, RADIUS)
    finally:
        stream.CHUNK_BYTES = old
    assert chunked == whole


def _play(cfg):
    prep = harness.prepare(cfg, harness.Registry(harness.make_plugin_manager([])))
    harness.play(prep)
    return prep.context.params


def _cfg(tmp_path, **reference_conf):
    cfg = game_cfg("constraint.k=20", "p_player=ru_sgd", "dataset=breast_cancer",
                   "budget=2000", "checkpoints=3", "reference.exact=auto",
                   f"reference.cache_dir={tmp_path / 'cache'}")
    cfg["reference"].update(reference_conf)
    return cfg


def test_reference_uses_the_working_set_beyond_max_size_and_caches_it(tmp_path):
    # breast cancer (17,070 entries) with max_size 1000: auto takes the working set;
    # its interval holds the direct OPT (method=direct, exact=true) within the tolerance
    params = _play(_cfg(tmp_path, max_size=1000))
    assert params["opt_status"] == "solved" and params["opt_solver"].startswith("working set")
    assert "|S| = " in params["opt_message"] and "of 569 rows" in params["opt_message"]
    direct = _play(_cfg(tmp_path / "direct", max_size=1000, method="direct", exact=True))
    assert direct["opt_status"] == "solved" and direct["opt_solver"] == "CLARABEL"
    assert params["opt_lower"] <= direct["opt"] and direct["opt_lower"] <= params["opt"]
    assert params["opt_width"] <= 1e-5 * params["opt"] + 1e-8
    again = _play(_cfg(tmp_path, max_size=1000))
    assert again["opt_status"] == "cached" and again["opt"] == params["opt"]
    assert "|S| = " in again["opt_message"]


def test_method_direct_beyond_max_size_is_skipped_and_names_the_working_set(tmp_path):
    params = _play(_cfg(tmp_path, max_size=1000, method="direct"))
    assert params["opt_status"] == "skipped" and "opt" not in params
    assert "reference.method=working_set" in params["opt_message"]


def test_working_set_refuses_a_regularised_problem():
    conf = reference.settings({"reference": {"method": "working_set"}})
    why = reference.choose_method(conf, 10, True, 0.1, 0.0)
    assert "mu = nu = 0" in why
    assert reference.choose_method(conf, 10, False, 0.0, 0.0).startswith("reference.method")
    auto = reference.settings({"reference": {"max_size": 5}})
    assert reference.choose_method(auto, 10, True, 0.0, 0.0) == "working_set"
    assert reference.choose_method(auto, 4, True, 0.0, 0.0) == "direct"
    assert "max_size" in reference.choose_method(auto, 10, False, 0.0, 0.0)


def test_a_start_w_is_validated(tmp_path):
    bad = tmp_path / "w.npy"
    np.save(bad, np.zeros(3))
    with pytest.raises(harness.ConfigError, match="working_set_start"):
        _play(_cfg(tmp_path, max_size=1000, working_set_start=str(bad)))


def test_a_regrown_working_set_keeps_the_tighter_stored_ends():
    # a stored bounded interval [1.0, 1.3] (w = a) and a regrowth that stopped
    # sooner with [0.9, 1.4] (w = b): the result is [1.0, 1.3] with w = a; a
    # regrowth that improves one end keeps it and takes the other from the store
    def interval(lower, value, w):
        return optimum.Optimum(value=value, lower=lower, solver="working set", status="bounded",
                       solve_time_s=0.0, w=list(w), working_set={"rows": 10})

    stored = interval(1.0, 1.3, [1.0, 2.0])
    both = reference._tighter(interval(0.9, 1.4, [3.0, 4.0]), stored)
    assert (both.lower, both.value, both.w) == (1.0, 1.3, [1.0, 2.0])
    upper = reference._tighter(interval(0.95, 1.2, [5.0, 6.0]), stored)
    assert (upper.lower, upper.value, upper.w) == (1.0, 1.2, [5.0, 6.0])
    lower = reference._tighter(interval(1.1, 1.35, [7.0, 8.0]), stored)
    assert (lower.lower, lower.value, lower.w) == (1.1, 1.3, [1.0, 2.0])
