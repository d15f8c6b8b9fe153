"""The compiled round engine (``harness.engine``) against the Python loop.

For every built-in p-player on every built-in set it plays on, with both
models: the same seed gives the same action (rows and values) every round and
the same metrics at every checkpoint on both paths, to ``ATOL`` (1e-12).
A third-party component without a compiled form runs the Python loop next to
compiled built-ins.
"""

from __future__ import annotations

import itertools
from typing import ClassVar

import numpy as np
import pytest

import harness
from harness import engine
from harness.game import Game, GuardError
from harness.protocols import refusal
from harness.registry import make_plugin_manager

from conftest import game_cfg

#: the two paths' metrics agree to this (absolute; losses are scaled to [0, 1])
ATOL = 1e-12

#: and p_t, w_bar to this: the models' dot products round differently on the two
#: paths (BLAS against a loop), and a player's dynamics carry that 1e-16 along
#: (dense exp_ix_m on the simplex: 1.5e-12 after 20000 rounds on boston)
STATE_ATOL = 1e-10

#: p-player options that change the compiled kernel taken
VARIANTS = {
    "exp4mp": [[], ["p_player.confidence=sampled"],
               ["p_player.confidence=sampled", "p_player.state=dense"]],
    "exp_ix_m": [["p_player.state=dense"], ["p_player.state=tree"]],
    "adacvar": [["p_player.variant=authors"], ["p_player.variant=all_rows"]],
    "uniform": [[], ["p_player.action=sampled"]],
}

#: rows of breast cancer and boston
ROWS = {"breast_cancer": 569, "boston": 506}


def _sets(n: int) -> dict[str, list[str]]:
    """Each built-in set, the alpha-set with caps k alpha_i of 1, 2 and 4."""
    caps = ",".join((["1", "2", "1", "4"] * n)[:n])
    return {
        "kset": ["constraint=kset", "constraint.k=5"],
        "kset_systematic": ["constraint=kset", "constraint.k=5", "constraint.sampler=systematic"],
        "simplex": ["constraint=simplex"],
        "alphaset": ["constraint=alphaset", "constraint.k=4",
                     "constraint.caps={rows: ${oc.decode:'[" + caps + "]'}}"],
    }


def _combinations() -> list:
    registry = harness.Registry(make_plugin_manager(load_entrypoints=False))
    out = []
    for p_name, entry in sorted(registry.entries["p_player"].items()):
        cls = entry.cls
        for (set_name, set_over), data in itertools.product(
                _sets(ROWS["breast_cancer"]).items(), ROWS):
            set_over = _sets(ROWS[data])[set_name]
            for variant in VARIANTS.get(p_name, [[]]):
                over = [*set_over, f"p_player={p_name}", *variant, f"dataset={data}"]
                try:
                    prep = harness.prepare(game_cfg(*over, "budget=20000"))
                except harness.ConfigError as err:
                    refused = ("cannot play on constraint", "samples systematically")
                    if any(text in str(err) for text in refused):
                        continue
                    raise
                assert not refusal(cls, prep.parts.constraint, prep.parts.names["constraint"])
                out.append(pytest.param(over, id="-".join(
                    [p_name, set_name, *[v.split("=")[1] for v in variant], data])))
    return out


class Recorder(Game):
    """A game that records the action of every round (``a_sum`` differences) and
    ``p``, ``w`` at every round, evaluating the full metrics only at the real
    checkpoints."""

    def __init__(self, *args, real, **kwargs):
        super().__init__(*args, **kwargs)
        self.real = set(int(r) for r in real)
        self.trace: list = []
        self.metrics: list = []

    def evaluate(self):
        state = self.state
        self.trace.append((state.rounds, state.a_sum.copy(), np.array(self.parts.p_player.p),
                           np.array(self.parts.w_player.w_bar), state.data_points))
        if state.rounds in self.real:
            metrics = super().evaluate()
            self.metrics.append(metrics)
            return metrics
        return {}


def _play(overrides, engine_name, rounds_traced=200, budget=None):
    cfg = game_cfg(*overrides, *( [f"budget={budget}"] if budget else []))
    prep = harness.prepare(cfg)
    real = prep.checkpoints
    every = np.union1d(np.arange(1, min(rounds_traced, prep.horizon) + 1), real)
    game = Recorder(prep.parts, prep.horizon, np.random.default_rng(3), every,
                    engine=engine_name, real=real)
    game.play()
    return game


@pytest.mark.parametrize("p_player", [["p_player=exp4mp"], ["p_player=ftrl"],
                                      ["p_player=exp_ix_m", "p_player.state=dense"]])
