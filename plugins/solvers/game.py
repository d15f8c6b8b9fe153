"""The game of Algorithm 1 as the built-in solver ``game`` (the default)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, ClassVar

import harness
from harness.engine import forms as engine_forms
from harness.game import Components, Game
from harness.params import ConfigError
from harness.protocols import refusal
from harness.solve import Algorithm, Setting


class GameSolver(Algorithm):
    """The game of Algorithm 1 (paper, Section 3): a p-player and a w-player
    from the ``p_player`` and ``w_player`` config groups, played by ``Game``.
    It solves the paper's problem (``problem.mu = problem.nu = 0``, a finite
    ball: the w-player's radius).

    ``T = budget // rows_per_round`` rounds; the ball's radius is
    ``problem.radius`` when set, given to the w-player. The players' theory
    defaults read T (e.g. Theorem 4.1's ``gamma`` and ``eta``) and their
    setup loads, or compiles, their kernels, so it is timed before the clock.
    The run is tagged with the p-player's name (``algorithm``) and the
    w-player's."""

    name: ClassVar[str] = "game"
    params: ClassVar[dict[str, Any]] = {}
    #: the config groups it is composed from
    composed: ClassVar[tuple[str, ...]] = ("p_player", "w_player")
    runner = Game

    def compose(self, setting: Setting) -> float:
        spec = setting.problem
        if spec["mu"] or spec["nu"] or not spec["ball"]:
            others = [s for s in setting.registry.names("solver")
                      if getattr(setting.registry.get("solver", s).cls, "composed", None) is None]
            listed = ", ".join(f"solver={s}" for s in others) or "none is installed"
            raise ConfigError(
                f"The solver '{setting.name}' plays the game of Algorithm 1, which solves the "
                "paper's problem only (problem.mu=0, problem.nu=0, problem.ball=true). Got "
                f"mu={spec['mu']!r}, nu={spec['nu']!r}, ball={spec['ball']!r}: choose a solver "
                f"that solves the regularised problem ({listed}).")
        p_name, self.p_player = setting.make("p_player")
        why = refusal(type(self.p_player), setting.constraint, setting.constraint_name)
        if why is not None:
            raise ConfigError(f"The p_player '{p_name}' cannot play on constraint "
                              f"'{setting.constraint_name}': it {why}.")
        # the problem's ball is the w-player's
        ball = {} if spec["radius"] is None else {"radius": spec["radius"]}
        w_name, self.w_player = setting.make("w_player", **ball)
        self.label, self.p_name, self.w_name = p_name, p_name, w_name
        return float(self.w_player.radius)

    def rows_per_round(self, constraint: Any) -> int:
        return int(self.p_player.rows_per_round(constraint))

    def set_up(self, problem: Any, budget: int, horizon: int,
               seed: int) -> tuple[dict[str, Any], float, float]:
        """The players' setup for T = ``horizon`` rounds, timed as compilation
        (it loads, or compiles, their kernels); the game has no setup on the
        clock."""
        began = time.perf_counter()
        pp, wp, model = self.p_player, self.w_player, problem.model
        values = {f"p_player.{k}": v for k, v in pp.setup(problem.constraint, horizon).items()}
        suggest = getattr(pp, "suggest_w_lr", None)
        lr_hint = suggest(wp.radius, model.grad_bound, horizon) if suggest else None
        values.update({f"w_player.{k}": v for k, v in wp.setup(
            model.n_params, horizon, model.grad_bound, lr_hint=lr_hint).items()})
        return values, time.perf_counter() - began, 0.0

    def names(self) -> dict[str, str]:
        return {"p_player": self.p_name, "w_player": self.w_name}

    def describe(self, horizon: int, rows_per_round: int) -> dict[str, Any]:
        return {"horizon_T": horizon, "rows_per_round": rows_per_round}

    def tags(self) -> dict[str, str]:
        return {"w_player": self.w_name}

    def components(self, dataset: Any, model: Any, constraint: Any,
                   names: Mapping[str, str], problem: Any) -> Components:
        return Components(dataset, model, constraint, self.p_player, self.w_player, names,
                          problem)

    def admit(self, parts: Components, engine: str) -> None:
        """``engine=compiled`` is refused before the run starts when a component
        has no compiled form."""
        if engine != "compiled":
            return
        found = engine_forms(parts)
        if isinstance(found, str):
            raise ConfigError(f"engine=compiled: {found}; use engine=auto (or python) to play "
                              "it on the Python loop.")


@harness.hookimpl
def register_solvers(register):
    register(GameSolver)
