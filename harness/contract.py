"""The contract suite: pytest tests parametrised over every registered plugin.

Every constraint set, p-player, w-player, model and data set registered
(built-in or installed through the ``minimax_bench`` entry points) is checked
against the behaviour the game relies on. A plugin package runs the same
suite on its own plugins with one import in one of its test files::

    from harness.contract import *  # noqa: F401,F403

and ``MINIMAX_BENCH_CONTRACT_PLUGINS=<its entry-point name>`` in the
environment to restrict the suite to them (comma-separated plugin names;
built-ins are named ``plugins.<module>``).

A component whose constructor needs values the suite cannot guess (a file
path, per-row caps) provides ``contract_params(n)``, a classmethod returning
the parameters for an instance over ``n`` rows of the suite's data
(``ContractData``). Every statistical check states its seed and tolerance.
"""

from __future__ import annotations

import os
from typing import Any, ClassVar

import numpy as np
import pytest
from scipy.optimize import linprog

import harness
from harness import Param

N_ROWS = 24


class ContractData:
    """24 rows x 3 features in [0, 1], two classes, a group column: the suite's data."""

    name: ClassVar[str] = "contract_data"
    params: ClassVar[dict[str, Param]] = {
        "task": Param(str, default="classification", choices=("classification", "regression")),
    }
    provenance: ClassVar[dict[str, str]] = {"source": "harness.contract.ContractData"}

    def __init__(self, task: str = "classification") -> None:
        rng = np.random.default_rng(2024)
        self.task = task
        self.X = rng.random((N_ROWS, 3))
        labels = (self.X[:, 0] + 0.3 * rng.standard_normal(N_ROWS) > 0.5).astype(np.int64)
        if task == "classification":
            self.y, self.n_classes, self.default_model = labels, 2, "logistic_cel"
        else:
            self.y = np.clip(0.5 * self.X[:, 1] + 0.1 * rng.standard_normal(N_ROWS), 0, 1)
            self.n_classes, self.default_model = 0, "linear_mse"
        self.columns = {"group": np.where(np.arange(N_ROWS) % 3 == 0, "a", "b")}
        self.group_column = "group"


class _ContractPlugin:
    @harness.hookimpl
    def register_datasets(self, register):
        register(ContractData)


REGISTRY = harness.Registry(harness.make_plugin_manager([_ContractPlugin()]))
_ONLY = {p.strip() for p in os.environ.get("MINIMAX_BENCH_CONTRACT_PLUGINS", "").split(",")
         if p.strip()}


def _names(kind: str) -> list[str]:
    names = []
    for name in REGISTRY.names(kind):
        plugin = REGISTRY.get(kind, name).plugin
        if name == ContractData.name or (_ONLY and plugin not in _ONLY):
            continue
        names.append(name)
    return names


def _params(kind: str, name: str, n: int) -> dict[str, Any]:
    cls = REGISTRY.get(kind, name).cls
    example = getattr(cls, "contract_params", None)
    if example is not None:
        return dict(example(n))
    params: dict[str, Any] = {}
    if "n" in cls.params:
        params["n"] = n
    if "k" in cls.params:
        params["k"] = 3
    return params


def _constraint(name: str, n: int = N_ROWS):
    K = REGISTRY.build("constraint_set", name, **_params("constraint_set", name, n))
    bind = getattr(K, "bind", None)
    if bind is not None:
        bind(ContractData())
    return K