def test_k_equal_n_keeps_the_point_on_both_paths(p_player):
    """Seed 3, the synthetic data set with k = n = 10, 40 rounds: S_{n,n} is
    the single point 1/n; both paths keep p at exactly the caps every round
    (the players' own set states and the k-set's compiled state both say the
    set is a point; projecting instead leaves p a few ulps off at n = 10)."""
    n = 10
    over = ["dataset=synthetic", f"dataset.n={n}", "constraint=kset", f"constraint.k={n}",
            *p_player]
    caps = np.full(n, 1.0 / n)
    for name in ("python", "compiled"):
        game = _play(over, name, budget=40 * n)
        assert game.path == name and len(game.trace) == 40
        for t, _, p, _, _ in game.trace:
            np.testing.assert_array_equal(p, caps, err_msg=f"{name} round {t}")


@pytest.mark.parametrize("overrides", _combinations())
def test_compiled_and_python_paths_give_the_same_numbers(overrides):
    """Seed 3, 200 rounds traced one by one, then the checkpoints of a budget of
    20000 data points: the rows of every traced round equal, ``a_sum`` to
    ``ATOL`` per round, p and w_bar to ``STATE_ATOL``, every metric but the
    timings to ``ATOL``."""
    python = _play(overrides, "python", budget=20000)
    compiled = _play(overrides, "compiled", budget=20000)
    assert compiled.path == "compiled" and python.path == "python"
    assert len(python.trace) == len(compiled.trace)
    previous = None
    for (t, a_py, p_py, w_py, dp_py), (t2, a_c, p_c, w_c, dp_c) in zip(
            python.trace, compiled.trace, strict=True):
        assert t == t2 and dp_py == dp_c
        step_py = a_py - (0 if previous is None else previous[0])
        step_c = a_c - (0 if previous is None else previous[1])
        if t <= 200:  # the action of round t alone: same rows, same values
            np.testing.assert_array_equal(np.flatnonzero(step_py), np.flatnonzero(step_c),
                                          err_msg=f"rows of round {t}")
        np.testing.assert_allclose(a_c, a_py, rtol=0, atol=ATOL * t, err_msg=f"a_sum {t}")
        np.testing.assert_allclose(p_c, p_py, rtol=0, atol=STATE_ATOL, err_msg=f"p at {t}")
        np.testing.assert_allclose(w_c, w_py, rtol=0, atol=STATE_ATOL, err_msg=f"w_bar at {t}")
        previous = (a_py, a_c)
    assert len(python.metrics) == len(compiled.metrics) > 0
    for m_py, m_c in zip(python.metrics, compiled.metrics, strict=True):
        assert m_py.keys() == m_c.keys()
        for key in m_py:
            if key not in harness.game.TIMING_METRICS:
                assert m_c[key] == pytest.approx(m_py[key], rel=0, abs=ATOL), key


def test_every_builtin_combination_takes_the_compiled_path():
    """No built-in p-player, set, model or w-player falls back to the Python loop."""
    missing = []
    for param in _combinations():
        overrides = param.values[0]
        prep = harness.prepare(game_cfg(*overrides, "budget=20000"))
        found = engine.forms(prep.parts)
        if not isinstance(found, engine.Forms):
            missing.append(f"{param.id}: {found}")
    assert not missing, "\n".join(missing)


class SlowModel:
    """A third-party model without a compiled form (the built-in linear model's
    numbers through Python methods only)."""

    name: ClassVar[str] = "slow_linear"
    params: ClassVar[dict] = {}

    def __init__(self) -> None:
        from plugins.models.glm import LinearMSE

        self.inner = LinearMSE()

    def __getattr__(self, key):
        if key in ("compiled", "inner"):
            raise AttributeError(key)
        return getattr(self.inner, key)

    def setup(self, dataset, radius):
        out = self.inner.setup(dataset, radius)
        self.n_params, self.scale_ = self.inner.n_params, self.inner.scale_
        self.grad_bound, self.n_clipped = self.inner.grad_bound, 0
        return out


