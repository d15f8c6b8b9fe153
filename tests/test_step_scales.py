"""Step-size multipliers (``plugins.lib.steps``): every derived step ``x`` of a
built-in algorithm has ``x_scale``, which multiplies the value used and is
refused together with ``x``."""

from __future__ import annotations

import math
from typing import Any

import pytest

import harness
from harness import ConfigError

#: (p-player, its parameters, constraint, the scaled step): every step of a built-in p-player
P_STEPS = [
    ("exp4mp", {}, "kset", "eta"),
    ("exp_ix", {}, "simplex", "eta"),
    ("exp_ix_m", {}, "kset", "eta"),
    ("ftrl", {}, "kset", "eta"),
    ("safl", {}, "kset", "eta"),
    ("adacvar", {}, "kset", "eta"),
    ("adacvar", {"variant": "all_rows"}, "kset", "eta"),
    ("ru_sgd", {}, "kset", "tau_lr"),
    ("soft_cvar", {}, "kset", "tau_lr"),
]

#: (solver, its parameters, the problem, the scaled step)
PAPER = {"mu": 0.0, "nu": 0.0, "radius": 1.0}
REGULARISED = {"mu_times_n": 1.0, "nu": 1.0, "radius": 1.0}
SOLVER_STEPS = [
    ("prospect", {}, REGULARISED, "lr"),
    ("lsvrg", {}, REGULARISED, "lr"),
    ("prospect", {}, PAPER, "lr"),
    ("sgd", {}, PAPER, "lr"),
    ("sgd", {}, PAPER, "tau_lr"),
    ("full_batch", {}, PAPER, "lr"),
    ("full_batch", {}, REGULARISED, "lr"),
]


def _game(p_name: str, p_params: dict[str, Any], constraint: str, w_params=None,
          **c_params: Any) -> dict[str, Any]:
    c = {"name": "kset", "k": 20} if constraint == "kset" else {"name": constraint}
    c.update(c_params)
    return {"dataset": {"name": "breast_cancer"}, "constraint": c,
            "p_player": {"name": p_name, **p_params},
            "w_player": {"name": "ogd", **(w_params or {})}, "model": {"name": "auto"},
            "budget": 20_000, "seed": 0, "checkpoints": 3, "progress": False,
            "state_dir": None}


def _solver(s_name: str, s_params: dict[str, Any], problem: dict[str, Any],
            passes: int = 4) -> dict[str, Any]:
    return {"solver": {"name": s_name, **s_params},
            "dataset": {"name": "yacht", "scale": "standard"},
            "constraint": {"name": "kset", "level": 0.5},
            "model": {"name": "linear_mse", "bias": False, "loss_scale": 2.0},
            "problem": problem, "budget": passes * 308, "seed": 0, "checkpoints": 3,
            "progress": False, "state_dir": None}


def _params(cfg: dict[str, Any]) -> dict[str, Any]:
    return harness.prepare(cfg).context.params


@pytest.mark.parametrize("p_name, p_params, constraint, step", P_STEPS)
def test_a_p_players_scale_multiplies_its_default_step(p_name, p_params, constraint, step):
    default = _params(_game(p_name, p_params, constraint))
    assert default[f"p_player.{step}_scale"] == 1.0
    ones = _params(_game(p_name, {**p_params, f"{step}_scale": 1.0}, constraint))
    assert ones == default
    scaled = _params(_game(p_name, {**p_params, f"{step}_scale": 3.0}, constraint))
    assert scaled[f"p_player.{step}"] == 3.0 * default[f"p_player.{step}"]
    assert scaled[f"p_player.{step}_scale"] == 3.0
    # a scale is the run with the scaled step given: the same resolved values
    given = _params(_game(p_name, {**p_params, step: scaled[f"p_player.{step}"]}, constraint))
    assert {k: v for k, v in given.items() if not k.endswith("_scale")} == {
        k: v for k, v in scaled.items() if not k.endswith("_scale")}


@pytest.mark.parametrize("p_name, p_params, constraint", [
    ("exp4mp", {}, "kset"), ("safl", {}, "kset"), ("uniform", {}, "kset")])
