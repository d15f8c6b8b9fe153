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
from conftest import game_cfg

import harness
from harness import engine
from harness.game import Game, GuardError
from harness.protocols import refusal
from harness.registry import make_plugin_manager

#: the two paths agree to this (absolute, on metrics in [0, 1]-scaled units and on p)
ATOL = 1e-12

#: p-player options that change the compiled kernel taken
VARIANTS = {
    "exp4mp": [[], ["p_player.confidence=sampled"]],
    "exp_ix_m": [["p_player.state=dense"], ["p_player.state=tree"]],
    "adacvar": [["p_player.variant=authors"], ["p_player.variant=all_rows"]],
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
                    if "cannot play on constraint" in str(err) or "samples systematically" in str(err):
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


@pytest.mark.parametrize("overrides", _combinations())
def test_compiled_and_python_paths_give_the_same_numbers(overrides):
    """Seed 3, 200 rounds traced one by one, then checkpoints up to 2000 rounds
    or the budget of 20000 data points: the actions of every traced round equal
    (rows exactly, values to ATOL), p and w_bar to ATOL, every metric but the
    timings to ATOL."""
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
        np.testing.assert_allclose(p_c, p_py, rtol=0, atol=ATOL, err_msg=f"p at {t}")
        np.testing.assert_allclose(w_c, w_py, rtol=0, atol=ATOL, err_msg=f"w_bar at {t}")
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
        from plugins.models import LinearMSE

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
        harness.run(game_cfg(*over, "model=slow_linear", "engine=compiled",
                             registry=registry), registry)


def test_a_non_finite_iterate_stops_the_compiled_run_as_the_python_one_does():
    """A step of 1e300 overflows w: both paths raise the same GuardError, naming
    the w-player, the round and the coordinate."""
    messages = []
    for path in ("python", "compiled"):
        with pytest.raises(GuardError) as err:
            harness.run(game_cfg("dataset=boston", "budget=4000", "w_player.lr=1e300",
                                 f"engine={path}"))
        messages.append(str(err.value))
    assert messages[0] == messages[1]
    assert "w-player 'ogd' produced a non-finite iterate before round" in messages[0]


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
    first = engine.driver("plugins.exp4mp:exp4mp", "plugins.models:linear_mse",
                          "plugins.ogd:ogd")
    files = sorted(p.name for p in tmp_path.glob("mmb_driver_*.py"))
    assert len(files) == 1 and files[0].startswith("mmb_driver_exp4mp_linear_mse_ogd_")
    assert engine.driver("plugins.exp4mp:exp4mp", "plugins.models:linear_mse",
                         "plugins.ogd:ogd") is first
    with pytest.raises(ValueError, match="'module:prefix'"):
        engine.driver("plugins.exp4mp", "plugins.models:linear_mse", "plugins.ogd:ogd")