def test_a_python_only_component_plays_on_the_python_loop_with_compiled_builtins():
    """A third-party model with no compiled form: the run takes the Python loop,
    says why, and its numbers equal the built-in model's on the compiled path."""

    class Plugin:
        @harness.hookimpl
        def register_models(self, register):
            register(SlowModel)

    registry = harness.Registry(make_plugin_manager([Plugin()], load_entrypoints=False))
    over = ["dataset=boston", "budget=20000", "checkpoints=4"]
    prep = harness.prepare(game_cfg(*over, "model=slow_linear", registry=registry), registry)
    game = Game(prep.parts, prep.horizon, np.random.default_rng(0), prep.checkpoints)
    slow = game.play()
    assert game.path == "python"
    assert "model 'slow_linear' has no compiled form" in game.python_reason
    prep = harness.prepare(game_cfg(*over, "model=linear_mse"))
    game = Game(prep.parts, prep.horizon, np.random.default_rng(0), prep.checkpoints)
    fast = game.play()
    assert game.path == "compiled"
    for key in ("dual_gap", "objective", "topk_mse"):
        assert fast[key] == pytest.approx(slow[key], rel=0, abs=ATOL)
    with pytest.raises(harness.ConfigError, match="engine=compiled: model 'slow_linear'"):
        harness.play(harness.prepare(game_cfg(*over, "model=slow_linear", "engine=compiled",
                                              registry=registry), registry))


def test_a_failing_kernel_names_the_player_and_the_round():
    """eta = 1e308 makes EXP4.MP's log-weights infinite: the projection fails in
    the compiled observe and the GuardError names the player and the round."""
    with pytest.raises(GuardError, match=r"p-player 'exp4mp' failed in observe at round \d+"):
        harness.run(game_cfg("budget=4000", "p_player.eta=1e308", "engine=compiled"))