def test_ogds_scale_multiplies_its_default_or_the_suggested_step(p_name, p_params, constraint):
    default = _params(_game(p_name, p_params, constraint))
    assert _params(_game(p_name, p_params, constraint, {"lr_scale": 1.0})) == default
    scaled = _params(_game(p_name, p_params, constraint, {"lr_scale": 3.0}))
    assert scaled["w_player.lr"] == 3.0 * default["w_player.lr"]
    assert scaled["w_player.lr_scale"] == 3.0
    if p_name == "safl":  # the default is S-AFL's suggestion, not B sqrt(2/T)
        assert default["w_player.lr"] != pytest.approx(math.sqrt(2.0 / default["horizon_T"]))


@pytest.mark.parametrize("s_name, s_params, problem, step", SOLVER_STEPS)
def test_a_solvers_scale_multiplies_its_default_step(s_name, s_params, problem, step):
    default = _params(_solver(s_name, s_params, problem))
    assert default[f"solver.{step}_scale"] == 1.0
    assert _params(_solver(s_name, {**s_params, f"{step}_scale": 1.0}, problem)) == default
    scaled = _params(_solver(s_name, {**s_params, f"{step}_scale": 3.0}, problem))
    assert scaled[f"solver.{step}"] == 3.0 * default[f"solver.{step}"]
    if "lr_default" in default:  # logged unscaled beside the step in use
        assert scaled["solver.lr_default"] == default["solver.lr_default"]
    if s_name == "sgd" and step == "lr":  # tau_lr's default follows the step in use
        assert scaled["solver.tau_lr"] == pytest.approx(3.0 * default["solver.tau_lr"],
                                                        rel=1e-15)


def test_full_batch_lbfgs_scales_its_first_step():
    # without a ball L-BFGS's first step along -grad has length lr_scale (lr: nan, not known
    # before the gradient)
    problem = {"mu_times_n": 1.0, "nu": 1.0, "ball": False}
    prep = harness.prepare(_solver("full_batch", {"lr_scale": 3.0}, problem))
    solver = prep.parts.solver
    assert solver.method_ == "lbfgs" and math.isnan(prep.context.params["solver.lr"])
    solver.advance(prep.parts.problem, None, 1)  # the first evaluation, at w = 0
    direction = solver._direction()
    assert math.sqrt(float(direction @ direction)) == pytest.approx(3.0, rel=1e-12)


@pytest.mark.parametrize("cfg, owner, step", [
    (_game("exp_ix", {"eta": 0.1, "eta_scale": 2.0}, "simplex"), "exp_ix", "eta"),
    (_game("ftrl", {"eta": 0.1, "eta_scale": 2.0}, "kset"), "ftrl", "eta"),
    (_game("ru_sgd", {"tau_lr": 0.1, "tau_lr_scale": 0.5}, "kset"), "ru_sgd", "tau_lr"),
    (_game("uniform", {}, "kset", {"lr": 0.1, "lr_scale": 2.0}), "ogd", "lr"),
    (_solver("lsvrg", {"lr": 0.01, "lr_scale": 2.0}, REGULARISED), "lsvrg", "lr"),
    (_solver("sgd", {"tau_lr": 0.01, "tau_lr_scale": 2.0}, PAPER), "sgd", "tau_lr"),
    (_solver("full_batch", {"lr": 0.01, "lr_scale": 2.0}, PAPER), "full_batch", "lr"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_a_step_and_its_scale_together_are_refused(cfg, owner, step):
    with pytest.raises(ConfigError, match=rf"'{step}' and '{step}_scale' parameters of {owner}"):
        harness.prepare(cfg)


@pytest.mark.parametrize("cfg", [
    _game("exp4mp", {"eta_scale": 3.0}, "kset", {"lr_scale": 0.5}),
    _game("exp_ix_m", {"eta_scale": 3.0, "state": "tree"}, "kset", sampler="systematic"),
    _game("ru_sgd", {"tau_lr_scale": 3.0}, "kset", {"lr_scale": 2.0}),
    _solver("sgd", {"lr_scale": 0.5, "tau_lr_scale": 3.0}, PAPER),
], ids=["exp4mp", "exp_ix_m", "ru_sgd", "sgd"])
def test_a_scaled_run_plays(cfg):
    metrics = harness.run(cfg)
    assert metrics["data_points"] > 0 and all(
        math.isfinite(v) for k, v in metrics.items() if k != "theory_bound")
