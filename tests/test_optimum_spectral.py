"""The exact optimum OPT over a permutahedron P(sigma), a spectral risk
(plugins/metrics/optimum.py; the reference plugin plugins/metrics/reference.py).

The references are independent of the code under test: the same OPT by the
other path (the cvxpy form of the spectral risk against L-BFGS-B and Newton's
polish), the inner maximum at a few rows over P(sigma) written by Rado's
theorem (one inequality per subset of rows) and solved by SLSQP, the spectral
risk sorted by hand and minimised by Nelder-Mead, the superquantile at an
integer n(1-level) against the k-set's OPT, and the cache's keys of capped
sets as they were before spectra.
"""

from __future__ import annotations

import itertools
import math
import warnings
from types import SimpleNamespace

import numpy as np
import pytest
from scipy import optimize

import harness
from harness.problem import Problem
from plugins.lib.permutahedron import RISKS, spectrum, superquantile_spectrum
from plugins.metrics import optimum, reference

from conftest import game_cfg

pytest.importorskip("cvxpy")

#: the smooth, strongly convex problems' certified interval, relative to |OPT|
SMOOTH_WIDTH = 1e-9
#: the two paths' OPT apart, relative (measured: at most 2.4e-16)
PATHS_RTOL = 1e-12
#: the nonsmooth problems' acceptance (conic interval; measured 1e-9 to 1e-8)
CONIC_RTOL = 1e-6