def test_the_driver_is_generated_once_and_cached_on_disk(tmp_path, monkeypatch):
    """The driver's source lands in the cache folder, named by the kernels and a
    hash of their sources; a second request in the process reuses it."""
    monkeypatch.setenv("MINIMAX_BENCH_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(engine, "_DRIVERS", {})
    first = engine.driver("plugins.p_players.exp4mp:exp4mp", "plugins.models.glm:linear_mse",
                          "plugins.w_players.ogd:ogd")
    files = sorted(p.name for p in tmp_path.glob("mmb_driver_*.py"))
    assert len(files) == 1 and files[0].startswith("mmb_driver_exp4mp_linear_mse_ogd_")
    assert engine.driver("plugins.p_players.exp4mp:exp4mp", "plugins.models.glm:linear_mse",
                         "plugins.w_players.ogd:ogd") is first
    with pytest.raises(ValueError, match="'module:prefix'"):
        engine.driver("plugins.p_players.exp4mp", "plugins.models.glm:linear_mse",
                      "plugins.w_players.ogd:ogd")


# ---------------------------------------------------------------- guards on both paths
# Components that fail at a given round on the Python and on the compiled path
# alike; their kernels live in this module (importable as ``test_engine``).

from numba import njit  # noqa: E402

from harness import Compiled, Param  # noqa: E402
from plugins.models.glm import LinearMSE, linear_mse_grad, linear_mse_losses  # noqa: E402
from plugins.p_players.exp4mp import Exp4MP, exp4mp_observe, exp4mp_propose  # noqa: E402

#: the round at which the broken components below fail
FAIL_AT = 37


class NaNLossModel(LinearMSE):
    """The linear model, with row 0 of round ``FAIL_AT``'s losses NaN (``bad="nan"``)
    or 1.5 (``bad="big"``)."""

    name: ClassVar[str] = "nan_loss_linear"
    kernels: ClassVar[str] = "test_engine:nan_loss_linear"
    params: ClassVar[dict] = {**LinearMSE.params, "bad": Param(str, default="nan",
                                                              choices=("nan", "big"))}

    def __init__(self, loss_scale=None, bias=True, bad="nan"):
        super().__init__(loss_scale, bias)
        self.bad, self.calls = bad, 0

    def losses(self, w, X, y):
        out = super().losses(w, X, y)
        self.calls += 1
        if self.calls == FAIL_AT:
            out[0] = np.nan if self.bad == "nan" else 1.5
        return out

    def compiled(self):
        inner = super().compiled()
        state = (inner.state, np.array([self.calls]), np.nan if self.bad == "nan" else 1.5)

        def store(state):
            inner.store(state[0])
            self.calls = int(state[1][0])

        return Compiled(self.kernels, state, store)


@njit(cache=True)
def nan_loss_linear_losses(ms, w, X, y, rows):  # pragma: no cover - compiled
    out = linear_mse_losses(ms[0], w, X, y, rows)
    ms[1][0] += 1
    if ms[1][0] == FAIL_AT:
        out[0] = ms[2]
    return out


@njit(cache=True)
def nan_loss_linear_grad(ms, w, X, y, rows, weights):  # pragma: no cover - compiled
    return linear_mse_grad(ms[0], w, X, y, rows, weights)


class NaNWeightsPlayer(Exp4MP):
    """EXP4.MP whose batch weights (``part="weights"``) or action (``part="action"``)
    of round ``FAIL_AT`` hold a NaN."""

    name: ClassVar[str] = "nan_weights_exp4mp"
    params: ClassVar[dict] = {**Exp4MP.params, "part": Param(str, default="weights",
                                                             choices=("weights", "action"))}

    def __init__(self, part="weights", **kwargs):
        super().__init__(**kwargs)
        self.part, self.calls = part, 0

    def propose(self, rng):
        prop = super().propose(rng)
        self.calls += 1
        if self.calls == FAIL_AT:
            bad = prop.weights.copy()
            bad[0] = np.nan
            if self.part == "weights":
                return prop._replace(weights=bad)
            return prop._replace(action_rows=prop.rows, action_values=bad)
        return prop

    def compiled(self, constraint):
        inner = super().compiled(constraint)
        state = (inner.state, np.array([self.calls]), self.part == "weights")

        def store(state):
            self.calls = int(state[1][0])

        return Compiled("test_engine:nan_weights", state, store)


@njit(cache=True)
def nan_weights_propose(ps, ks, rng):  # pragma: no cover - compiled
    rows, weights = exp4mp_propose(ps[0], ks, rng)
    ps[1][0] += 1
    return rows, weights


@njit(cache=True)
def nan_weights_observe(ps, ks, rows, weights, losses):  # pragma: no cover - compiled
    batch, action_rows, action = exp4mp_observe(ps[0], ks, rows, weights, losses)
    if ps[1][0] == FAIL_AT:
        bad = batch.copy()
        bad[0] = np.nan
        if ps[2]:
            return bad, action_rows, action
        return batch, action_rows, bad
    return batch, action_rows, action


class Broken:
    @harness.hookimpl
    def register_models(self, register):
        register(NaNLossModel)

    @harness.hookimpl
    def register_p_players(self, register):
        register(NaNWeightsPlayer)


@pytest.mark.parametrize(("overrides", "message"), [
    (["model=nan_loss_linear"],
     rf"model 'nan_loss_linear' gave loss nan for row \d+ at round {FAIL_AT}"),
    (["model=nan_loss_linear", "model.bad=big"],
     rf"model 'nan_loss_linear' gave loss 1.5 for row \d+ at round {FAIL_AT}"),
    (["p_player=nan_weights_exp4mp"],
     rf"p-player 'nan_weights_exp4mp' gave non-finite batch weights at round {FAIL_AT}"),
    (["p_player=nan_weights_exp4mp", "p_player.part=action"],
     rf"p-player 'nan_weights_exp4mp' gave a non-finite action a_t at round {FAIL_AT}"),
])
def test_guards_stop_both_paths_with_the_same_error(overrides, message):
    """A NaN or out-of-range loss, NaN batch weights, a NaN action at round
    FAIL_AT: the same GuardError, word for word, on both paths."""
    registry = harness.Registry(make_plugin_manager([Broken()], load_entrypoints=False))
    errors = []
    for path in ("python", "compiled"):
        cfg = game_cfg("dataset=boston", "budget=20000", f"engine={path}", *overrides,
                       registry=registry)
        with pytest.raises(GuardError, match=message) as err:
            harness.play(harness.prepare(cfg, registry))
        errors.append(str(err.value))
    assert errors[0] == errors[1]


@pytest.mark.parametrize("overrides", [
    ["constraint=simplex", "p_player=exp_ix"],
    ["p_player=exp_ix_m", "p_player.state=dense"],
    ["p_player=adacvar"],
    ["p_player=exp4mp"],
    ["p_player=safl"],
    ["p_player=ftrl", "budget=2000000"],
])
def test_long_runs_give_the_same_numbers_on_both_paths(overrides):
    """Seed 1, breast cancer, 2e5 data points (1e4 to 2e5 rounds; ftrl, which
    reads every row, 2e6 points: 3,515 rounds): a last-bit difference between
    the paths grows in a bandit's sampling until the rows part (it did after
    6e3 to 9e4 rounds before the Python methods ran the kernels' arithmetic),
    so the final metrics must still agree to ATOL."""
    runs = []
    for path in ("python", "compiled"):
        cfg = game_cfg("budget=200000", *overrides, "checkpoints=3", "seed=1",
                       f"engine={path}")
        runs.append(harness.run(cfg))
    for key in runs[0]:
        if key not in harness.game.TIMING_METRICS:
            assert runs[1][key] == pytest.approx(runs[0][key], rel=0, abs=ATOL), key
