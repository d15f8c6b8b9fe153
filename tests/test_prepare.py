"""What ``harness.prepare`` refuses before any round (data a game cannot play),
and the one path every solver takes through ``prepare`` and ``play``: the
game of Algorithm 1 and a whole-algorithm solver alike (``harness.solve.Algorithm``)."""

from __future__ import annotations

import time
from typing import ClassVar

import numpy as np
import pytest

import harness
from harness import Param
from harness.game import TIMING_METRICS, Game
from harness.solve import SolverRun, WholeSolver
from plugins.p_players.uniform import Uniform
from plugins.solvers.game import GameSolver

from conftest import game_cfg


class _Labels:
    """12 rows, two classes; ``labels`` decides how y is stored."""

    name: ClassVar[str] = "prepare_labels"
    params: ClassVar[dict[str, Param]] = {
        "labels": Param(str, default="int", choices=("int", "float", "outside")),
    }
    task, n_classes, default_model = "classification", 2, "logistic_cel"
    provenance: ClassVar[dict[str, str]] = {"source": "tests/test_prepare.py"}

    def __init__(self, labels: str = "int") -> None:
        self.X = np.linspace(0.0, 1.0, 24).reshape(12, 2)
        y = np.arange(12) % 2
        self.y = {"int": y, "float": y.astype(np.float64), "outside": y + 1}[labels]


class _Plugin:
    @harness.hookimpl
    def register_datasets(self, register):
        register(_Labels)


@pytest.mark.parametrize(("labels", "message"), [
    ("float", r"integer class codes in \[0, n_classes=2\)\. Got dtype float64"),
    ("outside", r"Got y\[1\] = 2 \(6 labels outside\)"),
])
def test_classification_labels_must_be_integer_codes(labels, message):
    registry = harness.Registry(harness.make_plugin_manager([_Plugin()]))
    cfg = game_cfg("dataset=prepare_labels", f"dataset.labels={labels}", "constraint.k=2",
                   "budget=400", registry=registry)
    with pytest.raises(harness.ConfigError, match=message):
        harness.prepare(cfg, registry)
    cfg["dataset"]["labels"] = "int"
    assert harness.prepare(cfg, registry).parts.dataset.y.dtype.kind == "i"


class _CountingGame(Game):
    """The game's loop, recording the rounds each ``play`` reached."""

    played: ClassVar[list[int]] = []

    def play(self) -> dict[str, float]:
        metrics = super().play()
        _CountingGame.played.append(self.state.rounds)
        return metrics


class _CountedGame(GameSolver):
    """The game of Algorithm 1 whose loop is ``_CountingGame``."""

    name: ClassVar[str] = "counted_game"
    runner = _CountingGame


class _SlowSetup(Uniform):
    """The uniform p-player, its setup 50 ms longer (as a kernel's compilation)."""

    name: ClassVar[str] = "slow_setup"

    def setup(self, constraint, horizon):
        time.sleep(0.05)
        return super().setup(constraint, horizon)


class _Solvers:
    @harness.hookimpl
    def register_solvers(self, register):
        register(_CountedGame)

    @harness.hookimpl
    def register_p_players(self, register):
        register(_SlowSetup)


def _untimed(metrics: dict[str, float]) -> dict[str, float]:
    return {k: v for k, v in metrics.items() if k not in TIMING_METRICS}


def test_the_game_is_prepared_and_played_through_its_solver():
    # the game's solver composes its players, records the game's values and
    # names the loop ``play`` runs: a subclass with another loop is played by
    # that loop, with the game's numbers (seed 4, equal to the last bit)
    registry = harness.Registry(harness.make_plugin_manager([_Solvers()]))
    over = ("constraint.k=5", "budget=4003", "checkpoints=3", "seed=4")
    plain = harness.prepare(game_cfg(*over))
    prep = harness.prepare(game_cfg(*over, "solver=counted_game", registry=registry), registry)
    assert type(prep.solver) is _CountedGame and type(plain.solver) is GameSolver
    assert prep.parts.solver is None and prep.parts.p_player is prep.solver.p_player
    assert prep.parts.w_player is prep.solver.w_player
    assert prep.context.tags == {**plain.context.tags, "solver": "counted_game"}
    assert prep.context.tags["algorithm"] == "exp4mp" and prep.context.tags["w_player"] == "ogd"
    params = prep.context.params
    assert params == {**plain.context.params, "solver.name": "counted_game"}
    assert list(params) == list(plain.context.params)
    assert (params["horizon_T"], params["rows_per_round"], prep.horizon) == (800, 5, 800)
    assert dict(prep.parts.names) == {**plain.parts.names, "solver": "counted_game"}
    assert prep.checkpoints.tolist() == plain.checkpoints.tolist()
    _CountingGame.played.clear()
    metrics = harness.play(prep)
    assert _CountingGame.played == [800] and type(prep.game) is _CountingGame
    assert _untimed(metrics) == _untimed(harness.play(plain))
    assert type(plain.game) is Game and _CountingGame.played == [800]


def test_a_whole_algorithm_solver_is_driven_through_its_adapter():
    cfg = game_cfg("solver=full_batch", "constraint.k=5", f"budget={569 * 4}", "checkpoints=3")
    prep = harness.prepare(cfg)
    assert type(prep.solver) is WholeSolver and prep.solver.solver is prep.parts.solver
    assert prep.parts.p_player is None and prep.parts.w_player is None
    tags, params = prep.context.tags, prep.context.params
    assert tags["algorithm"] == tags["solver"] == "full_batch" and "w_player" not in tags
    assert "horizon_T" not in params and "rows_per_round" not in params
    assert prep.horizon == prep.budget == 569 * 4 and prep.checkpoints[-1] == 569 * 4
    # its probe on copies is compiling, its own setup (a pass over the data) is its work
    assert prep.compile_time > 0.0 and prep.setup_time > 0.0
    metrics = harness.play(prep)
    assert type(prep.game) is SolverRun and metrics["data_points"] >= 569 * 4


def test_the_players_setup_is_timed_before_the_clock():
    # the game's players set up (their kernels load) outside wall_time_s: 50 ms
    # of a p-player's setup count as compilation, none as the game's setup
    registry = harness.Registry(harness.make_plugin_manager([_Solvers()]))
    cfg = game_cfg("p_player=slow_setup", "constraint.k=5", "budget=2000", "checkpoints=2",
                   registry=registry)
    prep = harness.prepare(cfg, registry)
    assert prep.compile_time >= 0.05 and prep.setup_time == 0.0
    harness.play(prep)
    assert prep.game.state.compile_time >= 0.05
    assert prep.game.state.wall_time < prep.game.state.compile_time


def test_a_budget_in_passes_is_that_many_passes_over_the_data_set():
    # breast cancer: n = 569 rows; 2.5 passes = ceil(1422.5) data points, recorded as both
    prep = harness.prepare(game_cfg("solver=full_batch", "constraint.k=5", "budget_passes=2.5",
                                    "budget=7"))
    assert prep.budget == 1423 and prep.context.params["budget_passes"] == 2.5
    assert prep.context.params["budget"] == 1423
    with pytest.raises(harness.ConfigError, match=r"'budget_passes'.*\(0, inf\).*Got 0"):
        harness.prepare(game_cfg("solver=full_batch", "budget_passes=0"))