def _instance(model_name: str, n: int, d: int, seed: int):
    """Random data (seeded): a linear model without bias, loss scale 2 (Prospect's
    squared loss / 2) on a noisy linear target, or a 3-class softmax model."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    if model_name == "linear_mse":
        ds = SimpleNamespace(X=X, y=X @ rng.normal(size=d) + rng.normal(size=n), n_classes=0)
        model = harness.build("model", "linear_mse", bias=False, loss_scale=2.0)
    else:
        ds = SimpleNamespace(X=X, y=rng.integers(0, 3, size=n), n_classes=3)
        model = harness.build("model", "logistic_cel")
    model.setup(ds, 1.0)
    return ds.X, ds.y, model


def _solve(X, y, model, sigma, *, conic: bool, mu: float, nu: float = 1.0,
           radius: float = math.inf, rtol: float = 1e-9):
    return optimum.solve(X, y, model, None, radius, rtol=rtol, atol=1e-14, mu=mu, nu=nu,
                         spectrum=sigma, conic_size=10**9 if conic else 0)


def _binding(X, y, model, sigma, w, mu: float, nu: float) -> float:
    """How far the inner maximiser at ``w`` lies from the unconstrained one ``1/n +
    (L - mean L) / (nu n)``: positive where P(sigma) binds (where the risk matters)."""
    P = Problem(X, y, model, optimum.SpectralSet(sigma), mu, nu, math.inf)
    losses = P.losses(np.asarray(w))
    n = losses.size
    return float(np.max(np.abs(P.inner(losses)[1] - (1 / n + (losses - losses.mean()) / (nu * n)))))


CASES = [(model, risk) for model in ("linear_mse", "logistic_cel") for risk in RISKS]
#: (n, d, data seed, nu) of each model's instance: nu small enough that P(sigma)
#: binds at OPT (the softmax model's losses are scaled into [0, 1])
INSTANCE = {"linear_mse": (40, 5, 0, 1.0), "logistic_cel": (30, 3, 1, 0.02)}


@pytest.fixture(scope="module")
def smooth_optima():
    """``{(model, risk): (data, sigma, nu, conic Optimum, L-BFGS Optimum)}``: n = 40
    (linear, d = 5, seed 0, nu = 1) or 30 (softmax, d = 3, seed 1, nu = 0.02),
    mu = 1/n, no ball; superquantile level 0.5, extremile r = 2, ESRM rho = 1.
    Solved once."""
    out = {}
    for model_name, risk in CASES:
        n, d, seed, nu = INSTANCE[model_name]
        X, y, model = _instance(model_name, n, d, seed)
        sigma = spectrum(risk, n)
        out[model_name, risk] = ((X, y, model), sigma, nu,
                                 _solve(X, y, model, sigma, conic=True, mu=1.0 / n, nu=nu),
                                 _solve(X, y, model, sigma, conic=False, mu=1.0 / n, nu=nu))
    return out


# ---------------------------------------------------------------------------
# the two paths, the certificate
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("risk", RISKS)
@pytest.mark.parametrize("nu", [0.0, 0.05, 1.0])
def test_the_cvxpy_form_of_the_inner_maximum_is_the_inner_maximum(risk, nu):
    # spectral_inner at fixed losses (n = 8, seed 7, uniform on [0, 2]) by
    # Clarabel against the spectral risk sorted by hand (nu = 0) or the maximum
    # over Rado's inequalities (nu > 0), within 1e-7 (Clarabel's accuracy); its
    # multiplier is the maximiser (1e-6). The smooth problems' polish would hide
    # a wrong form: it corrects any start
    import cvxpy as cp

    losses = np.random.default_rng(7).uniform(0.0, 2.0, size=8)
    sigma = spectrum(risk, 8)
    e = cp.Variable(8)
    fixed = e >= losses
    problem = cp.Problem(cp.Minimize(optimum.spectral_inner(cp, e, sigma, nu)), [fixed])
    assert problem.is_dcp()
    problem.solve(solver="CLARABEL")
    exact = (float(np.sort(losses) @ sigma) if nu == 0.0
             else _rado_inner(losses, sigma, nu))
    assert problem.value == pytest.approx(exact, abs=1e-7)
    if nu > 0.0:
        q = optimum.SpectralSet(sigma).euclidean_project(1 / 8 + losses / (nu * 8))
        np.testing.assert_allclose(fixed.dual_value, q, atol=1e-6)


@pytest.mark.parametrize(("model_name", "risk"), CASES)
def test_the_conic_form_and_lbfgs_with_newton_agree_within_certified_intervals(
        smooth_optima, model_name, risk):
    # the cvxpy form (sum_largest over the distinct levels, the Fenchel dual of the
    # shift cost), polished, against L-BFGS-B polished: two certified intervals at
    # most SMOOTH_WIDTH |OPT| wide (measured: 4e-15 to 1.3e-14), which overlap,
    # and values within PATHS_RTOL; P(sigma) binds at OPT (by 0.04 to 0.14)
    (X, y, model), sigma, nu, conic, smooth = smooth_optima[model_name, risk]
    assert _binding(X, y, model, sigma, smooth.w, 1.0 / X.shape[0], nu) > 0.01
    assert conic.solver == "CLARABEL" and conic.polished
    assert smooth.solver == optimum.LBFGS and smooth.polished
    for found in (conic, smooth):
        assert 0.0 <= found.value - found.lower <= SMOOTH_WIDTH * abs(found.value)
    assert conic.lower <= smooth.value and smooth.lower <= conic.value
    assert abs(conic.value - smooth.value) <= PATHS_RTOL * abs(conic.value)


@pytest.mark.parametrize(("model_name", "risk"), CASES)
def test_opt_is_f_at_its_point_and_no_nearby_point_goes_below_the_lower_end(
        smooth_optima, model_name, risk):
    # F(w*) by harness.problem with the registered spectral set (not the module's
    # own stand-in) is the record's value; F at 200 random points within 0.1 of w*
    # (seed 2) stays above the certified lower end
    (X, y, model), sigma, nu, _, found = smooth_optima[model_name, risk]
    n = X.shape[0]
    K = harness.build("constraint_set", "spectral", n=n, risk=risk)
    np.testing.assert_array_equal(K.spectrum(), sigma)
    P = Problem(X, y, model, K, 1.0 / n, nu, math.inf)
    w = np.asarray(found.w)
    assert P.value(w) == pytest.approx(found.value, rel=1e-14)
    rng = np.random.default_rng(2)
    for _ in range(200):
        step = rng.normal(size=w.size)
        assert P.value(w + 0.1 * rng.random() * step / np.linalg.norm(step)) >= found.lower


def test_certify_takes_the_dual_q_and_rejects_a_wrong_point(smooth_optima):
    # certify's lower end is the dual bound at q: at OPT's w with the inner
    # maximiser, tight (within 1e-9 |OPT|); at w = 0 with a uniform q, wide
    (X, y, model), sigma, _, _, found = smooth_optima["linear_mse", "extremile"]
    n = X.shape[0]
    upper, lower = optimum.certify(X, y, model, None, math.inf, np.asarray(found.w), None,
                                   mu=1.0 / n, nu=1.0, spectrum=sigma)
    assert lower <= found.value + 1e-15 and found.lower <= upper
    assert upper - lower <= 1e-9 * upper
    upper, lower = optimum.certify(X, y, model, None, math.inf, np.zeros(model.n_params),
                                   np.full(n, 1.0 / n), mu=1.0 / n, nu=1.0, spectrum=sigma)
    assert lower <= found.value <= upper and upper - lower > 0.1


@pytest.mark.parametrize("risk", ["extremile", "esrm"])
def test_the_two_paths_agree_over_an_active_ball(risk):
    # linear, n = 40, d = 5, seed 0, mu = 1/n, nu = 1, radius 0.5 (the free
    # minimiser lies outside): the multiplier search of the polish on both paths
    X, y, model = _instance("linear_mse", 40, 5, 0)
    sigma = spectrum(risk, 40)
    conic = _solve(X, y, model, sigma, conic=True, mu=1 / 40, radius=0.5)
    smooth = _solve(X, y, model, sigma, conic=False, mu=1 / 40, radius=0.5)
    assert np.linalg.norm(smooth.w) == pytest.approx(0.5, rel=1e-12)
    assert conic.lower <= smooth.value and smooth.lower <= conic.value
    assert abs(conic.value - smooth.value) <= PATHS_RTOL * conic.value


# ---------------------------------------------------------------------------
# against evaluations by hand
# ---------------------------------------------------------------------------


def _rado_inner(losses: np.ndarray, sigma: np.ndarray, nu: float) -> float:
    """``max_{q in P(sigma)} <l, q> - (nu n/2) ||q - 1/n||^2`` with P(sigma) written
    by Rado's theorem (``sum q = 1``, ``sum_{i in S} q_i <=`` the |S| largest
    entries of sigma for every proper subset S), solved by SLSQP from the
    uniform q (``ftol`` 1e-12: measured within 5e-15 of the projection's value)."""
    n = losses.size
    top = np.cumsum(np.sort(sigma)[::-1])
    subsets = [S for size in range(1, n) for S in itertools.combinations(range(n), size)]
    A = np.zeros((len(subsets), n))
    for row, S in enumerate(subsets):
        A[row, list(S)] = 1.0
    b = top[[len(S) - 1 for S in subsets]]
    cons = [{"type": "eq", "fun": lambda q: q.sum() - 1.0, "jac": lambda q: np.ones((1, n))},
            {"type": "ineq", "fun": lambda q: b - A @ q, "jac": lambda q: -A}]

    def neg(q):
        shift = q - 1.0 / n
        return -(losses @ q - 0.5 * nu * n * shift @ shift), -(losses - nu * n * shift)

    res = optimize.minimize(neg, np.full(n, 1.0 / n), jac=True, method="SLSQP",
                            constraints=cons, options={"ftol": 1e-12, "maxiter": 1000})
    assert res.success, res.message
    return -float(res.fun)


@pytest.mark.parametrize("risk", RISKS)
def test_opt_is_f_evaluated_by_hand_at_a_few_rows(risk):
    # n = 6, d = 2 (linear, seed 3), mu = 1/n, nu = 0.05 (P(sigma) binds at OPT:
    # by 0.2 to 0.3), no ball: F(w*) with the inner maximum over P(sigma) by
    # Rado's inequalities (62 subsets, SLSQP) within 1e-10 of OPT (measured:
    # below 1e-16)
    X, y, model = _instance("linear_mse", 6, 2, 3)
    sigma = spectrum(risk, 6)
    found = _solve(X, y, model, sigma, conic=True, mu=1 / 6, nu=0.05)
    w = np.asarray(found.w)
    assert _binding(X, y, model, sigma, w, 1 / 6, 0.05) > 0.1
    by_hand = _rado_inner(model.raw_losses(w, X, y) / 2.0, sigma, 0.05) + w @ w / 12
    assert abs(by_hand - found.value) <= 1e-10


def _sorted_risk(w: np.ndarray, X: np.ndarray, y: np.ndarray, sigma: np.ndarray,
                 mu: float) -> float:
    """``sum_i sigma_i l_(i) + (mu/2) ||w||^2``, the losses (``(y - Xw)^2 / 2``)
    sorted ascending by hand."""
    return float(np.sort(0.5 * (y - X @ w) ** 2) @ sigma + 0.5 * mu * w @ w)


@pytest.mark.parametrize("risk", RISKS)
def test_nonsmooth_opt_matches_the_sorted_risk_minimised_by_nelder_mead(risk):
    # nu = 0, mu = 0.1, no ball (the conic path alone, CONIC_RTOL): n = 8, d = 2,
    # seed 4. OPT's value is the hand-sorted risk at its w (1e-12), and
    # Nelder-Mead on that risk from 5 starts (seed 5) ends within 1e-7 of it
    # (measured: 3e-10 below it, inside the conic interval) and never below its
    # certified lower end
    X, y, model = _instance("linear_mse", 8, 2, 4)
    sigma = spectrum(risk, 8)
    found = _solve(X, y, model, sigma, conic=True, mu=0.1, nu=0.0, rtol=CONIC_RTOL)
    assert not found.polished
    assert _sorted_risk(np.asarray(found.w), X, y, sigma, 0.1) == pytest.approx(
        found.value, abs=1e-12)
    rng = np.random.default_rng(5)
    best = min(optimize.minimize(_sorted_risk, rng.normal(size=2), args=(X, y, sigma, 0.1),
                                 method="Nelder-Mead",
                                 options={"xatol": 1e-12, "fatol": 1e-14,
                                          "maxiter": 20_000}).fun for _ in range(5))
    assert best >= found.lower - 1e-12
    assert abs(best - found.value) <= 1e-7


@pytest.mark.parametrize(("mu", "nu", "radius"), [(0.0, 0.0, 1.0), (0.1, 0.0, math.inf),
                                                  (1 / 40, 1.0, math.inf)])
def test_the_superquantile_at_an_integer_width_is_the_kset(mu, nu, radius):
    # n = 40, level 0.5: n (1 - level) = 20, the k-set with k = 20. Its spectrum
    # (one distinct level) through the spectral program against the caps 1/20
    # through the Rockafellar-Uryasev one: the certified intervals overlap, on the
    # paper's problem, the nonsmooth one with mu, and the smooth one
    X, y, model = _instance("linear_mse", 40, 5, 0)
    sigma = superquantile_spectrum(40, 0.5)
    assert optimum.spectral_levels(sigma)[0].tolist() == [20]
    rtol = 1e-9 if nu else CONIC_RTOL
    spectral = optimum.solve(X, y, model, None, radius, rtol=rtol, mu=mu, nu=nu, spectrum=sigma)
    capped = optimum.solve(X, y, model, np.full(40, 1 / 20), radius, rtol=rtol, mu=mu, nu=nu)
    assert spectral.lower <= capped.value and capped.lower <= spectral.value
    # the set as a run builds it answers with its caps: the k-set's path and key
    caps, sigma_form = optimum.set_form(harness.build("constraint_set", "spectral", n=40))
    assert sigma_form is None
    np.testing.assert_array_equal(caps, np.full(40, 1 / 20))


# ---------------------------------------------------------------------------
# when each path is taken, and when none is
# ---------------------------------------------------------------------------


def test_the_spectral_size_picks_the_path_and_a_large_nonsmooth_program_is_refused():
    X, y, model = _instance("linear_mse", 30, 3, 6)
    sigma = spectrum("extremile", 30)
    assert optimum.spectral_size(sigma) == 30 * 30
    small = optimum.solve(X, y, model, None, math.inf, mu=1 / 30, nu=1.0, spectrum=sigma,
                          conic_size=900)
    large = optimum.solve(X, y, model, None, math.inf, mu=1 / 30, nu=1.0, spectrum=sigma,
                          conic_size=899)
    assert small.solver == "CLARABEL" and large.solver == optimum.LBFGS
    assert "too large for cvxpy (30 distinct levels x 30 rows = 900 > 899)" in large.attempts[0]
    with pytest.raises(optimum.OptimumUnavailable, match="not smooth and strongly convex"):
        optimum.solve(X, y, model, None, 1.0, spectrum=sigma, conic_size=899)
    # no conic attempt left (no solver chosen): the smooth path still answers
    assert optimum.solve(X, y, model, None, math.inf, (), mu=1 / 30, nu=1.0,
                         spectrum=sigma).solver == optimum.LBFGS


def test_a_set_is_given_by_caps_or_a_spectrum_exactly_once():
    X, y, model = _instance("linear_mse", 5, 2, 0)
    with pytest.raises(ValueError, match="exactly one"):
        optimum.solve(X, y, model, None, 1.0)
    with pytest.raises(ValueError, match="exactly one"):
        optimum.cache_key(X, y, model, np.full(5, 0.5), 1.0, spectrum=np.full(5, 0.2))
    with pytest.raises(ValueError, match="sorted ascending"):
        optimum.solve(X, y, model, None, 1.0, spectrum=np.array([0.4, 0.3, 0.1, 0.1, 0.1]))
    with pytest.raises(ValueError, match="one entry per row"):
        optimum.solve(X, y, model, None, 1.0, spectrum=np.full(4, 0.25))


# ---------------------------------------------------------------------------
# the cache
# ---------------------------------------------------------------------------


def test_capped_keys_are_those_before_spectra_and_spectral_keys_differ():
    # the keys of a fixed instance (seed 0, 10 x 3, linear_mse, caps 1/3, B = 1)
    # as the module computed them before spectra: existing records stay valid
    rng = np.random.default_rng(0)
    X, y = rng.random((10, 3)), rng.random(10)
    model = harness.build("model", "linear_mse")
    model.setup(SimpleNamespace(X=X, y=y, n_classes=0), 1.0)
    caps = np.full(10, 1 / 3)
    assert optimum.cache_key(X, y, model, caps, 1.0) == (
        "650ed9c0fa65ce0386be38887a8ecf1a8858e9699c1919b0b6a45d49ddaf6823")
    assert optimum.cache_key(X, y, model, caps, 1.0, mu=0.1, nu=1.0) == (
        "34d7d17f65f1a69eb28ed01a1f4a096cd2e50b539491e73d3ba64799d39757ed")
    # a spectrum with the caps' very bytes, and each risk, hash apart
    keys = {optimum.cache_key(X, y, model, None, 1.0, spectrum=s)
            for s in [np.full(10, 0.1), *(spectrum(r, 10) for r in RISKS)]}
    assert len(keys) == 4
    assert optimum.cache_key(X, y, model, np.full(10, 0.1), 1.0) not in keys


def test_a_spectral_optimum_survives_the_cache_round_trip(smooth_optima, tmp_path):
    (X, y, model), sigma, nu, _, found = smooth_optima["logistic_cel", "esrm"]
    n = X.shape[0]
    key = optimum.cache_key(X, y, model, None, math.inf, mu=1 / n, nu=nu, spectrum=sigma)
    optimum.store(tmp_path, key, found, {"constraint": "spectral"})
    assert optimum.load_cached(tmp_path, key) == found
    other = optimum.cache_key(X, y, model, None, math.inf, mu=1 / n, nu=nu,
                              spectrum=spectrum("extremile", n))
    assert optimum.load_cached(tmp_path, other) is None


# ---------------------------------------------------------------------------
# the reference plugin in a run
# ---------------------------------------------------------------------------


def _spectral_run(tmp_path, risk: str, dataset: str = "yacht", n: int = 308) -> list[str]:
    """The field's spectral problem on ``dataset`` (all ``n`` rows, standardised)
    for a full-batch run of 4 passes: the overrides."""
    return ["constraint=spectral", f"constraint.risk={risk}", "model=linear_mse",
            "model.bias=false", "model.loss_scale=2.0", f"dataset={dataset}",
            "dataset.scale=standard", "problem.mu_times_n=1.0", "problem.nu=1.0",
            "problem.ball=false", "solver=full_batch", f"budget={4 * n}", "checkpoints=4",
            "reference.exact=auto", "reference.rtol=1e-8",
            f"reference.cache_dir={tmp_path / 'cache'}"]


class Recorder:
    """Keeps every checkpoint's metrics."""

    def __init__(self) -> None:
        self.points: dict[int, dict[str, float]] = {}

    @harness.hookimpl
    def on_checkpoint(self, context, step, metrics):
        self.points[int(step)] = dict(metrics)


def _play(cfg):
    recorder = Recorder()
    prep = harness.prepare(cfg, harness.Registry(harness.make_plugin_manager([recorder])))
    harness.play(prep)
    return prep.context.params, recorder.points


def test_a_spectral_run_logs_opt_and_suboptimality_then_reads_the_cache(tmp_path):
    params, points = _play(game_cfg(*_spectral_run(tmp_path, "extremile")))
    assert params["opt_status"] == "solved", params["opt_message"]
    prep = harness.prepare(game_cfg(*_spectral_run(tmp_path, "extremile")))
    P = prep.parts.problem
    # the run's OPT (the conic path: 308 x 308 levels) against the smooth path's
    alone = optimum.solve(np.asarray(P.X), P.y, P.model, None, math.inf, rtol=1e-8,
                          mu=P.mu, nu=P.nu, spectrum=P.constraint.spectrum(), conic_size=0)
    assert params["opt_solver"] == "CLARABEL" and alone.solver == optimum.LBFGS
    assert params["opt_lower"] <= alone.value and alone.lower <= params["opt"]
    assert params["opt_width"] <= reference.machine_width(alone.value, P.n, False)
    last = points[max(points)]
    # the objective's upper end less OPT's lower end (harness.dual's enclosure)
    width = reference.machine_width(alone.value, P.n, False)
    assert 0.0 <= last["suboptimality"] == pytest.approx(last["objective"] - alone.lower,
                                                         abs=width)
    assert last["relative_suboptimality"] == pytest.approx(last["suboptimality"] / alone.value)
    assert 0.0 < last["normalised_suboptimality"] < 1.0
    again, _ = _play(game_cfg(*_spectral_run(tmp_path, "extremile")))
    assert again["opt_status"] == "cached" and again["opt"] == params["opt"]


def test_a_large_spectral_run_takes_the_smooth_path_without_a_precision_warning(tmp_path):
    # kin8nm, all 8,192 rows, the ESRM: 8,192 levels x 8,192 rows, far beyond
    # SPECTRAL_CONIC_SIZE, so L-BFGS-B and Newton. The interval (the permutahedron's
    # enclosure allows an n-term sum at each end) is wider than MACHINE_WIDTH |OPT|
    # but within machine_width, so the run does not warn that polishing fell short
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        params, points = _play(game_cfg(*_spectral_run(tmp_path, "esrm", "kin8nm", 8192)))
    assert params["opt_status"] == "solved" and params["opt_solver"] == optimum.LBFGS
    assert (reference.MACHINE_WIDTH * params["opt"] < params["opt_width"]
            <= reference.machine_width(params["opt"], 8192, False))
    assert points[max(points)]["suboptimality"] >= 0.0


def test_a_smooth_spectral_run_needs_no_cvxpy(tmp_path, monkeypatch):
    # without cvxpy a capped set's OPT is skipped (tests/test_optimum.py); a smooth,
    # strongly convex problem over a permutahedron still gets its OPT by L-BFGS-B
    monkeypatch.setattr(reference, "_cvxpy_installed", lambda: False)
    params, _ = _play(game_cfg(*_spectral_run(tmp_path, "esrm", "kin8nm", 8192)))
    assert params["opt_status"] == "solved" and params["opt_solver"] == optimum.LBFGS


def test_a_set_of_neither_form_is_skipped_with_its_reason():
    class Neither:
        name = "neither"

        def row_caps(self):
            return None

    parts = SimpleNamespace(dataset=SimpleNamespace(X=np.zeros((3, 2)), y=np.zeros(3)),
                            model=None, constraint=Neither())
    status, message, found = reference.compute(parts, reference.settings({}))
    assert (status, found) == ("skipped", None)
    assert "neither" in message and "permutahedron" in message
