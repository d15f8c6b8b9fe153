"""The object event hooks receive: one per game, with a read-only view of the run."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, NoReturn

if TYPE_CHECKING:
    import numpy as np

    from harness.api import Prepared
    from harness.game import Components
    from harness.problem import Problem
    from harness.protocols import ConstraintSet, Dataset, Model, PPlayer, Solver, WPlayer


class RunView:
    """A read-only view of one run: its components and the game's public state.

    Every attribute reads through to the run as it is now (a resumed run
    swaps in its saved components before ``on_run_start``), so keep the view,
    not what it returned. Attributes cannot be assigned. The components
    themselves are the live objects the game plays with: read them, do not
    change them.

    Counters are those the game last recorded: at run start (0, or the
    resumed round), at each checkpoint and at the end of the game.
    """

    __slots__ = ("_source",)

    _source: Prepared | None

    def __init__(self) -> None:
        object.__setattr__(self, "_source", None)

    def __setattr__(self, name: str, value: Any) -> NoReturn:
        raise AttributeError(f"The run view is read-only: cannot set {name!r}.")

    def __delattr__(self, name: str) -> NoReturn:
        raise AttributeError(f"The run view is read-only: cannot delete {name!r}.")

    def __repr__(self) -> str:
        if self._source is None:
            return "RunView(<not attached>)"
        return f"RunView({dict(self.names)!r}, rounds={self.rounds}/{self.horizon})"

    def _run(self) -> Prepared:
        if self._source is None:
            raise RuntimeError("This RunContext belongs to no game (harness.prepare makes one).")
        return self._source

    def _parts(self) -> Components:
        run = self._run()
        return run.game.parts if run.game is not None else run.parts

    @property
    def dataset(self) -> Dataset:
        return self._parts().dataset

    @property
    def model(self) -> Model:
        return self._parts().model

    @property
    def constraint(self) -> ConstraintSet:
        return self._parts().constraint

    @property
    def p_player(self) -> PPlayer | None:
        return self._parts().p_player

    @property
    def w_player(self) -> WPlayer | None:
        return self._parts().w_player

    @property
    def problem(self) -> Problem:
        """The problem ``F`` the run solves (``harness.problem.Problem``: the data,
        model and constraint set, ``mu``, ``nu`` and the ball's ``radius``)."""
        return self._parts().problem

    @property
    def solver(self) -> Solver | None:
        """The whole-algorithm solver of the run; None for the game of Algorithm 1
        (whose players are ``p_player`` and ``w_player``, None otherwise)."""
        return self._parts().solver

    @property
    def names(self) -> Mapping[str, str]:
        """The config names of the components, keyed ``dataset``, ``model``,
        ``constraint``, ``solver`` and, for the game, ``p_player``, ``w_player``
        (``model`` resolved from ``auto``)."""
        return MappingProxyType(self._parts().names)

    @property
    def horizon(self) -> int:
        """The number of rounds T of the game (``budget // rows_per_round``)."""
        return int(self._run().horizon)

    @property
    def checkpoints(self) -> tuple[int, ...]:
        """The rounds at which metrics are computed, increasing, the last = ``horizon``."""
        return tuple(int(r) for r in self._run().checkpoints)

    @property
    def rounds(self) -> int:
        """Rounds played as of the last checkpoint (``horizon`` once the game finished)."""
        game = self._run().game
        return 0 if game is None else int(game.state.rounds)

    @property
    def data_points(self) -> int:
        """Data points processed (rows whose losses were evaluated) so far."""
        game = self._run().game
        return 0 if game is None else int(game.state.data_points)

    @property
    def wall_time_s(self) -> float:
        """Seconds of the algorithm's own work (rounds or steps, a solver's setup)
        as of the last checkpoint, without compilation and checkpoints (summed
        over the interrupted runs a resumed run continues)."""
        game = self._run().game
        return 0.0 if game is None else float(game.state.wall_time)

    @property
    def start_w(self) -> np.ndarray | None:
        """The iterate the run started from, ``w_0`` (the w-player's first
        iterate, or the solver's after its setup); None before the run starts."""
        game = self._run().game
        return None if game is None else game.state.start_w

    @property
    def resumed_from(self) -> int | None:
        """The round a resumed run continued from (None: the run started afresh)."""
        return self._run().resumed_from


def attach(context: RunContext, source: Prepared) -> None:
    """Point ``context.parts`` at a prepared game (and at its game once it plays).
    Called by ``harness.prepare``; plugins never need it."""
    object.__setattr__(context.parts, "_source", source)


class PluginState(dict):
    """``context.state``: plugins' scratch space. The running game is not in it
    (``context.state["game"]`` of minimax-bench 0.1): a plugin that still asks
    for it is told where the run is now."""

    def __missing__(self, key: str) -> Any:
        if key == "game":
            raise KeyError("context.state['game'] was removed in minimax-bench 0.2: read the "
                           "run's components and counters through context.parts "
                           "(harness.RunView; see docs/plugins.md)")
        raise KeyError(key)


@dataclass
class RunContext:
    """What an event hook knows about one game.

    ``config``: the resolved configuration as plain containers.
    ``params``: flat parameters to record (config values with theory-derived
    values filled in, plus derived quantities such as the horizon T).
    ``tags``: algorithm, dataset, constraint, seed, package version.
    ``state``: scratch space for plugins, each under its own keys (e.g. a
    tracker's run id); ``state["resume"]`` is saved with the game state and
    restored when the run resumes.
    ``parts``: the run itself, read-only (a ``RunView``): the components,
    their names and the game's counters.
    """

    config: dict[str, Any]
    params: dict[str, Any] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    state: dict[str, Any] = field(default_factory=lambda: PluginState())
    _view: RunView = field(default_factory=RunView, init=False, repr=False, compare=False)

    @property
    def parts(self) -> RunView:
        """The read-only view of the run: components, names, counters."""
        return self._view