def _draw(K, p: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """A draw as (rows, multiplicities)."""
    out = K.sample(p, rng)
    if isinstance(out, tuple):
        rows, mult = out
        return np.asarray(rows), np.asarray(mult, dtype=np.int64)
    rows = np.asarray(out)
    return rows, np.ones(rows.size, dtype=np.int64)


def _weights(rng: np.random.Generator, n: int) -> np.ndarray:
    """Positive weights spanning six orders of magnitude, a few large."""
    w = np.exp(rng.normal(0.0, 3.0, n))
    w[rng.choice(n, 2, replace=False)] *= 1e3
    return w


# ---------------------------------------------------------------- constraint sets


@pytest.mark.parametrize("name", _names("constraint_set"))
def test_constraint_lmo_is_a_maximiser(name):
    # seed 0, 20 random loss vectors; tolerance 1e-9
    K = _constraint(name)
    rng = np.random.default_rng(0)
    caps = getattr(K, "caps", None)
    for _ in range(20):
        losses = rng.random(K.n)
        value, p_star = K.lmo(losses)
        assert K.contains(p_star, atol=1e-9)
        assert value == pytest.approx(float(losses @ p_star), abs=1e-9)
        for _ in range(5):  # no point of K does better
            assert float(losses @ K.project(_weights(rng, K.n), 0.1)) <= value + 1e-9
        if caps is not None:  # a capped simplex: compare with a linear program
            lp = linprog(-losses, A_eq=np.ones((1, K.n)), b_eq=[1.0],
                         bounds=list(zip(np.zeros(K.n), caps, strict=True)), method="highs")
            assert lp.status == 0 and value == pytest.approx(-lp.fun, abs=1e-9)


@pytest.mark.parametrize("name", _names("constraint_set"))
@pytest.mark.parametrize("gamma", [0.0, 0.1])
def test_constraint_projection_lands_in_the_set(name, gamma):
    # seed 1, 20 inputs; membership within 1e-9
    K = _constraint(name)
    rng = np.random.default_rng(1)
    for _ in range(20):
        w = _weights(rng, K.n)
        p = K.project(w, gamma)
        assert K.contains(p, atol=1e-9)
        np.testing.assert_allclose(K.project(np.log(w), gamma, log_domain=True), p, atol=1e-12)


@pytest.mark.parametrize("name", _names("constraint_set"))
def test_constraint_sampler_marginals(name):
    # seed 2, N = 4000 draws: every draw has total multiplicity k; the mean
    # multiplicity of each row is within 4.5 standard errors of k p_i, the
    # variance taken as the larger of the draws' and k p_i (1 - p_i) (sampling
    # with replacement; dependent rounding has less), so a rarely drawn row
    # does not shrink its own error bar. False alarms: below 1e-4 over 24 rows.
    K = _constraint(name)
    rng = np.random.default_rng(2)
    p = K.project(_weights(rng, K.n), 0.1)
    N = 4000
    counts = np.zeros((N, K.n))
    for t in range(N):
        rows, mult = _draw(K, p, rng)
        assert np.unique(rows).size == rows.size and mult.sum() == K.k and mult.min() >= 1
        counts[t, rows] = mult
    mean, sd = counts.mean(axis=0), counts.std(axis=0)
    target = K.k * p
    se = np.sqrt(np.maximum(sd**2, target * (1.0 - p)) / N)
    z = np.abs(mean - target) / np.maximum(se, 1e-300)
    fixed = sd == 0  # rows always drawn the same number of times
    assert np.all(np.abs(mean[fixed] - target[fixed]) < 1e-9)
    assert np.all(z[~fixed] < 4.5), (name, z.max())


@pytest.mark.parametrize("name", _names("constraint_set"))
def test_constraint_membership(name):
    K = _constraint(name)
    p = K.project(np.ones(K.n), 0.0)
    assert K.contains(p)
    assert not K.contains(p * 1.1)
    bad = p.copy()
    bad[0] -= 0.2
    bad[1] += 0.2
    bad[0] = min(bad[0], -0.01)
    assert not K.contains(bad)


# ---------------------------------------------------------------- p-players


def _player_cases() -> list[tuple[str, str]]:
    cases = []
    for name in _names("p_player"):
        fits = REGISTRY.get("p_player", name).cls.constraints
        for c_name in REGISTRY.names("constraint_set"):
            if fits is None or c_name in fits:
                cases.append((name, c_name))
    return cases


def _game(p_name: str, c_name: str, seed: int):
    c_params = {k: v for k, v in _params("constraint_set", c_name, N_ROWS).items() if k != "n"}
    cfg = {"constraint": {"name": c_name, **c_params},
           "p_player": {"name": p_name, **_params("p_player", p_name, N_ROWS)},
           "w_player": {"name": "ogd"}, "model": {"name": "auto"},
           "dataset": {"name": ContractData.name}, "seed": seed, "checkpoints": 3,
           "tracking": {"enabled": False}}
    probe = harness.prepare({**cfg, "budget": 10**6}, REGISTRY)
    per_round = probe.parts.p_player.rows_per_round(probe.parts.constraint)
    return harness.prepare({**cfg, "budget": 300 * per_round}, REGISTRY)


@pytest.mark.parametrize(("name", "constraint"), _player_cases())
def test_p_player_stays_in_the_set_and_observes_its_rows(name, constraint):
    prep = _game(name, constraint, seed=5)
    pp, K = prep.parts.p_player, prep.parts.constraint
    propose, observe = pp.propose, pp.observe
    seen = {"rounds": 0, "rows": None}

    def checked_propose(rng):
        prop = propose(rng)
        rows = np.asarray(prop.rows)
        assert rows.ndim == 1 and rows.size >= 1
        assert rows.min() >= 0 and rows.max() < K.n
        assert np.asarray(prop.weights).shape == rows.shape
        assert np.all(np.isfinite(prop.weights))
        if prop.action_rows is None:  # a_t = weights on rows: rows must be distinct
            assert np.unique(rows).size == rows.size
        seen["rows"] = rows
        return prop

    def checked_observe(losses):
        assert losses.shape == seen["rows"].shape
        out = observe(losses)
        if out is not None:
            assert np.shape(out) == seen["rows"].shape and np.all(np.isfinite(out))
        assert K.contains(pp.p, atol=1e-9), f"p_t left {constraint} at round {seen['rounds']}"
        seen["rounds"] += 1
        return out

    pp.propose, pp.observe = checked_propose, checked_observe
    metrics = harness.play(prep)
    assert seen["rounds"] == prep.horizon
    assert metrics["data_points"] == prep.horizon * pp.rows_per_round(K)


@pytest.mark.parametrize(("name", "constraint"), _player_cases())
def test_p_player_is_deterministic_under_a_seed(name, constraint):
    runs = []
    for _ in range(2):
        prep = _game(name, constraint, seed=9)
        metrics = harness.play(prep)
        metrics.pop("wall_time_s")
        runs.append((metrics, prep.parts.p_player.p.copy()))
    assert runs[0][0] == runs[1][0]
    np.testing.assert_array_equal(runs[0][1], runs[1][1])


# ---------------------------------------------------------------- w-players


@pytest.mark.parametrize("name", _names("w_player"))
def test_w_player_stays_in_the_ball_and_has_sublinear_regret(name):
    # seed 3: linear losses <g_t, w> with g_t = mu + noise, |mu| = 1; the
    # average regret at T = 4000 must be below half of that at T = 250
    # (sqrt(T) regret gives a quarter).
    rng = np.random.default_rng(3)
    dim = 5
    mu = rng.normal(size=dim)
    mu /= np.linalg.norm(mu)
    average = {}
    for T in (250, 4000):
        wp = REGISTRY.build("w_player", name, **_params("w_player", name, N_ROWS))
        wp.setup(dim, T, grad_bound=2.0)
        total, played = np.zeros(dim), 0.0
        for _ in range(T):
            g = mu + 0.5 * rng.normal(size=dim)
            w = wp.w
            assert np.linalg.norm(w) <= wp.radius * (1 + 1e-12)
            played += float(g @ w)
            total += g
            wp.step(g)
        regret = played + wp.radius * float(np.linalg.norm(total))
        bound = wp.regret_bound(T)
        if bound is not None:
            assert regret <= bound * (1 + 1e-9)
        average[T] = regret / T
    assert average[4000] < 0.5 * average[250]


# ---------------------------------------------------------------- models


def _model_cases() -> list[str]:
    return _names("model")


def _model_and_data(name: str):
    model = REGISTRY.build("model", name, **_params("model", name, N_ROWS))
    data = ContractData(getattr(model, "task", "classification"))
    model.setup(data, 1.5)
    return model, data


@pytest.mark.parametrize("name", _model_cases())
def test_model_losses_lie_in_the_unit_interval(name):
    # seed 4: 200 random directions on the sphere of radius B = 1.5 and inside it
    model, data = _model_and_data(name)
    rng = np.random.default_rng(4)
    for _ in range(200):
        w = rng.normal(size=model.n_params)
        w *= 1.5 * rng.choice([1.0, rng.random()]) / np.linalg.norm(w)
        losses = model.losses(w, data.X, data.y)
        assert losses.shape == (N_ROWS,)
        assert np.all((losses >= 0.0) & (losses <= 1.0))


@pytest.mark.parametrize("name", _model_cases())
def test_model_gradient_matches_finite_differences(name):
    # seed 6; central differences with h = 1e-6, relative tolerance 1e-5
    model, data = _model_and_data(name)
    rng = np.random.default_rng(6)
    w = 0.3 * rng.normal(size=model.n_params)
    a = rng.random(N_ROWS)
    value, grad = model.value_and_grad(w, data.X, data.y, a)
    numeric = np.zeros_like(w)
    for j in range(w.size):
        e = np.zeros_like(w)
        e[j] = 1e-6
        numeric[j] = (model.value_and_grad(w + e, data.X, data.y, a)[0]
                      - model.value_and_grad(w - e, data.X, data.y, a)[0]) / 2e-6
    np.testing.assert_allclose(grad, numeric, rtol=1e-5, atol=1e-8)
    np.testing.assert_allclose(model.grad(w, data.X, data.y, a), grad, rtol=1e-10, atol=1e-12)
    assert value == pytest.approx(float(a @ model.raw_losses(w, data.X, data.y)) / model.scale_)


# ---------------------------------------------------------------- data sets


@pytest.mark.parametrize("name", _names("dataset"))
def test_dataset_shapes_values_and_task(name):
    data = REGISTRY.build("dataset", name, **_params("dataset", name, N_ROWS))
    X, y = data.X, data.y
    assert X.ndim == 2 and X.shape[0] >= 1 and y.shape == (X.shape[0],)
    assert np.issubdtype(X.dtype, np.floating)
    chunk = np.asarray(X[: min(X.shape[0], 100_000)])
    assert np.all(np.isfinite(chunk)) and chunk.min() >= 0.0 and chunk.max() <= 1.0
    assert np.all(np.isfinite(np.asarray(y, dtype=np.float64)))
    assert data.task in ("classification", "regression")
    assert data.default_model in REGISTRY.names("model")
    assert isinstance(data.provenance, dict) and data.provenance
    if data.task == "classification":
        assert np.issubdtype(np.asarray(y).dtype, np.integer)
        assert data.n_classes >= 2 and y.min() >= 0 and y.max() < data.n_classes
