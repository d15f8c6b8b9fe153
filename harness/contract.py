"""The contract suite: pytest tests parametrised over every registered plugin.

Every constraint set, p-player, w-player, model, data set and solver registered
(built-in or installed through the ``minimax_bench`` entry points) is checked
against the behaviour the game relies on. A plugin package runs the same
suite on its own plugins with one import in one of its test files::

    from harness.contract import *  # noqa: F401,F403

and ``MINIMAX_BENCH_CONTRACT_PLUGINS=<its entry-point name>`` in the
environment to restrict the suite to them (comma-separated plugin names;
built-ins are named ``plugins.<module>``). A listed name that matches no
registered plugin with a component the suite checks is an error when the
suite is collected; the message lists the plugin names that do match, so a
misspelt name never turns into a run where everything is skipped.

A component whose constructor needs values the suite cannot guess (a file
path, per-row caps) provides ``contract_params(n)``, a classmethod returning
the parameters for an instance over ``n`` rows of the suite's data
(``ContractData``). Every statistical check states its seed and tolerance.

A constraint set's oracle is compared with a linear program when the set's
LP form ``K = {p : 0 <= p_i <= c_i, sum p = 1}`` is known: its ``row_caps()``
returns the caps ``c`` (a member every constraint set declares since
minimax-bench 0.2). When it returns None (``K`` is not of that form) that
test is skipped with a reason saying so.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np
import pytest
from scipy.optimize import linprog

import harness
from harness import Param, stream
from harness.game import TIMING_METRICS
from harness.protocols import refusal
from harness.registry import KINDS

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
SELECT_ENV = "MINIMAX_BENCH_CONTRACT_PLUGINS"


class SelectionError(LookupError):
    """``MINIMAX_BENCH_CONTRACT_PLUGINS`` names a plugin the suite cannot check."""


def _composed(registry: harness.Registry, name: str) -> bool:
    """Whether the solver ``name`` is the game of a p- and a w-player (checked
    through its players, not as a solver)."""
    return getattr(registry.get("solver", name).cls, "composed", None) is not None


def _checked_plugins(registry: harness.Registry) -> dict[str, list[str]]:
    """Plugin name -> the components it registers that the suite checks."""
    owners: dict[str, list[str]] = {}
    for kind in KINDS:
        for name in registry.names(kind):
            if kind == "dataset" and name == ContractData.name:
                continue
            if kind == "solver" and _composed(registry, name):
                continue
            owners.setdefault(registry.get(kind, name).plugin, []).append(f"{kind} {name}")
    return owners


def _selection(value: str, registry: harness.Registry) -> set[str]:
    """The plugin names listed in ``value`` (comma-separated; empty: every plugin).
    Raise ``SelectionError`` naming every listed name that matches no plugin
    registering a component the suite checks, and listing the names that do."""
    only = {p.strip() for p in value.split(",") if p.strip()}
    owners = _checked_plugins(registry)
    unknown = sorted(only - set(owners))
    if unknown:
        others = sorted({name for name, _ in registry.pm.list_name_plugin()} & set(unknown))
        why = (f" ({others} register no constraint set, player, model or data set)"
               if others else "")
        raise SelectionError(
            f"{SELECT_ENV}={value} names {unknown}, which match no registered plugin "
            f"with a component the contract suite checks{why}. Registered plugin names: "
            f"{sorted(owners)}."
        )
    return only


_ONLY = _selection(os.environ.get(SELECT_ENV, ""), REGISTRY)


def _selected(kind: str) -> list[str]:
    """The registered names of ``kind`` the suite checks (the selection's only)."""
    names = []
    for name in REGISTRY.names(kind):
        plugin = REGISTRY.get(kind, name).plugin
        if name == ContractData.name or (_ONLY and plugin not in _ONLY):
            continue
        if kind == "solver" and _composed(REGISTRY, name):
            continue
        names.append(name)
    return names


def _none_to_check(what: str, arity: int = 1) -> list[Any]:
    """One skipped case whose reason says why there is nothing to check (pytest's
    own "got empty parameter set" says neither what nor why)."""
    if _ONLY:
        why = f"{SELECT_ENV}={','.join(sorted(_ONLY))} selects no plugin with {what}"
    else:
        why = f"no plugin registers {what}"
    values = ("<none>",) * arity
    return [pytest.param(*values, marks=pytest.mark.skip(reason=why), id="none")]


_WORDS = {"constraint_set": "a constraint set", "p_player": "a p-player",
          "w_player": "a w-player", "model": "a model", "dataset": "a data set",
          "solver": "a whole-algorithm solver"}


def _names(kind: str) -> list[Any]:
    """The names of ``kind`` to check, as a parametrisation."""
    return _selected(kind) or _none_to_check(_WORDS[kind])


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
    """``K.sample(p, rng)`` as (rows, multiplicities), checked to be a
    ``harness.Draw`` (or a 2-tuple) of two integer arrays of one length."""
    out = K.sample(p, rng)
    assert isinstance(out, harness.Draw) or (type(out) is tuple and len(out) == 2), (
        f"constraint set '{K.name}': sample(p, rng) must return a harness.Draw(rows, "
        f"multiplicities) (multiplicities all 1 for a set of k distinct rows), as every "
        f"constraint set does since minimax-bench 0.2; got {type(out).__name__} "
        f"{out!r:.120}")
    rows, mult = np.asarray(out[0]), np.asarray(out[1])
    assert (rows.ndim == 1 and mult.shape == rows.shape
            and np.issubdtype(rows.dtype, np.integer) and np.issubdtype(mult.dtype, np.integer)), (
        f"constraint set '{K.name}': sample(p, rng) must return Draw(rows, multiplicities), "
        f"two 1-D integer arrays of one length; got {rows!r:.80} and {mult!r:.80}")
    return rows, mult


def _weights(rng: np.random.Generator, n: int) -> np.ndarray:
    """Positive weights spanning six orders of magnitude, a few large."""
    w = np.exp(rng.normal(0.0, 3.0, n))
    w[rng.choice(n, 2, replace=False)] *= 1e3
    return w


# ---------------------------------------------------------------- constraint sets


def _lp_caps(K) -> np.ndarray | None:
    """The per-row caps ``c`` of ``K = {p : 0 <= p_i <= c_i, sum p = 1}``,
    ``K.row_caps()``; None if ``K`` is not of that form."""
    assert callable(getattr(K, "row_caps", None)), (
        f"constraint set '{K.name}' lacks row_caps(), which constraint sets declare since "
        "minimax-bench 0.2; see docs/plugins.md")
    caps = K.row_caps()
    if caps is None:
        return None
    caps = np.asarray(caps, dtype=np.float64)
    assert caps.shape == (K.n,) and np.all(caps >= 0.0) and caps.sum() >= 1.0 - 1e-12, (
        f"row caps of {K.name} must be n={K.n} values >= 0 summing to at least 1; "
        f"got {caps!r:.200}")
    return caps


@pytest.mark.parametrize("name", _names("constraint_set"))
def test_constraint_lmo_is_a_maximiser(name):
    # seed 0, 20 random loss vectors; tolerance 1e-9
    K = _constraint(name)
    rng = np.random.default_rng(0)
    for j in range(20):
        losses = rng.random(K.n)
        value, p_star = K.lmo(losses)
        assert K.contains(p_star, atol=1e-9), (
            f"constraint set '{name}': lmo(losses) must return an argmax inside the set "
            f"(contains(argmax, atol=1e-9) is False at loss vector {j}); fix lmo or contains")
        assert value == pytest.approx(float(losses @ p_star), abs=1e-9), (
            f"constraint set '{name}': lmo(losses) must return (value, argmax) with value = "
            f"<losses, argmax>; got value {value}, <losses, argmax> = {losses @ p_star}")
        for _ in range(5):  # no point of K does better
            better = float(losses @ K.project(_weights(rng, K.n), 0.1))
            assert better <= value + 1e-9, (
                f"constraint set '{name}': lmo(losses) must maximise <losses, p> over the "
                f"set; a projected point gives {better} > the oracle's {value}")


@pytest.mark.parametrize("name", _names("constraint_set"))
def test_constraint_lmo_matches_a_linear_program(name):
    # seed 0, 20 random loss vectors, every other one rounded to 0.1 (ties);
    # the oracle's value equals the LP optimum (HiGHS) within 1e-9
    K = _constraint(name)
    caps = _lp_caps(K)
    if caps is None:
        pytest.skip(f"the LP form of constraint set '{name}' is unknown: its row_caps() "
                    "returns None (K is not {0 <= p_i <= c_i, sum p = 1}), so its oracle "
                    "is not compared with a linear program")
    rng = np.random.default_rng(0)
    for j in range(20):
        losses = rng.random(K.n)
        if j % 2:
            losses = np.round(losses, 1)
        value, p_star = K.lmo(losses)
        assert np.all(p_star <= caps + 1e-9), (name, "the oracle's point exceeds the row caps")
        lp = linprog(-losses, A_eq=np.ones((1, K.n)), b_eq=[1.0],
                     bounds=list(zip(np.zeros(K.n), caps, strict=True)), method="highs")
        assert lp.status == 0, (name, lp.message)
        assert value == pytest.approx(-lp.fun, abs=1e-9), (name, j, value, -lp.fun)


@pytest.mark.parametrize("name", _names("constraint_set"))
@pytest.mark.parametrize("gamma", [0.0, 0.1])
def test_constraint_projection_lands_in_the_set(name, gamma):
    # seed 1, 20 inputs; membership within 1e-9
    K = _constraint(name)
    rng = np.random.default_rng(1)
    for _ in range(20):
        w = _weights(rng, K.n)
        p = K.project(w, gamma)
        assert K.contains(p, atol=1e-9), (
            f"constraint set '{name}': project(weights, gamma={gamma}) must land in the set "
            f"(contains(p, atol=1e-9) is False; p sums to {np.sum(p)}, ranges over "
            f"[{np.min(p)}, {np.max(p)}])")
        np.testing.assert_allclose(
            K.project(np.log(w), gamma, log_domain=True), p, atol=1e-12,
            err_msg=f"constraint set '{name}': project(log(weights), gamma={gamma}, "
                    "log_domain=True) must equal project(weights, gamma)")


@pytest.mark.parametrize("name", _names("constraint_set"))
def test_constraint_sampler_marginals(name):
    # seed 2, two points of K: a projection, and 1/4 of it plus 3/4 of an
    # oracle vertex (rows with k p_i above 1 where caps allow). N = 4000 draws
    # each: every draw has total multiplicity k; the mean multiplicity of each
    # row is within 4.5 standard errors of k p_i, the variance taken as the
    # larger of the draws' and k p_i (1 - p_i) (sampling with replacement;
    # dependent rounding has less), so a rarely drawn row does not shrink its
    # own error bar. False alarms: below 2e-4 over 2 x 24 rows.
    K = _constraint(name)
    if K.sampler == "none":
        pytest.skip(f"constraint set '{name}' has no sampler (sampler 'none'): its sample "
                    "raises and the players that draw refuse it")
    rng = np.random.default_rng(2)
    projected = K.project(_weights(rng, K.n), 0.1)
    for p in (projected, 0.25 * projected + 0.75 * K.lmo(rng.random(K.n))[1]):
        N = 4000
        counts = np.zeros((N, K.n))
        for t in range(N):
            rows, mult = _draw(K, p, rng)
            assert np.unique(rows).size == rows.size and mult.sum() == K.k and mult.min() >= 1, (
                f"constraint set '{name}': sample (sampler '{K.sampler}') must draw distinct "
                f"rows with multiplicities >= 1 summing to k={K.k}; got rows {rows}, "
                f"multiplicities {mult}")
            counts[t, rows] = mult
        mean, sd = counts.mean(axis=0), counts.std(axis=0)
        target = K.k * p
        se = np.sqrt(np.maximum(sd**2, target * (1.0 - p)) / N)
        z = np.abs(mean - target) / np.maximum(se, 1e-300)
        fixed = se == 0  # p_i = 0 or 1: no draw may differ
        assert np.all(np.abs(mean[fixed] - target[fixed]) < 1e-9)
        assert np.all(z[~fixed] < 4.5), (name, z.max())


@pytest.mark.parametrize("name", _names("constraint_set"))
def test_constraint_membership(name):
    K = _constraint(name)
    p = K.project(np.ones(K.n), 0.0)
    assert K.contains(p), (
        f"constraint set '{name}': contains(p) must be True at p = project(ones(n)), a point "
        "of the set; fix contains (or project)")
    assert not K.contains(p * 1.1), (
        f"constraint set '{name}': contains(p) must be False when p sums to 1.1; make it "
        "check sum(p) = 1 within atol")
    bad = p.copy()
    bad[0] -= 0.2
    bad[1] += 0.2
    bad[0] = min(bad[0], -0.01)
    assert not K.contains(bad), (
        f"constraint set '{name}': contains(p) must be False when p has a negative entry "
        f"(p[0] = {bad[0]}); make it check p >= 0 within atol")


# ---------------------------------------------------------------- p-players


def _player_cases() -> list[Any]:
    cases: list[Any] = []
    players = _selected("p_player")
    for name in players:
        player = REGISTRY.get("p_player", name).cls
        for c_name in REGISTRY.names("constraint_set"):
            if refusal(player, _constraint(c_name), c_name) is None:
                cases.append((name, c_name))
    if players and not cases:
        return _none_to_check(f"a p-player fitting a registered constraint set (p-players "
                              f"{players}; constraint sets {REGISTRY.names('constraint_set')})", 2)
    return cases or _none_to_check("a p-player", 2)


def _game(p_name: str, c_name: str, seed: int, w_name: str = "ogd", m_name: str = "auto"):
    c_params = {k: v for k, v in _params("constraint_set", c_name, N_ROWS).items() if k != "n"}
    w_params = _params("w_player", w_name, N_ROWS)
    m_params = _params("model", m_name, N_ROWS) if m_name != "auto" else {}
    cfg = {"constraint": {"name": c_name, **c_params},
           "p_player": {"name": p_name, **_params("p_player", p_name, N_ROWS)},
           "w_player": {"name": w_name, **w_params}, "model": {"name": m_name, **m_params},
           "dataset": {"name": ContractData.name}, "seed": seed, "checkpoints": 3,
           "tracking": {"enabled": False},
           # the suite watches the Python methods; a compiled form is checked against them
           "engine": "python"}
    probe = harness.prepare({**cfg, "budget": 10**6}, REGISTRY)
    per_round = probe.parts.p_player.rows_per_round(probe.parts.constraint)
    return harness.prepare({**cfg, "budget": 300 * per_round}, REGISTRY)


def _indices(rows: np.ndarray, n: int, what: str, where: str) -> None:
    assert rows.ndim == 1 and rows.size >= 1 and np.issubdtype(rows.dtype, np.integer), (
        f"{where}: Proposal.{what} must be a non-empty 1-D integer array of row indices; "
        f"got {rows!r:.200}")
    assert rows.min() >= 0 and rows.max() < n, (
        f"{where}: Proposal.{what} must be row indices in [0, n={n}); got {rows!r:.200}")


@pytest.mark.parametrize(("name", "constraint"), _player_cases())
def test_p_player_stays_in_the_set_and_proposes_valid_rows(name, constraint):
    # seed 5, 300 rounds; membership of p_t and a_t within 1e-9. Data points:
    # never more rows in a round than rows_per_round declares (the horizon is
    # budget // rows_per_round), and the game counts exactly the rows proposed.
    prep = _game(name, constraint, seed=5)
    pp, K = prep.parts.p_player, prep.parts.constraint
    per_round = pp.rows_per_round(K)
    propose, observe = pp.propose, pp.observe
    seen = {"rounds": 0, "prop": None, "rows": 0}

    def checked_propose(rng):
        prop = propose(rng)
        t = seen["rounds"] + 1
        where = f"p-player '{name}' on {constraint}, round {t}"
        rows, weights = np.asarray(prop.rows), np.asarray(prop.weights)
        _indices(rows, K.n, "rows", where)
        assert rows.size <= per_round, (
            f"{where}: {rows.size} rows proposed, rows_per_round declares {per_round}; "
            "propose at most rows_per_round(constraint) rows (the horizon is "
            "budget // rows_per_round)")
        assert weights.shape == rows.shape and np.all(np.isfinite(weights)), (
            f"{where}: Proposal.weights must be finite, one per row ({rows.size}); "
            f"got {weights!r:.200}")
        if prop.action_rows is None:  # a_t = weights on rows: rows must be distinct
            assert np.unique(rows).size == rows.size, (
                f"{where}: repeated rows {rows}; propose distinct rows, or give the "
                "action a_t apart as Proposal.action_rows/action_values")
            a_rows, a_values = rows, weights
        else:
            a_rows, a_values = np.asarray(prop.action_rows), np.asarray(prop.action_values)
            _indices(a_rows, K.n, "action_rows", where)
            assert np.unique(a_rows).size == a_rows.size, (
                f"{where}: Proposal.action_rows must be distinct; got {a_rows}")
            assert a_values.shape == a_rows.shape and np.all(np.isfinite(a_values)), (
                f"{where}: Proposal.action_values must be finite, one per action row "
                f"({a_rows.size}); got {a_values!r:.200}")
        a = np.zeros(K.n)
        a[a_rows] = a_values
        assert K.contains(a, atol=1e-9), (
            f"{where}: the action a_t (weights on rows, or action_rows/action_values) must "
            f"be a point of {constraint}; it sums to {a.sum()} with largest entry "
            f"{a.max()}")
        seen["prop"] = prop
        seen["rows"] += rows.size
        return prop

    def checked_observe(losses):
        prop = seen["prop"]
        assert losses.shape == np.shape(prop.rows), (
            f"the game handed p-player '{name}' {losses.shape} losses for "
            f"{np.shape(prop.rows)} proposed rows")
        out = observe(losses)
        where = f"p-player '{name}' on {constraint}, round {seen['rounds'] + 1}"
        if out is not None:  # loss-dependent batch weights: a_t must be given apart
            assert np.shape(out) == np.shape(prop.rows) and np.all(np.isfinite(out)), (
                f"{where}: observe() must return None or finite batch weights, one per "
                f"proposed row; got {out!r:.200}")
            assert prop.action_rows is not None, (
                f"{where}: observe() returned batch weights but the proposal gave no "
                "action_rows; give a_t as Proposal.action_rows/action_values")
        seen["rounds"] += 1
        assert K.contains(pp.p, atol=1e-9), (
            f"{where}: p_t left {constraint}; the property p must return a point of the "
            "set (project onto it after each update)")
        return out

    pp.propose, pp.observe = checked_propose, checked_observe
    metrics = harness.play(prep)
    assert seen["rounds"] == prep.horizon, (
        f"p-player '{name}': the game played {seen['rounds']} rounds, not the horizon "
        f"{prep.horizon}")
    assert metrics["data_points"] == seen["rows"] <= prep.budget, (
        f"p-player '{name}': the game counted {metrics['data_points']} data points for "
        f"{seen['rows']} rows proposed (budget {prep.budget}); rows_per_round must bound "
        "every round's rows")


def _trajectory(name: str, constraint: str, seed: int, noise: np.random.Generator | None):
    """Rows proposed, losses handed over and ``p_t`` after each round of a game.

    With ``noise``, from before the first round until the end the data set holds
    noise on every row outside the current round's proposal (features uniform on
    [0, 1], the other class) and its own values on the proposed rows: the
    losses the game hands over are the same, any other view of the data (the
    data set or model read through the game's parts, say) is not."""
    prep = _game(name, constraint, seed)
    pp, data = prep.parts.p_player, prep.parts.dataset
    X0, y0 = data.X.copy(), data.y.copy()
    propose, observe = pp.propose, pp.observe
    rows_of, losses_of, p_of = [], [], []

    def show_only(rows: np.ndarray) -> None:
        out = np.ones(X0.shape[0], dtype=bool)
        out[rows] = False
        data.X[out] = noise.random((int(out.sum()), X0.shape[1]))
        data.y[out] = (y0[out] + 1) % data.n_classes
        data.X[~out], data.y[~out] = X0[~out], y0[~out]

    def watched_propose(rng):
        prop = propose(rng)
        rows_of.append(np.array(prop.rows, copy=True))
        if noise is not None:
            show_only(rows_of[-1])
        return prop

    def watched_observe(losses):
        losses_of.append(np.array(losses, copy=True))
        out = observe(losses)
        p_of.append(np.array(pp.p, copy=True))
        return out

    if noise is not None:
        show_only(np.empty(0, dtype=np.int64))
    pp.propose, pp.observe = watched_propose, watched_observe
    harness.play(prep)
    return rows_of, losses_of, p_of


@pytest.mark.parametrize(("name", "constraint"), _player_cases())
def test_p_player_sees_only_the_losses_of_its_rows(name, constraint):
    # two games under seed 7, 300 rounds each; in the second every row outside
    # the round's proposal holds noise (seed 8). The rows proposed and p_t after
    # every round must be equal exactly: what the player learns of the data is
    # the losses of the rows it proposed, handed to observe().
    rows_c, losses_c, p_c = _trajectory(name, constraint, 7, None)
    rows_h, losses_h, p_h = _trajectory(name, constraint, 7, np.random.default_rng(8))
    assert len(rows_h) == len(rows_c) == len(p_c) == len(p_h), (
        f"p-player '{name}' on {constraint}: two games under one seed played "
        f"{len(rows_c)} and {len(rows_h)} rounds")
    fix = ("; a p-player may learn of the data only the losses handed to observe(): "
           "do not read the data set, the model or the game's parts")
    for t in range(len(rows_c)):
        where = f"p-player '{name}' on {constraint}, round {t + 1}"
        np.testing.assert_array_equal(
            rows_h[t], rows_c[t],
            err_msg=f"{where}: the rows proposed depend on data outside earlier proposals{fix}")
        np.testing.assert_array_equal(
            losses_h[t], losses_c[t],
            err_msg=f"{where}: the losses of the proposed rows differ between the two games")
        np.testing.assert_array_equal(
            p_h[t], p_c[t],
            err_msg=f"{where}: p_t depends on the losses of rows not proposed{fix}")


@pytest.mark.parametrize(("name", "constraint"), _player_cases())
def test_p_player_is_deterministic_under_a_seed(name, constraint):
    runs = []
    for _ in range(2):
        prep = _game(name, constraint, seed=9)
        metrics = {k: v for k, v in harness.play(prep).items() if k not in TIMING_METRICS}
        runs.append((metrics, prep.parts.p_player.p.copy()))
    fix = ("; draw every random number from the rng handed to propose() (no global "
           "numpy or random state, no unseeded generator, no set iteration order)")
    differ = sorted(k for k in runs[0][0] if runs[0][0][k] != runs[1][0].get(k))
    assert runs[0][0] == runs[1][0], (
        f"p-player '{name}' on {constraint}: two games under seed 9 end with different "
        f"metrics {differ}{fix}")
    np.testing.assert_array_equal(
        runs[0][1], runs[1][1],
        err_msg=f"p-player '{name}' on {constraint}: two games under seed 9 end with "
                f"different p_t{fix}")


def _compiled_cases() -> list[Any]:
    """(p-player, set, w-player, model) games in which a selected component
    offers a compiled form: each p-player on each set it accepts, and each
    w-player and model with the built-in EXP4.MP on the k-set."""
    cases = [(case[0], case[1], "ogd", "auto") for case in _player_cases()
             if not hasattr(case, "marks")]  # not the skipped "nothing to check" case
    cases += [("exp4mp", "kset", w, "auto") for w in _selected("w_player")]
    cases += [("exp4mp", "kset", "ogd", m) for m in _selected("model")
              if getattr(REGISTRY.get("model", m).cls, "task", "classification")
              == "classification"]
    return cases or _none_to_check("a component", 4)


@pytest.mark.parametrize(("name", "constraint", "w_player", "model"), _compiled_cases())
def test_a_compiled_form_gives_the_numbers_of_the_python_methods(name, constraint, w_player,
                                                                 model):
    # seed 11: where every component of the game offers a compiled form
    # (harness.engine), the compiled path and the Python loop must give the
    # same metrics at every checkpoint and the same final p_t, to 1e-12
    # absolute (the kernels draw the same uniforms from rng as the methods)
    from harness import engine
    from harness.game import Game

    runs = {}
    for path in ("python", "compiled"):
        prep = _game(name, constraint, 11, w_player, model)
        found = engine.forms(prep.parts)
        if not isinstance(found, engine.Forms):
            pytest.skip(f"no compiled path: {found}")
        seen: list[dict[str, float]] = []
        game = Game(prep.parts, prep.horizon, np.random.default_rng(11), prep.checkpoints,
                    on_checkpoint=lambda step, metrics, seen=seen: seen.append(dict(metrics)),
                    engine=path)
        game.play()
        runs[path] = (seen, np.array(prep.parts.p_player.p))
    where = (f"p-player '{name}' on {constraint}, w-player '{w_player}', model '{model}', "
             "compiled path against the Python loop")
    (slow, p_slow), (fast, p_fast) = runs["python"], runs["compiled"]
    assert len(slow) == len(fast), f"{where}: {len(fast)} checkpoints, not {len(slow)}"
    for a, b in zip(slow, fast, strict=True):
        for key in a:
            if key in TIMING_METRICS:
                continue
            assert abs(a[key] - b.get(key, np.nan)) <= 1e-12, (
                f"{where}: {key} = {b.get(key)} at {int(a['data_points'])} data points, "
                f"{a[key]} on the Python loop; the kernels must reproduce the methods and "
                "draw the same uniforms from rng")
    np.testing.assert_allclose(p_fast, p_slow, rtol=0, atol=1e-12,
                               err_msg=f"{where}: the final p_t differs")


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
            assert np.linalg.norm(w) <= wp.radius * (1 + 1e-12), (
                f"w-player '{name}': ||w|| = {np.linalg.norm(w)} left the ball of radius "
                f"{wp.radius}; project each step's iterate onto the ball")
            played += float(g @ w)
            total += g
            wp.step(g)
        regret = played + wp.radius * float(np.linalg.norm(total))
        bound = wp.regret_bound(T)
        if bound is not None:
            assert regret <= bound * (1 + 1e-9), (
                f"w-player '{name}': regret {regret} after T={T} rounds of linear losses "
                f"exceeds its own regret_bound(T) = {bound}; fix the step size or the bound")
        average[T] = regret / T
    assert average[4000] < 0.5 * average[250], (
        f"w-player '{name}': average regret {average[4000]} at T=4000 is not below half "
        f"of {average[250]} at T=250 (sqrt(T) regret gives a quarter); the regret must "
        "be sublinear: check the step size schedule set in setup(dim, horizon, grad_bound)")


# ---------------------------------------------------------------- models


def _model_cases() -> list[Any]:
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
        assert np.shape(losses) == (N_ROWS,), (
            f"model '{name}': losses(w, X, y) must return one loss per row, shape "
            f"({N_ROWS},); got shape {np.shape(losses)}")
        out = ~((losses >= 0.0) & (losses <= 1.0))
        assert not out.any(), (
            f"model '{name}': losses(w, X, y) must lie in [0, 1] for every ||w|| <= B = 1.5 "
            f"and features in [0, 1]; got {losses[out][0]} at ||w|| = "
            f"{np.linalg.norm(w):.4g}. Divide the raw losses by a bound that holds on the "
            "whole ball (setup(dataset, radius) sets scale_)")


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
    np.testing.assert_allclose(
        grad, numeric, rtol=1e-5, atol=1e-8,
        err_msg=f"model '{name}': the gradient of value_and_grad(w, X, y, weights) must match "
                "central finite differences of its value; fix the gradient or the value")
    np.testing.assert_allclose(
        model.grad(w, data.X, data.y, a), grad, rtol=1e-10, atol=1e-12,
        err_msg=f"model '{name}': grad(w, X, y, weights) must equal the gradient "
                "value_and_grad returns (no loss is clipped here)")
    expected = float(a @ model.raw_losses(w, data.X, data.y)) / model.scale_
    assert value == pytest.approx(expected), (
        f"model '{name}': value_and_grad(w, X, y, weights)[0] must be sum_i weights_i "
        f"raw_losses_i / scale_ = {expected}; got {value}")


# ---------------------------------------------------------------- data sets


def _check_dataset(name: str, data: Any, built: str) -> None:
    """What the game and the models rely on of a data set, reading all of ``X``
    in row chunks (``harness.stream.row_chunks``), as a memmap is read."""
    who = f"data set '{name}' ({built})"
    X, y = data.X, data.y
    assert getattr(X, "ndim", None) == 2 and X.shape[0] >= 1, (
        f"{who}: X must be an n x d array with n >= 1; got shape {getattr(X, 'shape', None)}")
    assert getattr(y, "shape", None) == (X.shape[0],), (
        f"{who}: y must hold one target per row, shape ({X.shape[0]},); "
        f"got shape {getattr(y, 'shape', None)}")
    assert np.issubdtype(X.dtype, np.floating), (
        f"{who}: X must hold floats; got dtype {X.dtype}: convert it (X.astype(np.float64))")
    assert data.task in ("classification", "regression"), (
        f"{who}: task must be 'classification' or 'regression'; got {data.task!r}")
    classes = data.task == "classification"
    if classes:
        assert np.issubdtype(y.dtype, np.integer), (
            f"{who}: a classification data set's y must hold integer class codes "
            f"0..n_classes-1; got dtype {y.dtype}: convert it (y.astype(np.int64))")
        assert isinstance(data.n_classes, int | np.integer) and data.n_classes >= 2, (
            f"{who}: n_classes must be an int >= 2 for classification; got {data.n_classes!r}")
    where = stream.first_outside_unit(X)
    assert where is None, (
        f"{who}: features must be finite and lie in [0, 1]; got {where}. Scale each column "
        "to [0, 1] (min-max) when the data set is built")
    start = 0
    for _, yc in stream.row_chunks(X, y):
        yf = np.asarray(yc, dtype=np.float64)
        bad_y = ~np.isfinite(yf)
        if classes:
            bad_y |= (yf < 0) | (yf >= data.n_classes)
        if bad_y.any():
            i = int(np.flatnonzero(bad_y)[0])
            need = f"a class code in [0, {data.n_classes})" if classes else "finite"
            raise AssertionError(f"{who}: every target must be {need}; got y[{start + i}] = "
                                 f"{yc[i]}")
        start += len(yc)
    assert start == X.shape[0], (
        f"{who}: reading X in row chunks gave {start} rows, X.shape says {X.shape[0]}; "
        "X[a:b] must return rows a..b-1")
    models = REGISTRY.names("model")
    assert data.default_model in models, (
        f"{who}: default_model (the model of model=auto) must name a registered model; got "
        f"{data.default_model!r}, registered: {models}")
    assert isinstance(data.provenance, Mapping) and data.provenance, (
        f"{who}: provenance must be a non-empty mapping saying where the data comes from "
        f"(source, licence, generator and seed...); got {data.provenance!r}")


@pytest.mark.parametrize("name", _names("dataset"))
def test_dataset_shapes_values_and_task(name):
    params = _params("dataset", name, N_ROWS)
    built = f"built with {params}" if params else "built with no parameters"
    _check_dataset(name, REGISTRY.build("dataset", name, **params), built)


def _required(kind: str, name: str) -> list[str]:
    """The parameters of a component that have no default and may not be None."""
    table = REGISTRY.get(kind, name).cls.params
    return sorted(k for k, spec in table.items() if spec.default is None and not spec.nullable)


@pytest.mark.parametrize("name", _names("dataset"))
def test_dataset_at_its_defaults(name, tmp_path, monkeypatch):
    # as `dataset=<name>` builds it, not only at the suite's n = 24; whatever it
    # caches under $XDG_CACHE_HOME goes to a temporary folder
    required = _required("dataset", name)
    if required:
        pytest.skip(f"data set '{name}' has parameter(s) {required} without a default; it is "
                    "checked only as contract_params(n) builds it")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    _check_dataset(name, REGISTRY.build("dataset", name), "built with its defaults")


# ---------------------------------------------------------------- solvers

#: the problems a solver is run on: the paper's (mu = nu = 0, the unit ball) and
#: the DRO literature's regularised, smoothed one without a ball
SOLVER_PROBLEMS = {
    "paper": {"mu": 0.0, "nu": 0.0, "radius": 1.0},
    "regularised": {"mu": 0.1, "nu": 1.0, "ball": False},
}


def _solver_cases() -> list[Any]:
    names = _selected("solver")
    if not names:
        return _none_to_check(_WORDS["solver"], 2)
    return [(name, problem) for name in names for problem in SOLVER_PROBLEMS]


def _solver_run(name: str, problem: str, seed: int = 0, passes: int = 60):
    """A prepared run of solver ``name`` on the suite's regression data (n = 24),
    or a skip naming why the solver refuses the problem (a ConfigError)."""
    cfg = {"solver": {"name": name, **_params("solver", name, N_ROWS)},
           "problem": SOLVER_PROBLEMS[problem],
           "constraint": {"name": "kset", "k": 6},
           "model": {"name": "linear_mse", "loss_scale": 1.0},
           "dataset": {"name": ContractData.name, "task": "regression"},
           "seed": seed, "checkpoints": 4, "budget": passes * N_ROWS,
           "tracking": {"enabled": False}, "state_dir": None}
    try:
        return harness.prepare(cfg, REGISTRY)
    except harness.ConfigError as err:
        pytest.skip(f"solver '{name}' refuses the {problem} problem: {err}")


@pytest.mark.parametrize("name", _names("solver"))
def test_solver_solves_one_of_the_suites_problems(name):
    # a solver may refuse a problem (a ConfigError naming why), but not both:
    # one that refuses everything would pass every other check by skipping it
    refusals = {}
    for problem in SOLVER_PROBLEMS:
        try:
            _solver_run(name, problem)
        except pytest.skip.Exception as skipped:
            refusals[problem] = str(skipped)
    assert len(refusals) < len(SOLVER_PROBLEMS), (
        f"solver '{name}' refuses every problem of the suite: {refusals}")


def _untimed(metrics: Mapping[str, float]) -> dict[str, float]:
    return {k: v for k, v in metrics.items() if k not in TIMING_METRICS}


class _Checkpoints:
    """An ``on_checkpoint`` hook keeping the counters of every checkpoint of a run."""

    def __init__(self) -> None:
        self.counters: list[tuple[float, float]] = []

    @harness.hookimpl
    def on_checkpoint(self, context, step, metrics):
        self.counters.append((metrics["data_points"], metrics["grad_evals"]))


@pytest.mark.parametrize(("name", "problem"), _solver_cases())
def test_solver_reports_its_iterate_and_counters(name, problem):
    prep = _solver_run(name, problem)
    seen = _Checkpoints()
    prep.registry.pm.register(seen)
    try:
        metrics = harness.play(prep)
    finally:
        prep.registry.pm.unregister(seen)
    assert seen.counters, f"solver '{name}': the run logged no checkpoint"
    for data_points, grad_evals in seen.counters:
        assert grad_evals <= data_points, (
            f"solver '{name}': grad_evals = {grad_evals:g} exceeds data_points = "
            f"{data_points:g} at a checkpoint; a row's gradient is formed only where its "
            "row is evaluated, so count in grad_evals the per-row gradients actually formed "
            "(none for a row of weight 0: value_and_grad forms np.count_nonzero(q)), "
            "docs/tracking.md, Counters")
    solver, F = prep.parts.solver, prep.parts.problem
    w = np.asarray(solver.w, dtype=np.float64)
    assert w.shape == (F.n_params,), (
        f"solver '{name}': w has shape {w.shape}; it must be the model's flat parameter "
        f"vector of {F.n_params} entries")
    assert metrics["objective"] == pytest.approx(F.value(w), rel=1e-12, abs=1e-15), (
        f"solver '{name}': the reported objective is not F at its w")
    assert int(solver.data_points) >= prep.budget and metrics["data_points"] >= prep.budget, (
        f"solver '{name}': stopped at {solver.data_points} data points, short of the budget "
        f"{prep.budget}; advance(problem, rng, until) must reach until")
    assert isinstance(solver.grad_evals, (int, np.integer)) and solver.grad_evals >= 0, (
        f"solver '{name}': grad_evals must count per-row gradient evaluations (an int)")
    if not np.isinf(F.radius):
        assert float(w @ w) <= F.radius**2 * (1 + 1e-9), (
            f"solver '{name}': ||w|| = {np.sqrt(w @ w)} left the ball of radius {F.radius}")
    q = getattr(solver, "q", None)
    if q is not None:
        assert prep.parts.constraint.contains(np.asarray(q), atol=1e-8), (
            f"solver '{name}': its dual iterate q is not in K")
        assert metrics["dual_gap"] >= -1e-9, (
            f"solver '{name}': certified gap {metrics['dual_gap']} < 0 cannot be")


@pytest.mark.parametrize(("name", "problem"), _solver_cases())
def test_solver_improves_on_the_trivial_solution(name, problem):
    # after 60 passes over 24 rows the iterate is no worse than w = 0 (where the
    # built-in solvers start): a solver that cannot beat it solves nothing
    prep = _solver_run(name, problem)
    metrics = harness.play(prep)
    start = prep.parts.problem.value(np.zeros(prep.parts.problem.n_params))
    assert metrics["objective"] <= start + 1e-12, (
        f"solver '{name}': F(w) = {metrics['objective']} after 60 passes is above F(0) = "
        f"{start} on the {problem} problem")


@pytest.mark.parametrize(("name", "problem"), _solver_cases())
def test_solver_is_deterministic_and_resumes_identically(name, problem):
    # the same seed gives the same metrics; a solver pickled half-way (as the
    # harness saves it at a checkpoint) and continued ends at the same w
    import pickle

    first = _untimed(harness.play(_solver_run(name, problem, seed=5)))
    again = _untimed(harness.play(_solver_run(name, problem, seed=5)))
    assert first == again, f"solver '{name}': two runs with seed 5 differ"
    straight, parted = _solver_run(name, problem, seed=5), _solver_run(name, problem, seed=5)
    rng_a, rng_b = np.random.default_rng(11), np.random.default_rng(11)
    half, end = 30 * N_ROWS, 60 * N_ROWS
    straight.parts.solver.advance(straight.parts.problem, rng_a, end)
    solver = parted.parts.solver
    solver.advance(parted.parts.problem, rng_b, half)
    solver, rng_b = pickle.loads(pickle.dumps((solver, rng_b)))
    solver.advance(parted.parts.problem, rng_b, end)
    np.testing.assert_array_equal(
        np.asarray(solver.w), np.asarray(straight.parts.solver.w),
        err_msg=f"solver '{name}': pickled at {half} data points and continued, it ends at "
                "another w than without the pause; keep all state in attributes and draw "
                "only from the rng handed to advance")


# ---------------------------------------------------------------- models under solvers

#: the problem every model is solved on under every solver: smooth and strongly
#: convex (nu > 0, mu > 0) in a ball, so every solver's iterates converge to OPT
MODEL_UNDER_SOLVER = {"mu": 0.1, "nu": 1.0, "radius": 1.5}
#: passes over the suite's 24 rows, and the normalised suboptimality
#: ``(F(w) - F*) / (F(w_0) - F*)`` against the exact OPT to reach in them when
#: the solver declares no ``contract_accuracy`` (``harness.protocols.Solver``):
#: loose, for a sublinear schedule (the built-ins: 4e-4 and 6.5e-3 under sgd;
#: 1e-15 to 3e-14 under prospect, lsvrg and full_batch, which declare 1e-8)
MODEL_UNDER_SOLVER_PASSES, MODEL_UNDER_SOLVER_TOL = 200, 2e-2


def _model_solver_cases() -> list[Any]:
    """(model, solver) pairs of which the selection holds either: a selected
    model under every registered solver, every registered model under a
    selected solver (the game of two players excepted: the paper's problem
    only)."""
    models, solvers = set(_selected("model")), set(_selected("solver"))
    every_solver = [name for name in REGISTRY.names("solver") if not _composed(REGISTRY, name)]
    cases = sorted({(m, s) for m in REGISTRY.names("model") for s in every_solver
                    if m in models or s in solvers})
    return cases or _none_to_check("a model or a solver", 2)


@pytest.mark.parametrize(("model", "solver"), _model_solver_cases())
def test_model_reaches_the_exact_opt_under_every_solver(model, solver):
    # run seed 0, the suite's data (24 rows, the model's task), the k-set with
    # k = 6, MODEL_UNDER_SOLVER: after MODEL_UNDER_SOLVER_PASSES passes the
    # normalised suboptimality against the exact OPT (cvxpy, the model's
    # cvx_raw_losses) is at most the solver's contract_accuracy (else
    # MODEL_UNDER_SOLVER_TOL). A solver may refuse
    # the model (a ConfigError naming why: a constant the model does not
    # declare); the case is then skipped with that message
    pytest.importorskip("cvxpy")
    cls = REGISTRY.get("model", model).cls
    if getattr(cls, "cvx_raw_losses", None) is None:
        pytest.skip(f"model '{model}' has no cvx_raw_losses: its exact OPT is unknown")
    cfg = {"solver": {"name": solver, **_params("solver", solver, N_ROWS)},
           "problem": MODEL_UNDER_SOLVER, "constraint": {"name": "kset", "k": 6},
           "model": {"name": model, **_params("model", model, N_ROWS)},
           "dataset": {"name": ContractData.name,
                       "task": getattr(cls, "task", "classification")},
           "seed": 0, "checkpoints": 3, "budget": MODEL_UNDER_SOLVER_PASSES * N_ROWS,
           "tracking": {"enabled": False}, "state_dir": None,
           "reference": {"exact": "true", "rtol": 1e-9}}
    try:
        prep = harness.prepare(cfg, REGISTRY)
    except harness.ConfigError as err:
        pytest.skip(f"solver '{solver}' refuses model '{model}': {err}")
    metrics = harness.play(prep)
    gap = metrics.get("normalised_suboptimality", np.nan)
    tol = float(getattr(REGISTRY.get("solver", solver).cls, "contract_accuracy",
                        MODEL_UNDER_SOLVER_TOL))
    assert gap <= tol, (
        f"model '{model}' under solver '{solver}': normalised suboptimality {gap} against the "
        f"exact OPT after {MODEL_UNDER_SOLVER_PASSES} passes (at most {tol:g}, the solver's "
        "contract_accuracy); a solver reads the model through its protocol only "
        "(harness.protocols.Model): check its value_and_grad, row_smoothness and, if "
        "compiled, its row roles against each other")
